"""The divergence map: the fraction of runs that diverged, size x learning rate, one panel per row
label (row label x learning rate in one map without a transfer axis), optionally coloured by why
the runs diverged. A cell holding a run that is stuck (it completed with a finite metric at or
below the no-learning level, the leaderboard's `stuck` column) is hatched on top of its shade, so it
reads apart from both a diverged cell and a healthy one. The figure grows with the grid, tick
labels are thinned to fit, and cells carry their percentages only when they fit."""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np
import pandas as pd

from nas_stab.analysis.table import Analysis
from nas_stab.analysis.values import fmt_value
from nas_stab.results._plotbase import _CHAR_EM, _COLS, _MAX_MAP_ROWS, _MAX_PANELS, _TICK_PT, _TITLE_PT, _figure, _labels, _png, _short_keys, _suptitle, _wrap

STUCK_HATCH = "////"
STUCK_COLOR = "#1a1a1a"  # the hatch: dark on the white-to-red shade and on the diverged_why colours
STUCK_LABEL = "hatched: some run stuck (completed without learning)"
STUCK_LABEL_NUMBERS = STUCK_LABEL + "; numbers: % diverged over % stuck"


def _clamp(x: float, lo: float, hi: float) -> float:
    return max(lo, min(hi, x))


def _thin(n: int, room_in: float, per_tick_in: float) -> int:
    """Tick step so that n ticks fit in room_in inches at per_tick_in inches each."""
    fit = max(1, int(room_in / per_tick_in))
    return max(1, math.ceil(n / fit))


def _dominant_why(a: Analysis, why) -> dict:
    """{(row code, size code, lr code): the most frequent diverged_why label of the cell's diverged runs}.
    `why`: one label per record of `a.records` (in order), or None to use its `diverged_why` column."""
    rec = a.records
    if why is None:
        if "diverged_why" not in rec.columns:
            return {}
        why = rec["diverged_why"]
    labels = pd.Series(list(why), index=rec.index).fillna("").astype(str).str.strip()
    div = rec["_div"].astype(bool) & (labels != "") & (labels != "nan")
    out = {}
    for key, grp in labels[div].groupby([rec.loc[div, "_k"], rec.loc[div, "_s"], rec.loc[div, "_l"]]):
        counts = grp.value_counts()
        out[key] = sorted(counts.index[counts == counts.max()])[0]  # ties: alphabetical, deterministic
    return out


