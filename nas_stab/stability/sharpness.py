"""Hessian sharpness by Lanczos, and the optimizer geometry it is read against.

`sharpness` is the largest algebraic eigenvalue of the Hessian of the
training loss on the Hessian batch with respect to all trainable parameters
(with Adam/AdamW, of the preconditioned Hessian, `preconditioner`), by
Lanczos with full reorthogonalization. It stops when two successive top Ritz
values agree to `hessian_tol` (relative) or after `hessian_iters` products;
it starts from the previous estimate's top Ritz vector (warm start, kept in
training checkpoints), from the gradient direction plus a fixed-seed random
vector the first time (`start_vector`). `eos_factor` turns it into
`eos_ratio` (docs/metrics.md).

Why a sub-batch: a Hessian-vector product costs about twice a forward and
backward pass of its batch; on 64 examples about one training step (batch
128). The price: the top eigenvalue of a smaller batch's loss is larger
(sampling noise adds curvature); benchmarks/bench_probes.py --accuracy
measures it.
"""
from __future__ import annotations

import math

import torch

Tensors = tuple[torch.Tensor, ...] | list[torch.Tensor]  # torch._foreach_* take either and return a tuple


def top_eigenvalue(params: list, grads: list, scale: list | None, start: list[torch.Tensor] | None, seed: int,
                   iters: int, tol: float) -> tuple[float, int, bool, list[torch.Tensor] | None]:
    """The largest algebraic eigenvalue of A = H (or S H S, S = P^-1/2, for Adam) by Lanczos.

    Each step is one Hessian-vector product reusing the gradients' graph;
    the Krylov basis is fully reorthogonalized (it holds at most
    `iters` vectors the size of the parameters). The top Ritz value
    rises monotonically to lambda_max (the largest algebraic eigenvalue,
    whatever the sign of the others); it stops when two successive top Ritz
    values agree to `tol` (relative) or after `iters` products. `start`: the
    previous estimate's eigenvector (warm start) or None (see `start_vector`).
    Returns (eigenvalue, products, converged, the top Ritz vector -- the next
    estimate's warm start -- or None when there is none to keep).
    """
    pairs = [(p, g, s) for p, g, s in zip(params, grads, scale if scale is not None else [None] * len(params))
             if g is not None and g.requires_grad]
    if not pairs:
        return 0.0, 0, True, None
    ps = [p for p, _, _ in pairs]
    gs = [g for _, g, _ in pairs]
    ss = None if scale is None else [s for _, _, s in pairs]

    # the Krylov basis as flat vectors (no copies: one dot product and one axpy per basis vector)
    shapes, sizes = [p.shape for p in ps], [p.numel() for p in ps]
    flat_s = None if ss is None else torch.cat([t.reshape(-1) for t in ss])

    def unflat(x):
        return [t.view(sh) for t, sh in zip(torch.split(x, sizes), shapes)]

    def apply(x):
        u = x if flat_s is None else x * flat_s
        hv = torch.autograd.grad(gs, ps, grad_outputs=unflat(u), retain_graph=True, allow_unused=True)
        h = torch.cat([(torch.zeros_like(p) if t is None else t.detach()).reshape(-1) for p, t in zip(ps, hv)])
        return h if flat_s is None else h * flat_s

    v0 = torch.cat([t.reshape(-1) for t in start_vector(start, ps, [g.detach() for g in gs], seed)])
    basis = [v0 / v0.norm()]  # grows one vector per product: memory = products x parameters
    alphas: list[float] = []
    betas: list[float] = []
    theta_prev, theta, y = None, math.nan, None
    converged = False
    it = 0
    for it in range(1, iters + 1):
        w = apply(basis[-1])
        a = float(basis[-1] @ w)
        if not math.isfinite(a):
            return math.inf, it, False, None
        alphas.append(a)
        # the three-term recurrence, then one full reorthogonalization pass against the basis
        w = w - a * basis[-1]
        if betas:
            w = w - betas[-1] * basis[-2]
        coef = torch.stack([q @ w for q in basis])
        for c, q in zip(coef.tolist(), basis):
            w.add_(q, alpha=-c)
        b = float(w.norm())
        T = torch.diag(torch.tensor(alphas, dtype=torch.float64))
        if len(alphas) > 1:
            off = torch.tensor(betas, dtype=torch.float64)
            T += torch.diag(off, 1) + torch.diag(off, -1)
        evals, evecs = torch.linalg.eigh(T)
        theta, y = float(evals[-1]), evecs[:, -1]
        if not math.isfinite(b):
            return math.inf, it, False, None
        if b <= 1e-12 * max(abs(theta), 1e-30):  # an invariant subspace: exact
            converged = True
            break
        if theta_prev is not None and abs(theta - theta_prev) <= tol * abs(theta):
            converged = True
            break
        theta_prev = theta
        betas.append(b)
        basis.append(w / b)
    assert y is not None, "iters >= 1 (stability.hessian_iters): the loop ran and set y"
    x = y.to(basis[0].dtype) @ torch.stack(basis[: len(alphas)])
    return theta, it, converged, [t.detach().clone() for t in unflat(x / x.norm())]


