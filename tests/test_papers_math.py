"""The papers' math, checked on our models (issue 3, item 5).

Each test states the claim, the measured numbers it relies on and why its
tolerance is what it is. Runs in a few seconds on one thread.
"""
from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F

from nas_stab.config import loads_spec
from nas_stab.data import DataInfo
from nas_stab.models import build_model
from nas_stab.models.base import deepnorm_constants
from nas_stab.models.path import chains, load_weight_space
from nas_stab.models.skip import Skip

IMG = DataInfo("synthetic", (3, 8, 8), 10)


def spec(model: str, dataset: str = "{name: synthetic, shape: [3, 8, 8]}"):
    return loads_spec(f"name: t\ntask: {{dataset: {dataset}}}\nmodel: {{{model}}}\n")


def model(text: str, info=IMG, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(spec(text), info)


# --------------------------------------------------------------- STAM Theorem 1


@pytest.mark.parametrize("agg", ["sum", "avg", "stam"])
def test_stam_forward_norm_follows_sqrt_sum_alpha_squared(agg):
    """STAM Theorem 1 / Remark 1: at Kaiming init, E||N(h)||^2 = sum_k alpha_k^2 ||h||^2
    for C ReLU branches of depth b (hidden layers N(0, 2/m), last N(0, 1/m)).

    We average ||N(h)||^2 / ||h||^2 over 32 inputs and 12 inits (m = 256, b = 2)
    and compare with sum alpha^2 = C (sum), 1/C (avg), 1 (stam). Tolerance: one
    init's squared ratio has a relative spread of 0.032-0.038 here (measured;
    theory: ~sqrt(7/m) = 0.17 per sample, averaged over 32 samples sharing the
    weights), so the mean of 12 has a standard error of about 0.01; we allow
    0.08 on the squared ratio (about 8 standard errors; 0.04 on the norm).
    Measured: sqrt(mean) = 0.992 / 1.996 / 4.002 for sum at C = 1 / 4 / 16. A wrong last-layer gain
    (He's 2/m) would be off by 2x, a wrong alpha by C^(+-1/2).
    """
    m, b = 256, 2
    g = torch.Generator().manual_seed(1)
    h = torch.randn(32, m, generator=g)
    measured = {}
    for C in (1, 4, 16):
        sq = []
        for seed in range(12):
            net = model(f"arch: mlp_resnet, width: {m}, depth: 1, branch_depth: {b}, branches: {C}, aggregation: {agg}", seed=seed)
            with torch.no_grad():
                out = net.blocks[0].branch(h)
            sq.append(((out.norm(dim=1) ** 2).mean() / (h.norm(dim=1) ** 2).mean()).item())
        alpha = {"sum": 1.0, "avg": 1.0 / C, "stam": C ** -0.5}[agg]
        predicted = C * alpha ** 2
        measured[C] = sum(sq) / len(sq)
        assert abs(measured[C] / predicted - 1) < 0.08, (agg, C, measured[C], predicted)
    # the shape across C, independently of the constant: sum grows as C, avg shrinks as 1/C, stam is flat
    growth = measured[16] / measured[1]
    expected = {"sum": 16.0, "avg": 1 / 16.0, "stam": 1.0}[agg]
    assert abs(math.log(growth / expected)) < 0.15, (agg, growth)


def test_stam_scaled_down_inits():
    """STAM Appendix A.4 with sum aggregation: gamma = C^(-1/(2b)) on every branch
    layer restores ||N(h)|| ~ ||h|| (sum gamma^(2b) C = 1); gamma = (bC)^(-1/(2(b-1)))
    gives ||N(h)||^2 = C gamma^(2b) = C (bC)^(-b/(b-1)) = 1/(4C) for b = 2."""
    m, b = 256, 2
    h = torch.randn(32, m, generator=torch.Generator().manual_seed(2))
    for C in (1, 16):
        for init, predicted in (("stam_forward", 1.0), ("stam_update", 1 / (4 * C))):
            sq = []
            for seed in range(8):
                net = model(f"arch: mlp_resnet, width: {m}, depth: 1, branch_depth: {b}, branches: {C}, init: {init}", seed=seed)
                with torch.no_grad():
                    out = net.blocks[0].branch(h)
                sq.append(((out.norm(dim=1) ** 2).mean() / (h.norm(dim=1) ** 2).mean()).item())
            assert abs(sum(sq) / len(sq) / predicted - 1) < 0.1, (init, C, sum(sq) / len(sq), predicted)


# --------------------------------------------------------------- tau paper


def _forward_growth(tau: str, seed: int) -> float:
    net = model(f"arch: mlp_resnet, width: 128, depth: 100, tau: '{tau}'", info=DataInfo("mnist", (1, 28, 28), 10), seed=seed)
    first, last = [], []
    net.blocks[0].register_forward_hook(lambda mod, i, o: first.append(i[0].norm(dim=1).mean().item()))
    net.blocks[-1].register_forward_hook(lambda mod, i, o: last.append(o.norm(dim=1).mean().item()))
    x = torch.randn(64, 784, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        net(x)
    return last[0] / first[0]


def test_tau_quarter_power_explodes_at_depth_100():
    """Tau paper (Theorem 4 and Figure 1): on its MLP ResNet with m = 128 and
    L = 100, tau = L^(-1/4) makes the forward norm grow (at least as L^(1/4) ~ 3.2 by
    the theorem; measured ~1700-3200x here) while tau = 1/sqrt(L) keeps it bounded
    (measured ~2.4-2.7x, the e^(O(tau^2 L)) = O(1) regime) and tau = 1/L flat
    (~1.01x). Thresholds 100x and 5x sit far from all measurements."""
    for seed in (0, 1):
        explode = _forward_growth("L^-0.25", seed)
        sqrt_l = _forward_growth("1/sqrt(L)", seed)
        one_l = _forward_growth("1/L", seed)
        assert explode > 100, explode
        assert sqrt_l < 5, sqrt_l
        assert one_l < 1.1, one_l
        assert explode > 30 * sqrt_l > 30 * one_l


def test_learnable_tau_is_one_parameter_with_the_averaged_gradient():
    """Tau paper, Section 5.2: one tau shared by all blocks, updated with the
    average of the per-block gradients. We give each block its own copy of tau,
    compute the per-block gradients, and compare their mean with the shared
    parameter's gradient."""
    L = 5
    net = model(f"arch: mlp_resnet, width: 16, depth: {L}, tau: {{init: 1/sqrt(L), learnable: true}}")
    taus = [(n, p) for n, p in net.named_parameters() if "tau" in n]
    assert len(taus) == 1 and taus[0][1].ndim == 0
    assert taus[0][1].item() == pytest.approx(1 / math.sqrt(L))
    assert all(b._tau is net.tau for b in net.blocks)
    x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))
    clone = copy.deepcopy(net)  # the averaging must survive copies (probes, checkpoints)
    F.cross_entropy(net(x), y).backward()
    shared = net.tau.value.grad.item()
    F.cross_entropy(clone(x), y).backward()
    assert clone.tau.value.grad.item() == pytest.approx(shared, rel=1e-6)

    copies = [torch.tensor(1 / math.sqrt(L), requires_grad=True) for _ in range(L)]
    for block, t in zip(net.blocks, copies):
        object.__setattr__(block, "_tau", lambda t=t: t)
    F.cross_entropy(net(x), y).backward()
    per_block = [t.grad.item() for t in copies]
    assert shared == pytest.approx(sum(per_block) / L, rel=1e-5, abs=1e-9)
    assert abs(shared) > 1e-6 and len(set(round(g, 8) for g in per_block)) == L  # a real average of distinct values


