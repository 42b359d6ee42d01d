"""Probes on the fixed probe batch: the stability metrics of docs/metrics.md.

`Prober.snapshot()` is called at init, every `stability.every` steps and at
the end. One snapshot costs: one forward pass on the probe batch with hooks
(each block's stream before its Norm, its scaled branch sum, the attention
logits, the model output "before") and its backward pass (parameter gradients
and the gradients with respect to each block's output); one forward and
backward pass on the update batch (a fixed training batch); one optimizer step
with those gradients, one forward pass on the probe batch (the output and loss
"after"), and the step undone. When the Hessian is due, Lanczos runs on the
loss of the first `stability.hessian_batch` examples of the probe batch
(default 64 of 256): one more forward and a backward that keeps the gradient
graph (create_graph=True), which every Hessian-vector product reuses. With
`hessian_batch: 0` (or at least the probe batch's size) the snapshot's own
backward keeps its graph.

A snapshot never changes training: parameters, gradients (`.grad`), optimizer
state, BatchNorm running statistics and the global RNG are exactly as before.

Conventions (docs/metrics.md):

- probe mode: every module with batch statistics (BatchNorm) and its
  ancestors in training mode -- batch statistics, as in training -- every
  other module in eval mode (dropout, head dropout off); buffers restored.
- `sharpness` is the largest algebraic eigenvalue of the Hessian of the
  training loss on the Hessian batch with respect to all trainable
  parameters (with Adam/AdamW, of the preconditioned Hessian), by Lanczos
  with full reorthogonalization. It stops when two successive top Ritz values
  agree to `hessian_tol` (relative) or after `hessian_iters` products; it
  starts from the previous estimate's top Ritz vector (warm start, kept in
  training checkpoints), from the gradient direction plus a fixed-seed
  random vector the first time.
- Why a sub-batch: a Hessian-vector product costs about twice a forward and
  backward pass of its batch; on 64 examples about one training step (batch
  128). The price: the top eigenvalue of a smaller batch's loss is larger
  (sampling noise adds curvature); benchmarks/bench_probes.py --accuracy
  measures it.
- Values: nan means undefined (a 0 denominator), inf an overflow; the
  training loop leaves both out of its records.
"""
from __future__ import annotations

import contextlib
import math
import time
from typing import Callable

import torch
from torch import nn

from nas_stab.config.schema import StabilityConfig

_DEFAULTS = StabilityConfig()  # the schema's defaults, for a Prober built without a spec


def update_batch(task, seed: int = 0):
    """The training batch whose optimizer step `update_ratio`, `update_norm` and `loss_drop` measure:
    the first batch of the task's training stream under its own generator (seeded from `seed`,
    so the run's batch order and the global RNG are untouched). None for a task without a
    training stream (then the step is taken on the probe batch itself)."""
    batches = getattr(task, "train_batches", None)
    if batches is None:
        return None
    return next(iter(batches(torch.Generator().manual_seed(7919 + seed))))


def _rms_t(t: torch.Tensor) -> torch.Tensor:
    """Root mean square as a 0-d float32 tensor (no host sync; one fused reduction);
    inf or nan if the tensor holds a non-finite value (overflow)."""
    return torch.linalg.vector_norm(t.detach(), dtype=torch.float32) / math.sqrt(max(t.numel(), 1))


def slice_batch(batch, k: int):
    """The first `k` examples of a batch (a tensor, or a tuple/list of tensors
    sharing their first dimension); None when the batch has at most `k`
    examples or another structure (then the whole batch is used)."""
    ts = [batch] if torch.is_tensor(batch) else list(batch) if isinstance(batch, (tuple, list)) else []
    if not ts or not all(torch.is_tensor(t) and t.dim() >= 1 for t in ts):
        return None
    n = ts[0].shape[0]
    if k <= 0 or k >= n or any(t.shape[0] != n for t in ts):
        return None
    parts = [t[:k] for t in ts]
    return parts[0] if torch.is_tensor(batch) else type(batch)(parts)


