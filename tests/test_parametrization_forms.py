"""Tensor Programs V's standard parametrization (`init: fan_in`), the faithful depth block (`block: preact` on
mlp_resnet: nothing nonlinear on the residual stream, Tensor Programs VI and Bordelon et al.) and CompleteP
(`parametrization: completep`, Dey et al. 2025: branches x L0/L, Adam's block lr unchanged, eps x L0/L)."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from nas_stab.config import loads_spec
from nas_stab.data import DataInfo
from nas_stab.errors import SpecError
from nas_stab.models import build_model
from nas_stab.training.optim import build_optimizer

INFO = DataInfo("mnist1d", (40,), 10)
SPEC = """\
name: f
task: {{dataset: {{name: mnist1d}}}}
model: {{arch: mlp_resnet, depth: {depth}, width: {width}, base_width: 64, base_depth: 2, {extra}}}
train: {{optimizer: {opt}, lr: 0.01, eps: 1.0e-8}}
"""


def build(width=64, depth=2, extra="parametrization: sp", opt="adam", seed=0):
    spec = loads_spec(SPEC.format(width=width, depth=depth, extra=extra, opt=opt))
    torch.manual_seed(seed)
    return build_model(spec, INFO), spec


def hidden_rms(model, x):
    with torch.no_grad():
        return float(F.relu(model.A(x)).pow(2).mean().sqrt())


def test_fan_in_init_is_tp5_sp_every_weight_by_its_fan_in():
    m, _ = build(256, extra="init: fan_in, parametrization: sp")
    assert m.A.weight.std().item() == pytest.approx(math.sqrt(2 / 40), rel=0.03)  # He on the input's 40 dims
    assert m.B.weight.std().item() == pytest.approx(math.sqrt(1 / 256), rel=0.05)  # readout: 1 / fan_in
    assert m.W.weight.std().item() == pytest.approx(math.sqrt(2 / 256), rel=0.02)
    assert m.blocks[0].branch.layers[0].weight.std().item() == pytest.approx(math.sqrt(2 / 256), rel=0.02)
    k, _ = build(256, extra="parametrization: sp")  # the tau paper's: fan-out input layer, readout 2 / classes
    assert k.A.weight.std().item() == pytest.approx(math.sqrt(2 / (256 * 40)), rel=0.03)
    assert k.B.weight.std().item() == pytest.approx(math.sqrt(2 / 10), rel=0.05)


def test_fan_in_keeps_hidden_units_flat_in_width_the_tau_papers_init_shrinks_them():
    x = torch.randn(512, 40)  # standard inputs: O(1) coordinates
    fan_in = [hidden_rms(build(w, extra="init: fan_in, parametrization: sp")[0], x) for w in (64, 256, 1024)]
    paper = [hidden_rms(build(w, extra="parametrization: sp")[0], x) for w in (64, 256, 1024)]
    assert max(fan_in) / min(fan_in) < 1.1
    assert paper[0] / paper[2] == pytest.approx(4.0, rel=0.1)  # like width^-1/2 over 16x


def test_mup_on_fan_in_equals_fan_in_sp_at_the_base_width_and_zero_readout_holds():
    x = torch.randn(8, 40)
    sp, _ = build(64, extra="init: fan_in, parametrization: sp")
    mu, _ = build(64, extra="init: fan_in, parametrization: mup")
    assert torch.equal(sp(x), mu(x))
    wide, _ = build(512, extra="init: fan_in, parametrization: mup")
    assert wide.A.weight.std().item() == pytest.approx(math.sqrt(2 / 40), rel=0.03)  # input: constant in width
    assert wide.W.weight.std().item() == pytest.approx(math.sqrt(2 / 512), rel=0.02)  # hidden: 1 / fan_in
    assert wide.B.weight.std().item() == pytest.approx(math.sqrt(1 / 64), rel=0.05)  # the base's, read x 64/512
    assert wide.B._nas_output_mult == pytest.approx(64 / 512)
    zero, _ = build(512, extra="init: fan_in, parametrization: mup, readout_zero_init: true")
    assert zero.B.weight.abs().sum() == 0 and zero(x).abs().sum() == 0


def test_fan_in_is_refused_where_it_is_not_implemented():
    with pytest.raises(SpecError, match="fan_in.*mlp_resnet"):
        loads_spec("name: r\ntask: {dataset: {name: digits}}\nmodel: {arch: resnet, depth: 8, init: fan_in}\n")


def test_preact_block_is_the_tp6_residual_stream():
    """h0 = A x; h_l = h + tau W_l relu(h); y = B relu(W relu(h_L)), computed by hand."""
    m, _ = build(64, depth=3, extra="init: fan_in, block: preact, parametrization: sp, tau: 1/sqrt(L)")
    x = torch.randn(5, 40)
    with torch.no_grad():
        h = x @ m.A.weight.T
        for blk in m.blocks:
            h = h + 3 ** -0.5 * (F.relu(h) @ blk.branch.layers[0].weight.T)
        want = F.relu(F.relu(h) @ m.W.weight.T) @ m.B.weight.T
        assert torch.allclose(m(x), want, atol=1e-5)
        assert (h < 0).any(), "the stream keeps negative entries: no relu on it"


def test_preact_is_refused_on_the_plain_mlp():
    with pytest.raises(SpecError, match="block"):
        loads_spec("name: r\ntask: {dataset: {name: digits}}\nmodel: {arch: mlp, block: preact}\n")


@pytest.mark.parametrize("depth", [2, 8, 32])
def test_completep_scales_branches_by_1_over_L_and_keeps_adams_block_lr(depth):
    m, spec = build(256, depth=depth, extra="init: fan_in, block: preact, parametrization: completep")
    assert float(m.tau.value) == pytest.approx(2 / depth)  # (L0 / L)^1
    groups = build_optimizer(m, spec.train).param_groups
    names = {id(p): n for n, p in m.named_parameters()}
    by = {names[id(p)]: (g["lr"], g["eps"]) for g in groups for p in g["params"]}
    lr, eps = by["blocks.0.branch.layers.0.weight"]
    assert lr == pytest.approx(0.01 * 64 / 256)  # muP's hidden rule only: no depth factor at alpha 1
    assert eps == pytest.approx(1e-8 * 2 / depth)
    assert by["W.weight"] == (pytest.approx(0.01 * 64 / 256), pytest.approx(1e-8))  # outside the blocks: muP only
    assert groups[0]["lr"] == pytest.approx(0.01)  # the first group carries the base lr (histories read it)


def test_depth_mup_keeps_its_rules_and_eps():
    m, spec = build(64, depth=8, extra="parametrization: depth_mup")
    assert float(m.tau.value) == pytest.approx(math.sqrt(2 / 8))
    assert {g["eps"] for g in build_optimizer(m, spec.train).param_groups} == {1e-8}


def test_completep_needs_adam_and_residual_blocks():
    with pytest.raises(SpecError, match="completep.*Adam"):
        build(64, depth=4, extra="parametrization: completep", opt="sgd")
    with pytest.raises(SpecError, match="completep scales residual branches"):
        loads_spec("name: r\ntask: {dataset: {name: digits}}\nmodel: {arch: mlp, parametrization: completep}\n"
                   "train: {optimizer: adam}\n")


def test_at_init_completeps_logits_stay_order_one_over_depth_where_sps_blow_up():
    """At init: SP's post-ReLU stream grows with depth (its logits with it); CompleteP's stays O(1)."""
    x = torch.randn(256, 40)
    with torch.no_grad():
        cp = [float(build(64, depth=L, extra="init: fan_in, block: preact, parametrization: completep")[0](x).std()) for L in (2, 32)]
        sp = [float(build(64, depth=L, extra="init: fan_in, parametrization: sp")[0](x).std()) for L in (2, 32)]
    assert cp[1] / cp[0] < 2
    assert sp[1] / sp[0] > 100
