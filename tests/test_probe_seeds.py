"""`nas-stab probe` over seeds: medians, ranges and log-log slopes with seed-bootstrap intervals
(probe_seeds.py), checked on data whose exponent is known, and on the STAM theorem through the command."""
import csv
import math
import random

import pytest

from nas_stab.config import loads_spec
from nas_stab.probe.cmd import run_probe
from nas_stab.probe.seeds import aggregate, slopes


def table(k: float, seeds: int, sd: float, rng: random.Random, sizes=(1, 4, 16, 64), paired: float = 0.0):
    """Rows of a probe whose init_fwd_ratio = size^k x noise (log2 noise: `sd` per cell, `paired` per seed)."""
    rows = []
    for s in range(seeds):
        shift = rng.gauss(0, paired)
        for i, c in enumerate(sizes):
            rows.append({"config": i, "seed": s, "model.branches": c, "status": "ok",
                         "init_fwd_ratio": 2.0 ** (k * math.log2(c) + shift + rng.gauss(0, sd))})
    return rows


def test_slope_is_the_exponent_without_noise():
    rows = table(0.5, 3, 0.0, random.Random(0))
    (r,) = [x for x in slopes(rows, "model.branches", []) if x["metric"] == "init_fwd_ratio"]
    assert r["slope"] == pytest.approx(0.5, abs=1e-12) and r["lo"] == pytest.approx(0.5) and r["hi"] == pytest.approx(0.5)
    assert r["sizes"] == 4 and r["seeds"] == 3


def test_seed_effects_shared_across_sizes_cancel_in_the_paired_bootstrap():
    """A seed that scales every size alike (the same init draw's luck) moves no slope: the interval stays tight."""
    rows = table(-0.5, 5, 0.0, random.Random(1), paired=2.0)
    (r,) = slopes(rows, "model.branches", [])
    assert r["slope"] == pytest.approx(-0.5) and r["hi"] - r["lo"] < 1e-9


def test_interval_coverage_and_error_rates_on_simulated_probes():
    """200 simulated probes per setting (exponent 0.5, 4 sizes, per-cell log2 noise sd 0.3):
    the 90% interval covers the true exponent in >= 75% of tables with 5 seeds and >= 80% with 10
    (a percentile bootstrap over few seeds is a little narrow); an exponent 0 vs 0.5 is told apart
    (interval excludes 0) in >= 95% of the 10-seed tables."""
    rng = random.Random(7)
    for seeds, want in ((5, 0.75), (10, 0.80)):
        covered = excludes_zero = 0
        for _ in range(200):
            (r,) = slopes(table(0.5, seeds, 0.3, rng), "model.branches", [], seed=rng.randrange(10**6))
            covered += r["lo"] <= 0.5 <= r["hi"]
            excludes_zero += r["lo"] > 0
        assert covered / 200 >= want, (seeds, covered)
        if seeds == 10:
            assert excludes_zero / 200 >= 0.95


def test_aggregate_medians_ranges_and_worst_status():
    rows = [{"config": 0, "seed": s, "model.branches": 4, "status": st, "init_fwd_ratio": v, "error": e}
            for s, st, v, e in ((0, "ok", 1.0, ""), (1, "ok", 3.0, ""), (2, "nonfinite", 10.0, "x"))]
    (a,) = aggregate(rows)
    assert a["init_fwd_ratio"] == 3.0 and a["init_fwd_ratio_lo"] == 1.0 and a["init_fwd_ratio_hi"] == 10.0
    assert a["seeds"] == 3 and a["status"] == "nonfinite" and "seed 2: x" in a["error"]


PROBE = """\
name: probe-stam
seeds: 4
task: {dataset: {name: synthetic, size: 512, shape: [32], classes: 10}}
model: {arch: mlp_resnet, depth: 3, width: 64, branch_depth: 1}
train: {lr: 0.01, batch_size: 64, steps: 10}
stability: {probe_batch: 128, hessian: false}
space:
  model.branches: [1, 4, 16]
  model.aggregation: [sum, stam]
leaderboard: {compare: [model.aggregation]}
"""


def test_probe_command_every_seed_and_stam_theorem_1_slopes(tmp_path):
    """Every seed is probed (different inits give different values) and the forward-ratio slope in log2(C)
    separates sum (Theorem 1: C^(1/2)) from STAM (C^0): sum's interval lies above STAM's."""
    assert run_probe(loads_spec(PROBE), out_root=tmp_path) == 0
    out = tmp_path / "probe-stam"
    with open(out / "probe.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 6 * 4
    per_seed = {r["seed"]: r["init_fwd_ratio"] for r in rows if r["config"] == "1"}
    assert len(set(per_seed.values())) == 4  # four different inits
    with open(out / "probe_slopes.csv") as f:
        sl = {(r["model.aggregation"], r["metric"]): r for r in csv.DictReader(f)}
    s, t = sl[("sum", "init_fwd_ratio")], sl[("stam", "init_fwd_ratio")]
    assert float(s["lo"]) > float(t["hi"])
    assert float(s["slope"]) > 0.3 and abs(float(t["slope"])) < 0.2
    # the slope is the least-squares fit through the per-size means of log2 over seeds
    pts = {}
    for r in rows:
        if r["model.aggregation"] == "sum":
            pts.setdefault(math.log2(int(r["model.branches"])), []).append(math.log2(float(r["init_fwd_ratio"])))
    xs = sorted(pts)
    ys = [sum(pts[x]) / len(pts[x]) for x in xs]
    mx, my = sum(xs) / 3, sum(ys) / 3
    want = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    assert float(s["slope"]) == pytest.approx(want, rel=1e-9)
    md = (out / "probe.md").read_text()
    assert "## Slopes against model.branches" in md and "| sum | init_fwd_ratio |" in md
