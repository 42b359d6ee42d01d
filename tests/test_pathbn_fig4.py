"""The Path-BN paper's Figure 4 (Section 5.2) with `nas-stab probe`: the constant-width stacked CNN
(`model.stages: 1`), the per-layer BN sigma (`bn_sigma.<i>`) and hidden-gradient norms
(`grad_stream.<i>`), checked against hand computations on tiny nets (seconds, one thread)."""
from __future__ import annotations

import csv

import pytest
import torch
import torch.nn.functional as F

from nas_stab.config import loads_spec
from nas_stab.data import DataInfo
from nas_stab.errors import SpecError
from nas_stab.models import build_model
from nas_stab.models import plainnet as plainnet_mod
from nas_stab.models.path import chains
from nas_stab.stability import Prober

IMG = DataInfo("synthetic", (3, 8, 8), 5)


def spec_of(model: str):
    return loads_spec(f"name: t\ntask: {{dataset: {{name: synthetic, shape: [3, 8, 8], classes: 5}}}}\nmodel: {{{model}}}\n")


def net(model: str, seed: int = 0):
    torch.manual_seed(seed)
    return build_model(spec_of(model), IMG)


class Task:
    """One fixed batch (what the Prober needs: probe_batch, forward, loss)."""

    def __init__(self, n=24, seed=1):
        g = torch.Generator().manual_seed(seed)
        self.probe_batch = (torch.randn(n, 3, 8, 8, generator=g), torch.randint(0, 5, (n,), generator=g))

    def forward(self, model, batch):
        return model(batch[0])

    def loss(self, model, batch):
        return F.cross_entropy(model(batch[0]), batch[1])


# ---------------------------------------------------------------- model.stages


def test_one_stage_plainnet_has_constant_width_stride_one_and_one_path_chain():
    m = net("arch: plainnet, depth: 5, width: 4, stages: 1, norm: path_bn, parametrization: path")
    x = torch.randn(2, 3, 8, 8)
    shapes = []
    h = x
    for b in m.blocks:
        h = b(h)
        shapes.append(tuple(h.shape))
    assert shapes == [(2, 4, 8, 8)] * 5  # every layer: width channels, stride 1 (8x8 kept)
    assert [(b.layer.cin, b.layer.cout, b.layer.stride) for b in m.blocks] == [(3, 4, 1)] + [(4, 4, 1)] * 4
    # path space: ONE chain, layer 0 its head, layers 1..4 ratio layers under Path-BN (ordinary BN only on the head)
    cs = chains(m)
    assert len(cs) == 1 and [n for n, _ in cs[0]] == [f"blocks.{i}.layer" for i in range(5)]
    assert [b.layer.ratio for b in m.blocks] == [False, True, True, True, True]
    assert all(b.layer.head is m.blocks[0].layer for b in m.blocks[1:])
    # three stages (the default): widths 4, 8, 16, stride 2 at the stage starts, three chains
    m3 = net("arch: plainnet, depth: 6, width: 4, norm: path_bn, parametrization: path")
    assert [(b.layer.cout, b.layer.stride) for b in m3.blocks] == [(4, 1), (4, 1), (8, 2), (8, 1), (16, 2), (16, 1)]
    assert len(chains(m3)) == 3


def _old_stage_dims(depth: int, width: int) -> list[tuple[int, int, int]]:
    """plainnet.stage_dims before `model.stages` existed (a verbatim copy)."""
    dims, prev = [], 0
    for i in range(depth):
        s = min(2, 3 * i // depth)
        dims.append((3, width * 2 ** s, 2 if s > prev else 1))
        prev = s
    return dims


@pytest.mark.parametrize("knobs", ["norm: bn", "norm: path_bn, parametrization: path"])
def test_three_stage_plainnet_is_unchanged_bit_for_bit(monkeypatch, knobs):
    for depth in (1, 2, 3, 7, 20):
        assert plainnet_mod.stage_dims(depth, 4) == _old_stage_dims(depth, 4) == plainnet_mod.stage_dims(depth, 4, 3)
    x = torch.randn(4, 3, 8, 8, generator=torch.Generator().manual_seed(2))
    new = net(f"arch: plainnet, depth: 7, width: 4, {knobs}", seed=3)
    explicit = net(f"arch: plainnet, depth: 7, width: 4, stages: 3, {knobs}", seed=3)
    monkeypatch.setattr(plainnet_mod, "stage_dims", lambda depth, width, stages=3: _old_stage_dims(depth, width))
    old = net(f"arch: plainnet, depth: 7, width: 4, {knobs}", seed=3)
    for m in (new, explicit, old):
        m.train()
    assert torch.equal(new(x), old(x)) and torch.equal(explicit(x), old(x))
    # and the spec hash of an experiment that does not set stages is the one it had before
    import hashlib
    import json

    from nas_stab.config import spec_hash, to_plain

    s = spec_of(f"arch: plainnet, depth: 7, width: 4, {knobs}")
    plain = to_plain(s)
    for k in ("description", "runner", "leaderboard", "logging"):
        plain.pop(k, None)
    plain["search"].pop("bracket", None)
    plain["search"].pop("transfer", None)
    plain["search"].pop("population_size", None)  # (added after stages)
    for k in ("aggregation_exponent", "tau_exponent", "stages", "layer_skip", "base_width", "base_depth", "readout_zero_init",
              "ffn_ratio"):
        plain["model"].pop(k, None)
    plain["stability"].pop("budget", None)  # (added after stages)
    from nas_stab.config.schema import DatasetConfig

    plain["task"]["dataset"].update({**DatasetConfig.RETIRED, **plain["task"]["dataset"]})  # then every dataset had every option
    plain["space"] = s.raw.get("space") if s.raw else None
    assert spec_hash(s) == hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:16]
    assert spec_hash(spec_of("arch: plainnet, depth: 7, width: 4, stages: 1")) != spec_hash(spec_of("arch: plainnet, depth: 7, width: 4"))