def divergence_figure(a: Analysis, color_by: str | None = None, why=None):
    """The Figure of `divergence_plot`, or None without cells.

    `color_by="diverged_why"`: each cell with a diverged run is coloured by the
    most frequent `diverged_why` label of its diverged runs (the shade still
    the fraction diverged), with a legend of the labels; the labels come from
    `why` (one per record of `a.records`) or the records' `diverged_why` column.
    Either way a cell with a stuck run (``a.cells["n_stuck"] > 0``) is hatched (patches with gid
    ``"stuck"``), with a legend entry; the title says whether stuck runs are marked.
    """
    cells = a.cells
    if cells.empty:
        return None
    if color_by not in (None, "diverged_why"):
        raise ValueError(f"divergence map: color_by must be None or 'diverged_why', not {color_by!r}")
    dominant = _dominant_why(a, why) if color_by else {}
    why_names = sorted(set(dominant.values()))
    st = a.settings
    lrs = np.sort(cells["lr"].unique())
    # frac_stuck: NaN everywhere when the metric has no task-defined no-learning level (nothing marked)
    cells = cells if "frac_stuck" in cells.columns else cells.assign(frac_stuck=np.nan)
    lr_text = [f"{v:.3g}" for v in lrs]
    limit = _MAX_PANELS if st.transfer_key else _MAX_MAP_ROWS  # one map holds many more rows than panels
    labels = _labels(a, limit)
    if st.transfer_key:
        panels, row_text, ylabel = _size_panels(cells, lrs, labels, dominant, why_names, st.transfer_key)
    else:
        panels, row_text, ylabel = _label_map(a, cells, lrs, labels, dominant, why_names)
    lay = _layout(panels, row_text, lr_text)
    # at least 6.5 inches wide, so the figure title fits on one line
    fig, axes = _figure(len(panels), lay.panel_w, lay.panel_h, cols=lay.cols, extra_w=max(1.2, 6.5 - lay.cols * lay.panel_w), extra_h=0.7)
    why_colors = [_tab10(i) for i in range(len(why_names))] if color_by else []
    im, any_stuck = None, False
    for ax, (title, grid, wgrid, sgrid) in zip(axes, panels):
        shaded = _shade(ax, grid, wgrid, why_colors if color_by else None)
        im = shaded if shaded is not None else im
        _axis_text(ax, lay, row_text, lr_text, st.lr_key, ylabel, title)
        any_stuck = _hatch_stuck(ax, sgrid) or any_stuck
        if lay.annotate:
            _annotate(ax, grid, sgrid, lay.cell_h)
    if im is not None:
        fig.colorbar(im, ax=axes, shrink=0.8 if len(axes) > 1 or lay.n_rows > 3 else 1.0, label="fraction diverged")
    _legend(fig, why_names, why_colors, any_stuck, lay.annotate)
    what = "coloured by why (shade: fraction diverged)" if color_by else "fraction of runs diverged"
    stuck = ("stuck runs not marked (no task-defined no-learning level)" if st.stuck_na else
             STUCK_LABEL)  # "at or below m0 + margin" would be wrong for a loss
    _suptitle(fig, a, f"divergence map: {what}; {stuck} (blank: not tried)", limit)
    return fig


def _size_panels(cells: pd.DataFrame, lrs: np.ndarray, labels: list, dominant: dict, why_names: list, transfer_key: str):
    """One panel per row label, size x lr: (title, fraction diverged, diverged_why index (-1: none), fraction stuck)
    per panel, the size tick labels and the y label."""
    li = {v: i for i, v in enumerate(lrs)}
    sizes = sorted(cells["_s"].unique())
    size_name = dict(zip(cells["_s"], cells["size"]))
    row_text = [fmt_value(size_name[s]) for s in sizes]
    panels = []
    for k, title in labels:
        grid = np.full((len(sizes), len(lrs)), np.nan)
        wgrid = np.full(grid.shape, -1)
        sgrid = np.full(grid.shape, np.nan)
        sub = cells[cells["_k"] == k]
        si = {v: i for i, v in enumerate(sizes)}
        for s, lc, lr, f, fs in zip(sub["_s"], sub["_l"], sub["lr"], sub["frac_diverged"], sub["frac_stuck"]):
            grid[si[s], li[lr]] = f
            sgrid[si[s], li[lr]] = fs
            if (k, s, lc) in dominant:
                wgrid[si[s], li[lr]] = why_names.index(dominant[(k, s, lc)])
        panels.append((title, grid, wgrid, sgrid))
    return panels, row_text, transfer_key


def _label_map(a: Analysis, cells: pd.DataFrame, lrs: np.ndarray, labels: list, dominant: dict, why_names: list):
    """Without a size axis, one map of row label x lr (rank 1 at the top), as `_size_panels` returns it."""
    st = a.settings
    li = {v: i for i, v in enumerate(lrs)}
    short = _short_keys(st.compare)
    row_text = []
    grid = np.full((len(labels), len(lrs)), np.nan)
    wgrid = np.full(grid.shape, -1)
    sgrid = np.full(grid.shape, np.nan)
    for i, (k, _) in enumerate(labels):
        r = a.rows.loc[a.rows["_k"] == k].iloc[0]
        row_text.append(", ".join(fmt_value(r[c]) for c in st.compare) if st.compare else str(r["label"]))
        sub = cells[cells["_k"] == k]
        for s, lc, lr, f, fs in zip(sub["_s"], sub["_l"], sub["lr"], sub["frac_diverged"], sub["frac_stuck"]):
            grid[i, li[lr]] = f
            sgrid[i, li[lr]] = fs
            if (k, s, lc) in dominant:
                wgrid[i, li[lr]] = why_names.index(dominant[(k, s, lc)])
    panels = [("", grid[::-1], wgrid[::-1], sgrid[::-1])]
    return panels, row_text[::-1], ", ".join(short) if st.compare else ""


