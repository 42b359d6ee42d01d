"""Every registered vision architecture x knob combination on tiny inputs:
finite output, every parameter gets a gradient, identical results for a fixed
seed; and every knob value either builds or is refused at validation with a
reason (never "not supported yet")."""
from __future__ import annotations

import typing

import pytest
import torch
import torch.nn.functional as F

from nas_stab.config import loads_spec
from nas_stab.config.schema import ModelConfig
from nas_stab.data import DataInfo
from nas_stab.errors import SpecError
from nas_stab.models import ARCHS, build_model
from nas_stab.models.branches import MultiBranch

INFO = DataInfo("synthetic", (3, 8, 8), 5)
DATASET = "{name: synthetic, shape: [3, 8, 8], classes: 5}"
VISION = ("mlp", "mlp_resnet", "plainnet", "resnet", "resnext")
BASE = {
    "mlp": "arch: mlp, width: 8, depth: 3",
    "mlp_resnet": "arch: mlp_resnet, width: 8, depth: 3, branch_depth: 2",
    "plainnet": "arch: plainnet, width: 4, depth: 4",
    "resnet": "arch: resnet, width: 4, depth: 8",
    "resnext": "arch: resnext, width: 2, depth: 11",
}
PLAIN_KNOBS = [
    "", "norm: bn", "norm: ln", "norm: path_bn", "parametrization: path", "parametrization: path, norm: bn",
    "dropout: 0.2", "skip: none", "layer_skip: true", "layer_skip: true, norm: bn",
]
RESIDUAL_KNOBS = [
    "", "branches: 3", "branches: 3, aggregation: avg", "branches: 3, aggregation: stam",
    "branches: 4, aggregation: 0.5", "branches: 4, aggregation: stam, aggregation_base: 2, alpha_scale: 0.3",
    "tau: 0.5", "tau: 1/sqrt(L), tau_learnable: true", "tau: 1/L", "tau: 1/sqrt(L)", "tau: L^-0.25", "tau: {init: 1/sqrt(L), learnable: true}",
    "skip: none", "skip: xskip, skip_lambda: 2", "skip: xskip, skip_lambda: 0.5", "skip: xskip_ln, skip_lambda: 2",
    "skip: rskip_ln, skip_lambda: 2", "skip: rskip_ln, skip_lambda: 3, skip_norm: bn",
    "skip: xskip_ln, skip_lambda: 3, skip_norm: bn", "skip: deepnorm", "skip: deepnorm, init: deepnorm",
    "norm: bn", "norm: ln", "norm: path_bn", "norm: path_bn, branches: 3", "parametrization: path",
    "parametrization: path, norm: bn, branches: 2",
    "init: fixup", "init: fixup, branches: 3, aggregation: stam", "init: zero_last", "init: zero_last, norm: bn",
    "init: deepnorm", "init: stam_forward, branches: 4", "init: stam_update, branches: 4",
    "scalar_bias: true, tau: {init: 1/sqrt(L), learnable: true}", "dropout: 0.2",
    "branches: 2, norm: bn, skip: rskip_ln, skip_lambda: 2, tau: {init: 0.5, learnable: true}",
]
CNN_KNOBS = ["norm: ln, ln_mode: channel", "skip: xskip_ln, skip_lambda: 2, ln_mode: channel"]
# He et al.'s pre-activation block composes with every skip, tau, branch count and init
PREACT_KNOBS = [
    "block: preact", "block: preact, norm: bn", "block: preact, norm: ln", "block: preact, norm: bn, skip: none",
    "block: preact, norm: bn, skip: xskip, skip_lambda: 2", "block: preact, norm: bn, skip: xskip_ln, skip_lambda: 2",
    "block: preact, norm: bn, skip: rskip_ln, skip_lambda: 3", "block: preact, norm: bn, skip: rskip_ln, skip_lambda: 2, skip_norm: bn",
    "block: preact, norm: bn, skip: deepnorm", "block: preact, norm: bn, branches: 3, aggregation: stam",
    "block: preact, norm: bn, tau: {init: 1/sqrt(L), learnable: true}", "block: preact, init: fixup",
    "block: preact, norm: bn, init: zero_last", "block: preact, init: stam_forward, branches: 2",
    "block: preact, scalar_bias: true, tau: 1/sqrt(L)",
]