# --------------------------------------------------------------- skip lambda / rSkip


def test_xskip_ln_and_rskip_ln_at_lambda_1_are_the_post_ln_block():
    """rSkip paper: lambda = 1 in both LN forms is the post-LN block LN(x + F(x))."""
    x, f = torch.randn(6, 12), torch.randn(6, 12)
    ref = F.layer_norm(x + f, (12,))
    for kind in ("xskip_ln", "rskip_ln"):
        out = Skip(kind, 12, lam=1)(x, f)
        torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    # on CNNs, LN is over (C, H, W) per sample with a per-channel affine
    xc, fc = torch.randn(2, 4, 5, 5), torch.randn(2, 4, 5, 5)
    ref = F.layer_norm(xc + fc, (4, 5, 5))
    torch.testing.assert_close(Skip("rskip_ln", 4, lam=1, conv=True)(xc, fc), ref, rtol=1e-5, atol=1e-5)
    # whole networks: same seed, same parameters, same outputs
    for arch in ("arch: mlp_resnet, width: 16, depth: 3", "arch: resnet, width: 4, depth: 8, branches: 2"):
        outs = [model(f"{arch}, skip: {k}")(torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(0)))
                for k in ("xskip_ln", "rskip_ln")]
        torch.testing.assert_close(outs[0], outs[1])


