"""`model.parametrization: umup` (u-muP, Blake et al. 2024) checked against Graphcore's `unit-scaling` package:
nas_stab's abc-equivalent form (weights N(0, c^2), lr x c x s) computes the same function as the package's
unit-scaled Linear / LinearReadout modules with the same unit weights, and trains along the same Adam trajectory as
the package's optim.Adam on them; per-parameter lrs are the package's lr_scale_func_adam times the multiplier."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nas_stab.config import loads_spec
from nas_stab.data import DataInfo
from nas_stab.errors import SpecError
from nas_stab.models import build_model
from nas_stab.training.optim import build_optimizer

uu = pytest.importorskip("unit_scaling")
uu_optim = pytest.importorskip("unit_scaling.optim")

INFO = DataInfo("mnist1d", (40,), 10)
SPEC = """\
name: u
task: {{dataset: {{name: mnist1d}}}}
model: {{arch: mlp_resnet, depth: {depth}, width: {width}, tau: 0.5, {extra}}}
train: {{optimizer: {opt}, lr: {lr}, eps: 1.0e-8, batch_size: 64}}
"""


def build(width=64, depth=2, extra="parametrization: umup", opt="adam", lr=0.5, seed=0):
    spec = loads_spec(SPEC.format(width=width, depth=depth, extra=extra, opt=opt, lr=lr))
    torch.manual_seed(seed)
    return build_model(spec, INFO), spec


class UnitScaledResNet(nn.Module):
    """The same network (the tau paper's post-activation MLP ResNet, one branch per block) from the package's own
    unit-scaled modules: h0 = relu(A x), h_l = relu(h + tau F_l(h)), y = B relu(W h_L)."""

    def __init__(self, d_in: int, m: int, classes: int, depth: int, tau: float):
        super().__init__()
        self.A = uu.Linear(d_in, m)
        self.F = nn.ModuleList(uu.Linear(m, m) for _ in range(depth))
        self.W = uu.Linear(m, m)
        self.B = uu.LinearReadout(m, classes)
        self.tau = tau

    def forward(self, x):
        h = F.relu(self.A(x))
        for f in self.F:
            h = F.relu(h + self.tau * f(h))
        return self.B(F.relu(self.W(h)))


def twin(width, depth=2, seed=0):
    """(nas_stab's umup model, the package's model holding the same unit weights W = theta / c)."""
    ours, spec = build(width, depth, seed=seed)
    ref = UnitScaledResNet(40, width, 10, depth, 0.5)
    pairs = [(ref.A, ours.A), *((f, b.branch.layers[0]) for f, b in zip(ref.F, ours.blocks)), (ref.W, ours.W), (ref.B, ours.B)]
    with torch.no_grad():
        for mod, theirs in pairs:
            n = theirs.weight.shape[1]
            c = n ** -1.0 if mod is ref.B else n ** -0.5
            mod.weight.copy_(theirs.weight / c)
    return ours, ref, spec


def test_weights_are_unit_weights_times_u_mups_multipliers():
    m, _ = build(256)
    assert m.A.weight.std().item() == pytest.approx(40 ** -0.5, rel=0.03)  # input: fan-in 40, N(0,1) x 40^-1/2
    assert m.W.weight.std().item() == pytest.approx(256 ** -0.5, rel=0.02)  # hidden: x 256^-1/2
    assert m.blocks[0].branch.layers[0].weight.std().item() == pytest.approx(256 ** -0.5, rel=0.02)
    assert m.B.weight.std().item() == pytest.approx(1 / 256, rel=0.05)  # readout: x 1/256
    z, _ = build(256, extra="parametrization: umup, readout_zero_init: true")
    assert z.B.weight.abs().sum() == 0 and z.W.weight.std().item() == pytest.approx(256 ** -0.5, rel=0.02)


@pytest.mark.parametrize("width", [64, 512])
def test_same_function_as_the_unit_scaling_packages_modules(width):
    ours, ref, _ = twin(width)
    x = torch.randn(32, 40)
    with torch.no_grad():
        a, b = ours(x), ref(x)
    assert torch.allclose(a, b, rtol=1e-4, atol=1e-6), float((a - b).abs().max())


@pytest.mark.parametrize("width", [64, 512])
def test_lrs_are_the_packages_lr_scale_func_adam_times_the_multiplier(width):
    ours, ref, spec = twin(width)
    lr = spec.train.lr
    got = {id(p): g["lr"] for g in build_optimizer(ours, spec.train).param_groups for p in g["params"]}
    theirs = {id(p): g["lr"] for g in uu_optim.Adam(ref.parameters(), lr=lr).param_groups for p in g["params"]}
    for mod, mine in [(ref.A, ours.A), (ref.F[0], ours.blocks[0].branch.layers[0]), (ref.W, ours.W), (ref.B, ours.B)]:
        n = mine.weight.shape[1]
        c = n ** -1.0 if mod is ref.B else n ** -0.5
        assert got[id(mine.weight)] == pytest.approx(c * theirs[id(mod.weight)], rel=1e-12)
    assert got[id(ours.W.weight)] == pytest.approx(lr / width)  # hidden: eta / n in all (c = s = n^-1/2)
    assert got[id(ours.B.weight)] == pytest.approx(lr / width)  # readout: c = 1/n, s = 1


def train_pair(width, steps=20, eps_mult=True):
    """Both networks after `steps` Adam steps on the same batches: nas_stab's with its optimizer and the mean cross
    entropy it trains with, the package's with its optim.Adam and its unit-scaled cross entropy."""
    ours, ref, spec = twin(width, seed=1)
    if not eps_mult:
        for p in ours.parameters():
            p._nas_eps_mult = 1.0
    opt_a = build_optimizer(ours, spec.train)
    opt_b = uu_optim.Adam(ref.parameters(), lr=spec.train.lr, eps=1e-8)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x, y = torch.randn(64, 40, generator=g), torch.randint(0, 10, (64,), generator=g)
        opt_a.zero_grad()
        F.cross_entropy(ours(x), y).backward()
        opt_a.step()
        opt_b.zero_grad()
        uu.functional.cross_entropy(ref(x), y).backward()
        opt_b.step()
    return ours, ref


def weight_gap(ours, ref) -> float:
    """The largest relative difference between the two networks' weights (nas_stab's theta / c vs the package's W)."""
    gaps = []
    for mod, mine in [(ref.A, ours.A), (ref.F[0], ours.blocks[0].branch.layers[0]), (ref.W, ours.W), (ref.B, ours.B)]:
        n = mine.weight.shape[1]
        c = n ** -1.0 if mod is ref.B else n ** -0.5
        gaps.append(float((mine.weight.detach() / c - mod.weight.detach()).norm() / mod.weight.detach().norm()))
    return max(gaps)


@pytest.mark.parametrize("width", [64, 512])
def test_same_adam_trajectory_as_the_packages_optimizer_eps_included(width):
    """Adam is invariant to each tensor's gradient scale but for eps, and the package's gradients are the true ones
    times a constant per tensor (unit-scaled backward): with each tensor's eps divided by that constant, 20 steps at
    a large lr land on the same weights; with eps as given (1e-8 on nas_stab's true gradients) they do not."""
    ours, ref = train_pair(width)
    before = twin(width, seed=1)[1]
    assert weight_gap(ours, before) > 0.1  # it trained
    assert weight_gap(ours, ref) < 1e-4
    assert weight_gap(*train_pair(width, eps_mult=False)) > 1e-3  # the eps rule is what makes them agree


def test_hidden_units_flat_in_width_logits_shrink_like_width_to_the_minus_half():
    """At init u-muP's hidden units are O(1) at every width and its readout (N(0,1) x 1/n) gives logits of
    order n^-1/2 (they grow to O(1) as the readout trains: its lr is constant in n)."""
    x = torch.randn(512, 40)
    rms, scaled = {}, {}
    for w in (64, 1024):
        ms = [build(w, seed=s)[0] for s in range(4)]
        with torch.no_grad():
            rms[w] = sum(float(F.relu(m.A(x)).pow(2).mean().sqrt()) for m in ms) / 4
            scaled[w] = sum(float(m(x).std()) * math.sqrt(w) for m in ms) / 4  # logit std x sqrt(n)
    assert rms[1024] / rms[64] == pytest.approx(1.0, abs=0.1)
    assert 0.6 < scaled[1024] / scaled[64] < 1.6  # a 16x wider net: logits 4x smaller, not 16x or 1x


@pytest.mark.parametrize("extra, opt, match", [
    ("parametrization: umup", "sgd", "Adam rules"),
    ("parametrization: umup, init: fixup", "adam", "sets every weight's init"),
    ("parametrization: umup, base_depth: 2", "adam", "width rules only"),
])
def test_refused_where_it_is_not_u_mup(extra, opt, match):
    with pytest.raises(SpecError, match=match):
        build(64, extra=extra, opt=opt)


def test_refused_on_other_architectures_and_with_a_searched_depth():
    with pytest.raises(SpecError, match="umup is implemented for mlp_resnet"):
        loads_spec("name: r\ntask: {dataset: {name: digits}}\nmodel: {arch: mlp, parametrization: umup}\n")
    with pytest.raises(SpecError, match="width rules only"):
        loads_spec("name: r\ntask: {dataset: {name: digits}}\nmodel: {arch: mlp_resnet, parametrization: umup}\n"
                   "train: {optimizer: adam}\nspace: {model.depth: [2, 4]}\n")


def test_a_width_search_needs_no_base_width():
    spec = loads_spec("name: r\ntask: {dataset: {name: digits}}\nmodel: {arch: mlp_resnet, parametrization: umup}\n"
                      "train: {optimizer: adam}\nspace: {model.width: [64, 128]}\n")
    assert spec.model.base_width is None and math.isfinite(spec.train.lr)
