"""The default verdict (criterion: regret) on the curve shapes real sweeps produce, with a known answer
(`nas_stab/analysis/calibration.py` simulates them; docs/leaderboard.md has the full table, written by
``benchmarks/bench_calibration.py``). Each test below failed on the verdict of 2026-11-27 (drift of the
argmax, replication counted per row, grid quantization left out of the intervals, ranking by verdict and
regret alone); the figures in the comments are that code's rates, measured on these same tables."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nas_stab.analysis.calibration import Setting, evaluate
from nas_stab.analysis.table import analyze

TABLES = 100
POINT_FAMILIES = ("peak", "asym", "cliff", "edge", "ceiling", "quartic", "hetero", "heavy", "rand_div", "missing", "merged")


def _fmt(r: pd.DataFrame) -> str:
    cols = ["family", "drift", "grid", "seeds", "true_worst", "carried_worst", "epsilon", "yes", "inconclusive", "no",
            "yes_if_costly", "cover_x", "cover_drift", "cover_carried", "cover_worst"]
    return "\n" + r[[c for c in cols if c in r.columns]].to_string(float_format=lambda v: f"{v:.3f}")


@pytest.fixture(scope="module")
def families():
    settings = [Setting(f, d, 3, 5, 0.01, "half") for f in POINT_FAMILIES + ("plateau",) for d in (0.0, 1.0, 2.0, 3.0)]
    r = evaluate(settings, tables=TABLES, n_boot=200, seed=1)
    print(_fmt(r))
    return r


def test_no_false_yes_where_one_lr_costs_two_epsilon(families):
    # the verdict's question: what carrying the lr the reference size's fit found costs (on the true curves)
    bad = families[families["yes_if_costly"] > 0.05]
    assert bad.empty, "P(yes) above 5% where carrying the found lr costs >= 2 epsilon:" + _fmt(bad)
    # and where carrying the true optimum costs >= 2 epsilon
    bad = families[(families["true_worst"] >= 2 * families["epsilon"]) & (families["yes"] > 0.05)]
    assert bad.empty, "P(yes) above 5% where the true optimum's regret is >= 2 epsilon:" + _fmt(bad)


def test_no_false_no_where_the_optimum_does_not_move(families):
    still = families[families["drift"] == 0]
    assert (still["no"] <= 0.05).all(), "P(no) above 5% with the same curve at every size:" + _fmt(still)


def test_yes_on_peaks_and_flat_tops_alike(families):
    # was 0-1% on a quartic top and a 2-octave plateau (the argmax wanders across a flat top)
    same = families[(families["drift"] == 0) & families["family"].isin(["peak", "quartic", "plateau", "heavy", "merged"])]
    assert (same["yes"] >= 0.80).all(), "P(yes) below 80% for the same curve at every size, 5 seeds, sd 0.01:" + _fmt(same)


def test_optimum_and_drift_intervals_cover(families):
    # the lr_drift interval covered a true drift of 0 in 49-74% of tables; x* beside cliffs 0-21%
    pts = families[families["family"].isin(POINT_FAMILIES)]
    assert (pts["cover_x"] >= 0.85).all(), "x* intervals cover below 85%:" + _fmt(pts)
    assert (pts["cover_drift"] >= 0.85).all(), "lr_drift intervals cover below 85%:" + _fmt(pts)


def test_regret_intervals_cover(families):
    # worst_regret estimates what carrying the found lr costs at the size it serves worst
    assert (families["cover_carried"] >= 0.85).all(), "worst_regret intervals cover below 85%:" + _fmt(families)


@pytest.mark.parametrize("grid", ["one", "quarter", "irregular"])
def test_error_rates_hold_on_other_grids(grid):
    settings = [Setting(f, d, n, k, 0.01, grid) for f in ("peak", "cliff", "quartic", "plateau") for d in (0.0, 2.0)
                for n, k in ((2, 3), (5, 10))]
    r = evaluate(settings, tables=60, n_boot=200, seed=2)
    bad_yes = r[(r["yes_if_costly"] > 0.05) | ((r["true_worst"] >= 2 * r["epsilon"]) & (r["yes"] > 0.05))]
    bad_no = r[(r["drift"] == 0) & (r["no"] > 0.05)]
    assert bad_yes.empty and bad_no.empty, _fmt(r)
    assert (r[r["family"] != "plateau"]["cover_x"] >= 0.85).all(), _fmt(r)
    # flat tops on a fine grid with many seeds (many cells near the top) covered 67-84% before the regret's
    # selection-free lower bound (docs/leaderboard.md): the seed bootstrap does not see the maximum's bias there
    assert (r["cover_carried"] >= 0.85).all(), _fmt(r)


def test_drift_criterion_on_a_cliff_with_a_one_octave_grid():
    # true drift 1.5 octaves, every optimum beside a divergence cliff, 1-octave grid: the old interval had zero
    # width (x* not refined, every replicate at the same grid point) and said yes in 15-25% of tables
    settings = [Setting("cliff", 1.5, 3, 5, 0.01, "one"), Setting("cliff", 2.0, 4, 5, 0.01, "one")]
    r = evaluate(settings, tables=TABLES, n_boot=200, seed=3, criterion="drift")
    assert (r["yes"] <= 0.05).all(), _fmt(r)
    assert (r["cover_x"] >= 0.85).all(), _fmt(r)


def test_drift_criterion_error_rates():
    settings = [Setting(f, d, 3, 5, 0.01, "half") for f in ("peak", "asym", "cliff", "quartic", "merged") for d in (0.0, 2.0, 3.0)]
    r = evaluate(settings, tables=60, n_boot=200, seed=4, criterion="drift")
    assert (r.loc[r["drift"] >= 2, "yes"] <= 0.05).all(), _fmt(r)
    assert (r.loc[r["drift"] == 0, "no"] <= 0.05).all(), _fmt(r)
    assert (r["cover_drift"] >= 0.85).all(), _fmt(r)


# ---------------------------------------------------------------- replication per cell


def _one_seed_per_size(tables=60, seed=0):
    """Run directories of one size and one seed each, merged: seed ids 0, 1, 2 on sizes 1, 2, 4."""
    rng = np.random.default_rng(seed)
    x = np.arange(0, 6.01, 0.5)
    rows = []
    for t in range(tables):
        xs = 3 + rng.uniform(-0.5, 0.5)
        for s, size in enumerate((1, 2, 4)):
            for lr in x:
                rows.append({"table": t, "seed": s, "status": "complete", "model.width": size, "train.lr": 0.001 * 2**lr,
                             "val_acc": 0.9 - 0.05 * (lr - xs) ** 2 + rng.normal(0, 0.01)})
    return pd.DataFrame(rows)


def test_merged_single_seed_runs_never_decide():
    # was: "seeds 3", lr_drift 1.01-1.01 and a decisive "no" in 10-15% of tables whose true drift is 0
    a = analyze(_one_seed_per_size(), transfer="model.width", compare=["table"], metric="val_acc", classes=10, n_boot=200)
    assert (a.rows["transfers"] == "inconclusive").all()
    assert a.rows["lr_drift_lo"].isna().all() and a.rows["worst_regret_hi"].isna().all()  # no interval, never a zero-width one
    assert a.sizes["x_lo"].isna().all() and (a.sizes["rest_seeds"] == 1).all()
    assert a.rows["why"].str.contains("1 seed").all()


def test_a_size_with_one_seed_beside_five_gets_no_interval_and_no_verdict():
    rng = np.random.default_rng(5)
    rows = []
    for size, seeds in ((1, 5), (2, 5), (4, 1)):
        for k in range(seeds):
            for lr in np.arange(0, 6.01, 0.5):
                rows.append({"seed": k, "status": "complete", "model.width": size, "train.lr": 0.001 * 2**lr,
                             "val_acc": 0.9 - 0.05 * (lr - 3) ** 2 + rng.normal(0, 0.01)})
    a = analyze(pd.DataFrame(rows), transfer="model.width", metric="val_acc", classes=10, n_boot=200)
    sz = a.sizes.set_index("size")
    assert np.isnan(sz.loc[4, "x_lo"]) and np.isfinite(sz.loc[1, "x_lo"])
    r = a.rows.iloc[0]
    assert r["transfers"] == "inconclusive" and "too few seeds at the optimum of 4 (1)" in r["why"]


# ---------------------------------------------------------------- ranking: collapse and instability


def _rows(label, rng, *, top=(0.9, 0.9, 0.9), window=None, seeds=5):
    out = []
    for s, size in enumerate((1, 2, 4)):
        for lr in np.arange(0, 6.01, 0.5):
            for k in range(seeds):
                v = 0.1 + (top[s] - 0.1) * max(0.0, 1 - 0.06 * (lr - 3) ** 2) + rng.normal(0, 0.01)
                div = window is not None and s == 2 and abs(lr - 3) > window
                out.append({"kind": label, "seed": k, "status": "diverged" if div else "complete", "model.width": size,
                            "train.lr": 0.001 * 2**lr, "val_acc": np.nan if div else v})
    return out


def test_a_collapsing_row_never_ranks_above_a_healthy_one():
    # the largest size reaches only 0.30 at the same optimum: it got "yes" and ranked first in 51% of tables
    rng = np.random.default_rng(6)
    firsts = []
    for t in range(40):
        df = pd.DataFrame(_rows("healthy", rng) + _rows("collapsed", rng, top=(0.9, 0.9, 0.3)))
        a = analyze(df, transfer="model.width", compare=["kind"], metric="val_acc", classes=10, n_boot=100, boot_seed=t)
        firsts.append(a.rows.iloc[0]["kind"])
    assert firsts.count("collapsed") == 0


def test_an_unstable_row_never_ranks_above_a_healthy_one_that_transfers():
    # the largest size trains only within half an octave of its optimum (about a quarter of its runs
    # diverge): it outranked a healthy row in 7% of tables
    rng = np.random.default_rng(7)
    above = 0
    for t in range(40):
        df = pd.DataFrame(_rows("healthy", rng) + _rows("unstable", rng, window=0.5))
        a = analyze(df, transfer="model.width", compare=["kind"], metric="val_acc", classes=10, n_boot=100, boot_seed=t)
        order = a.rows["kind"].tolist()
        healthy = a.rows.set_index("kind").loc["healthy", "transfers"]
        if healthy == "yes" and order.index("unstable") < order.index("healthy"):
            above += 1
    assert above == 0


# ---------------------------------------------------------------- translation


def _bleu_rows(label, level, rng, seeds=3):
    out = []
    for size in (1, 2, 4):
        for lr in np.arange(0, 4.01, 0.5):
            for k in range(seeds):
                bump = 0.3 * max(0.0, 1 - 0.25 * (lr - 2) ** 2) if level < 5 else level * max(0.0, 1 - 0.05 * (lr - 2) ** 2) - level
                out.append({"kind": label, "seed": k, "status": "complete", "model.depth": size, "train.lr": 1e-4 * 2**lr,
                            "bleu": max(0.0, level + bump + rng.normal(0, 0.15 if level < 5 else 0.5))})
    return out


def test_a_collapsed_translation_model_never_says_yes():
    # about 2 BLEU at every size with a mild lr bump said "yes" in 89% of tables (the 1-BLEU margin)
    rng = np.random.default_rng(8)
    said_beside, said_alone = [], []
    for t in range(40):
        df = pd.DataFrame(_bleu_rows("collapsed", 2.0, rng) + _bleu_rows("healthy", 30.0, rng))
        a = analyze(df, transfer="model.depth", compare=["kind"], metric="bleu", n_boot=100, boot_seed=t)
        said_beside.append(a.rows.set_index("kind").loc["collapsed", "transfers"])
        assert a.rows.iloc[0]["kind"] == "healthy"
        alone = analyze(df[df["kind"] == "collapsed"], transfer="model.depth", metric="bleu", n_boot=100, boot_seed=t)
        said_alone.append(alone.rows.iloc[0]["transfers"])
    assert "yes" not in said_beside and said_beside.count("no") == len(said_beside)
    assert said_alone.count("yes") <= 2, said_alone


def test_a_right_skewed_regret_far_above_epsilon_says_no():
    """The width control's SP row (leaderboards/mup-width, reference width 128): carrying width 128's lr to
    width 1024 costs 0.98 in training loss, 18x epsilon, and its bootstrap replicates have a long upper tail
    (up to 2). The old lower end, which also took the reflection of the upper end about the estimate, put the
    interval at 0-1.97 (`inconclusive`); the lower end now widens by the replicates' deviation below their
    median only. muP's row in the same table, whose optimum stays within epsilon from width 128, says yes."""
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "leaderboards" / "mup-width" / "trials.csv"
    trials = pd.read_csv(path)
    a = analyze(trials, transfer="model.width", compare=["model.parametrization"], metric="train_loss_tail",
                reference=128, classes=10, n_boot=1000, boot_seed=0)
    rows = a.rows.set_index("model.parametrization")
    assert rows.loc["sp", "transfers"] == "no", rows.loc["sp", ["worst_regret", "worst_regret_lo", "why"]]
    assert rows.loc["sp", "worst_regret_lo"] > 0.1
    assert rows.loc["mup", "transfers"] == "yes", rows.loc["mup", ["worst_regret", "worst_regret_hi", "why"]]