def combos():
    out = []
    for arch in VISION:
        knobs = PLAIN_KNOBS if arch in ("mlp", "plainnet") else RESIDUAL_KNOBS
        if arch in ("plainnet", "resnet", "resnext"):
            knobs = knobs + CNN_KNOBS[: 1 if arch == "plainnet" else None]
        if arch in ("resnet", "resnext", "mlp_resnet"):
            knobs = knobs + PREACT_KNOBS
        if arch == "mlp_resnet":  # Tensor Programs V's SP init, alone and with the faithful depth block
            knobs = knobs + ["init: fan_in", "init: fan_in, block: preact, tau: 1/sqrt(L)", "init: fan_in, skip: xskip_ln, skip_lambda: 2"]
        out += [(arch, k) for k in knobs]
    return out


def make(arch: str, knobs: str, seed: int = 0):
    text = BASE[arch] + (", " + knobs if knobs else "")
    s = loads_spec(f"name: t\ntask: {{dataset: {DATASET}}}\nmodel: {{{text}}}\n")
    torch.manual_seed(seed)
    return build_model(s, INFO), s


def test_every_vision_arch_is_registered():
    assert set(VISION) <= set(ARCHS.names())


@pytest.mark.parametrize("arch,knobs", combos(), ids=lambda v: v if v else "default")
def test_arch_knob_combination(arch, knobs):
    net, s = make(arch, knobs)
    x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    y = torch.randint(0, 5, (4,), generator=torch.Generator().manual_seed(2))
    torch.manual_seed(3)  # dropout
    out = net(x)
    assert out.shape == (4, 5) and torch.isfinite(out).all()
    F.cross_entropy(out, y).backward()
    zero_init = s.model.init in ("fixup", "zero_last")
    for name, p in net.named_parameters():
        assert p.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(p.grad).all(), name
        if not zero_init:  # a zero-initialized last layer blocks the gradient of the layers before it at init
            assert p.grad.abs().sum() > 0, f"{name} has an all-zero gradient"
    # identical results for a fixed seed
    again, _ = make(arch, knobs)
    torch.manual_seed(3)
    torch.testing.assert_close(again(x), out, rtol=0, atol=0)
    # blocks and branch weights are exposed for the stability probes
    assert len(net.blocks) >= 1 and net.branch_weights()
    assert all(p.ndim >= 2 for _, p in net.branch_weights())


def test_learnable_and_fixup_scalars_are_zero_dimensional():
    """The optimizer trains 0-d parameters at scalar_lr_mult x lr: tau and Fixup's biases must be 0-d."""
    net, _ = make("resnet", "init: fixup, branches: 2, tau: {init: 1/sqrt(L), learnable: true}")
    scalars = [n for n, p in net.named_parameters() if p.ndim == 0]
    assert "tau.value" in scalars
    assert any("in_bias" in n for n in scalars) and any("scale" in n for n in scalars)
    assert len(scalars) == 1 + 2 + 3 * (1 + 1 * 2 + 2 * 2 + 2)  # tau, stem/head biases, per block: a1, a2 x C, b x 2C, scale x C
    # Fixup's init: last conv of each branch and the classifier are zero
    for block in net.blocks:
        assert block.branch.layers[-1].weight.abs().sum() == 0
    assert net.head.weight.abs().sum() == 0


