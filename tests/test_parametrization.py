"""`model.parametrization`: muP and Depth-muP checked against Microsoft's `mup` package (the same per-parameter
learning rates as MuAdam / MuSGD after `set_base_shapes`, the same init scaling laws as `set_base_shapes` with a
MuReadout) and against Tensor Programs V / VI's rules."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from nas_stab.config import loads_spec
from nas_stab.data import DataInfo
from nas_stab.models import build_model
from nas_stab.training.optim import build_optimizer

mup = pytest.importorskip("mup")

SPEC = """\
name: p
task: {{dataset: {{name: mnist1d}}}}
model: {{arch: {arch}, depth: {depth}, width: {width}, branches: {branches}, parametrization: {param}, base_width: 16, base_depth: 2}}
train: {{optimizer: {opt}, lr: 1.0, weight_decay: 0.1}}
"""
INFO = DataInfo("mnist1d", (40,), 10)


IMAGES = DataInfo("cifar10", (3, 8, 8), 10)


def build(width, param="mup", opt="adam", arch="mlp_resnet", depth=2, branches=1):
    spec = loads_spec(SPEC.format(arch=arch, depth=depth, width=width, param=param, opt=opt, branches=branches))
    torch.manual_seed(0)
    return build_model(spec, IMAGES if arch == "resnet" else INFO), spec


def lrs_by_name(model, opt):
    ids = {id(p): n for n, p in model.named_parameters()}
    return {ids[id(p)]: (g["lr"], g["weight_decay"]) for g in opt.param_groups for p in g["params"]}


@pytest.mark.parametrize("arch,branches", [("mlp_resnet", 1), ("mlp_resnet", 4), ("mlp", 1), ("resnet", 1), ("resnet", 2)])
@pytest.mark.parametrize("opt", ["adam", "sgd"])
def test_learning_rates_are_the_mup_packages(arch, branches, opt):
    depth = 8 if arch == "resnet" else 2
    ours, spec = build(64, "mup", opt, arch=arch, branches=branches, depth=depth)
    sp, _ = build(64, "sp", opt, arch=arch, branches=branches, depth=depth)
    base, _ = build(16, "sp", opt, arch=arch, branches=branches, depth=depth)
    mup.set_base_shapes(sp, base, rescale_params=False, do_assert=False)
    ref = (mup.MuAdam if opt == "adam" else mup.MuSGD)(sp.parameters(), lr=1.0, weight_decay=0.1)
    want = lrs_by_name(sp, ref)
    got = lrs_by_name(ours, build_optimizer(ours, spec.train))
    assert set(got) == set(want)
    for name in want:
        assert got[name][0] == pytest.approx(want[name][0]), (name, got[name], want[name])
        assert got[name][1] == pytest.approx(want[name][1]), (name, got[name], want[name])
    # the rules themselves (TP-V Table 3): Adam's hidden lr 1/r, SGD's input and readout lr r, r = 64 / 16
    hidden = {"mlp_resnet": "W.weight", "mlp": "blocks.1.layer.weight", "resnet": "blocks.0.branch.layers.0.weight"}[arch]
    if hidden in got:
        assert got[hidden][0] == pytest.approx(0.25 if opt == "adam" else 1.0)


class MupMLP(nn.Module):
    """The mup package's reference: nn.Linear input and hidden layers, a MuReadout."""

    def __init__(self, width):
        super().__init__()
        self.inp, self.hid, self.out = nn.Linear(40, width, bias=False), nn.Linear(width, width, bias=False), mup.MuReadout(width, 10, bias=False)


