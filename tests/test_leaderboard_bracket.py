"""Issue 19 in the leaderboard: why a bracket sweep stopped (limit / divergence wall / ...) in every
format, and the written rule for pruned runs (docs/leaderboard.md, "Pruned runs")."""
from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent / "data"))
from lb_fixtures import grid_rows, make_run, spec_dict

from nas_stab.analysis.table import analyze
from nas_stab.errors import RunError
from nas_stab.results.leaderboard import build_leaderboard, load_analysis
from nas_stab.results.plots import PRUNED_MARKER, transfer_figure
from nas_stab.results.tables import display_table
from nas_stab.search.replay import upgrade
from nas_stab.search.sources.bracket import BracketSource
from nas_stab.store.decisions import DECISIONS
from nas_stab.store.reader import read_run

LIMITS = (0.005, 0.08)
# (aggregation, branches) -> (optimum lr, divergence wall): stam's optima lie far above the upper limit
# at both sizes (censored there, at the same lr: a drift of 0 that must still not be "yes"); sum's size 4
# diverges just above its best lr (a divergence wall), its size 1 is bracketed inside the limits
OPT = {("stam", 1): (1.0, math.inf), ("stam", 4): (1.0, math.inf),
       ("sum", 1): (0.03, math.inf), ("sum", 4): (0.3, 0.05)}


def bracket_run(tmp_path: Path) -> Path:
    sp = spec_dict("br", seeds=[0, 1, 2], space={"model.branches": [1, 4], "model.aggregation": ["sum", "stam"],
                                                "train.lr": [0.01, 0.02]})
    sp["search"].update(sampler="bracket", bracket={"step_octaves": 1, "resolution_octaves": 0.5, "lr_limits": list(LIMITS)})
    d = make_run(tmp_path, [], spec=sp, history=False)
    src = BracketSource(read_run(d).spec)
    records = []
    while (jobs := src.pending(records, ())) is not None:
        for j in jobs:
            agg, c, lr = j.params["model.aggregation"], j.params["model.branches"], j.params["train.lr"]
            opt, wall = OPT[(agg, c)]
            r = {"key": j.key, "seed": j.seed, **j.params}
            if lr > wall:
                r.update(status="diverged", val_acc=math.nan)
            else:
                r.update(status="complete", val_acc=0.9 - 0.05 * (math.log2(lr) - math.log2(opt)) ** 2 + 0.003 * j.seed)
            records.append(r)
    ends = {(e.params["model.aggregation"], e.params["model.branches"]): e.end for e in src.report(records)}
    assert ends == {("stam", 1): "limit", ("stam", 4): "limit", ("sum", 1): "bracketed", ("sum", 4): "divergence wall"}
    # as a real run directory has them: trials.csv keeps learning rates to 6 digits (0.0141421 for
    # 0.0141421356237), and a key computed from the stored spec need not be the search's (1.0 read back
    # as 1 changes the hash): the table matches runs to sweeps by their values
    for n, r in enumerate(records):
        r["train.lr"] = float(f"{r['train.lr']:.6g}")
        r["key"] = f"{n:016x}"
    return make_run(tmp_path, records, spec=sp, history=False)


def upgraded(d: Path) -> Path:
    """A run directory made without decisions.jsonl (as before searches recorded them), given them by the
    replay (`nas-stab upgrade`): the records are matched to the search's jobs by their values."""
    run = read_run(d)
    (d / DECISIONS).unlink(missing_ok=True)
    assert upgrade(d, run.spec, run.trials.to_dict("records"))
    return d


def drop_last_of(d: Path, agg: str, c: int) -> pd.DataFrame:
    """trials.csv without the last run of the sweep (agg, c): the search stopped mid-round."""
    t = pd.read_csv(d / "trials.csv", dtype={"key": str})
    last = t[(t["model.aggregation"] == agg) & (t["model.branches"] == c)].index[-1]
    t = t.drop(index=last)
    t.to_csv(d / "trials.csv", index=False)
    return t


def test_a_run_without_decisions_names_the_upgrade_and_the_upgrade_replays_them(tmp_path):
    d = bracket_run(tmp_path)
    with pytest.raises(RunError, match=r"decisions.jsonl: missing .*nas-stab upgrade"):
        load_analysis([d], n_boot=0)
    upgraded(d)
    events = [json.loads(ln) for ln in (d / DECISIONS).read_text().splitlines()]
    assert events[0]["event"] == "start" and events[0]["replayed"] and events[0]["sweeps"] == 4
    sweeps = [e for e in events if e["event"] == "sweep"]
    assert sorted(e["end"] for e in sweeps) == ["bracketed", "divergence wall", "limit", "limit"]
    t = pd.read_csv(d / "trials.csv", dtype={"key": str})
    assert sorted(k for e in sweeps for k in e["runs"]) == sorted(t["key"])  # every record in one ended sweep
    assert not upgrade(d, read_run(d).spec, t.to_dict("records"))  # once


