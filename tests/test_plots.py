"""Leaderboard figures: structural facts measured on the drawn matplotlib figures.

No pixel comparison: each test draws a figure from a hand-made analysis and
checks what a reader would check -- titles inside the figure and not on top of
each other, a figure that grows with its grid, tick labels that do not overlap,
a sensible x range for a single learning rate, no "best lr" star for a size
where nothing trained.
"""
from __future__ import annotations

import itertools
import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent / "data"))
from lb_fixtures import grid_rows

from nas_stab.analysis.table import analyze
from nas_stab.results import plots

matplotlib = pytest.importorskip("matplotlib")


def _grid(labels=("sum", "stam"), sizes=(1, 2, 4), lrs=(0.1, 0.2, 0.4), dead=()):
    """{(label, size, lr): two seeds}; (label, size) pairs in `dead` diverge at every lr."""
    t = {}
    for i, lab in enumerate(labels):
        for s in sizes:
            for j, lr in enumerate(lrs):
                v = 0.5 + 0.1 * math.sin(i + (s or 0) + j)
                t[(lab, s, lr)] = ["diverged", "diverged"] if (lab, s) in dead else [v, v - 0.02]
    return t


def _analysis(t, *, transfer="model.branches", compare=("model.aggregation",), extra=None):
    df = pd.DataFrame(grid_rows(t))
    for k, v in (extra or {}).items():
        df[k] = v
    return analyze(df, transfer=transfer, compare=list(compare), metric="val_acc", n_boot=20)