def test_rskip_recursion_and_xskip_scale():
    """rSkip+LN with lambda 3 is y3 = LN3(x + LN2(x + LN1(x + F))); xSkip is lambda x + F;
    DeepNorm is LN(alpha x + F) with DeepNet's alpha for L sublayers."""
    x, f = torch.randn(5, 8), torch.randn(5, 8)
    ln = lambda t: F.layer_norm(t, (8,))  # noqa: E731  (fresh LN affine is the identity)
    torch.testing.assert_close(Skip("rskip_ln", 8, lam=3)(x, f), ln(x + ln(x + ln(x + f))))
    torch.testing.assert_close(Skip("xskip_ln", 8, lam=2.5)(x, f), ln(2.5 * x + f))
    torch.testing.assert_close(Skip("xskip", 8, lam=2)(x, f), 2 * x + f)
    a, beta = deepnorm_constants(9)["enc"]
    assert a == pytest.approx((2 * 9) ** 0.25) and beta == pytest.approx((8 * 9) ** -0.25)  # N = 9 layers, 2 sublayers each
    torch.testing.assert_close(Skip("deepnorm", 8, L=18)(x, f), ln(a * x + f))


# --------------------------------------------------------------- Path-BN


def _positive_diagonals(weight_model, path_model):
    """Path space fixes diagonal weights to +1: make the weight-space ones positive."""
    src = dict(weight_model.named_parameters())
    with torch.no_grad():
        for chain in chains(path_model):
            for name, layer in chain[1:]:
                w = src[name + ".weight"].view(src[name + ".weight"].shape[0], -1)
                idx = layer.diag_index.view(-1, 1)
                w.scatter_(1, idx, w.gather(1, idx).abs() + 0.05)


@pytest.mark.parametrize("arch", [
    "arch: mlp, width: 16, depth: 4",
    "arch: mlp_resnet, width: 8, depth: 2, branch_depth: 3, branches: 3",
    "arch: plainnet, width: 4, depth: 7",
    "arch: plainnet, width: 4, depth: 5, stages: 1",
    "arch: resnet, width: 4, depth: 8, branches: 2",
    "arch: resnext, width: 2, depth: 11, branches: 2",
])
def test_path_reparameterization_computes_the_same_function(arch):
    """Path-BN Theorem 1: the path-reparameterized network (path values as
    parameters, diagonal weights 1) computes exactly the weight-space network's
    outputs. Float32 tolerance."""
    weight = model(arch, seed=3)
    path = model(arch + ", parametrization: path", seed=4)
    assert chains(path) and all(len(c) >= 1 for c in chains(path))
    _positive_diagonals(weight, path)
    load_weight_space(path, weight)
    x = torch.randn(6, 3, 8, 8, generator=torch.Generator().manual_seed(5))
    a, b = weight(x), path(x)
    assert a.abs().max() > 1e-3  # not a trivial zero network
    torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5 * a.abs().max().item())
    # and the path model really holds other numbers: every chain head differs from its weights
    wp = dict(weight.named_parameters())
    for chain in chains(path):
        name, head = chain[0]
        if len(chain) > 1:
            assert not torch.allclose(head.weight, wp[name + ".weight"])


@pytest.mark.parametrize("arch", ["arch: mlp, width: 32, depth: 4", "arch: plainnet, width: 4, depth: 6",
                                  "arch: plainnet, width: 4, depth: 5, stages: 1",
                                  "arch: mlp_resnet, width: 16, depth: 2, branch_depth: 3, branches: 2"])
