"""A bracketed optimum by a criterion that means it (issue 38): per size, the best grid lr against its two tried
neighbours in units of the best cell's standard error (docs/leaderboard.md, Bracketed): `bracketed`, `plateau`,
`censored`, `one seed`, or empty where the size does not train; the row's `plateaus` counts the plateaus.

Every table here is built so that the answer is known by hand: the seeds of a cell are the curve's value plus
the offsets -0.01, +0.01, -0.01, +0.01 (seed mean: the curve; standard deviation sqrt(4e-4 / 3); standard
error 0.01 / sqrt(3), the same in every cell)."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from nas_stab.analysis.table import analyze
from nas_stab.results import formats as F

LRS = (0.01, 0.02, 0.04, 0.08, 0.16)
OFFSETS = (-0.01, 0.01, -0.01, 0.01)
SE = float(np.std(OFFSETS, ddof=1) / math.sqrt(len(OFFSETS)))  # 0.01 / sqrt(3)

# seed-mean accuracy per size over LRS
PEAK = (0.70, 0.80, 0.90, 0.80, 0.70)  # both neighbours 0.1 below: 17.3 standard errors
FLAT = (0.70, 0.80, 0.90, 0.898, 0.70)  # the neighbour above 0.002 below: 0.35 standard errors
EDGE = (0.60, 0.70, 0.80, 0.85, 0.90)  # best at the largest lr


def _trials(curves: dict, metric: str = "val_acc", flip: bool = False) -> pd.DataFrame:
    """One run per (size, lr, seed); `flip`: a loss, 2 - the accuracy curve (the same shapes, minimized)."""
    rows = []
    for size, curve in curves.items():
        for lr, m in zip(LRS, curve):
            for seed, off in enumerate(OFFSETS):
                v = 2.0 - (m + off) if flip else m + off
                rows.append({"seed": seed, "status": "complete", "model.branches": size, "train.lr": lr, metric: v})
    return pd.DataFrame(rows)


def _sizes(a) -> pd.DataFrame:
    return a.sizes.set_index("size")


@pytest.mark.parametrize("metric, flip", [("val_acc", False), ("val_loss", True)], ids=["maximized", "minimized"])
def test_bracketed_plateau_and_censored_by_the_standard_error(metric, flip):
    a = analyze(_trials({1: PEAK, 2: FLAT, 4: EDGE}, metric, flip), transfer="model.branches", metric=metric, classes=10, n_boot=0)
    s = _sizes(a)
    assert s["bracket"].to_dict() == {1: "bracketed", 2: "plateau", 4: "censored"}
    assert np.allclose(s["grid_se"], SE)  # std / sqrt(n) of the best grid cell, the same cell the optimum rests on
    assert s.loc[1, "gap_below_se"] == pytest.approx(0.1 / SE) and s.loc[1, "gap_above_se"] == pytest.approx(0.1 / SE)
    assert s.loc[2, "gap_below_se"] == pytest.approx(0.1 / SE) and s.loc[2, "gap_above_se"] == pytest.approx(0.002 / SE)
    assert s.loc[2, "gap_above_se"] < 1 < s.loc[2, "gap_below_se"]  # in the metric's direction: positive for a loss too
    assert s.loc[4, "gap_below_se"] == pytest.approx(0.05 / SE) and math.isnan(s.loc[4, "gap_above_se"])  # no lr above
    assert s.loc[4, "censored"] == ">="
    assert a.rows["plateaus"].tolist() == [1]


def test_the_standard_error_is_the_cells_own():
    """grid_se is the standard error of the cell at grid_lr as leaderboard_cells.csv has it (std / sqrt(n))."""
    t = _trials({1: PEAK, 2: FLAT})
    best = (t["model.branches"] == 2) & (t["train.lr"] == 0.04)
    t.loc[best & (t["seed"] == 0), "val_acc"], t.loc[best & (t["seed"] == 1), "val_acc"] = 0.85, 0.97  # a wider best cell, mean 0.905
    a = analyze(t, transfer="model.branches", metric="val_acc", classes=10, n_boot=0)
    for r in a.sizes.to_dict("records"):
        c = a.cells[(a.cells["size"] == r["size"]) & (a.cells["lr"] == r["grid_lr"])].iloc[0]
        assert r["grid_se"] == pytest.approx(c["std"] / math.sqrt(c["n"]))
    assert a.sizes.set_index("size").loc[2, "grid_se"] > 2 * SE


def test_a_neighbour_that_diverged_with_every_seed_is_worse_by_definition():
    t = _trials({1: PEAK, 2: PEAK})
    dead = (t["model.branches"] == 2) & (t["train.lr"] == 0.08)
    t.loc[dead, "status"], t.loc[dead, "val_acc"] = "diverged", np.nan
    # a single seed at the best cell of size 1: no standard error, so only a dead neighbour's gap is known
    t = t[~((t["model.branches"] == 1) & (t["train.lr"] == 0.04) & (t["seed"] > 0))]
    a = analyze(t, transfer="model.branches", metric="val_acc", classes=10, n_boot=0)
    s = _sizes(a)
    assert s.loc[2, "gap_above_se"] == math.inf and s.loc[2, "bracket"] == "bracketed"
    assert math.isnan(s.loc[1, "grid_se"]) and math.isnan(s.loc[1, "gap_below_se"]) and s.loc[1, "bracket"] == "one seed"
    assert a.rows["plateaus"].tolist() == [0]


def test_a_tie_with_a_neighbour_is_a_plateau_and_a_size_that_does_not_train_has_no_label():
    t = _trials({1: (0.70, 0.90, 0.90, 0.80, 0.70), 2: (0.1,) * 5})  # size 2 at chance everywhere
    t.loc[t["model.branches"] == 2, "val_acc"] = 0.1
    a = analyze(t, transfer="model.branches", metric="val_acc", classes=10, n_boot=0)
    s = _sizes(a)
    assert s.loc[1, "grid_lr"] == 0.02 and s.loc[1, "gap_above_se"] == 0 and s.loc[1, "bracket"] == "plateau"  # ties: the smaller lr
    assert not s.loc[2, "trains"] and s.loc[2, "bracket"] == "" and math.isnan(s.loc[2, "gap_below_se"])


def test_plateaus_per_row_and_the_verdict_is_untouched(monkeypatch):
    """The new columns only report: the verdicts, regrets and ranking are the same when every optimum is called a
    plateau."""
    from nas_stab.analysis import plateau, table

    t = pd.concat([_trials({1: PEAK, 2: PEAK}).assign(**{"model.aggregation": "sum"}),
                   _trials({1: FLAT, 2: FLAT}).assign(**{"model.aggregation": "stam"})], ignore_index=True)
    kw = dict(transfer="model.branches", compare=("model.aggregation",), metric="val_acc", classes=10, n_boot=200)
    a = analyze(t, **kw)
    rows = a.rows.set_index("label")
    assert rows.loc["sum", "plateaus"] == 0 and rows.loc["stam", "plateaus"] == 2

    def all_plateaus(sizes, cells, sign):
        out = plateau.bracket_columns(sizes, cells, sign)
        return out.assign(bracket=plateau.PLATEAU, gap_below_se=0.0, gap_above_se=0.0)

    monkeypatch.setattr(table, "bracket_columns", all_plateaus)
    b = analyze(t, **kw)
    assert b.rows["plateaus"].tolist() == [2, 2]
    same = ["label", "rank", "transfers", "why", "worst_regret", "worst_regret_lo", "worst_regret_hi", "lr_drift", "best"]
    pd.testing.assert_frame_equal(a.rows[same], b.rows[same])


def test_csv_columns_are_appended_and_the_markdown_names_the_plateaus():
    a = analyze(_trials({1: PEAK, 2: FLAT, 4: EDGE}), transfer="model.branches", metric="val_acc", classes=10, n_boot=0)
    sizes_header = F.to_sizes_csv(a).splitlines()[0].split(",")
    assert sizes_header[sizes_header.index("bracket_end") + 1:] == [
        "grid_se", "gap_below_se", "gap_above_se", "bracket", "report_at_best", "report_std", "report_n"]
    header = F.to_csv(a).splitlines()[0].split(",")
    assert header[header.index("largest_window") + 1:] == ["plateaus", "best_report", "best_report_std", "best_report_n"]
    md = F.to_markdown(a, [("spec", "t")])
    assert "**Plateaus**: all at 2 (" in md