@pytest.mark.parametrize("conv", [False, True])
@pytest.mark.parametrize("norm,b", [("none", 1), ("none", 3), ("bn", 2), ("path_bn", 3)])
def test_batched_branches_equal_a_loop_over_branches(conv, norm, b):
    """One grouped op (and, without a norm after the last layer, the last layer
    fused with the aggregation) computes the same as C separate branches, each
    weighted by alpha, summed in a Python loop."""
    C, ch = 4, 5
    layers = [(3 if conv else 0, ch, 1)] * b
    torch.manual_seed(0)
    mb = MultiBranch(ch, layers, C=C, alpha=0.7, norm=norm, path=norm == "path_bn")
    x = torch.randn(6, ch, 6, 6) if conv else torch.randn(6, ch)
    ref = 0
    for k in range(C):
        sl = slice(k * ch, (k + 1) * ch)
        h = x
        for i, (layer, nm) in enumerate(zip(mb.layers, mb.norms)):
            w = layer.effective_weight()[sl]
            y = F.conv2d(h, w, padding=1) if conv else F.linear(h, w)
            if isinstance(nm, torch.nn.modules.batchnorm._BatchNorm):
                z = F.batch_norm(y, None, None, nm.weight[sl], nm.bias[sl], training=True)
                y = z + h if layer.ratio else z
            elif layer.ratio:
                y = y + h
            h = F.relu(y) if i < b - 1 else y
        ref = ref + 0.7 * h
    torch.testing.assert_close(mb(x), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("conv", [False, True])
@pytest.mark.parametrize("n", [2, 40])  # a dense output smaller than the weight (scaled after), larger (weight scaled)
def test_one_branch_last_layer_scales_output_or_weight_with_the_same_values_and_gradients(conv, n):
    """C = 1: a_0 (W_0 h) is computed without the sum over one branch, by scaling the
    smaller of output and weight; values and every gradient (weights, Fixup's multiplier)
    equal the general weight-sum formula's."""
    ch = 5
    torch.manual_seed(0)
    mb = MultiBranch(ch, [(3 if conv else 0, ch, 1)] * 2, C=1, alpha=0.7, fixup_scale=True)
    with torch.no_grad():
        mb.scale[0].fill_(1.3)
    x = torch.randn(n, ch, 4, 4) if conv else torch.randn(n, ch)
    out = mb(x)
    out.square().sum().backward()
    got = [p.grad.clone() for p in mb.parameters()]
    mb.zero_grad()
    h = F.relu(F.conv2d(x, mb.layers[0].weight, padding=1) if conv else F.linear(x, mb.layers[0].weight))
    wd = (mb.layers[1].weight.unsqueeze(0) * mb._weights().view(1, *[1] * mb.layers[1].weight.ndim)).sum(0)
    ref = F.conv2d(h, wd, padding=1) if conv else F.linear(h, wd)
    ref.square().sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-6, atol=1e-6)
    for g, p in zip(got, mb.parameters()):
        torch.testing.assert_close(g, p.grad, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------- refusals


def refuse(arch_text: str, dataset: str = DATASET) -> SpecError:
    with pytest.raises(SpecError) as e:
        loads_spec(f"name: t\ntask: {{dataset: {dataset}}}\nmodel: {{{arch_text}}}\n")
    return e.value


@pytest.mark.parametrize("text,key,fragment", [
    ("arch: mlp, branches: 2", "model.branches", "mlp_resnet"),
    ("arch: mlp, skip: xskip", "model.skip", "no skip"),
    ("arch: mlp, tau: 0.5", "model.tau", "no residual branches"),
    ("arch: mlp, tau_learnable: true", "model.tau_learnable", "no residual branches"),
    ("arch: plainnet, init: fixup", "model.init", "residual branches"),
    ("arch: plainnet, branches: 4", "model.branches", "resnet"),
    ("arch: mlp, ln_mode: channel", "model.ln_mode", "spatial"),
    ("arch: mlp_resnet, parametrization: path", "model.parametrization", "branch_depth >= 2"),
    ("arch: mlp_resnet, norm: path_bn", "model.norm", "branch_depth >= 2"),
    ("arch: mlp_resnet, init: stam_update, branches: 4", "model.init", "b >= 2"),
    ("arch: resnet, depth: 10", "model.depth", "6n + 2"),
    ("arch: resnext, depth: 14", "model.depth", "9n + 2"),
    ("arch: resnet, depth: 8, norm: ln, parametrization: path", "model.norm", "scale-invariant"),
    ("arch: resnet, depth: 8, init: zero_last, parametrization: path", "model.init", "path space"),
    ("arch: resnet, depth: 8, init: fixup, norm: bn", "model.init", "normalization-free"),
    ("arch: resnet, depth: 8, scalar_bias: true, norm: bn", "model.scalar_bias", "normalization-free"),
    ("arch: resnet, depth: 8, skip_lambda: 2", "model.skip_lambda", "xskip"),
    ("arch: resnet, depth: 8, skip: deepnorm, skip_lambda: 2", "model.skip_lambda", "deepnorm"),
    ("arch: resnet, depth: 8, skip: xskip, skip_norm: bn", "model.skip_norm", "no norm"),
    ("arch: resnet, depth: 8, skip: deepnorm, init: fixup", "model.init", "DeepNet"),
    ("arch: resnet, depth: 8, skip: rskip_ln, skip_lambda: 1.5", "model.skip_lambda", "integer"),
    ("arch: resnet, depth: 8, branch_depth: 2", "model.branch_depth", "mlp_resnet"),
    ("arch: resnet, depth: 8, d_model: 256", "model.d_model", "transformer"),
    ("arch: mlp_resnet, layer_skip: true", "model.layer_skip", "model.skip"),
    ("arch: mlp, layer_skip: true, norm: path_bn", "model.layer_skip", "already carries the identity"),
    ("arch: plainnet, layer_skip: true, parametrization: path, norm: bn", "model.layer_skip", "weight-space"),
    ("arch: mlp, block: preact", "model.block", "resnet, resnext, mlp_resnet"),
    ("arch: plainnet, block: preact", "model.block", "resnet, resnext, mlp_resnet"),
    ("arch: resnet, depth: 8, init: fan_in", "model.init", "is implemented for mlp_resnet"),
    ("arch: resnet, depth: 8, block: preact, norm: path_bn", "model.block", "norm first"),
    ("arch: resnet, depth: 8, block: preact, parametrization: path", "model.block", "norm first"),
    ("arch: resnet, depth: 8, init: xavier_branch", "model.init", "transformer only"),
    ("arch: mlp_resnet, branch_depth: 2, branches: 4, aggregation: stam, init: stam_forward", "model.init", "SUM aggregation"),
    ("arch: resnext, depth: 11, branches: 4, aggregation: avg, init: stam_update", "model.init", "SUM aggregation"),
])
def test_unsupported_knobs_are_refused_with_a_reason(text, key, fragment):
    e = refuse(text)
    assert e.key == key, (e.key, e.message)
    assert fragment in e.message, e.message
    assert "not supported yet" not in e.message


def test_cnn_needs_image_inputs():
    e = refuse("arch: resnet, depth: 8", dataset="{name: synthetic, shape: [64]}")
    assert e.key == "task.dataset.shape" and "image" in e.message


def _choices(field: str):
    return typing.get_args(typing.get_type_hints(ModelConfig)[field])


@pytest.mark.parametrize("arch", VISION)
def test_every_knob_value_builds_or_is_refused_with_a_reason(arch):
    """SPEC 1.2: each knob value trains or is refused at validation with a reason."""
    built = 0
    for field in ("skip", "norm", "parametrization", "init", "skip_norm", "ln_mode", "block"):
        for value in _choices(field):
            extra = {"skip_norm": ", skip: xskip_ln", "init": ", branches: 2"}.get(field, "")
            if arch in ("mlp", "plainnet"):
                extra = ""
            text = f"{BASE[arch]}, {field}: {value}{extra}"
            try:
                s = loads_spec(f"name: t\ntask: {{dataset: {DATASET}}}\nmodel: {{{text}}}\n")
            except SpecError as e:
                assert "not supported yet" not in e.message and len(e.message) > 20, (field, value, e.message)
                continue
            net = build_model(s, INFO)
            assert torch.isfinite(net(torch.randn(2, 3, 8, 8))).all(), (field, value)
            built += 1
    assert built >= (8 if arch in ("mlp", "plainnet") else 18)


# --------------------------------------------------------------- pre-activation block


def _bn(t, norm):
    return F.batch_norm(t, None, None, norm.weight, norm.bias, training=True)


def _ln(t, norm):  # LN of a CNN: each sample over (C, H, W), per-channel affine
    return F.group_norm(t, 1, norm.weight, norm.bias, norm.eps)


@pytest.mark.parametrize("skip,lam", [("plain", 1), ("xskip", 2), ("xskip", 0.5), ("xskip_ln", 2), ("rskip_ln", 3),
                                      ("deepnorm", 1), ("none", 1)])
def test_preact_block_equations(skip, lam):
    """He et al.'s pre-activation block on a tiny input, by hand:
    a = relu(BN1(x)), f = tau * conv2(relu(BN2(conv1(a)))), out = Skip(x, f), NOTHING after
    the addition; a reshaping block's shortcut reads a; the network ends with
    relu(BN(h)) before the pooling, and its stem is the conv alone."""
    knobs = f"block: preact, norm: bn, skip: {skip}, tau: 0.7"
    if skip in ("xskip", "xskip_ln", "rskip_ln"):
        knobs += f", skip_lambda: {lam}"
    net, _ = make("resnet", knobs)
    x = torch.randn(3, 4, 8, 8, generator=torch.Generator().manual_seed(5))
    blk = net.blocks[0]
    br = blk.branch
    a = F.relu(_bn(x, br.norms[0]))
    f = 0.7 * F.conv2d(F.relu(_bn(F.conv2d(a, br.layers[0].weight, padding=1), br.norms[1])), br.layers[1].weight, padding=1)
    norms = blk.skip.norms
    expect = {
        "plain": lambda: x + f,
        "none": lambda: f,
        "xskip": lambda: lam * x + f,
        "xskip_ln": lambda: _ln(lam * x + f, norms[0]),
        "rskip_ln": lambda: _ln(x + _ln(x + _ln(x + f, norms[0]), norms[1]), norms[2]),
        "deepnorm": lambda: _ln(3 ** 0.25 * x + f, norms[0]),  # depth 8: L = 3 blocks, alpha = L^(1/4)
    }
    out = blk(x)
    torch.testing.assert_close(out, expect[skip](), rtol=1e-5, atol=1e-5)
    if skip in ("plain", "xskip", "none"):
        assert (out < 0).any(), "no ReLU after the addition"
    # a reshaping block (first of stage 2): the option-A shortcut reads the pre-activated input
    down = net.blocks[1]
    h = torch.randn(3, 4, 8, 8, generator=torch.Generator().manual_seed(6))
    a2 = F.relu(_bn(h, down.branch.norms[0]))
    s = F.pad(a2[:, :, ::2, ::2], (0, 0, 0, 0, 0, 4))
    f2 = 0.7 * down.branch(a2, preactivated=True)
    if skip in ("plain", "xskip"):
        torch.testing.assert_close(down(h), (lam if skip == "xskip" else 1) * s + f2, rtol=1e-5, atol=1e-5)
    # the whole network: stem conv, blocks, relu(BN(h)), pool, linear
    img = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(7))
    h = F.conv2d(img, net.stem.weight, padding=1)
    for b in net.blocks:
        h = b(h)
    logits = net.head(F.relu(_bn(h, net.final_norm)).mean((2, 3)))
    torch.testing.assert_close(net(img), logits, rtol=1e-5, atol=1e-5)