def _drawn(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _close(fig):
    import matplotlib.pyplot as plt

    plt.close(fig)


def _inside(bb, fig_bb, tol=1.0):
    return bb.x0 >= fig_bb.x0 - tol and bb.y0 >= fig_bb.y0 - tol and bb.x1 <= fig_bb.x1 + tol and bb.y1 <= fig_bb.y1 + tol


def _overlap(a, b, tol=0.5):
    return a.x0 < b.x1 - tol and b.x0 < a.x1 - tol and a.y0 < b.y1 - tol and b.y0 < a.y1 - tol


def _shown(labels, lim, i):
    """Tick labels inside the axis limits (matplotlib also lists the ones it will not draw)."""
    lo, hi = sorted(lim)
    return [t for t in labels if lo - 1e-9 <= t.get_position()[i] <= hi + 1e-9]


def _long_rows():
    """15 rows labelled by three keys (like skip-lambda): titles that clipped before."""
    labels = [f"{sk}|{lam}|{nm}" for sk, lam, nm in itertools.product(("xskip_ln", "rskip_ln", "xskip"), (1, 2, 3), ("bn", "ln"))][:15]
    t = _grid(labels=labels, sizes=(None,), lrs=(0.01, 0.03, 0.1, 0.3))
    df = pd.DataFrame(grid_rows({(lab, None, lr): v for (lab, _, lr), v in t.items()}))
    parts = df["model.aggregation"].str.split("|", expand=True)
    df["model.skip"], df["model.skip_lambda"], df["model.skip_norm"] = parts[0], parts[1].astype(int), parts[2]
    df = df.drop(columns="model.aggregation")
    return analyze(df, compare=["model.skip", "model.skip_lambda", "model.skip_norm"], metric="val_acc", n_boot=20)


@pytest.mark.parametrize("kind", ["transfer", "divergence", "fwd_norm"])
def test_titles_inside_the_figure_and_apart(kind):
    a = _long_rows()
    if kind == "transfer":
        fig = plots.transfer_figure(a)
    elif kind == "divergence":
        fig = plots.divergence_figure(a)
    else:
        norms = pd.DataFrame([(k, 0, b, 1.0 + b) for k in a.rows["_k"] for b in range(4)], columns=["_k", "_s", "block", "norm"])
        fig = plots.fwd_norm_figure(a, norms)
    r = _drawn(fig)
    fig_bb = fig.bbox
    texts = [fig._suptitle] + [ax.title for ax in fig.axes if ax.get_visible() and ax.get_title()]
    boxes = [t.get_window_extent(r) for t in texts]
    for t, bb in zip(texts, boxes):
        assert _inside(bb, fig_bb), (kind, t.get_text(), bb, fig_bb)
    for (t1, b1), (t2, b2) in itertools.combinations(zip(texts, boxes), 2):
        assert not _overlap(b1, b2), (kind, t1.get_text(), t2.get_text())
    # every tick label and axis label is inside the figure too
    for ax in fig.axes:
        if not ax.get_visible():
            continue
        for lab in [*_shown(ax.get_xticklabels(), ax.get_xlim(), 0), *_shown(ax.get_yticklabels(), ax.get_ylim(), 1),
                    ax.xaxis.label, ax.yaxis.label]:
            if lab.get_text():
                assert _inside(lab.get_window_extent(r), fig_bb), (kind, lab.get_text())
    if kind != "divergence":  # panel titles name the row by all three keys (shortened)
        assert any("skip=" in t.get_text() and "skip_lambda=" in t.get_text() and "skip_norm=" in t.get_text() for t in texts)
    assert "model.skip, model.skip_lambda, model.skip_norm" in fig._suptitle.get_text().replace("\n", " ")
    _close(fig)


def test_divergence_map_grows_with_the_grid():
    small = plots.divergence_figure(_analysis(_grid(sizes=(1, 2), lrs=(0.1, 0.2, 0.4))))
    tall = plots.divergence_figure(_analysis(_grid(sizes=tuple(2**i for i in range(14)), lrs=(0.1, 0.2, 0.4))))
    wide = plots.divergence_figure(_analysis(_grid(sizes=(1, 2), lrs=tuple(np.logspace(-4, 0, 16)))))
    w0, h0 = small.get_size_inches()
    assert tall.get_size_inches()[1] > h0 + 2  # 14 sizes: each panel is taller
    assert wide.get_size_inches()[0] > w0 + 2 or wide.get_size_inches()[1] > h0  # 16 lrs: wider panels (or wrapped)
    for f in (small, tall, wide):
        _close(f)


def test_divergence_ticks_readable_and_cells_annotated_only_when_they_fit():
    few = plots.divergence_figure(_analysis(_grid(sizes=(1, 2), lrs=(0.1, 0.2, 0.4), dead=(("sum", 2),))))
    many = plots.divergence_figure(_analysis(_grid(sizes=tuple(range(1, 41)), lrs=tuple(np.logspace(-5, 0, 40)))))
    for fig in (few, many):
        r = _drawn(fig)
        for ax in fig.axes[:-1]:  # the last axes is the colour bar
            if not ax.get_visible():
                continue
            for labels in (ax.get_xticklabels(), ax.get_yticklabels()):
                boxes = [t.get_window_extent(r) for t in labels if t.get_text() and t.get_visible()]
                assert boxes
                for b1, b2 in itertools.combinations(boxes, 2):
                    assert not _overlap(b1, b2)
    cell_texts = lambda fig: [t for ax in fig.axes for t in ax.texts]  # noqa: E731
    assert {t.get_text() for t in cell_texts(few)} >= {"0", "100%"}  # 2 x 3 cells: each says its fraction
    assert not cell_texts(many)  # 40 x 40 cells: no room for text
    # ticks are thinned, not dropped: the first learning rate is still labelled
    xt = [t.get_text() for t in many.axes[0].get_xticklabels()]
    assert xt[0] == "1e-05" and len(xt) < 40
    for f in (few, many):
        _close(f)


def test_single_learning_rate_panel_has_a_sensible_x_range():
    lr = 0.002
    t = {(lab, None, lr): [20.0 + i, 21.5 + i] for i, lab in enumerate(("plain", "rskip"))}
    a = analyze(pd.DataFrame(grid_rows(t, metric="bleu")), compare=["model.aggregation"], metric="bleu", n_boot=20)
    fig = plots.transfer_figure(a)
    _drawn(fig)
    x0 = math.log2(lr)
    for ax in fig.axes:
        assert ax.get_xlim() == pytest.approx((x0 - 1, x0 + 1))  # one octave either side, not a zoom to +-0.05
        assert list(ax.get_xticks()) == pytest.approx([x0])
        assert ax.get_xticklabels()[0].get_text() == "0.002" and "log scale" in ax.get_xlabel()  # lr values, not log2
        lo, hi = ax.get_ylim()
        std = math.sqrt(2 * 0.75**2)  # means 20.75 and 21.75, std 1.06 over the two seeds
        assert lo < 20.75 - std and hi > 21.75 + std  # the error bars are inside the plot
        assert any("±" in t.get_text() for t in ax.texts)  # the point carries its value
    _close(fig)


def test_without_transfer_axis():
    t = {(lab, None, lr): [0.5 + lr, 0.49 + lr] for lab in ("a", "b", "c") for lr in (0.1, 0.2, 0.4)}
    t[("c", None, 0.4)] = ["diverged", 0.8]
    a = analyze(pd.DataFrame(grid_rows(t)), compare=["model.aggregation"], metric="val_acc", n_boot=20)
    tr = plots.transfer_figure(a)
    assert not tr.legends and all(ax.get_legend() is None for ax in tr.axes)  # no legend with the one entry "all"
    assert len([ax for ax in tr.axes if ax.get_visible()]) == 3  # one panel per row label
    dv = plots.divergence_figure(a)
    maps = [ax for ax in dv.axes if ax.images]
    assert len(maps) == 1  # one map: row label x lr, not three one-row panels with a "null" size
    ax = maps[0]
    _drawn(dv)
    assert [t.get_text() for t in ax.get_yticklabels()] == list(a.rows["label"])[::-1]  # rank 1 at the top
    assert ax.get_ylabel() == "aggregation" and ax.get_xlabel() == "train.lr"
    assert "null" not in {t.get_text() for t in ax.get_yticklabels()}
    for f in (tr, dv):
        _close(f)


def test_no_star_for_a_size_where_nothing_trained():
    a = _analysis(_grid(labels=("sum",), sizes=(1, 2, 4), dead=(("sum", 4),)))
    fig = plots.transfer_figure(a)
    stars = [c for c in fig.axes[0].collections if hasattr(c, "get_sizes") and list(c.get_sizes()) == [130]]
    assert len(stars) == 2  # sizes 1 and 2; size 4 diverged everywhere: it has no best lr
    _close(fig)


def test_error_bars_stay_within_the_metric_range():
    """An accuracy's mean +- std bar is cut at 0 and 1: a cell with one seed at 0.99 and one at 0.6
    (std 0.28) must not reach 1.07, a cell with a diverged seed (counted at 0) must not go below 0."""
    t = {("avg", 1, 0.1): [0.99, 0.6], ("avg", 1, 0.2): [0.9, "diverged"], ("avg", 2, 0.1): [0.5, 0.48],
         ("avg", 2, 0.2): [0.52, 0.5]}
    a = _analysis(t)
    fig = plots.transfer_figure(a)
    ax = fig.axes[0]
    ends = [y for c in ax.containers for seg in c.lines[2][0].get_segments() for y in (seg[0][1], seg[1][1])]
    assert ends and min(ends) >= 0.0 and max(ends) <= 1.0
    assert max(ends) == pytest.approx(1.0) and min(ends) == pytest.approx(0.0)  # both cells were cut
    inner = [seg for c in ax.containers for seg in c.lines[2][0].get_segments() if seg[0][0] > math.log2(0.15)]
    lo, hi = ax.get_ylim()
    assert hi <= 1.1 and lo >= -0.1  # the shared y range follows the cut bars
    assert inner  # the lr-0.2 cells have bars too
    _close(fig)


def test_pngs_still_written():
    a = _analysis(_grid())
    for png in (plots.transfer_plot(a), plots.divergence_plot(a)):
        assert png.startswith(b"\x89PNG")
    empty = pd.DataFrame(columns=["_k", "_s", "block", "norm"])
    assert plots.fwd_norm_plot(a, empty) is None


def test_lr_axes_are_labelled_with_learning_rates():
    """The transfer plots' lr axes carry learning rates (0.0039), not log2 values (-8), at most 6 ticks."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nas_stab.results.plots import _lr_ticks

    fig, ax = plt.subplots()
    ax.set_xlim(-12.3, -6.2)
    _lr_ticks(ax.xaxis, -12.3, -6.2)
    labels = [t.get_text() for t in ax.get_xticklabels()]
    assert 2 <= len(labels) <= 6 and all(float(s) > 0 for s in labels)
    assert [float(s) for s in labels] == sorted(float(s) for s in labels)
    plt.close(fig)