def test_init_scaling_laws_are_the_mup_packages():
    """Std of each kind of weight at width 1024 over width 16 (averaged over seeds: the readout of width 16 has
    only 160 entries), for the mup package's reference MLP and for nas_stab's mlp_resnet under muP."""
    small, large, seeds = 16, 1024, 12

    def ref(w, seed):
        torch.manual_seed(seed)
        m = MupMLP(w)
        mup.set_base_shapes(m, MupMLP(small))
        return {"input": m.inp.weight.std().item(), "hidden": m.hid.weight.std().item(),
                "readout": m.out.weight.std().item(), "mult": 1.0 / m.out.width_mult()}

    def ours(w, seed):
        spec = loads_spec(SPEC.format(arch="mlp_resnet", depth=2, width=w, param="mup", opt="adam", branches=1))
        torch.manual_seed(seed)
        m = build_model(spec, INFO)
        return {"input": m.A.weight.std().item(), "hidden": m.W.weight.std().item(), "readout": m.B.weight.std().item(),
                "mult": m.B._nas_output_mult}

    def mean(f, w):
        runs = [f(w, s) for s in range(seeds)]
        return {k: sum(r[k] for r in runs) / seeds for k in runs[0]}

    r_small, r_large, o_small, o_large = mean(ref, small), mean(ref, large), mean(ours, small), mean(ours, large)
    for k in ("input", "hidden", "readout", "mult"):
        law_ref, law_ours = r_large[k] / r_small[k], o_large[k] / o_small[k]
        assert law_ours == pytest.approx(law_ref, rel=0.05), (k, law_ours, law_ref)
    # TP-V Table 3: input and readout weights constant in width, hidden std 1/sqrt(fan_in), output multiplier 1/r
    assert o_large["hidden"] / o_small["hidden"] == pytest.approx(math.sqrt(small / large), rel=0.05)
    assert o_large["input"] / o_small["input"] == pytest.approx(1.0, rel=0.05)
    assert o_large["mult"] == pytest.approx(small / large)


def test_the_resnets_init_follows_the_mup_rules():
    """The convolutional ResNet under muP, widths 16 (the base) and 64, r = 4: the stem (3 input channels: an
    input weight) keeps its std, hidden convolutions' std falls like 1/sqrt(r), the head keeps its std and
    reads its input / r."""
    small, _ = build(16, "mup", arch="resnet", depth=8)
    large, _ = build(64, "mup", arch="resnet", depth=8)
    sp, _ = build(64, "sp", arch="resnet", depth=8)
    w = {n: p for n, p in large.named_parameters()}
    w0 = {n: p for n, p in small.named_parameters()}
    stem, conv, head = "stem.weight", "blocks.0.branch.layers.0.weight", "head.weight"
    std = lambda t: t.std().item()  # noqa: E731
    assert std(w[stem]) == pytest.approx(std(w0[stem]), rel=0.2)  # 432 vs 108 entries
    assert std(w[stem]) == pytest.approx(2.0 * std(dict(sp.named_parameters())[stem]), rel=0.2)  # SP's fan-out He: / sqrt(4)
    assert std(w[conv]) == pytest.approx(std(w0[conv]) / 2.0, rel=0.1)
    assert std(w[head]) == pytest.approx(std(w0[head]), rel=0.25)
    assert large.head._nas_output_mult == pytest.approx(16 / 64)
    seen = {}
    large.head.register_forward_pre_hook(lambda mod, args: seen.setdefault("pooled", args[0]), prepend=True)
    out = large(torch.randn(2, 3, 8, 8))
    assert torch.allclose(out, nn.functional.linear(seen["pooled"] * 0.25, large.head.weight, large.head.bias))
    from nas_stab.models.parametrization import classify

    kinds = {n: c["kind"] for n, c in classify(large, build(16, "sp", arch="resnet", depth=8)[0], "head").items()}
    assert kinds == {stem: "vector", "head.weight": "readout", "head.bias": "fixed",
                     **{n: "hidden" for n in kinds if n.startswith("blocks.")}}


def test_sp_is_untouched_and_mup_equals_sp_at_the_base_width():
    sp, _ = build(16, "sp")
    mu, _ = build(16, "mup")
    for (n, a), (_, b) in zip(sp.named_parameters(), mu.named_parameters()):
        assert torch.equal(a, b), n
    x = torch.randn(8, 40)
    assert torch.allclose(sp(x), mu(x))