def test_preact_resnext_shortcut_is_a_plain_conv_of_the_preactivated_input():
    net, _ = make("resnext", "block: preact, norm: bn, branches: 2")
    blk = net.blocks[0]  # stem width 2 -> 8 channels: a projection
    assert isinstance(blk.shortcut[1], torch.nn.Identity)
    x = torch.randn(3, 2, 8, 8, generator=torch.Generator().manual_seed(1))
    a = F.relu(_bn(x, blk.branch.norms[0]))
    torch.testing.assert_close(blk(x), blk.shortcut(a) + blk.branch(a, preactivated=True), rtol=1e-5, atol=1e-5)
    assert len(blk.branch.norms) == 3 and blk.branch.norms[0].num_features == 2  # one norm before each conv


@pytest.mark.parametrize("train,decay", [("weight_decay: 0.01", 0.01), ("weight_decay: 0.01, scalar_weight_decay: 0", 0.0),
                                         ("scalar_weight_decay: 0.02", 0.02), ("", 0.0)])
def test_scalar_parameters_follow_weight_decay_unless_told(train, decay):
    """Learnable tau and Fixup's scalars decay with train.weight_decay (Fixup's code does),
    unless train.scalar_weight_decay says otherwise; always at scalar_lr_mult x lr."""
    from nas_stab.training.optim import build_optimizer

    s = loads_spec(f"name: t\ntask: {{dataset: {DATASET}}}\nmodel: {{{BASE['resnet']}, init: fixup, "
                   f"tau: {{init: 0.5, learnable: true}}}}\ntrain: {{lr: 0.1, momentum: 0, {train}}}\n")
    torch.manual_seed(0)
    net = build_model(s, INFO)
    opt = build_optimizer(net, s.train)
    regular, scalars = opt.param_groups
    assert all(p.ndim == 0 for p in scalars["params"]) and len(scalars["params"]) > 3
    assert scalars["weight_decay"] == decay and regular["weight_decay"] == s.train.weight_decay
    # one SGD step with a zero loss gradient: only the decay moves the scalars
    (0 * net(torch.randn(2, 3, 8, 8)).sum()).backward()
    before = net.tau.value.item()
    opt.step()
    assert net.tau.value.item() == pytest.approx(before * (1 - 0.1 * 0.1 * decay), rel=1e-6)