class _Layout(NamedTuple):
    """The map's geometry in inches: cell and panel sizes, panel columns, tick thinning, rotated lr labels,
    and whether the cells carry their percentages."""

    n_rows: int
    n_cols: int
    cell_w: float
    cell_h: float
    rotate: bool
    panel_w: float
    panel_h: float
    cols: int
    annotate: bool
    x_step: int
    y_step: int


def _layout(panels: list, row_text: list[str], lr_text: list[str]) -> _Layout:
    """Size the cells to the grid and the panels to the cells, tick labels and titles."""
    n_rows, n_cols = len(row_text), len(lr_text)
    cell_w = _clamp(6.0 / n_cols, 0.14, 0.55)
    cell_h = _clamp(6.0 / n_rows, 0.14, 0.42)
    tick_chars = max(len(t) for t in row_text)
    left = 0.45 + min(3.0, tick_chars * _TICK_PT * _CHAR_EM / 72)  # y tick labels and y label
    rotate = n_cols * cell_w < sum(len(t) for t in lr_text) * _TICK_PT * _CHAR_EM / 72 + 0.1 * n_cols
    bottom = 0.55 + (max(len(t) for t in lr_text) * _TICK_PT * _CHAR_EM / 72 * 0.75 if rotate else 0.15)
    panel_w = max(3.0, n_cols * cell_w + left + 0.2)
    title_lines = max((len(_wrap(t, panel_w - 0.2, _TITLE_PT).splitlines()) for t, *_ in panels if t), default=0)
    panel_h = max(2.2, n_rows * cell_h + bottom + 0.2 + 0.2 * title_lines)
    cols = max(1, min(_COLS, len(panels), int(16.0 // panel_w)))
    annotate = cell_w >= 0.28 and cell_h >= 0.17
    x_step = _thin(n_cols, n_cols * cell_w, 0.17 if rotate else max(0.3, max(len(t) for t in lr_text) * 0.07))
    y_step = _thin(n_rows, n_rows * cell_h, 0.15)
    return _Layout(n_rows=n_rows, n_cols=n_cols, cell_w=cell_w, cell_h=cell_h, rotate=rotate, panel_w=panel_w, panel_h=panel_h,
                   cols=cols, annotate=annotate, x_step=x_step, y_step=y_step)


def _shade(ax, grid: np.ndarray, wgrid: np.ndarray, why_colors: list | None):
    """Draw the fraction diverged: white to red (returns the image, for the colour bar), or with `why_colors`
    white to the colour of the cell's diverged_why label (light grey: tried, none diverged; returns None)."""
    if why_colors is None:
        return ax.imshow(np.ma.masked_invalid(grid), vmin=0, vmax=1, cmap="Reds", aspect="auto", origin="lower",
                         interpolation="nearest")
    rgba = np.zeros(grid.shape + (4,))
    for (r, c), v in np.ndenumerate(grid):
        if np.isnan(v):
            continue
        if wgrid[r, c] >= 0:
            base = np.array(why_colors[wgrid[r, c]][:3])
            shade = 0.35 + 0.65 * v
            rgba[r, c] = (*(1 - shade + shade * base), 1.0)
        else:
            rgba[r, c] = (0.93, 0.93, 0.93, 1.0)
    ax.imshow(rgba, aspect="auto", origin="lower", interpolation="nearest")
    return None


def _axis_text(ax, lay: _Layout, row_text: list[str], lr_text: list[str], xlabel: str, ylabel: str, title: str) -> None:
    """The thinned tick labels, the axis labels and the panel's title."""
    xt = list(range(0, lay.n_cols, lay.x_step))
    ax.set_xticks(xt, [lr_text[i] for i in xt], fontsize=_TICK_PT, rotation=60 if lay.rotate else 0,
                  ha="right" if lay.rotate else "center", rotation_mode="anchor" if lay.rotate else "default")
    yt = list(range(0, lay.n_rows, lay.y_step))
    ax.set_yticks(yt, [row_text[i] for i in yt], fontsize=_TICK_PT)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    if title:
        ax.set_title(_wrap(title, lay.panel_w - 0.2, _TITLE_PT), fontsize=_TITLE_PT)


def _hatch_stuck(ax, sgrid: np.ndarray) -> bool:
    """Hatch the cells holding a stuck run; whether there was one."""
    from matplotlib.patches import Rectangle  # deferred: loads matplotlib only when this runs

    any_stuck = False
    for (r, c), fs in np.ndenumerate(sgrid):
        if fs > 0:  # (NaN: not tried, or stuck undefined)
            any_stuck = True
            ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, hatch=STUCK_HATCH, edgecolor=STUCK_COLOR,
                                   linewidth=0.8, zorder=2, gid="stuck"))
    return any_stuck


def _annotate(ax, grid: np.ndarray, sgrid: np.ndarray, cell_h: float) -> None:
    """Write each tried cell's percentage diverged (and, under it, stuck) into it."""
    for (r, c), v in np.ndenumerate(grid):
        if not np.isnan(v):
            fs = sgrid[r, c]
            if fs > 0:  # the diverged fraction, and under it the stuck one, on a light box over the hatch
                ax.text(c, r, (f"{v:.0%}" if v else "0") + f"\n{fs:.0%}", ha="center", va="center", fontsize=6 if cell_h >= 0.25 else 5,
                        color="black", zorder=3, bbox={"boxstyle": "square,pad=0.05", "fc": (1, 1, 1, 0.75), "ec": "none"})
            else:
                ax.text(c, r, f"{v:.0%}" if v else "0", ha="center", va="center", fontsize=6,
                        color="white" if v > 0.6 else "black")


def _legend(fig, why_names: list[str], why_colors: list, any_stuck: bool, annotate: bool) -> None:
    """The legend of the diverged_why colours and of the stuck hatch (below the panels when there is a hatch)."""
    from matplotlib.patches import Patch  # deferred: loads matplotlib only when this runs

    label = STUCK_LABEL_NUMBERS if annotate else STUCK_LABEL
    stuck_patch = [Patch(facecolor="white", edgecolor=STUCK_COLOR, hatch=STUCK_HATCH, label=label)] if any_stuck else []
    why_patches = [Patch(color=c, label=n) for n, c in zip(why_names, why_colors)]
    if stuck_patch:  # below the panels (with the colours of diverged_why, when coloured by it)
        handles = why_patches + stuck_patch
        fig.legend(handles=handles, loc="outside lower center", fontsize=7, ncols=min(len(handles), 3),
                   title="diverged_why (most frequent)" if why_patches else None, title_fontsize=7)
    elif why_patches:
        fig.legend(handles=why_patches, loc="lower right", fontsize=7, title="diverged_why (most frequent)", title_fontsize=7)


def _tab10(i: int):
    import matplotlib  # deferred: loads matplotlib only when this runs

    return matplotlib.colormaps["tab10"](i % 10)


def divergence_plot(a: Analysis, color_by: str | None = None, why=None) -> bytes | None:
    """Fraction of runs diverged, size x learning rate, one panel per row label
    (row label x learning rate in one map without a transfer axis), cells holding a stuck run
    hatched; with `color_by="diverged_why"` each cell coloured by why its runs diverged."""
    fig = divergence_figure(a, color_by, why)
    return None if fig is None else _png(fig)
