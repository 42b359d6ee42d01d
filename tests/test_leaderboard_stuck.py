"""The leaderboard's `stuck` column and the divergence map's stuck marking (docs/leaderboard.md, "Stuck runs").

A stuck run completed with a finite metric at or below the trains threshold (m0 + margin in the
metric's direction): it never learned, yet it is not `diverged`. Every table here is hand-made, with
the count worked out in the comments.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent / "data"))
from lb_fixtures import grid_rows, make_run

from nas_stab.analysis.table import analyze
from nas_stab.results import build_leaderboard
from nas_stab.results.tables import cells_table, display_table, settings_items

LRS = (0.01, 0.02, 0.04, 0.08)


def _table():
    """Rows "a" and "b", sizes 1 and 2, lrs 0.01-0.08, 3 seeds: 24 runs per row. With 10 classes
    m0 = 0.1, margin 0.09: a run that completed at or below 0.19 is stuck.

    Row "a": 3 stuck (0.10 and 0.11 at size 2, lr 0.08; 0.19, exactly the threshold, at size 1,
    lr 0.08), 2 diverged (size 2, lr 0.04), one that learned poorly (0.25, above the threshold:
    not stuck), one pruned at 0.05 and one failed (neither is stuck, whatever their value).
    Row "b": every run learned (healthy)."""
    t = {}
    for lab in ("a", "b"):
        for s in (1, 2):
            for j, lr in enumerate(LRS):
                v = 0.6 + 0.05 * j
                t[(lab, s, lr)] = [v, v + 0.01, v - 0.01]
    t[("a", 2, 0.08)] = [0.10, 0.11, 0.80]
    t[("a", 1, 0.08)] = [0.19, 0.80, 0.80]
    t[("a", 2, 0.04)] = ["diverged", "diverged", 0.75]
    t[("a", 1, 0.01)] = [0.25, "pruned", "failed"]
    return grid_rows(t)


def _analysis(rows=None, **kw):
    kw.setdefault("classes", 10)
    return analyze(pd.DataFrame(rows if rows is not None else _table()), transfer="model.branches",
                   compare=["model.aggregation"], metric=kw.pop("metric", "val_acc"), n_boot=20, **kw)


def test_exact_fractions_of_stuck_diverged_and_healthy_runs():
    a = _analysis()
    r = a.rows.set_index("label")
    assert r.loc["a", "runs"] == 24 and r.loc["b", "runs"] == 24
    assert r.loc["a", "stuck"] == pytest.approx(3 / 24)
    assert r.loc["a", "diverged"] == pytest.approx(2 / 24)
    assert r.loc["a", "pruned"] == pytest.approx(1 / 24)
    assert r.loc["b", "stuck"] == 0 and r.loc["b", "diverged"] == 0
    c = a.cells.set_index(["label", "size", "lr"])
    assert c.loc[("a", 2, 0.08), "n_stuck"] == 2 and c.loc[("a", 2, 0.08), "frac_stuck"] == pytest.approx(2 / 3)
    assert c.loc[("a", 1, 0.08), "n_stuck"] == 1  # 0.19: at the threshold counts
    assert c.loc[("a", 2, 0.04), "n_stuck"] == 0 and c.loc[("a", 2, 0.04), "n_diverged"] == 2  # diverged is not stuck
    assert int(c["n_stuck"].sum()) == 3


def test_a_run_that_learned_poorly_is_not_stuck():
    # 0.25 with 10 classes: far from good, but above m0 + margin = 0.19; the pruned (0.05) and failed runs
    # of the same cell never count as stuck either
    c = _analysis().cells.set_index(["label", "size", "lr"])
    assert c.loc[("a", 1, 0.01), "n_stuck"] == 0
    # the same cell with the learned run just at the threshold: now it is stuck
    rows = [dict(r, val_acc=0.19) if (r["model.aggregation"], r["model.branches"], r["train.lr"], r["seed"]) == ("a", 1, 0.01, 0)
            else r for r in _table()]
    c2 = _analysis(rows).cells.set_index(["label", "size", "lr"])
    assert c2.loc[("a", 1, 0.01), "n_stuck"] == 1


def test_a_minimized_metric_is_stuck_at_or_above_its_threshold():
    # train_loss with 10 classes: m0 = ln 10 = 2.303, margin 0.230: a loss >= 2.072 did not learn
    t = {}
    for s in (1, 2):
        for j, lr in enumerate(LRS):
            t[("a", s, lr)] = [1.0 - 0.1 * j] * 2
    t[("a", 2, 0.08)] = [2.30, 2.10]  # both stuck (2.30: a uniform prediction; 2.10 >= 2.072)
    t[("a", 1, 0.08)] = [2.05, 9.0]  # 2.05: learned a little, not stuck; 9.0 (above m0, clamped to it): stuck
    t[("a", 1, 0.04)] = ["diverged", 0.5]
    a = _analysis(grid_rows(t, metric="train_loss"), metric="train_loss")
    r = a.rows.iloc[0]
    assert r["stuck"] == pytest.approx(3 / 16) and r["diverged"] == pytest.approx(1 / 16)
    c = a.cells.set_index(["size", "lr"])
    assert c.loc[(2, 0.08), "n_stuck"] == 2 and c.loc[(1, 0.08), "n_stuck"] == 1


@pytest.mark.parametrize("metric, classes", [("bleu", None), ("val_acc", None), ("val_loss", None)])
def test_no_task_defined_no_learning_level_leaves_stuck_empty(metric, classes):
    # BLEU (0 is the scale's floor, not what a collapsed model scores), accuracy without a class count
    # (0 is not chance), a loss without one (m0 is the worst run: it would always count one): no count
    t = {("a", s, lr): [0.0 if lr == 0.08 else 20.0 + j, 21.0] for s in (1, 2) for j, lr in enumerate(LRS)}
    if metric != "bleu":
        t = {k: [v / 100 if metric == "val_acc" else 5 - v / 10 for v in vals] for k, vals in t.items()}
    a = _analysis(grid_rows(t, metric=metric), metric=metric, classes=classes)
    assert a.rows["stuck"].isna().all() and a.cells["n_stuck"].isna().all()
    assert a.settings.stuck_na
    headers, text, keys = display_table(a)
    assert text[0][headers.index("stuck")] == "–" and keys[0][headers.index("stuck")] is None
    ch, ct, _ = cells_table(a)
    assert {row[ch.index("stuck")] for row in ct} == {"–"}
    assert dict(settings_items(a))["stuck"].startswith("not counted")
    # an m0 given explicitly is a declared no-learning level: counted again
    b = _analysis(grid_rows(t, metric=metric), metric=metric, classes=classes, m0=t[("a", 1, 0.08)][0])
    assert b.rows["stuck"].iloc[0] == pytest.approx(2 / 16)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    d = make_run(tmp_path_factory.mktemp("runs"), _table())  # digits: 10 classes
    return d, build_leaderboard([d], formats=("md", "csv", "tex", "html"), n_boot=20)


def test_every_format_has_stuck_beside_diverged(built):
    d, paths = built
    df = pd.read_csv(paths["csv"]).set_index("label")
    cols = list(df.columns)
    assert cols[cols.index("diverged") + 1] == "stuck"
    assert df.loc["a", "stuck"] == pytest.approx(3 / 24) and df.loc["b", "stuck"] == 0
    for c in ("diverged", "pruned", "m0", "margin"):  # extended, nothing renamed
        assert c in cols

    md = paths["md"].read_text().splitlines()
    head = next(line for line in md if line.startswith("| rank"))
    hs = [h.strip() for h in head.strip("|").split("|")]
    assert hs[hs.index("diverged") + 1] == "stuck"
    row_a = next(line for line in md if line.startswith("| ") and "| a |" in line)
    vals = [v.strip() for v in row_a.strip("|").split("|")]
    assert vals[hs.index("stuck")] == "12%" and vals[hs.index("diverged")] == "8%"  # 3/24, 2/24

    page = paths["html"].read_text()
    assert '<th data-col="diverged" data-type="num" scope="col">diverged</th>\n<th data-col="stuck"' in page
    assert f'data-value="{3 / 24!r}" class="num">12%</td>' in page
    assert '<th scope="row">stuck</th>' in page  # the settings say what counts

    cells = pd.read_csv(paths["cells_csv"]).set_index(["label", "model.branches", "train.lr"])
    assert cells.loc[("a", 2, 0.08), "n_stuck"] == 2 and int(cells["n_stuck"].sum()) == 3
    # LaTeX keeps only the verdict and its main numbers, without diverged; stuck follows it
    tex = paths["tex"].read_text()
    header = next(line for line in tex.splitlines() if line.startswith("rank"))
    assert "diverged" not in header and "stuck" not in header


def _map_table():
    """Row "a" at one size: lr 0.01 healthy, 0.02 stuck (2 of 3 at chance), 0.04 diverged (every run)."""
    t = {("a", 1, 0.01): [0.8, 0.81, 0.79], ("a", 1, 0.02): [0.1, 0.11, 0.8],
         ("a", 1, 0.04): ["diverged"] * 3, ("a", 2, 0.01): [0.8] * 3, ("a", 2, 0.02): [0.8] * 3,
         ("a", 2, 0.04): [0.7] * 3}
    return grid_rows(t)


def _title(fig):
    return " ".join(fig._suptitle.get_text().split())  # unwrapped


def _stuck_cells(fig):
    """(x, y) centres of the hatched stuck patches of every panel."""
    out = []
    for ax in fig.axes:
        for p in ax.patches:
            if p.get_gid() == "stuck":
                out.append((p.get_x() + p.get_width() / 2, p.get_y() + p.get_height() / 2))
                assert p.get_hatch()
    return out


@pytest.mark.parametrize("color_by", [None, "diverged_why"])
def test_divergence_map_marks_a_stuck_cell_apart_from_diverged_and_healthy(color_by):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from nas_stab.results import plots

    rows = _map_table()
    for r in rows:
        r["diverged_why"] = "loss_spike" if r["status"] == "diverged" else ""
    a = _analysis(rows)
    fig = plots.divergence_figure(a, color_by, why=[r["diverged_why"] for r in rows] if color_by else None)
    # sizes 1, 2 are rows 0, 1; lrs 0.01, 0.02, 0.04 columns 0, 1, 2: only (lr 0.02, size 1) is hatched,
    # not the diverged cell (0.04, 1) nor the healthy ones
    assert _stuck_cells(fig) == [(1.0, 0.0)]
    legend = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
    assert any(t.startswith("hatched: some run stuck (completed without learning)") for t in legend)
    assert "hatched: some run stuck" in _title(fig)
    plt.close(fig)


def test_divergence_map_without_stuck_runs_or_without_a_level_marks_nothing():
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from nas_stab.results import plots

    rows = [r for r in _map_table() if r["train.lr"] != 0.02]
    fig = plots.divergence_figure(_analysis(rows))
    assert _stuck_cells(fig) == [] and not fig.legends
    plt.close(fig)
    fig = plots.divergence_figure(_analysis(_map_table(), classes=None))  # accuracy, no class count: undefined
    assert _stuck_cells(fig) == [] and "stuck runs not marked" in _title(fig)
    plt.close(fig)