@pytest.mark.parametrize("conv", [False, True])
def test_preact_branches_equal_a_loop_over_branches(conv):
    """Pre-activation MultiBranch (C = 3, b = 3): one shared BN-ReLU on the input, then per
    branch conv, BN-ReLU, conv, BN-ReLU, conv; alpha-weighted sum, as C separate branches."""
    C, ch, b = 3, 4, 3
    torch.manual_seed(0)
    mb = MultiBranch(ch, [(3 if conv else 0, ch, 1)] * b, C=C, alpha=0.6, norm="bn", preact=True)
    x = torch.randn(6, ch, 5, 5) if conv else torch.randn(6, ch)
    a = F.relu(_bn(x, mb.norms[0]))
    ref = 0
    for k in range(C):
        sl = slice(k * ch, (k + 1) * ch)
        h = a
        for i, layer in enumerate(mb.layers):
            if i > 0:
                nm = mb.norms[i]
                h = F.relu(F.batch_norm(h, None, None, nm.weight[sl], nm.bias[sl], training=True))
            w = layer.weight[sl]
            h = F.conv2d(h, w, padding=1) if conv else F.linear(h, w)
        ref = ref + 0.6 * h
    torch.testing.assert_close(mb(x), ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(mb(a, preactivated=True), ref, rtol=1e-5, atol=1e-5)


def test_layer_skip_gives_the_weight_space_net_the_identity_paths_of_path_bn():
    """`layer_skip`: layer 1 is relu(BN(W x)); every later (width-keeping) layer is
    relu(BN(W h) + h), the identity that a Path-BN layer adds back (relu(BN(off-diagonal) + h)),
    at the same layers: the weight-space control of the Path-BN comparison."""
    net, _ = make("mlp", "norm: bn, layer_skip: true")
    pbn, _ = make("mlp", "norm: path_bn")
    plain, _ = make("mlp", "norm: bn")
    assert [b.skip for b in net.blocks] == [b.layer.ratio for b in pbn.blocks] == [False, True, True]
    assert not any(b.skip for b in plain.blocks)
    net.eval()  # BN on running statistics: each layer is a fixed affine map
    with torch.no_grad():
        for b in net.blocks:
            b.norm.running_mean.normal_()
            b.norm.running_var.uniform_(0.5, 2.0)
    x = torch.randn(6, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    h = x.flatten(1)
    for i, b in enumerate(net.blocks):
        y = b.norm(F.linear(h, b.layer.weight))
        h = torch.relu(y + h) if i > 0 else torch.relu(y)
    torch.testing.assert_close(net(x), net.head(h))
    plain.load_state_dict(net.state_dict())  # same weights, no skips: a different function
    plain.eval()
    assert not torch.allclose(plain(x), net(x))


def test_layer_skip_off_keeps_every_earlier_spec_hash_and_run_key():
    """A run directory made before `layer_skip` existed resumes: with it off (or unset) the
    spec hash and the run keys are what they were; on, they differ."""
    from nas_stab.config import config_key, spec_hash

    def spec(extra):
        return loads_spec(f"name: t\ntask: {{dataset: {DATASET}}}\nmodel: {{arch: mlp, width: 8, depth: 3{extra}}}\n")

    unset, off, on = spec(""), spec(", layer_skip: false"), spec(", layer_skip: true")
    assert spec_hash(unset) == spec_hash(off) != spec_hash(on)
    assert config_key(unset, 0) == config_key(off, 0) != config_key(on, 0)
    # the run key as it was computed before the key existed (config_key without the added model keys)
    import hashlib
    import json

    from nas_stab.config import to_plain

    plain = {k: to_plain(getattr(off, k)) for k in ("task", "model", "train", "stability")}
    for k in ("aggregation_exponent", "tau_exponent", "stages", "layer_skip", "base_width", "base_depth", "readout_zero_init",
              "ffn_ratio"):
        plain["model"].pop(k)
    plain["stability"].pop("budget")  # (added after layer_skip)
    from nas_stab.config.schema import DatasetConfig

    plain["task"]["dataset"].update({**DatasetConfig.RETIRED, **plain["task"]["dataset"]})  # then every dataset had every option
    before = hashlib.sha256(json.dumps({"config": plain, "seed": 0}, sort_keys=True, default=str).encode()).hexdigest()[:16]
    assert config_key(off, 0) == before
