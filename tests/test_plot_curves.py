"""Training-loss curves (the tau paper's Figure 1 form): which runs are read, what is drawn."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent / "data"))
from lb_fixtures import make_run, spec_dict

from nas_stab.results import plots
from nas_stab.results.leaderboard import build_leaderboard, load_analysis

matplotlib = pytest.importorskip("matplotlib")

SIZES, LRS, SEEDS, STEPS = (1, 4), (0.1, 0.2, 0.4), (0, 1, 2), 200
BEST = {1: 0.2, 4: 0.1}  # the lr with the best mean val_acc per size


def _loss(size, seed, step):
    return (1.0 + size) * math.exp(-step / 50.0) * (1.0 + 0.1 * seed) + 0.01


def _run(tmp_path, diverge=None):
    rows = []
    for s in SIZES:
        for lr in LRS:
            for seed in SEEDS:
                rows.append({"model.branches": s, "model.aggregation": "sum", "train.lr": lr, "seed": seed,
                             "status": "diverged" if (s, lr, seed) == diverge else "complete",
                             "val_acc": (0.9 if lr == BEST[s] else 0.6) + 0.001 * seed})
    spec = spec_dict(space={"model.branches": list(SIZES), "model.aggregation": ["sum"], "train.lr": list(LRS)})
    d = make_run(tmp_path, rows, spec=spec, history=False)
    for i, r in enumerate(rows):
        steps = np.arange(1, STEPS + 1)
        best = r["train.lr"] == BEST[r["model.branches"]]
        # another lr's curve is 99 throughout: read by mistake, it would show
        loss = np.array([_loss(r["model.branches"], r["seed"], t) for t in steps]) if best else np.full(steps.size, 99.0)
        if (r["model.branches"], r["train.lr"], r["seed"]) == diverge:
            loss[120:] = np.inf
        h = pd.DataFrame({"step": steps, "train_loss": loss})
        snap = pd.DataFrame({"step": [0, 100], "train_loss": [np.nan, np.nan]})  # snapshot rows carry no loss
        pd.concat([snap, h]).sort_values("step", kind="mergesort").to_csv(d / "history" / f"t{i:05d}-s{r['seed']}.csv", index=False)
    return d


def test_curves_read_only_each_sizes_best_lr_and_average_within_bins(tmp_path):
    d = _run(tmp_path)
    a, _, runs = load_analysis([d], n_boot=20)
    c = plots.loss_curves(a, {"0": d / "history"}, points=20)
    assert not c.empty and c["loss"].max() < 99  # no run at another lr was read
    size_of = dict(zip(a.cells["_s"], a.cells["size"]))
    for (s_code, seed_code), grp in c.groupby(["_s", "_seed"]):
        size = float(size_of[s_code])
        assert len(grp) == 20  # 200 steps in 20 bins of 10
        grp = grp.sort_values("step")
        for step_end, got in zip(grp["step"], grp["loss"]):
            lo = int(step_end) - 9
            want = np.mean([_loss(size, int(seed_code), t) for t in range(lo, int(step_end) + 1)])
            assert got == pytest.approx(want, rel=1e-9)
    assert not c["diverged"].any()


def test_a_diverged_run_ends_at_its_last_finite_loss_with_a_mark(tmp_path):
    d = _run(tmp_path, diverge=(4, 0.1, 2))
    a, _, _ = load_analysis([d], n_boot=20)
    c = plots.loss_curves(a, {"0": d / "history"}, points=200)
    div = c[c["diverged"]]
    assert len(div) == 1 and int(div["step"].iloc[0]) == 120  # steps 1..120 finite, 121.. inf
    assert np.isfinite(c["loss"]).all()
    fig = plots.loss_curve_figure(a, c)
    ax = [x for x in fig.axes if x.get_visible() and x.get_title()][0]
    marks = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
    assert len(marks) == 1 and marks[0].get_xdata()[0] == 120
    assert ax.get_yscale() == "log"
    solid = [ln for ln in ax.get_lines() if ln.get_marker() != "x" and ln.get_linestyle() == "-"]
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert len(solid) == len(SIZES)  # one line per size, while every seed runs
    assert len(dashed) == 1 and min(dashed[0].get_xdata()) > 120  # size 4 after its seed 2 diverged


def test_the_leaderboard_writes_and_links_the_curves(tmp_path):
    d = _run(tmp_path)
    paths = build_leaderboard([d], formats="md", out_dir=tmp_path / "out", n_boot=20)
    png = paths["plot:loss_curves"]
    assert png.read_bytes().startswith(b"\x89PNG")
    assert "(plots/loss_curves.png)" in paths["md"].read_text()


def test_no_curves_without_histories(tmp_path):
    d = _run(tmp_path)
    a, _, _ = load_analysis([d], n_boot=20)
    assert plots.loss_curves(a, {}).empty
    assert plots.loss_curve_plot(a, plots.loss_curves(a, {})) is None


def test_a_run_that_diverged_before_any_finite_loss_is_still_drawn(tmp_path):
    """A forward explosion at init leaves no finite loss: the run is counted (the survivors' median goes
    dashed, it is no longer every seed's) and its cross sits on the top edge, not silently dropped."""
    d = _run(tmp_path)
    trials = pd.read_csv(d / "trials.csv")
    i = int(trials.index[(trials["model.branches"] == 4) & (trials["train.lr"] == 0.1) & (trials["seed"] == 1)][0])
    trials.loc[i, "status"], trials.loc[i, "diverged_step"] = "diverged", 1
    trials.to_csv(d / "trials.csv", index=False)
    pd.DataFrame({"step": [0, 1], "train_loss": [np.nan, np.inf]}).to_csv(d / "history" / f"t{i:05d}-s1.csv", index=False)
    a, _, _ = load_analysis([d], n_boot=20)
    c = plots.loss_curves(a, {"0": d / "history"}, points=20)
    gone = c[c["diverged"] & c["loss"].isna()]
    assert len(gone) == 1 and gone["step"].iloc[0] == 1
    fig = plots.loss_curve_figure(a, c)
    ax = [x for x in fig.axes if x.get_visible() and x.get_title()][0]
    top = [ln for ln in ax.get_lines() if ln.get_marker() == "x"]
    assert len(top) == 1 and top[0].get_ydata()[0] >= ax.get_ylim()[1] * 0.999
    dashed = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--"]
    assert len(dashed) == 1  # size 4: two seeds left of three, from the first step
    assert "dashed" in fig._suptitle.get_text()