def test_bracket_ends_in_every_format_and_a_limit_is_never_yes(tmp_path):
    d = upgraded(bracket_run(tmp_path))
    a, _, _ = load_analysis([d], n_boot=200)
    sz = a.sizes.set_index(["label", "size"])
    assert sz.loc[("stam", 1), "bracket_end"] == "limit" and sz.loc[("stam", 4), "bracket_end"] == "limit"
    assert sz.loc[("sum", 1), "bracket_end"] == "bracketed" and sz.loc[("sum", 4), "bracket_end"] == "divergence wall"
    rows = a.rows.set_index("label")
    # stam: both optima censored at the same lr (0.08), so lr_drift's point value is 0, but a censored optimum
    # lies at or beyond the grid's end: the interval is one-sided (no upper end) and never a perfect 0-0;
    # a censored optimum is never "yes", and the reason names the limit
    assert rows.loc["stam", "lr_drift"] == 0 and rows.loc["stam", "lr_drift_hi"] == np.inf
    assert rows.loc["stam", "worst_regret_hi"] == np.inf
    assert rows.loc["stam", "transfers"] == "inconclusive"
    assert "censored at 1 (>=0.08, limit), 4 (>=0.08, limit)" in rows.loc["stam", "why"]

    headers, text, _ = display_table(a)
    shown = {t[headers.index("model.aggregation")]: t[headers.index("best_lr(s)")] for t in text}
    assert shown["stam"] == "1:>=0.08 (limit) 4:>=0.08 (limit)"
    assert "4:" in shown["sum"] and shown["sum"].endswith("(wall)") and "1:" in shown["sum"]
    assert "(limit)" not in shown["sum"].split(" ")[0]  # a bracketed size gets no mark

    paths = build_leaderboard([d], formats=("md", "csv", "html"), plots=False, n_boot=100)
    for fmt, gte in (("md", "\\>="), ("html", "&gt;="), ("csv", ">=")):
        body = paths[fmt].read_text()
        assert f"4:{gte}0.08 (limit)" in body, fmt
        assert "(wall)" in body, fmt
    sizes_csv = pd.read_csv(paths["sizes_csv"])
    assert dict(zip(zip(sizes_csv["label"], sizes_csv["model.branches"]), sizes_csv["bracket_end"])) == {
        ("stam", 1): "limit", ("stam", 4): "limit", ("sum", 1): "bracketed", ("sum", 4): "divergence wall"}
    assert "why a sweep stopped there" in paths["md"].read_text()


def test_an_unfinished_sweep_is_marked_and_a_grid_run_has_no_marks(tmp_path):
    d = bracket_run(tmp_path)
    drop_last_of(d, "sum", 1)
    a, _, _ = load_analysis([upgraded(d)], n_boot=0)
    assert a.sizes.set_index(["label", "size"]).loc[("sum", 1), "bracket_end"] == "unfinished"
    headers, text, _ = display_table(a)
    assert any("1:" in t[headers.index("best_lr(s)")] and "(unfinished)" in t[headers.index("best_lr(s)")] for t in text)

    g = make_run(tmp_path / "g", grid_rows({("sum", 1, lr): [0.5, 0.6, 0.55] for lr in (0.01, 0.02, 0.04)}))
    a, _, _ = load_analysis([g], n_boot=0)
    assert (a.sizes["bracket_end"] == "").all()
    assert "why a sweep stopped" not in build_leaderboard([g], formats=("md",), plots=False, n_boot=0)["md"].read_text()


# ---------------------------------------------------------------- pruned runs

def cells(table, **kw):
    rows = []
    for (size, lr), vals in table.items():
        for seed, (status, v) in enumerate(vals):
            rows.append({"seed": seed, "model.branches": size, "train.lr": lr, "status": status, "val_acc": v})
    kw.setdefault("n_boot", 0)
    return analyze(pd.DataFrame(rows), transfer="model.branches", metric="val_acc", classes=10, **kw)


C = ("complete",)
P = ("pruned",)


def test_a_pruned_run_counts_where_it_stopped_never_absent_never_diverged():
    # size 1: lr 0.02 is the best complete cell (0.80). At 0.04 one seed completed high (0.85) and two were
    # pruned low (0.30, 0.40): left out, 0.04 would be the optimum on one seed (0.85); counted where they
    # stopped, its mean is 0.517 and 0.02 stays the optimum, bracketed by 0.04
    t = {(1, 0.01): [C + (0.7,)] * 3, (1, 0.02): [C + (0.8,)] * 3,
         (1, 0.04): [C + (0.85,), P + (0.30,), P + (0.40,)],
         (2, 0.01): [C + (0.7,)] * 3, (2, 0.02): [C + (0.8,)] * 3, (2, 0.04): [C + (0.75,)] * 3}
    a = cells(t)
    c = a.cells.set_index(["size", "lr"])
    assert c.loc[(1, 0.04), "mean"] == pytest.approx((0.85 + 0.30 + 0.40) / 3)
    assert c.loc[(1, 0.04), "n_pruned"] == 2 and c.loc[(1, 0.04), "n_diverged"] == 0
    assert c.loc[(1, 0.04), "frac_diverged"] == 0
    sz = a.sizes.set_index("size")
    assert sz.loc[1, "grid_lr"] == pytest.approx(0.02) and sz.loc[1, "censored"] == ""
    r = a.rows.iloc[0]
    assert r["diverged"] == 0 and r["pruned"] == pytest.approx(2 / 18)
    headers, text, _ = display_table(a)
    assert text[0][headers.index("diverged")] == "0%" and text[0][headers.index("pruned")] == "11%"