def test_path_bn_is_invariant_to_rescaling_off_diagonals_but_bn_is_not(arch):
    """Path-BN Proposition 2: multiplying the trained (off-diagonal) parameters of
    a layer l >= 2 by c != 1 changes BN(o_j + sum_k u_jk o_k) but not Path-BN's
    BN(sum_k u_jk o_k) + o_j. Training mode (batch statistics); c = 3. The
    invariance holds up to BN's eps (1e-5 against unit-scale variances)."""
    x = torch.randn(32, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    change = {}
    for norm in ("path_bn", "bn"):
        net = model(f"{arch}, norm: {norm}, parametrization: path", seed=1)
        net.train()
        before = net(x).detach()
        ratio_layers = [layer for chain in chains(net) for _, layer in chain[1:]]
        assert ratio_layers
        with torch.no_grad():
            for layer in ratio_layers:
                layer.weight.mul_(3.0)
        after = net(x).detach()
        change[norm] = ((after - before).norm() / before.norm()).item()
    assert change["path_bn"] < 1e-4, change
    assert change["bn"] > 1e-2, change


def test_path_space_sgd_step_is_the_g_sgd_update():
    """One plain SGD step on the path values equals the G-SGD update written by
    hand (Path-BN equations 6-7; Meng et al. 2019) on a 3-layer MLP:
    grad v^l_jk = dL/du^l_jk / v^1_kk  (l >= 2, j != k),
    grad v^1_kk = dL/du^1_kk - sum_{l>=2} sum_{j!=k} dL/du^l_jk v^l_jk / (v^1_kk)^2,
    grad v^1_jk = dL/du^1_jk off the diagonal,
    with the weight-space gradients dL/du of the network whose weights are
    u^1 = v^1, u^l = v^l / v^1_kk off the diagonal and 1 on it."""
    d, h, lr = 6, 5, 0.1
    net = model(f"arch: mlp, width: {h}, depth: 3, parametrization: path", info=DataInfo("v", (d,), 3), seed=7)
    with torch.no_grad():  # move the diagonal path values away from their init of 1
        net.blocks[0].layer.weight.add_(0.3 * torch.rand(h, d))
    V = [b.layer.weight.detach().clone() for b in net.blocks]
    head_w, head_b = net.head.weight.detach().clone(), net.head.bias.detach().clone()
    x, y = torch.randn(16, d), torch.randint(0, 3, (16,))

    # --- by hand, in weight space
    k = torch.arange(h)
    diag1 = V[0][k, k % d]
    eye = torch.eye(h)
    U = [V[0].clone()] + [v * (1 - eye) / diag1[None, :] + eye for v in V[1:]]
    U = [u.requires_grad_() for u in U]
    hw, hb = head_w.clone().requires_grad_(), head_b.clone().requires_grad_()
    z = x
    for u in U:
        z = F.relu(z @ u.T)
    loss = F.cross_entropy(z @ hw.T + hb, y)
    G = torch.autograd.grad(loss, U + [hw, hb])
    grads = [G[0].clone()]
    for j in (1, 2):
        grads.append(G[j] * (1 - eye) / diag1[None, :])
    correction = sum(((G[j] * V[j]) * (1 - eye)).sum(0) for j in (1, 2)) / diag1 ** 2
    grads[0][k, k % d] -= correction
    expected = [v - lr * g for v, g in zip(V, grads)]

    # --- autograd through the path parametrization + torch SGD
    opt = torch.optim.SGD(net.parameters(), lr=lr)
    F.cross_entropy(net(x), y).backward()
    opt.step()
    for b, e in zip(net.blocks, expected):
        got = b.layer.weight.detach()
        mask = b.layer.mask.bool() if b.layer.ratio else torch.zeros_like(got, dtype=torch.bool)
        torch.testing.assert_close(got[~mask], e[~mask], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(net.head.weight.detach(), head_w - lr * G[3])
    assert correction.abs().max() > 1e-4  # the diagonal correction term is really exercised