def test_readout_zero_init_and_the_output_multiplier():
    spec = loads_spec(SPEC.format(arch="mlp_resnet", depth=2, width=64, param="mup", opt="adam", branches=1).replace(
        "base_depth: 2}", "base_depth: 2, readout_zero_init: true}"))
    m = build_model(spec, INFO)
    assert m.B.weight.abs().sum() == 0 and m(torch.randn(4, 40)).abs().sum() == 0
    mu, _ = build(64, "mup")
    seen = {}
    mu.B.register_forward_hook(lambda mod, args, out: seen.setdefault("in", args[0]))
    mu.W.register_forward_hook(lambda mod, args, out: seen.setdefault("h", out))
    mu(torch.randn(4, 40))
    assert torch.allclose(seen["in"], torch.relu(seen["h"]) * 0.25)  # the readout reads its input / r


@pytest.mark.parametrize("width", [16, 64])
def test_readout_zero_init_holds_at_the_base_width_too(width):
    """readout_zero_init starts the readout at 0 at every width, the base width (16 here) included: there no dim of
    the readout grows, and it was once classified as a fixed parameter and kept its SP init (|B| 232 at width 64,
    the base, against 0 at 128 in the width control)."""
    spec = loads_spec(SPEC.format(arch="mlp_resnet", depth=2, width=width, param="mup", opt="adam", branches=1).replace(
        "base_depth: 2}", "base_depth: 2, readout_zero_init: true}"))
    m = build_model(spec, INFO)
    assert m.B.weight.abs().sum() == 0
    assert m.B._nas_output_mult == pytest.approx(16 / width)


def test_depth_mup_scales_the_branches_and_adams_block_lrs():
    for opt, lr_block in (("adam", 0.25 * math.sqrt(2 / 8)), ("sgd", 1.0)):
        m, spec = build(64, "depth_mup", opt, depth=8)
        assert float(m.tau.value) == pytest.approx(math.sqrt(2 / 8))  # tau 1 x sqrt(L0 / L)
        lrs = lrs_by_name(m, build_optimizer(m, spec.train))
        assert lrs["blocks.3.branch.layers.0.weight"][0] == pytest.approx(lr_block)
        assert lrs["W.weight"][0] == pytest.approx(0.25 if opt == "adam" else 1.0)  # outside the blocks: muP only


def test_unsupported_architectures_are_refused_at_validation():
    from nas_stab.errors import SpecError

    with pytest.raises(SpecError, match="parametrization.*not yet for 'resnext'"):
        loads_spec("name: r\ntask: {dataset: {name: digits}}\nmodel: {arch: resnext, depth: 11, parametrization: mup}\n")


def test_a_searched_width_needs_a_base_width():
    from nas_stab.errors import SpecError

    text = ("name: w\ntask: {dataset: {name: mnist1d}}\nmodel: {arch: mlp_resnet, parametrization: mup}\n"
            "space: {model.width: [32, 64]}\n")
    with pytest.raises(SpecError, match="base_width"):
        loads_spec(text)
    loads_spec(text.replace("parametrization: mup}", "parametrization: mup, base_width: 32}"))


COORD = """\
name: coord
seeds: [0, 1]
task: {dataset: {name: mnist1d, size: 1000}}
model: {arch: mlp_resnet, depth: 2, width: 32, base_width: 32}
train: {optimizer: adam, lr: 0.01, batch_size: 64, steps: 10, threads: 1}
stability: {probe_batch: 128, hessian: false}
space:
  model.width: [32, 128, 512]
  model.parametrization: [sp, mup]
leaderboard: {transfer: model.width, compare: [model.parametrization]}
"""