def test_a_pruned_cell_bounds_the_optimum_and_keeps_it_a_grid_point():
    # every seed at 0.04 pruned (at 0.5): the lr was tried, so 0.02 is bracketed, not censored at the top;
    # and no parabola through the pruned cell (its value is where the runs were stopped): x* = the grid point
    base = {(1, 0.01): [C + (0.7,)] * 3, (1, 0.02): [C + (0.8,)] * 3,
            (2, 0.01): [C + (0.7,)] * 3, (2, 0.02): [C + (0.8,)] * 3, (2, 0.04): [C + (0.75,)] * 3}
    a = cells({**base, (1, 0.04): [P + (0.5,)] * 3})
    s1 = a.sizes.set_index("size").loc[1]
    assert s1["censored"] == "" and s1["best_lr"] == pytest.approx(0.02) and s1["m_star"] == pytest.approx(0.8)
    # the same values complete: the parabola through (0.01, .7) (0.02, .8) (0.04, .5) moves x* below 0.02
    b = cells({**base, (1, 0.04): [C + (0.5,)] * 3})
    assert b.sizes.set_index("size").loc[1, "best_lr"] < 0.02 * 0.95
    # a size-2 parabola is untouched by size 1's pruned cell
    assert a.sizes.set_index("size").loc[2, "best_lr"] == pytest.approx(b.sizes.set_index("size").loc[2, "best_lr"])


def test_a_pruned_run_without_a_value_counts_as_no_learning():
    t = {(1, 0.01): [C + (0.7,)] * 3, (1, 0.02): [C + (0.8,)] * 3, (1, 0.04): [P + (math.nan,)] * 3,
         (2, 0.01): [C + (0.7,)] * 3, (2, 0.02): [C + (0.8,)] * 3, (2, 0.04): [C + (0.75,)] * 3}
    a = cells(t)
    c = a.cells.set_index(["size", "lr"])
    assert c.loc[(1, 0.04), "mean"] == pytest.approx(0.1)  # m0 = 1/10
    assert not c.loc[(1, 0.04), "trains"] and c.loc[(1, 0.04), "n_diverged"] == 0


def test_the_plot_marks_pruned_cells_apart_from_diverged_ones():
    t = {(1, 0.01): [C + (0.7,)] * 3, (1, 0.02): [C + (0.8,)] * 3, (1, 0.04): [P + (0.5,)] * 3,
         (2, 0.01): [C + (0.7,)] * 3, (2, 0.02): [C + (0.8,)] * 3, (2, 0.04): [("diverged", math.nan)] * 3}
    fig = transfer_figure(cells(t))
    ax = fig.axes[0]
    at = {g: [tuple(np.round(p, 3)) for c in ax.collections if c.get_gid() == g for p in c.get_offsets()]
          for g in ("pruned", "diverged")}
    x = round(math.log2(0.04), 3)
    assert at["pruned"] == [(x, 0.5)]  # size 1's pruned cell, where its runs stopped
    assert at["diverged"] == [(x, 0.1)]  # size 2's diverged cell, at m0; not marked pruned
    assert PRUNED_MARKER == "v"


def test_status_of_a_bracket_run_counts_the_sweeps_not_ended(tmp_path):
    """`nas-stab status` on a bracket search: no planned total (it is decided as results come in), but how
    many sweeps have not ended, replayed from the records; it never fails on `search.trials` being unset."""
    from nas_stab.results.status import status_text

    d = bracket_run(tmp_path)
    text = status_text(d)  # no decisions yet: the count is unknown, and the line says how to get it
    assert "bracket: ? learning-rate sweep(s) not ended yet" in text and "nas-stab upgrade" in text
    text = status_text(upgraded(d))
    assert "bracket: 0 learning-rate sweep(s) not ended yet" in text and "not ended:" not in text
    t = pd.read_csv(d / "trials.csv", dtype={"key": str})
    drop_last_of(d, "sum", 1)
    text = status_text(upgraded(d))
    assert "bracket: 1 learning-rate sweep(s) not ended yet" in text
    assert "1 sweep(s) not ended: rerun `nas-stab run`" in text
    t[t["model.aggregation"] == "sum"].to_csv(d / "trials.csv", index=False)  # stam's sweeps never started
    assert "bracket: 2 learning-rate sweep(s) not ended yet" in status_text(upgraded(d))  # sum's are both ended