@pytest.mark.parametrize("model,needle", [
    ("arch: plainnet, depth: 4, stages: 0", "must be >= 1"),
    ("arch: plainnet, depth: 4, stages: 4", "must be <= 3"),
    ("arch: resnet, depth: 8, stages: 1", "resnet has its own three stages"),
    ("arch: mlp, depth: 4, stages: 2", "mlp has no stages"),
])
def test_stages_is_validated_at_load_naming_file_line_and_key(tmp_path, model, needle):
    p = tmp_path / "s.yaml"
    body = ",\n         ".join(model.split(", "))
    p.write_text(f"name: t\ntask: {{dataset: {{name: synthetic, shape: [3, 8, 8]}}}}\nmodel: {{{body}}}\n")
    from nas_stab.config import load_spec

    with pytest.raises(SpecError) as e:
        load_spec(p)
    msg = str(e.value)
    line = 3 + next(i for i, part in enumerate(model.split(", ")) if part.startswith("stages"))
    assert f"{p}:{line}" in msg and "model.stages" in msg and needle in msg, msg


# ---------------------------------------------------------------- bn_sigma


def _bn_inputs(model, x):
    """Each BatchNorm's input in a training-mode forward, and its output."""
    seen = []
    hooks = [m.register_forward_hook(lambda mod, i, o: seen.append((mod, i[0].detach(), o.detach())))
             for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    model.train()
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return seen


@pytest.mark.parametrize("knobs", ["norm: bn", "norm: bn, parametrization: path", "norm: path_bn, parametrization: path"])
def test_bn_sigma_is_what_each_batchnorm_divides_by(knobs):
    """bn_sigma.<i>: the per-channel divisor of layer i's BatchNorm on the probe batch, averaged over channels.
    Recovered here from the BN's own input and output: with gain 1 and shift 0, out = (in - mean) / sigma_c,
    so sigma_c = <in - mean, in - mean> / <in - mean, out> per channel (a least-squares fit, no variance formula)."""
    m = net(f"arch: plainnet, depth: 5, width: 4, stages: 1, {knobs}", seed=4)
    with torch.no_grad():  # layer 3's BN input ~1e-3: its variance ~1e-6 is below BN's eps (1e-5), which then counts
        m.blocks[3].layer.weight.mul_(1e-3)
    task = Task()
    snap = Prober(m, task, hessian=False).snapshot(None)
    seen = _bn_inputs(m, task.probe_batch[0])
    assert len(seen) == 5 and [s[0] for s in seen] == [b.norm for b in m.blocks]
    for i, (bn, xin, out) in enumerate(seen):
        assert torch.equal(bn.weight, torch.ones_like(bn.weight)) and torch.equal(bn.bias, torch.zeros_like(bn.bias))
        c = xin - xin.mean((0, 2, 3), keepdim=True)
        sig = (c * c).sum((0, 2, 3)) / (c * out).sum((0, 2, 3))
        assert snap[f"bn_sigma.{i}"] == pytest.approx(float(sig.mean()), rel=1e-4), i
        if i == 3 and knobs != "norm: bn, parametrization: path":  # (there the BN input also holds h, unscaled)
            std = c.pow(2).mean((0, 2, 3)).sqrt().mean()  # the plain standard deviation, without eps
            assert float(sig.mean()) > 1.5 * float(std)  # so this layer tells sqrt(var + eps) from sqrt(var)
    # the BN input is what each norm sees: Path-BN the off-diagonal sum alone, BN in path space that sum + h
    if "path_bn" in knobs:
        b = m.blocks[2]
        h = m.blocks[1](m.blocks[0](task.probe_batch[0]))
        assert torch.allclose(seen[2][1], b.layer(h), atol=1e-5)


def test_bn_sigma_scales_with_the_scale_of_its_layer_input_and_nothing_else_moves():
    """Multiplying layer i's conv weight by c multiplies its BN input, hence sigma_i, by c; every other
    layer's sigma is unchanged (BN removes the scale). The same for Path-BN with layer i's off-diagonal
    (trained) path values: Path-BN normalizes exactly that sum. Up to BN's eps (1e-5) against variances ~1."""
    task = Task()
    for knobs, i in (("norm: bn", 2), ("norm: path_bn, parametrization: path", 3)):
        m = net(f"arch: plainnet, depth: 5, width: 4, stages: 1, {knobs}", seed=5)
        before = Prober(m, task, hessian=False).snapshot(None)
        with torch.no_grad():
            m.blocks[i].layer.weight.mul_(7.0)
        after = Prober(m, task, hessian=False).snapshot(None)
        for j in range(5):
            want = 7.0 * before[f"bn_sigma.{j}"] if j == i else before[f"bn_sigma.{j}"]
            assert after[f"bn_sigma.{j}"] == pytest.approx(want, rel=1e-4), (knobs, j)


def test_grad_stream_is_autograds_norm_of_dloss_dhidden_per_layer():
    """grad_stream.<i> on plainnet: the L2 norm of dLoss/dz^i, z^i = relu(Norm(...)) the output of layer i
    (the hidden values handed to layer i+1), the probe loss as the mean cross-entropy over the batch."""
    for knobs in ("norm: bn, parametrization: path", "norm: path_bn, parametrization: path"):
        m = net(f"arch: plainnet, depth: 5, width: 4, stages: 1, {knobs}", seed=6)
        task = Task()
        snap = Prober(m, task, hessian=False).snapshot(None)
        m.train()
        h, zs = task.probe_batch[0], []
        for b in m.blocks:
            h = b(h)
            h.retain_grad()
            zs.append(h)
        F.cross_entropy(m.head(h.mean((2, 3))), task.probe_batch[1]).backward()
        got = [snap[f"grad_stream.{i}"] for i in range(5)]
        assert got == pytest.approx([float(z.grad.norm()) for z in zs], rel=1e-5), knobs
        assert all(f"bn_sigma.{i}" in snap for i in range(5))  # one per BatchNorm, in the same snapshot


# ---------------------------------------------------------------- nas-stab probe


PROBE = """\
name: fig4-tiny
seeds: [0, 1]
task: {dataset: {name: synthetic, shape: [3, 8, 8], classes: 5}}
model: {arch: plainnet, depth: 6, width: 4, stages: 1, norm: bn, parametrization: path}
train: {lr: 0.05, batch_size: 16, steps: 5}
stability: {probe_batch: 16, hessian: false}
space:
  model.norm: [bn, path_bn]
leaderboard: {compare: [model.norm]}
"""


def test_probe_writes_per_layer_sigma_and_gradient_columns_table_and_plot(tmp_path, capsys):
    from nas_stab.probe.cmd import run_probe

    assert run_probe(loads_spec(PROBE), steps=1, out_root=tmp_path) == 0
    out = tmp_path / "fig4-tiny"
    with open(out / "probe.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and all(r["status"] == "ok" for r in rows)
    for r in rows:
        for p in ("init_", "final_"):
            for i in range(6):
                assert float(r[f"{p}bn_sigma.{i}"]) > 0 and float(r[f"{p}grad_stream.{i}"]) > 0
    # probe.csv's values are the snapshot's: rebuild configuration 1 (path_bn), seed 0, and measure
    from nas_stab.config import resolve
    from nas_stab.probe.measure import probe_one

    again = probe_one(resolve(loads_spec(PROBE), {"model.norm": "path_bn"}), 0, 0)
    r = next(r for r in rows if r["model.norm"] == "path_bn" and r["seed"] == "0")
    assert [float(r[f"init_bn_sigma.{i}"]) for i in range(6)] == pytest.approx([again[f"init_bn_sigma.{i}"] for i in range(6)], rel=1e-6)
    md = (out / "probe.md").read_text()
    assert "## Per layer: BN sigma and hidden-gradient norm" in md and "| layer | #0 sigma | #1 sigma | #0 grad | #1 grad |" in md
    assert "After 1 step(s):" in md
    assert (out / "plots" / "probe_per_layer.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