def test_coordinate_check_sp_grows_with_width_mup_stays_flat(tmp_path):
    """`nas-stab probe --steps 3` over width (Tensor Programs V, Figure 5): after 3 Adam steps the logits' RMS
    grows like width^0.9 under SP (measured 0.92, 0.40 to 1.44) and stays nearly flat under muP (0.17, 0.08 to
    0.26); every layer's RMS is drawn in plots/probe_coord.png."""
    import csv

    from nas_stab.probe.cmd import run_probe

    assert run_probe(loads_spec(COORD), steps=3, out_root=tmp_path) == 0
    d = tmp_path / "coord"
    with open(d / "probe_slopes.csv") as f:
        slopes = {(r["model.parametrization"], r["metric"]): float(r["slope"]) for r in csv.DictReader(f)}
    sp, mu = slopes[("sp", "final_output_logit_rms")], slopes[("mup", "final_output_logit_rms")]
    assert sp > 0.5 and abs(mu) < 0.35 and sp - mu > 0.4, (sp, mu)
    assert (d / "plots" / "probe_coord.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(d / "probe.csv") as f:
        rows = list(csv.DictReader(f))
    # muP's init keeps every hidden block's RMS constant in width (SP's tau-paper init shrinks it like 1/sqrt(width))
    init = {(r["model.parametrization"], r["model.width"]): float(r["init_fwd_norm.1"]) for r in rows if r["seed"] == "0"}
    assert init[("mup", "512")] / init[("mup", "32")] == pytest.approx(1.0, rel=0.25)
    assert init[("sp", "512")] / init[("sp", "32")] < 0.5


@pytest.mark.slow  # over 15 s: CI runs it in its slow stage (pytest -m slow)
def test_stam_is_mups_init_over_branches_but_not_its_adam_update():
    """STAM meets muP (benchmarks/bench_stam_mup.py, leaderboards/README.md): over the branch count C, STAM's
    1/sqrt(C) keeps the branch sum's RMS flat at init, as muP's hidden-layer rule does, but after Adam steps
    its change grows with C; muP's prescription (the branches' Adam lr also x 1/sqrt(C)) keeps both flat; sum
    grows in both. Small: width 32, C = 1, 4, 16, 2 seeds, 20 steps at lr 0.01 (measured: STAM's update slope 0.26, muP's 0.03)."""
    import importlib.util
    from pathlib import Path

    import numpy as np

    path = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_stam_mup.py"
    spec = importlib.util.spec_from_file_location("bench_stam_mup", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    Cs = (1, 4, 16)

    def slopes(form):
        r = np.array([[bench.measure(form, C, s, width=32, depth=2, lr=0.01, steps=20) for C in Cs] for s in range(2)])
        return bench.slope(Cs, r[..., 0])[0], bench.slope(Cs, r[..., 1])[0]

    stam, mu, total = slopes("stam"), slopes("mup"), slopes("sum")
    assert abs(stam[0]) < 0.06 and abs(mu[0]) < 0.06  # both flat at init (the same forward pass)
    assert stam[1] > 0.15, stam  # STAM's update grows with C
    assert abs(mu[1]) < 0.1, mu  # muP's does not
    assert total[0] > 0.5 and total[1] > 0.5, total


COORD_DEPTH = """\
name: coord-depth
seeds: [0, 1]
task: {dataset: {name: mnist1d, size: 1000}}
model: {arch: mlp_resnet, depth: 2, width: 32, tau: 1, base_width: 32, base_depth: 2}
train: {optimizer: adam, lr: 0.003, batch_size: 64, steps: 10, threads: 1}
stability: {probe_batch: 128, hessian: false}
space:
  model.depth: [2, 4, 16]
  model.parametrization: [sp, depth_mup]
  train.lr: [0.003]
leaderboard: {transfer: model.depth, compare: [model.parametrization]}
"""


def test_coordinate_check_over_depth_sp_explodes_depth_mup_stays_flat(tmp_path):
    """`nas-stab probe` over depth (TP-VI's check): plain residual blocks (tau 1) make the logits' RMS grow
    exponentially with depth; Depth-muP's sqrt(L0/L) branches keep it nearly flat. The experiment searches
    one lr with a transfer leaderboard: a table would refuse it (every optimum at the grid's end), the probe,
    which trains nothing, does not."""
    import csv

    from nas_stab.errors import SpecError
    from nas_stab.probe.cmd import run_probe

    with pytest.raises(SpecError, match="searched with only 1 value"):
        loads_spec(COORD_DEPTH)
    assert run_probe(loads_spec(COORD_DEPTH, probe=True), steps=3, out_root=tmp_path) == 0
    with open(tmp_path / "coord-depth" / "probe_slopes.csv") as f:
        slopes = {(r["model.parametrization"], r["metric"]): float(r["slope"]) for r in csv.DictReader(f)}
    sp, dm = slopes[("sp", "final_output_logit_rms")], slopes[("depth_mup", "final_output_logit_rms")]
    assert sp > 1.0 and abs(dm) < 0.3, (sp, dm)


# ---------------------------------------------------------------- the encoder-decoder transformer (width: d_model)

TOKENS = DataInfo("synthetic", extra={"vocab": 40, "pad": 0, "bos": 2, "eos": 3})


def tf_spec(d_model, param="mup", opt="adam", space=None, **model):
    """A small translation transformer: 2 heads, FFN 2 d_model, pre-LN (so its LayerNorms are vectors too)."""
    import yaml

    kw = dict(arch="transformer", d_model=d_model, heads_per_branch=2, ffn_ratio=2.0, enc_layers=1, dec_layers=1,
              norm="ln", norm_position="pre", parametrization=param, base_width=16)
    kw.update(model)
    data = {"name": "t", "task": {"kind": "translation", "dataset": {"name": "synthetic"}}, "model": kw,
            "train": {"optimizer": opt, "lr": 1.0, "weight_decay": 0.1}, "search": {"objective": "bleu"}}
    if space:
        data["space"] = space
    return loads_spec(yaml.safe_dump(data))


def tf_build(d_model, param="mup", opt="adam", seed=0, **model):
    spec = tf_spec(d_model, param, opt, **model)
    torch.manual_seed(seed)
    return build_model(spec, TOKENS).eval(), spec


def tf_batch():
    g = torch.Generator().manual_seed(0)
    src, tgt = torch.randint(4, 40, (3, 7), generator=g), torch.randint(4, 40, (3, 6), generator=g)
    src[0, 5:] = 0  # padding: the encoder's key mask
    return src, tgt


@pytest.mark.parametrize("opt", ["adam", "sgd"])
def test_transformer_learning_rates_are_the_mup_packages(opt):
    """d_model 64 over base 16: every parameter's lr and weight decay those of MuAdam / MuSGD after the mup
    package's set_base_shapes (the tied embedding-readout [V, d]: one infinite dim, Adam x 1, SGD x r)."""
    ours, spec = tf_build(64, "mup", opt, branches=2)
    sp, _ = tf_build(64, "sp", opt, branches=2)
    base, _ = tf_build(16, "sp", opt, branches=2)
    mup.set_base_shapes(sp, base, rescale_params=False, do_assert=False)
    ref = (mup.MuAdam if opt == "adam" else mup.MuSGD)(sp.parameters(), lr=1.0, weight_decay=0.1)
    want = lrs_by_name(sp, ref)
    got = lrs_by_name(ours, build_optimizer(ours, spec.train))
    assert set(got) == set(want)
    for name in want:
        assert got[name][0] == pytest.approx(want[name][0]), (name, got[name], want[name])
        assert got[name][1] == pytest.approx(want[name][1]), (name, got[name], want[name])
    hidden, embed = got["blocks.0.fn.qkv_proj.weight"][0], got["embed.weight"][0]
    assert (hidden, embed) == pytest.approx((0.25, 1.0) if opt == "adam" else (1.0, 4.0))


def test_transformer_mup_equals_sp_at_the_base_width():
    """At d_model = base_width nothing grows: the same parameters and, bit for bit, the same logits."""
    sp, _ = tf_build(16, "sp")
    mu, _ = tf_build(16, "mup")
    for (n, a), (_, b) in zip(sp.named_parameters(), mu.named_parameters()):
        assert torch.equal(a, b), n
    assert (mu.readout_mult, mu.embed_scale) == (1.0, sp.embed_scale)
    assert all(getattr(mod, "scale", None) is None for mod in mu.modules())
    src, tgt = tf_batch()
    assert torch.equal(sp(src, tgt), mu(src, tgt))


def test_transformer_readout_embedding_and_attention_multipliers():
    """d_model 64 over base 16 (r = 4), 2 heads (dh 32 over dh0 8): the tied readout reads its input / r, the
    embedding's multiplier is the base's sqrt(16) at every width, the attention logits are q.k x sqrt(dh0) / dh
    (checked against a manual attention), and the probes' attn_logit_max uses that scale."""
    from nas_stab.stability.capture import Capture

    mu, _ = tf_build(64)
    assert mu.readout_mult == pytest.approx(0.25) and mu.embed_scale == 4.0 == tf_build(256)[0].embed_scale
    src, tgt = tf_batch()
    seen = {}
    mu.dec_norm.register_forward_hook(lambda mod, args, out: seen.setdefault("x", out))
    logits = mu(src, tgt)
    assert torch.allclose(logits, nn.functional.linear(seen["x"] * 0.25, mu.embed.weight), atol=1e-6)
    assert torch.equal(mu._embed(tgt), mu.embed(tgt) * 4.0 + mu.pe[: tgt.shape[1]])

    attn = mu.blocks[0].fn  # encoder self-attention, no mask
    assert attn.scale == pytest.approx(math.sqrt(8) / 32)
    x = torch.randn(2, 5, 64)
    q, k, v = (t.view(2, 5, 2, 32).transpose(1, 2) for t in attn.qkv_proj(x).chunk(3, dim=-1))
    w = torch.softmax(q @ k.transpose(-2, -1) * (math.sqrt(8) / 32), dim=-1)
    manual = attn.out_proj((w @ v).transpose(1, 2).reshape(2, 5, 64)) * attn.alpha
    assert torch.allclose(attn(x), manual, atol=1e-6)

    def encoder_logit_max(model):
        """The probes' attn_logit_max over the encoder alone (one attention: enc_layers 1), with its q and k."""
        taps = {}
        model.blocks[0].fn.logits_tap.register_forward_hook(lambda mod, args, out: taps.setdefault("qk", args[:2]))
        cap = Capture(model, list(model.blocks), logits=True)
        with torch.no_grad():
            model.encode(src)
        cap.remove()
        return cap.logit_max, taps["qk"]

    got, (q, k) = encoder_logit_max(mu)
    keys = (src != 0)[:, None, None, :]
    assert got == pytest.approx(float((q @ k.transpose(-2, -1) * (math.sqrt(8) / 32)).masked_fill(~keys, -1e9).amax()))
    # SP: the same q and k at init (muP keeps SP's embedded tokens and projections: below), logits / sqrt(dh):
    # muP's are sqrt(dh0 / dh) = 1/2 of them
    got_sp, (q_sp, _) = encoder_logit_max(tf_build(64, "sp")[0])
    assert torch.allclose(q, q_sp, atol=1e-6) and got == pytest.approx(got_sp / 2, rel=1e-5)


@pytest.mark.parametrize("init", ["kaiming", "xavier_branch", "deepnorm", "zero_last"])
def test_transformer_init_follows_the_mup_rules_with_no_notes(init):
    """Xavier's std falls like 1/sqrt(r) when both fans grow by r: muP's hidden weights are SP's own (same seed),
    i.e. x 1/sqrt(r) relative to the base; the embedding keeps the base's std d0^-1/2 (SP's x sqrt(r)); every
    tensor's init is recorded (no "SP init kept" note)."""
    from nas_stab.models import ARCHS
    from nas_stab.models.parametrization import apply

    kw = dict(branches=2, heads_per_branch=1, init=init)
    spec = tf_spec(64, **kw)
    torch.manual_seed(0)
    mu = ARCHS.get("transformer")(spec, TOKENS)
    assert apply(mu, spec, TOKENS, ARCHS.get("transformer")) == []
    sp, _ = tf_build(64, "sp", **kw)
    base, _ = tf_build(16, "sp", **kw)
    w, w_sp, w0 = dict(mu.named_parameters()), dict(sp.named_parameters()), dict(base.named_parameters())
    for name in w:
        if name == "embed.weight":
            assert torch.allclose(w[name], 2.0 * w_sp[name])
            assert w[name].std().item() == pytest.approx(w0[name].std().item(), rel=0.15)
            assert w[name][1:].std().item() == pytest.approx(16**-0.5, rel=0.05)
        else:
            assert torch.allclose(w[name], w_sp[name], rtol=1e-5, atol=0), name
    if init != "zero_last":
        for name in ("blocks.0.fn.qkv_proj.weight", "blocks.3.fn.out_proj.weight", "blocks.4.fn.fc1.weight"):
            assert w[name].std().item() == pytest.approx(w0[name].std().item() / 2, rel=0.1), name


def test_transformer_hidden_std_is_exact_when_the_ffn_width_rounds():
    """ffn_ratio 1.1: FFN widths 18 (d_model 16) and 70 (d_model 64), fans not in proportion: fc1's muP std is
    exactly the base's / sqrt(r_in), r_in = 4 (Xavier: std sqrt(2 / (fan_in + fan_out)))."""
    mu, _ = tf_build(64, ffn_ratio=1.1)
    sp, _ = tf_build(64, "sp", ffn_ratio=1.1)
    assert mu.blocks[1].fn.fc1.weight.shape == (70, 64)
    factor = math.sqrt(2 / (16 + 18)) / 2 / math.sqrt(2 / (64 + 70))
    assert torch.allclose(mu.blocks[1].fn.fc1.weight, sp.blocks[1].fn.fc1.weight * factor)


@pytest.mark.parametrize("model,space,key,match", [
    ({"d_model": 64, "ffn_ratio": None}, None, "model.ffn_ratio", "ffn_ratio"),
    ({"d_model": 64, "head_dim": 8}, None, "model.head_dim", "leave model.head_dim unset"),
    ({"d_model": 64, "parametrization": "depth_mup"}, None, "model.parametrization", "enc_layers and dec_layers"),
    ({"d_model": 16, "base_width": None}, {"model.d_model": [16, 64]}, "model.base_width", "d_model is searched"),
    ({"d_model": 16, "ffn_ratio": None}, {"model.d_model": [16, 64]}, "model.ffn_ratio", "d_model is searched"),
    ({"d_model": 64, "base_width": 15}, None, "model.base_width", "not divisible"),
    ({"d_model": 64, "readout_zero_init": True}, None, "model.readout_zero_init", "tied"),
    ({"d_model": 64, "parametrization": "sp", "ffn_per_branch": 32}, None, "model.ffn_per_branch", "give one of them"),
])
def test_transformer_mup_validation(model, space, key, match):
    from nas_stab.errors import SpecError

    model = dict(model)
    param = model.pop("parametrization", "mup")
    with pytest.raises(SpecError, match=match) as e:
        tf_spec(param=param, space=space, **model)
    assert e.value.key == key


def test_transformer_mup_validation_accepts():
    tf_spec(16, space={"model.d_model": [16, 64]})  # ffn_ratio set, head_dim unset, base_width given
    tf_spec(64, ffn_ratio=None, base_width=None)  # its own base: muP is SP, the FFN need not grow
    with pytest.raises(Exception, match="ffn_ratio applies to arch transformer only"):
        loads_spec("name: m\ntask: {dataset: {name: mnist1d}}\nmodel: {arch: mlp, ffn_ratio: 4}\n")


@pytest.mark.parametrize("name,hash_,key", [
    ("multi30k_base.yaml", "d10c5aa9f563b3ca", "672b36afb0cf1398"),
    ("multi30k_stam_heads.yaml", "c48e79447c1290e1", "c3cb17707549aa99"),
])
def test_ffn_ratio_unset_keeps_the_translation_hashes(name, hash_, key):
    """Values computed by the code before model.ffn_ratio existed (e3ac2b4): unset, it stays out of the spec hash
    and the run keys (config/load.py _ADDED_KEYS)."""
    from pathlib import Path

    from nas_stab.config import config_key, load_spec, spec_hash

    spec = load_spec(str(Path(__file__).resolve().parents[1] / "spaces" / name))
    assert (spec_hash(spec), config_key(spec, 0)) == (hash_, key)


COORD_TF = """\
name: coord-tf
seeds: [0, 1]
task: {kind: translation, dataset: {name: synthetic, size: 400, vocab_size: 100, val: 50, test: 50}, max_decode_len: 8}
model: {arch: transformer, d_model: 32, heads_per_branch: 2, ffn_ratio: 2, enc_layers: 1, dec_layers: 1, norm: ln,
        norm_position: pre, base_width: 32}
train: {optimizer: adam, lr: 0.01, max_tokens: 600, steps: 10, threads: 1}
stability: {probe_batch: 32, hessian: false}
search: {objective: bleu}
space:
  model.d_model: [32, 96, 288]
  model.parametrization: [sp, mup]
leaderboard: {transfer: model.d_model, compare: [model.parametrization]}
"""


def test_transformer_coordinate_check_sp_grows_with_d_model_mup_stays_flat(tmp_path):
    """`nas-stab probe --steps 3` over d_model (32 to 288, 2 seeds, Adam at lr 0.01): after 3 steps the logits'
    RMS grows like d_model^0.48 under SP (90% interval 0.35 to 0.61) and stays flat under muP (-0.09, -0.21 to
    0.02). muP's attention logits shrink with d_model at init (slope -0.55: random q.k ~ sqrt(dh), scaled by
    1/dh), SP's largest attention logit after the steps grows (1.15)."""
    import csv

    from nas_stab.probe.cmd import run_probe

    assert run_probe(loads_spec(COORD_TF), steps=3, out_root=tmp_path) == 0
    with open(tmp_path / "coord-tf" / "probe_slopes.csv") as f:
        slopes = {(r["model.parametrization"], r["metric"]): float(r["slope"]) for r in csv.DictReader(f)}
    sp, mu = slopes[("sp", "final_output_logit_rms")], slopes[("mup", "final_output_logit_rms")]
    assert sp > 0.3 and abs(mu) < 0.25 and sp - mu > 0.35, (sp, mu)


def test_depth_mup_counts_residual_blocks_not_layers():
    """The resnet's depth 6n + 2 has L = 3n residual blocks: Depth-muP's multiplier is sqrt(L0 / L) in blocks
    (base depth 8: 3 blocks; depth 20: 9 blocks; sqrt(3/9), not sqrt(8/20)); the plain mlp, which has no
    residual branch, is refused."""
    from nas_stab.errors import SpecError

    text = SPEC.format(arch="resnet", depth=20, width=16, param="depth_mup", opt="adam", branches=1)
    with pytest.raises(SpecError, match="base_depth 2 is not a depth of resnet"):
        loads_spec(text)
    spec = loads_spec(text.replace("base_depth: 2}", "base_depth: 8}"))
    torch.manual_seed(0)
    m = build_model(spec, IMAGES)
    assert float(m.tau.value) == pytest.approx(math.sqrt(3 / 9))
    lrs = lrs_by_name(m, build_optimizer(m, spec.train))
    assert lrs["blocks.0.branch.layers.0.weight"][0] == pytest.approx(math.sqrt(3 / 9))  # width = base: muP's 1
    with pytest.raises(SpecError, match="plain mlp has none"):
        build(16, "depth_mup", arch="mlp", depth=4)