def _norms(ts: list[torch.Tensor]) -> list[float]:
    """L2 norm of each tensor, in one batched call."""
    if not ts:
        return []
    return torch.stack([n.float() for n in torch._foreach_norm([t.detach() for t in ts])]).tolist()


def _dot(a: list[torch.Tensor], b: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack([(x * y).sum() for x, y in zip(a, b)]).sum()


def _has_batch_stats(m: nn.Module) -> bool:
    """True for BatchNorm-like modules: their forward depends on training mode through batch statistics."""
    if isinstance(m, nn.modules.batchnorm._BatchNorm) or getattr(m, "uses_batch_stats", False):
        return True
    return any(n in ("running_mean", "running_var") for n, _ in m.named_buffers(recurse=False))


def probe_modes(model: nn.Module) -> dict[nn.Module, bool]:
    """The training flag of every module in probe mode: True for modules with
    batch statistics (BatchNorm) and their ancestors, False for everything else
    (dropout, head dropout and any other train-only randomness off)."""
    keep = set()
    for name, m in model.named_modules():
        if _has_batch_stats(m):
            parts = name.split(".") if name else []
            for k in range(len(parts) + 1):
                keep.add(".".join(parts[:k]))
    return {m: (name in keep and not (isinstance(m, nn.modules.dropout._DropoutNd) or getattr(m, "is_dropout", False)))
            for name, m in model.named_modules()}


@contextlib.contextmanager
def probe_mode(model: nn.Module, modes: dict[nn.Module, bool] | None = None):
    """BatchNorm (and every module that contains one) in training mode, every
    other module in eval mode (dropout, head dropout off); restores the modes
    and every buffer (BatchNorm running statistics, batch counters) afterwards.
    `modes`: a precomputed `probe_modes(model)`."""
    modes = modes if modes is not None else probe_modes(model)
    saved = [(m, m.training) for m in modes]
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    for m, t in modes.items():
        m.training = t
    try:
        yield
    finally:
        with torch.no_grad():
            for b, v in buffers:
                # only what the forward passes wrote (running statistics, which batch_norm updates
                # without bumping the version counter): copying into a constant buffer (an
                # aggregation weight, positional encodings) would invalidate graphs that saved it
                if not torch.equal(b, v):
                    b.copy_(v)
        for m, t in saved:
            m.training = t


@contextlib.contextmanager
def math_attention():
    """PyTorch's math attention kernel: fused kernels have no double backward."""
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:  # pragma: no cover - older torch
        yield
        return
    with sdpa_kernel(SDPBackend.MATH):
        yield


def _taps(block: nn.Module, name: str) -> list[nn.Module]:
    """The block's probe taps called `name` (see `models.base.Tap`)."""
    return [m for n, m in block.named_modules() if n.rsplit(".", 1)[-1] == name]


class _Capture:
    """Forward hooks for one probe forward pass.

    Per block i: the RMS of its input, of its residual stream before the
    Norm that follows the addition (its `stream_tap`; a block without one,
    such as a plain layer, gives its output), of its scaled branch sum (its
    `branch_tap`), and with `grads` the L2 norm of the loss gradient with
    respect to its output (the hidden stream it hands on), filled in by the
    backward pass. Also the model's output and, for attention layers, the
    largest attention logit. The hooks keep 0-d tensors; `values()` turns
    them into floats in one transfer (one host sync per pass).
    """

    def __init__(self, model: nn.Module, blocks: list[nn.Module], *, grads: bool = False, logits: bool = False):
        n = len(blocks)
        self.n = n
        self.block_rms: list[float] = [math.nan] * n  # the stream of each block (pre-norm)
        self.in_rms: list[float] = [math.nan] * n
        self.branch_rms: list[float] = [math.nan] * n
        self.grad_out: list[float] = [math.nan] * n
        self.logit_max = math.nan
        self.first_in = math.nan
        self._t: dict[tuple[str, int], torch.Tensor] = {}
        self._g: dict[int, torch.Tensor] = {}
        self._logits: list[torch.Tensor] = []
        self.outputs: list[torch.Tensor] = []
        self.hooks = []
        self.grads = grads
        for i, b in enumerate(blocks):
            self.hooks.append(b.register_forward_hook(self._block_hook(i)))
            for t in _taps(b, "stream_tap"):
                self.hooks.append(t.register_forward_hook(self._tap_hook("stream", i)))
            for t in _taps(b, "branch_tap"):
                self.hooks.append(t.register_forward_hook(self._tap_hook("branch", i)))
        if logits:
            for t in _taps(model, "logits_tap"):
                self.hooks.append(t.register_forward_hook(self._logits_hook))
        self.hooks.append(model.register_forward_hook(self._model_hook))

    def _block_hook(self, i: int):
        def hook(mod, inp, out):
            if inp and torch.is_tensor(inp[0]):
                self._t[("in", i)] = _rms_t(inp[0])
            o = out[0] if isinstance(out, tuple) else out
            if torch.is_tensor(o):
                self._t[("out", i)] = _rms_t(o)
                if self.grads and o.requires_grad:
                    o.register_hook(lambda g, i=i: self._g.__setitem__(i, torch.linalg.vector_norm(g.detach(), dtype=torch.float32)))

        return hook

    def _tap_hook(self, kind: str, i: int):
        def hook(mod, inp, out):
            if torch.is_tensor(out):
                self._t[(kind, i)] = _rms_t(out)

        return hook

    def _logits_hook(self, mod, inp, out):
        q, k = inp[0], inp[1]
        mask = inp[2] if len(inp) > 2 else None
        causal = bool(inp[3]) if len(inp) > 3 else False
        with torch.no_grad():
            lg = (q.detach().float() @ k.detach().float().transpose(-2, -1)) / math.sqrt(q.shape[-1])
            if mask is not None:
                lg = lg.masked_fill(~mask if mask.dtype == torch.bool else mask == float("-inf"), float("-inf"))
            if causal:
                T, S = lg.shape[-2], lg.shape[-1]
                lg = lg.masked_fill(torch.ones(T, S, dtype=torch.bool, device=lg.device).triu(1), float("-inf"))
            self._logits.append(lg.amax())

    def _model_hook(self, mod, inp, out):
        if torch.is_tensor(out):
            self.outputs.append(out.detach())

    def remove(self) -> None:
        """Remove the forward hooks and read the forward values (gradient hooks stay on their tensors)."""
        for h in self.hooks:
            h.remove()
        self.hooks = []
        if self._t:
            keys = list(self._t)
            vals = torch.stack([self._t[k] for k in keys]).tolist()
            self._t = {}
            have_stream = set()
            for (kind, i), v in zip(keys, vals):
                v = math.inf if math.isnan(v) else v  # nan: a non-finite value (overflow)
                if kind == "in":
                    self.in_rms[i] = v
                elif kind == "branch":
                    self.branch_rms[i] = v
                elif kind == "stream":
                    self.block_rms[i] = v
                    have_stream.add(i)
                elif i not in have_stream and not any(k == ("stream", i) for k in keys):
                    self.block_rms[i] = v  # no stream tap: the block's output is the stream
            self.first_in = self.in_rms[0] if self.n else math.nan
        if self._logits:
            v = float(torch.stack(self._logits).amax())
            self.logit_max = math.inf if math.isnan(v) else v
            self._logits = []

    def grad_values(self) -> list[float]:
        """The gradient norms with respect to each block's output, after the backward pass."""
        if self._g:
            keys = list(self._g)
            vals = torch.stack([self._g[k] for k in keys]).tolist()
            for i, v in zip(keys, vals):
                self.grad_out[i] = math.inf if math.isnan(v) else v
            self._g = {}
        return self.grad_out


class Prober:
    """Stability metrics of one model on one task's probe batch.

    `spec` supplies `stability.hessian`, `hessian_iters`, `hessian_tol`,
    `hessian_every` and `hessian_batch`; keyword arguments override them
    (tests, `nas-stab probe`). Without a spec the schema's defaults apply.
    """

    def __init__(self, model: nn.Module, task, spec=None, *, hessian: bool | None = None,
                 hessian_iters: int | None = None, hessian_tol: float | None = None,
                 hessian_every: int | None = None, hessian_batch: int | None = None, seed: int = 0):
        st = getattr(spec, "stability", None)
        self.model = model
        self.task = task
        self.spec = spec
        self.batch = task.probe_batch
        self.hessian = bool(getattr(st, "hessian", False)) if hessian is None else hessian
        self.hessian_iters = hessian_iters or getattr(st, "hessian_iters", _DEFAULTS.hessian_iters)
        self.hessian_tol = hessian_tol or getattr(st, "hessian_tol", _DEFAULTS.hessian_tol)
        self.hessian_every = getattr(st, "hessian_every", 0) if hessian_every is None else hessian_every
        hb = getattr(st, "hessian_batch", _DEFAULTS.hessian_batch) if hessian_batch is None else hessian_batch
        self.hessian_batch = int(hb or 0)
        # the Hessian's batch: the first `hessian_batch` examples of the probe batch (None: all of it)
        self.hessian_sub_batch = slice_batch(self.batch, self.hessian_batch) if self.hessian_batch else None
        self.seed = seed
        self.eigvec: list[torch.Tensor] | None = None  # warm start of the power iteration
        self.nonfinite: tuple[str, float] | None = None  # (quantity, value) of the last snapshot
        self.last_sharpness_info: dict = {}
        self.n_snapshots = 0
        self._modes = probe_modes(model)
        self._names = {p: n for n, p in model.named_parameters()}
        self.update_batch = update_batch(task, seed)

    # -------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict:
        """What later snapshots depend on: the power iteration's warm start
        (the last eigenvector) and the snapshot count. Plain tensors and ints,
        for a training checkpoint (`torch.save`, loadable with weights_only)."""
        return {"eigvec": None if self.eigvec is None else [t.detach().cpu().clone() for t in self.eigvec],
                "n_snapshots": self.n_snapshots}

    def load_state_dict(self, state: dict) -> None:
        dev = next((p.device for p in self.model.parameters()), None)
        ev = state.get("eigvec")
        self.eigvec = None if ev is None else [t.to(dev) if dev is not None else t for t in ev]
        self.n_snapshots = int(state.get("n_snapshots", 0))

    # -------------------------------------------------------------- pieces
    def _blocks(self) -> list[nn.Module]:
        return list(getattr(self.model, "blocks", []))

    def _branch(self) -> list[tuple[str, nn.Parameter]]:
        return list(self.model.branch_weights()) if hasattr(self.model, "branch_weights") else []

    def _flag(self, what: str, value: float) -> None:
        """Remember the first non-finite quantity of this snapshot (in computation order)."""
        if self.nonfinite is None and not math.isfinite(value):
            self.nonfinite = (what, value)

    def forward_norms(self) -> tuple[list[float], float]:
        """RMS of each block's residual stream (before its Norm), and the first block's input RMS
        (one forward, no grad)."""
        cap = _Capture(self.model, self._blocks())
        try:
            with torch.no_grad(), probe_mode(self.model, self._modes):
                self.task.forward(self.model, self.batch)
        finally:
            cap.remove()
        return cap.block_rms, cap.first_in

    def update_ratio(self, optimizer: torch.optim.Optimizer) -> float:
        """RMS(f(theta') - f(theta)) / RMS(f(theta)) on the probe batch for one optimizer step
        on the update batch (undone)."""
        return self.snapshot(optimizer, hessian=False)["update_ratio"]

    def sharpness(self) -> float:
        """The top eigenvalue of the Hessian on the Hessian batch (one estimate)."""
        return self.snapshot(None, hessian=True)["sharpness"]

    # -------------------------------------------------------------- snapshot
    def hessian_due(self, step: int | None, final: bool) -> bool:
        if not self.hessian:
            return False
        if final or step == 0 or (step is None and self.n_snapshots == 0):
            return True
        return bool(self.hessian_every) and step is not None and step % self.hessian_every == 0

    def snapshot(self, optimizer: torch.optim.Optimizer | None, step: int | None = None, *,
                 final: bool = False, hessian: bool | None = None) -> dict[str, float]:
        """Every metric, as a flat {name: value} dict (docs/metrics.md defines each).

        Keys: `fwd_norm.<i>` (RMS of block i's stream before its Norm),
        `fwd_ratio` (Transformer: also `enc_fwd_ratio`, `dec_fwd_ratio`),
        `branch_ratio`, `grad_norm`, `branch_grad_norm`, `grad_norm.<name>`
        (per branch weight), `grad_stream.<i>` (gradient norm with respect to
        block i's output), `grad_ratio`, `probe_loss`; with an optimizer
        `update_ratio`, `update_norm`, `loss_drop`, `dw_ratio.<name>`; when
        the Hessian is due `sharpness`, `sharpness_iters`,
        `sharpness_converged`, and with an optimizer `lr_sharpness`,
        `eos_ratio`; Transformer: `attn_logit_max`, `output_logit_rms`.

        nan means undefined (a 0 denominator), inf an overflow. Afterwards
        `self.nonfinite` names the first non-finite quantity, in computation
        order, or is None.
        """
        do_hessian = self.hessian_due(step, final) if hessian is None else hessian
        self.nonfinite = None
        model = self.model
        blocks = self._blocks()
        branch = self._branch()
        params = [p for p in model.parameters() if p.requires_grad]
        out: dict[str, float] = {}
        transformer = getattr(model, "enc_blocks", None) is not None

        cap = _Capture(model, blocks, grads=True, logits=transformer)
        attn = math_attention() if do_hessian else contextlib.nullcontext()
        try:
            with probe_mode(model, self._modes), attn:
                # one forward on the probe batch: streams, branch sums, the output before the update, the loss
                with torch.enable_grad():
                    loss = self.task.loss(model, self.batch)
                cap.remove()
                loss_value = float(loss.detach())
                before = cap.outputs[0].float() if len(cap.outputs) == 1 else None
                if before is None:  # the task's loss did not call the model exactly once
                    with torch.no_grad():
                        before = self.task.forward(model, self.batch).detach().float()
                self._forward_metrics(out, cap, transformer, before)
                out["probe_loss"] = loss_value
                self._flag("probe loss", loss_value)

                # one backward: parameter gradients and the hidden stream's gradients (with their graph
                # when the Hessian is due on this very batch: every Hessian-vector product reuses it)
                keep_graph = bool(params) and do_hessian and self.hessian_sub_batch is None and math.isfinite(loss_value)
                grads = list(torch.autograd.grad(loss, params, create_graph=keep_graph, allow_unused=True)) if params else []
                del loss
                detached = [None if g is None else g.detach() for g in grads]
                self._grad_metrics(out, params, detached, branch)
                self._stream_grad_metrics(out, cap.grad_values())

                # the gradient of the update batch (a training batch): the step, and Adam's first preconditioner
                step_grads = None
                if optimizer is not None and params:
                    step_grads = self._update_batch_grads(params) if self.update_batch is not None else detached

                if do_hessian:
                    self._hessian_metrics(out, params, grads if keep_graph else None, optimizer, step_grads, loss_value)
                grads = None

                if optimizer is not None:
                    self._update_metrics(out, optimizer, params, step_grads or [], branch, before, loss_value)
        finally:
            cap.remove()
        self.n_snapshots += 1
        return out

    def _forward_metrics(self, out: dict, cap: _Capture, transformer: bool, before: torch.Tensor) -> None:
        for i, v in enumerate(cap.block_rms):  # nan: the block did not run; inf: it overflowed
            out[f"fwd_norm.{i}"] = v
            if math.isinf(v):
                self._flag(f"forward output of blocks.{i}", v)
        out["fwd_ratio"] = _ratio(cap.block_rms[-1], cap.in_rms[0]) if cap.n else math.nan
        if any(math.isinf(v) for v in cap.block_rms):
            out["fwd_ratio"] = math.inf
        if transformer:
            ne = 2 * self.model.n_enc
            enc, dec = cap.block_rms[:ne], cap.block_rms[ne:]
            out["enc_fwd_ratio"] = math.inf if any(map(math.isinf, enc)) else (_ratio(enc[-1], cap.in_rms[0]) if enc else math.nan)
            out["dec_fwd_ratio"] = math.inf if any(map(math.isinf, dec)) else (_ratio(dec[-1], cap.in_rms[ne]) if dec else math.nan)
            pair = [v for v in (out["enc_fwd_ratio"], out["dec_fwd_ratio"]) if not math.isnan(v)]
            out["fwd_ratio"] = max(pair) if pair else math.nan
            out["attn_logit_max"] = cap.logit_max
            self._flag("attention logit", cap.logit_max)
            out["output_logit_rms"] = float(_rms_t(before))
            self._flag("model output", out["output_logit_rms"])
        ratios = [_ratio(b, x) for b, x in zip(cap.branch_rms, cap.in_rms) if not math.isnan(b)]
        ratios = [r for r in ratios if not math.isnan(r)]
        out["branch_ratio"] = math.fsum(ratios) / len(ratios) if ratios else math.nan

    def _stream_grad_metrics(self, out: dict, gs: list[float]) -> None:
        for i, v in enumerate(gs):
            out[f"grad_stream.{i}"] = v
        vals = [v for v in gs if not math.isnan(v)]
        if len(vals) < 2:
            out["grad_ratio"] = math.nan
        elif not all(map(math.isfinite, vals)):
            out["grad_ratio"] = math.inf
        else:
            out["grad_ratio"] = _ratio(max(vals), min(vals))

    def _grad_metrics(self, out: dict, params: list, grads: list, branch: list) -> None:
        pos = {p: i for i, p in enumerate(params)}
        names = self._names
        # the first non-finite gradient in backward order: from the output side
        gnorms = _norms([p.new_zeros(()) if g is None else g for p, g in zip(params, grads)])
        for p, v in reversed(list(zip(params, gnorms))):
            if not math.isfinite(v):
                self._flag(f"gradient norm of {names.get(p, '?')}", v)
                break
        out["grad_norm"] = _l2(gnorms)
        vals = []
        for n, p in branch:
            i = pos.get(p)
            v = 0.0 if i is None or grads[i] is None else gnorms[i]
            out[f"grad_norm.{n}"] = v
            vals.append(v)
        out["branch_grad_norm"] = _l2(vals) if vals else math.nan

    def _update_batch_grads(self, params: list) -> list | None:
        """Gradients of the training loss on the update batch (probe mode, BatchNorm statistics restored)."""
        with torch.enable_grad():
            loss = self.task.loss(self.model, self.update_batch)
        return [None if g is None else g.detach() for g in torch.autograd.grad(loss, params, allow_unused=True)]

    def _update_metrics(self, out: dict, optimizer, params: list, grads: list, branch: list,
                        before: torch.Tensor, loss_before: float) -> None:
        """One optimizer step with the update batch's gradients, measured on the probe batch, then undone exactly."""
        model = self.model
        opt_params = [p for g in optimizer.param_groups for p in g["params"]]
        saved_params = [p.detach().clone() for p in opt_params]
        gmap = dict(zip(params, grads))
        saved_grads = [(p, p.grad) for p in opt_params]
        # the step mutates copies of the optimizer state; the originals are put back untouched
        state = optimizer.state
        orig_state = {p: state[p] for p in opt_params if p in state}
        for p, s in orig_state.items():
            state[p] = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in s.items()}
        try:
            for p in opt_params:
                p.grad = gmap.get(p)
            optimizer.step()
            outs: list[torch.Tensor] = []
            hook = model.register_forward_hook(lambda m, i, o: outs.append(o.detach()) if torch.is_tensor(o) else None)
            try:
                with torch.no_grad():
                    loss_after = float(self.task.loss(model, self.batch))
            finally:
                hook.remove()
            with torch.no_grad():
                after = outs[0].float() if len(outs) == 1 else self.task.forward(model, self.batch).detach().float()
                idx = {p: i for i, p in enumerate(opt_params)}
                bw = [(n, p) for n, p in branch if p in idx]
                old = [saved_params[idx[p]] for _, p in bw]
                norms = _norms([*torch._foreach_sub([p.detach() for _, p in bw], old), *old]) if bw else []
                dws, ws = norms[: len(bw)], norms[len(bw):]
                for (n, _), dw, w in zip(bw, dws, ws):
                    out[f"dw_ratio.{n}"] = dw / w if w > 0 else (0.0 if dw == 0 else math.inf)
            if not torch.isfinite(before).all():
                self._flag("model output", math.inf)
                out["update_ratio"] = out["update_norm"] = out["loss_drop"] = math.inf
            elif not torch.isfinite(after).all():
                self._flag("model output after one update step", math.inf)
                out["update_ratio"] = out["update_norm"] = out["loss_drop"] = math.inf
            else:
                before, after = before.double(), after.double()  # no overflow in the norms of finite outputs
                n = math.sqrt(max(before.numel(), 1))
                num = float((after - before).norm()) / n
                out["update_norm"] = num
                out["update_ratio"] = _ratio(num, float(before.norm()) / n)
                out["loss_drop"] = loss_before - loss_after if math.isfinite(loss_after) else math.inf
        finally:
            with torch.no_grad():
                torch._foreach_copy_(opt_params, saved_params)
            for p, g in saved_grads:
                p.grad = g
            for p in opt_params:
                if p in orig_state:
                    state[p] = orig_state[p]
                elif p in state:
                    del state[p]

    # -------------------------------------------------------------- Hessian
    def _hessian_metrics(self, out: dict, params: list, grads: list, optimizer, step_grads, loss_value: float) -> None:
        t0 = time.perf_counter()
        scale = preconditioner(optimizer, params, step_grads) if optimizer is not None else None
        if not math.isfinite(loss_value):
            lam, iters, converged = math.inf, 0, False
        elif not params:
            lam, iters, converged = 0.0, 0, True
        else:
            sub = self.hessian_sub_batch
            graph = grads if grads is not None else self._graph_grads(params, self.batch if sub is None else sub)
            if graph is None:
                lam, iters, converged = math.inf, 0, False
            else:
                lam, iters, converged = self._top_eigenvalue(params, graph, scale)
            del graph
        out["sharpness"] = lam
        self._flag("sharpness", lam)
        out["sharpness_iters"] = float(iters)
        out["sharpness_converged"] = float(converged)
        if optimizer is not None:
            lr = optimizer.param_groups[0]["lr"]
            out["lr_sharpness"] = lr * lam
            factor = eos_factor(optimizer)
            out["eos_ratio"] = lam * factor if factor is not None else math.nan
        self.last_sharpness_info = {"iters": iters, "converged": converged, "seconds": time.perf_counter() - t0,
                                    "preconditioned": scale is not None}

    def _graph_grads(self, params: list, batch) -> list | None:
        """Gradients of the loss on `batch` with their graph (create_graph=True);
        None if that loss is not finite."""
        with torch.enable_grad():
            loss = self.task.loss(self.model, batch)
        if not math.isfinite(float(loss.detach())):
            return None
        return list(torch.autograd.grad(loss, params, create_graph=True, allow_unused=True))

    def _top_eigenvalue(self, params: list, grads: list, scale: list | None) -> tuple[float, int, bool]:
        """The largest algebraic eigenvalue of A = H (or S H S, S = P^-1/2, for Adam) by Lanczos.

        Each step is one Hessian-vector product reusing the gradients' graph;
        the Krylov basis is fully reorthogonalized (it holds at most
        `hessian_iters` vectors the size of the parameters). The top Ritz value
        rises monotonically to lambda_max (the largest algebraic eigenvalue,
        whatever the sign of the others); it stops when two successive top Ritz
        values agree to `hessian_tol` (relative) or after `hessian_iters`
        products. Returns (eigenvalue, products, converged); keeps the top Ritz
        vector as the next estimate's warm start.
        """
        pairs = [(p, g, s) for p, g, s in zip(params, grads, scale if scale is not None else [None] * len(params))
                 if g is not None and g.requires_grad]
        if not pairs:
            return 0.0, 0, True
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

        v0 = torch.cat([t.reshape(-1) for t in self._start_vector(ps, [g.detach() for g in gs])])
        basis = [v0 / v0.norm()]  # grows one vector per product: memory = products x parameters
        alphas, betas = [], []
        theta_prev, theta, y = None, math.nan, None
        converged = False
        it = 0
        for it in range(1, self.hessian_iters + 1):
            w = apply(basis[-1])
            a = float(basis[-1] @ w)
            if not math.isfinite(a):
                return math.inf, it, False
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
                return math.inf, it, False
            if b <= 1e-12 * max(abs(theta), 1e-30):  # an invariant subspace: exact
                converged = True
                break
            if theta_prev is not None and abs(theta - theta_prev) <= self.hessian_tol * abs(theta):
                converged = True
                break
            theta_prev = theta
            betas.append(b)
            basis.append(w / b)
        x = y.to(basis[0].dtype) @ torch.stack(basis[: len(alphas)])
        self.eigvec = [t.detach().clone() for t in unflat(x / x.norm())]
        return theta, it, converged

    def _start_vector(self, ps: list[torch.Tensor], gs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Warm start: the previous eigenvector. Cold start: the gradient direction
        plus an equal-norm fixed-seed random vector. The gradient lies mostly in
        the top Hessian eigenspace (Gur-Ari et al., 2018): from a random vector
        alone, power iteration can stall on the second eigenvalue when the top
        eigenvector is nearly orthogonal to it (seen on a sum-aggregated
        mlp_resnet: 1.56e6 reported for a top eigenvalue of 3.23e6); the random
        part covers a zero gradient. The global RNG is left alone."""
        if self.eigvec is not None and [tuple(t.shape) for t in self.eigvec] == [tuple(p.shape) for p in ps]:
            return _unit([t.to(p.device, p.dtype) for t, p in zip(self.eigvec, ps)])
        gen = torch.Generator().manual_seed(self.seed)
        r = _unit([torch.randn(p.shape, generator=gen, dtype=torch.float32).to(p.device, p.dtype) for p in ps])
        g = _unit(gs)
        if not all(math.isfinite(float(t.norm())) for t in g):
            return r
        return _unit(torch._foreach_add(g, r))


def _ratio(a: float, b: float) -> float:
    """a / b; nan (undefined) when b is 0 or either is undefined; inf when either overflowed."""
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if math.isinf(a) or math.isinf(b):
        return math.inf
    return a / b if b > 0 else math.nan


def _l2(vals: list[float]) -> float:
    return math.sqrt(math.fsum(v * v for v in vals)) if all(map(math.isfinite, vals)) else math.inf


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


def _unit(v: list[torch.Tensor]) -> list[torch.Tensor]:
    n = float(torch.stack(torch._foreach_norm(v)).norm()) if v else 0.0
    return torch._foreach_div(v, n) if n > 0 and math.isfinite(n) else v


def first_nonfinite_block(model: nn.Module, run: Callable[[], object]) -> tuple[str, float] | None:
    """Run `run()` (a forward pass) with hooks; the first block whose output is non-finite."""
    blocks = list(getattr(model, "blocks", []))
    cap = _Capture(model, blocks)
    try:
        with torch.no_grad(), probe_mode(model):
            run()
    finally:
        cap.remove()
    for i, v in enumerate(cap.block_rms):
        if not math.isfinite(v):
            return f"forward output of blocks.{i}", v
    if cap.outputs and not torch.isfinite(cap.outputs[0]).all():
        return "model output", math.inf
    return None