def test_a_flat_top_whose_optimum_moves_says_no_yes_on_a_fine_grid():
    """A quartic top moving 1.5 octaves over the sizes: carrying the reference size's true optimum costs
    2.1 epsilon at the largest size. On a quarter-octave grid the fit's vertex wanders over the flat top and
    sometimes lands where the carried lr happens to cost less: P(yes) was 0.09-0.11 (5 seeds, 2-5 sizes).
    The regret's upper end now also carries where the reference size's replicates put its optimum."""
    settings = [Setting("quartic", 1.5, n, 5, 0.01, "quarter") for n in (2, 3, 5)]
    r = evaluate(settings, tables=150, n_boot=200, seed=4)
    assert (r["true_worst"] >= 2 * r["epsilon"]).all(), _fmt(r)
    assert (r["yes"] <= 0.05).all(), _fmt(r)


@pytest.mark.slow  # over 15 s: CI runs it in its slow stage (pytest -m slow)
def test_error_rates_hold_under_adaptive_seeds():
    """Optional stopping: tables that start with 3 seeds per cell and grow where their verdict is open, up to 12
    (`seeds: {min: 3, max: 12}`, `analysis/more_seeds.py`), looked at after every batch: the false-yes and
    false-no rates stay at or under 5%, and adaptive seeds decide at least as many tables as a fixed 5 seeds
    with fewer runs where the fixed count already decides."""
    settings = [Setting(f, d, 3, 5, 0.01, "half") for f in ("peak", "cliff", "plateau", "heavy", "asym")
                for d in (0.0, 0.5, 1.0, 2.0)]
    r = evaluate(settings, tables=TABLES, n_boot=200, seed=5, adaptive=(3, 12))
    fixed = evaluate(settings, tables=TABLES, n_boot=200, seed=5)
    bad = r[(r["yes_if_costly"] > 0.05) | ((r["true_worst"] >= 2 * r["epsilon"]) & (r["yes"] > 0.05))]
    assert bad.empty, "P(yes) above 5% where one lr costs >= 2 epsilon, adaptive seeds:" + _fmt(bad)
    bad = r[(r["no_if_cheap"] > 0.05) | ((r["drift"] == 0) & (r["family"] != "cliff") & (r["no"] > 0.05))]
    assert bad.empty, "P(no) above 5% where the carried lr costs < epsilon, adaptive seeds:" + _fmt(bad)
    assert (r["runs"] <= 3 * 13 * 12).all() and (r["runs"] >= 3 * 13 * 3).all()
    decided = (r["yes"] + r["no"]).sum()
    assert decided >= (fixed["yes"] + fixed["no"]).sum() - 0.05, _fmt(r) + _fmt(fixed)
    easy = (r["family"] == "peak") & (r["drift"] == 0)  # decided with 3 seeds: no more runs than 3 seeds need
    assert (r.loc[easy, "runs"] < 0.7 * fixed.loc[easy, "runs"]).all(), _fmt(r[easy]) + _fmt(fixed[easy])
