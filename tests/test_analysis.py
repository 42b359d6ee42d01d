"""The leaderboard analysis (docs/leaderboard.md) on hand-made tables whose answers are worked out in the comments."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent / "data"))
from lb_fixtures import grid_rows, make_run, spec_dict

from nas_stab.analysis.table import analyze, fill_base, fmt_value
from nas_stab.errors import RunError
from nas_stab.results.leaderboard import leaderboard_markdown, load_analysis

X = np.arange(5.0)  # log2(lr / 0.01): lrs 0.01, 0.02, 0.04, 0.08, 0.16, one octave apart
LRS = 0.01 * np.exp2(X)


def parabola(x, x_star):
    return 0.9 - 0.05 * (x - x_star) ** 2


def table(curves, seeds=3, label="stam", shift=None):
    """{size: x*} -> rows: every seed on the exact curve m = 0.9 - 0.05 (x - x*)^2
    (plus shift[seed] on x*, when given)."""
    t = {}
    for s, xs in curves.items():
        for x, lr in zip(X, LRS):
            t[(label, s, float(lr))] = [float(parabola(x, xs + (shift[k] if shift else 0.0))) for k in range(seeds)]
    return grid_rows(t)


def run(rows, **kw):
    kw.setdefault("transfer", "model.branches")
    kw.setdefault("compare", ["model.aggregation"])
    kw.setdefault("metric", "val_acc")
    kw.setdefault("n_boot", 200)
    return analyze(pd.DataFrame(rows), **kw)


def row(a, label):
    return a.rows.set_index("label").loc[label]


def test_quadratic_optimum_drift_slope_regret_sensitivity_by_hand():
    a = run(table({1: 1.5, 2: 2.5}))
    r = row(a, "stam")
    # size 1: grid values .7875 .8875 .8875 .7875 .5875 (x = 0..4); the tie goes to x = 1, whose
    # neighbours x = 0, 2 lie on the same parabola: the fit is exact, x*(1) = 1.5, m = 0.9.
    # size 2: the best grid point is x = 2 (tie with 3), fitted x*(2) = 2.5.
    sz = a.sizes.set_index("size")
    x0 = math.log2(0.01)  # x_star is log2(lr)
    assert sz.loc[1, "x_star"] - x0 == pytest.approx(1.5) and sz.loc[2, "x_star"] - x0 == pytest.approx(2.5)
    assert sz.loc[1, "m_star"] == pytest.approx(0.9)
    assert r["best_lrs"][0][1] == pytest.approx(0.01 * 2**1.5)
    assert r["lr_drift"] == pytest.approx(1.0)
    assert r["lr_slope"] == pytest.approx(1.0)  # 1 octave over log2(2) - log2(1) = 1
    # regret at size 2 on its fitted curve at x*(1) = 1.5: 0.9 - (0.9 - 0.05 * 1^2) = 0.05; size 1: 0
    assert r["worst_regret"] == pytest.approx(0.05)
    assert r["transfer_regret"] == pytest.approx(0.025)
    # sensitivity: size 1 (.1125 + .0125 + .0125 + .1125 + .3125) / 5 = .1125; size 2 (mirror image) the same
    assert r["lr_sensitivity"] == pytest.approx(0.1125)
    # identical seeds: every resample gives the same curves, so the intervals are the allowances alone. A
    # parabola's vertex is exact only on a symmetric peak: each printed refined optimum spans three quarters of the
    # local step (1 octave here) on each side (XSTAR_MISFIT), x*(1) in 0.75..2.25 and x*(2) in 1.75..3.25, so the
    # drift, from the band of half a step on each side (MISFIT, with which its calibration holds), lies in 0..2
    assert (sz.loc[1, "x_lo"] - x0, sz.loc[1, "x_hi"] - x0) == pytest.approx((0.75, 2.25))
    assert (r["lr_drift_lo"], r["lr_drift_hi"]) == pytest.approx((0.0, 2.0))
    # the regret of carrying size 1's optimum, from either end of its fit allowance (half the local step on each
    # side, MISFIT): at x = 1, size 2's parabola
    # gives 0.9 - 0.05 * 1.5^2 = 0.7875 (regret 0.1125: the upper end); at x = 2, 0.8875, which is also size
    # 2's best measured value (its grid points 2 and 3 tie at 0.8875): without a parabola, regret 0 (the lower end)
    assert (r["worst_regret_lo"], r["worst_regret_hi"]) == pytest.approx((0.0, 0.1125))
    assert (r["transfer_regret_lo"], r["transfer_regret_hi"]) == pytest.approx((0.0, 0.05625))
    # epsilon 3% of the gap between the best measured seed-mean (0.8875) and m0 (0: no class count): 0.0266
    assert r["epsilon"] == pytest.approx(0.026625)
    assert r["transfers"] == "inconclusive" and r["why"] == "worst_regret 0-0.113 straddles epsilon 0.0266"
    c = row(run(table({1: 1.5, 2: 2.5}), epsilon=0.2), "stam")
    assert c["transfers"] == "yes" and c["why"] == "worst_regret 0-0.113 <= epsilon 0.2"
    # optima 2 octaves apart: carrying x = 1 (0.5 to 1.5) to size 2 (optimum 3) loses 0.125 at least
    b = row(run(table({1: 1.0, 2: 3.0}), epsilon=0.01), "stam")
    assert b["transfers"] == "no" and b["why"] == "worst_regret 0.125-0.325 > epsilon 0.01"
    d = row(run(table({1: 1.5, 2: 2.5}), criterion="drift", tolerance=3.0), "stam")
    assert d["transfers"] == "yes" and d["why"] == "lr_drift 0.00-2.00 <= 3 oct"


def test_censored_optimum_is_marked_and_inconclusive():
    a = run(table({1: 3.4, 2: 4.6}))  # size 2's best grid point is the top lr, 0.16; drift >= 0.6 only
    r = row(a, "stam")
    assert dict(r["censored"]) == {2: ">="}
    assert r["transfers"] == "inconclusive"
    assert "censored at 2 (>=0.16)" in r["why"]


def test_one_or_two_seeds_are_inconclusive_never_yes():
    for seeds in (1, 2):
        r = row(run(table({1: 2.0, 2: 2.0}, seeds=seeds)), "stam")
        assert r["transfers"] == "inconclusive"
        assert r["why"].startswith(f"{seeds} seed")
    one = row(run(table({1: 2.0, 2: 2.0}, seeds=1)), "stam")
    assert math.isnan(one["lr_drift_lo"])  # one seed: no interval, never a 1.58-1.58


def test_bootstrap_is_paired_over_the_lrs_of_a_size():
    # each seed is better than the last by 0.05 at every lr (the same curve shifted up): a resample draws
    # seeds for the whole curve of a size, so every replicate has the same shape and optimum, and the
    # optimum's interval is its fit allowance alone (half the 1-octave step on each side)
    rows = table({1: 1.5, 2: 1.5})
    for r in rows:
        r["val_acc"] += 0.05 * r["seed"]
    a = run(rows)
    sz = a.sizes.set_index("size")
    x0 = math.log2(0.01)
    assert (sz.loc[1, "x_lo"] - x0, sz.loc[1, "x_hi"] - x0) == pytest.approx((0.75, 2.25))  # 3/4 step each side
    assert sz.loc[1, "rest_seeds"] == 3


def test_sizes_are_resampled_independently():
    # every seed has the same optimum at both sizes, but the seeds disagree (x* = 1, 2, 3). Sizes are
    # resampled independently (a size's seeds are its own: merged run directories, separate trainings), so
    # the drift interval is wide; it still covers 0
    a = run(table({1: 1.0, 2: 1.0}, shift=[0.0, 1.0, 2.0]))
    r = row(a, "stam")
    assert r["lr_drift"] == pytest.approx(0.0, abs=1e-9)
    assert r["lr_drift_lo"] == 0.0 and r["lr_drift_hi"] > 1.0
    sz = a.sizes.set_index("size")
    assert sz.loc[1, "x_hi"] - sz.loc[1, "x_lo"] > 0.5  # the optimum itself is uncertain


def test_untrainable_size_is_no_and_ranks_last():
    rows = table({1: 2.0, 2: 2.0}, label="good")
    rows += table({1: 2.0, 2: 2.0}, label="dead")
    for r in rows:
        if r["model.aggregation"] == "dead" and r["model.branches"] == 2:
            r["status"] = "diverged"
            r["val_acc"] = float("nan")
    a = run(rows, classes=10)
    assert a.rows["label"].tolist() == ["good", "dead"]
    d = row(a, "dead")
    assert d["transfers"] == "no" and d["why"] == "size 2: diverged"
    assert dict(d["no_best_lr"]) == {2: "diverged"}


def test_chance_row_is_no_and_m0_clamps():
    rows = table({1: 2.0, 2: 2.0}, label="chance")
    for r in rows:
        r["val_acc"] = 0.05  # below chance: clamped to m0 = 1/10
    a = run(rows, classes=10)
    r = row(a, "chance")
    assert a.settings.m0 == pytest.approx(0.1) and a.settings.margin == pytest.approx(0.09)
    assert a.cells["mean"].tolist() == pytest.approx([0.1] * len(a.cells))
    assert r["transfers"] == "no" and "no lr trains" in r["why"]


def _noisy(rows, sd=0.004, seed=0):
    rng = np.random.default_rng(seed)
    for r in rows:
        r["val_acc"] += float(rng.normal(0, sd))
    return rows


def test_ranking_within_a_tier_by_verdict():
    # the same level at the transferred lr (one tier): the verdict orders them
    rows = table({1: 2.0, 2: 2.0}, label="yes-row")
    rows += table({1: 2.0, 2: 2.0}, seeds=2, label="unsure-row")  # 2 seeds: inconclusive
    rows += table({1: 0.5, 2: 3.5}, label="no-row")
    a = run(_noisy(rows), epsilon=0.05)
    assert a.rows["transfers"].tolist() == ["yes", "inconclusive", "no"]
    assert a.rows["label"].tolist() == ["yes-row", "unsure-row", "no-row"]


def test_ranking_tiers_by_the_worst_size_at_the_transferred_lr():
    # a row 0.05 better at every size ranks first although it has only 2 seeds (inconclusive): what one lr
    # reaches at the worst size comes before the verdict when the difference is beyond the noise
    rows = table({1: 2.0, 2: 2.0}, label="yes-row")
    rows += table({1: 2.0, 2: 2.0}, seeds=2, label="better-row")
    for r in rows:
        if r["model.aggregation"] == "better-row":
            r["val_acc"] += 0.05
    a = run(_noisy(rows), epsilon=0.05)
    assert a.rows["label"].tolist() == ["better-row", "yes-row"]
    assert a.rows["transfers"].tolist() == ["inconclusive", "yes"]


def test_coarse_grid_is_inconclusive():
    rows = [r for r in table({1: 2.0, 2: 2.0}) if r["train.lr"] in (0.01, 0.04, 0.16)]  # 2-octave steps
    r = row(run(rows), "stam")
    assert r["transfers"] == "inconclusive" and "lr grid step 2.00 > 1 oct" in r["why"]


def test_one_size_and_no_size_axis_are_inconclusive():
    r = row(run(table({1: 2.0})), "stam")
    assert r["transfers"] == "inconclusive" and "1 size" in r["why"]
    r = row(run(table({1: 2.0}), transfer=None), "stam")
    assert r["transfers"] == "inconclusive" and "no size axis" in r["why"]


def test_loss_metric_minimized_with_m0_the_uniform_loss():
    rows = table({1: 2.0, 2: 2.0})
    for r in rows:
        r["val_loss"] = 3.0 - 2 * r.pop("val_acc")  # minimum 1.2 at x* = 2
    rows[0]["val_loss"] = 50.0  # worse than ln(10): clamped to m0
    a = run(rows, metric="val_loss", classes=10)
    assert a.settings.m0 == pytest.approx(math.log(10))
    assert a.cells["mean"].max() <= math.log(10) + 1e-12
    r = row(a, "stam")
    assert r["lr_drift"] == pytest.approx(0.0) and r["best"] == pytest.approx(1.2)
    # the clamped run did not learn while its cell's other seeds did: a partly failing cell near the carried lr,
    # beside which a yes needs CARRIED_SEEDS at the carried lr (rules 2026.12); the same table without it says yes
    assert r["transfers"] == "inconclusive" and "partly failed" in r["why"]
    rows[0]["val_loss"] = 3.0 - 2 * table({1: 2.0, 2: 2.0})[0]["val_acc"]
    assert row(run(rows, metric="val_loss", classes=10), "stam")["transfers"] == "yes"


def test_labels_from_several_keys_and_base_values():
    rows = [{"seed": 0, "train.lr": lr, "model.aggregation": ag, "model.norm": nm, "val_acc": v}
            for lr, v in ((0.1, 0.5), (0.2, 0.6)) for ag in ("sum", "stam") for nm in ("bn", None)]
    df = pd.DataFrame(rows)
    spec = {"model": {"norm": "none", "branches": 4}, "train": {"lr": 0.1}}
    a = analyze(fill_base(df, ["model.norm", "model.branches"], spec), transfer="model.branches",
                compare=["model.aggregation", "model.norm"], metric="val_acc")
    # the empty model.norm cells take the base value "none"; model.branches is not a column: 4
    assert sorted(a.rows["label"]) == ["stam, bn", "stam, none", "sum, bn", "sum, none"]
    assert set(a.cells["size"]) == {4}
    # a table without an lr column uses the base lr
    b = analyze(df.drop(columns="train.lr"), base=spec, metric="val_acc", compare=["model.aggregation"])
    assert set(b.cells["lr"]) == {0.1}


def test_other_searched_keys_are_averaged_and_noted():
    rows = [{"seed": 0, "train.lr": 0.1, "model.depth": d, "val_acc": v} for d, v in ((2, 0.6), (4, 0.8))]
    a = analyze(pd.DataFrame(rows), metric="val_acc")
    assert a.settings.other_keys == ("model.depth",)
    assert a.rows.iloc[0]["best"] == pytest.approx(0.7)


def test_bad_input_errors():
    with pytest.raises(RunError, match="val_acc"):
        analyze(pd.DataFrame({"train.lr": [0.1]}), metric="val_acc")
    with pytest.raises(RunError, match="learning rate"):
        analyze(pd.DataFrame({"val_acc": [0.1]}), metric="val_acc")


def test_fmt_value():
    assert [fmt_value(v) for v in (1, 2.0, 0.1, None, True, "stam", float("nan"))] == ["1", "2", "0.1", "null", "true", "stam", "null"]


def test_load_analysis_from_run_dirs(tmp_path):
    d1 = make_run(tmp_path, grid_rows({("sum", 1, 0.1): [0.5], ("sum", 1, 0.2): [0.7]}),
                  spec=spec_dict("one", seeds=[0]))
    # the second run does not search model.aggregation: its base value ("stam") labels its rows
    sp = spec_dict("two", seeds=[0], space={"model.branches": [1, 2, 4], "train.lr": {"log_grid": [0.1, 0.8, 4]}})
    sp["model"]["aggregation"] = "stam"
    d2 = make_run(tmp_path, [{"seed": 0, "model.branches": 2, "train.lr": lr, "val_acc": v} for lr, v in ((0.1, 0.6), (0.2, 0.4))], spec=sp)
    a, prov, runs = load_analysis([d1, d2])
    assert sorted(a.rows["label"]) == ["stam", "sum"]
    assert sum(1 for k, _ in prov if k == "run") == 2
    assert dict(prov)["trials"].startswith("4 runs: 4 complete")
    md = leaderboard_markdown(d1)
    assert "| rank |" in md and "hash 0123456789abcdef" in md


def test_run_dir_errors(tmp_path):
    with pytest.raises(RunError, match="not a run directory"):
        load_analysis([tmp_path / "nope"])
    d = make_run(tmp_path, grid_rows({("sum", 1, 0.1): [0.5]}))
    (d / "trials.csv").unlink()
    with pytest.raises(RunError, match=r"trials\.csv: missing"):
        load_analysis([d])
    (d / "trials.csv").write_text("")
    with pytest.raises(RunError, match=r"trials\.csv: empty"):
        load_analysis([d])
    (d / "trials.csv").write_text("trial,seed,status,train.lr,val_acc\n")
    with pytest.raises(RunError, match="no trials"):
        load_analysis([d])
    (d / "spec.yaml").write_text("name: [unclosed\n")
    with pytest.raises(RunError, match="spec.yaml"):
        load_analysis([d])


_vals = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0.0, 0.5, 1.0]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.tuples(
            st.sampled_from([0, 1, 2]),
            st.sampled_from(["complete", "diverged", "pruned", "failed", "running"]),
            st.sampled_from([1, 2, 4, float("nan")]),
            st.sampled_from(["sum", "stam", None]),
            st.one_of(st.sampled_from([0.01, 0.1, 1.0]), st.floats(allow_nan=True, allow_infinity=True)),
            _vals,
        ),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from(["val_acc", "val_loss"]),
)
def test_never_crashes(rows, metric):
    df = pd.DataFrame(rows, columns=["seed", "status", "model.branches", "model.aggregation", "train.lr", metric])
    try:
        a = analyze(df, transfer="model.branches", compare=["model.aggregation"], metric=metric, n_boot=50)
    except RunError:
        lr = pd.to_numeric(df["train.lr"], errors="coerce")
        assert not ((lr > 0) & np.isfinite(lr)).any()
        return
    assert np.isfinite(a.cells["mean"]).all()
    assert (a.rows["transfer_regret"].dropna() >= 0).all()
    assert (a.rows["worst_regret"].dropna() >= a.rows["transfer_regret"].dropna() - 1e-12).all()
    assert ((a.rows["lr_drift"] >= 0) | a.rows["lr_drift"].isna()).all() and (a.rows["stable_octaves"] >= 0).all()
    assert set(a.rows["transfers"]) <= {"yes", "no", "inconclusive"}
    assert a.rows["why"].map(lambda w: isinstance(w, str) and w != "").all()
    assert a.rows["rank"].tolist() == list(range(1, len(a.rows) + 1))




def test_no_parabola_through_a_divergence_cliff():
    # size 1: .78 .82 at x = 0, 1, then diverged (counted at m0 = 0.1) at x = 2: a parabola through the
    # cliff would put the optimum at 0.896, above every measurement; the grid point stands.
    rows = []
    for s in (1, 2):
        for x, v in zip(X[:4], (0.70, 0.78, 0.82, "diverged")):
            for k in range(3):
                r = {"seed": k, "train.lr": float(0.01 * 2**x), "model.branches": s, "model.aggregation": "a"}
                r.update({"status": "diverged", "val_acc": float("nan")} if v == "diverged" else {"status": "complete", "val_acc": v})
                rows.append(r)
    a = run(rows, classes=10)
    sz = a.sizes.set_index("size")
    assert sz.loc[1, "m_star"] == pytest.approx(0.82) and sz.loc[1, "best_lr"] == pytest.approx(0.04)
    assert sz.loc[1, "censored"] == ""


def _sweep_rows(last_cell):
    """Sizes 1 and 2, 3 seeds, lrs 0.01..0.08: 0.70, 0.78, 0.82 in every seed, then `last_cell` (one value per seed)."""
    rows = []
    for s in (1, 2):
        for x, vals in zip(X[:4], ([0.70] * 3, [0.78] * 3, [0.82] * 3, last_cell)):
            for k in range(3):
                rows.append({"seed": k, "train.lr": float(0.01 * 2**x), "model.branches": s, "model.aggregation": "a",
                             "status": "complete", "val_acc": vals[k]})
    return rows


def test_no_parabola_through_a_cell_where_some_seeds_did_not_learn():
    # the cell after the best holds two seeds at 0.80 and one stuck at chance (0.10, a finite loss, so not
    # 'diverged'): its mean 0.567 is above the trains threshold, but it is a cliff, not a curve. A parabola
    # through (1, .78), (2, .82), (3, .567) would peak at x = 1.64 with 0.839, above every measurement.
    a = run(_sweep_rows([0.80, 0.80, 0.10]), classes=10)
    sz = a.sizes.set_index("size")
    assert sz.loc[1, "m_star"] == pytest.approx(0.82) and sz.loc[1, "best_lr"] == pytest.approx(0.04)
    # control: the same mean reached by every seed learning is a curve, and the parabola is fitted
    b = run(_sweep_rows([0.567, 0.567, 0.567]), classes=10)
    sb = b.sizes.set_index("size")
    assert sb.loc[1, "m_star"] == pytest.approx(0.8394, abs=1e-4) and sb.loc[1, "best_lr"] == pytest.approx(0.01 * 2**1.636, rel=1e-3)