def start_vector(eigvec: list[torch.Tensor] | None, ps: list[torch.Tensor], gs: list[torch.Tensor],
                 seed: int) -> Tensors:
    """Warm start: the previous eigenvector. Cold start: the gradient direction
    plus an equal-norm fixed-seed random vector. The gradient lies mostly in
    the top Hessian eigenspace (Gur-Ari et al., 2018): from a random vector
    alone, power iteration can stall on the second eigenvalue when the top
    eigenvector is nearly orthogonal to it (seen on a sum-aggregated
    mlp_resnet: 1.56e6 reported for a top eigenvalue of 3.23e6); the random
    part covers a zero gradient. The global RNG is left alone."""
    if eigvec is not None and [tuple(t.shape) for t in eigvec] == [tuple(p.shape) for p in ps]:
        return _unit([t.to(p.device, p.dtype) for t, p in zip(eigvec, ps)])
    gen = torch.Generator().manual_seed(seed)
    r = _unit([torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.device, p.dtype) for p in ps])
    g = _unit(gs)
    if not all(math.isfinite(float(t.norm())) for t in g):
        return r
    return _unit(torch._foreach_add(g, r))


def _adam_like(optimizer) -> bool:
    return isinstance(optimizer, (torch.optim.Adam, torch.optim.AdamW))


def eos_factor(optimizer) -> float | None:
    """eos_ratio = sharpness x this factor: 1 / the edge-of-stability threshold of `optimizer`
    (its first parameter group's lr and momentum; Cohen et al. 2021, 2022).

    SGD: threshold 2 (1 + beta) / lr with heavy-ball momentum beta (2 / lr without),
    2 (1 + beta) / (lr (1 + 2 beta)) with Nesterov momentum; Adam/AdamW: (2 + 2 beta1) /
    (lr (1 - beta1)) on the preconditioned sharpness. None for another optimizer."""
    g = optimizer.param_groups[0]
    lr = float(g["lr"])
    if isinstance(optimizer, torch.optim.SGD):
        b = float(g.get("momentum", 0.0) or 0.0)
        if g.get("nesterov"):
            return lr * (1 + 2 * b) / (2 * (1 + b))
        return lr / (2 * (1 + b))
    if _adam_like(optimizer):
        b1 = float(g["betas"][0])
        return lr * (1 - b1) / (2 + 2 * b1)
    return None


def preconditioner(optimizer, params: list, step_grads: list | None) -> list | None:
    """S = P^-1/2 per parameter for Adam/AdamW (P = sqrt(v_hat) + eps, Adam's current
    preconditioner), None for SGD. Before Adam's first step (no state yet) v_hat is the
    update batch's squared gradient, which is what Adam's first step would use."""
    if not _adam_like(optimizer):
        return None
    eps_of = {p: g["eps"] for g in optimizer.param_groups for p in g["params"]}
    beta2_of = {p: g["betas"][1] for g in optimizer.param_groups for p in g["params"]}
    sg = dict(zip(params, step_grads or [None] * len(params)))
    out = []
    for p in params:
        st = optimizer.state.get(p, {})
        v = st.get("max_exp_avg_sq", st.get("exp_avg_sq"))
        if v is not None:
            t = float(st.get("step", 1))
            vhat = v / (1 - beta2_of.get(p, 0.999) ** max(t, 1))
        else:
            g = sg.get(p)
            vhat = torch.zeros_like(p) if g is None else g.detach() ** 2
        out.append((vhat.sqrt() + eps_of.get(p, 1e-8)).rsqrt())
    return out


def _unit(v: Tensors) -> Tensors:
    n = float(torch.stack(torch._foreach_norm(v)).norm()) if v else 0.0
    return torch._foreach_div(v, n) if n > 0 and math.isfinite(n) else v
