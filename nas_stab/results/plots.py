"""Leaderboard figures (matplotlib, Agg backend, PNG bytes).

- `transfer_plot`: the metric against log2(lr), one line per size, one panel
  per row label (the muP style); error bars are the standard deviation over
  seeds, cut at the metric's range (accuracy in [0, 1], BLEU in [0, 100]); a cell where any run diverged is marked with a red cross, and each
  size's fitted optimum (the quadratic refinement, at its fitted value) with a
  star and a horizontal bar for its bootstrap interval (none for a size where
  no lr trains: it has no optimum); a hollow star marks a censored optimum. All panels share one x and one y range; with a
  single learning rate the x range is one octave either side of it, the sizes
  are drawn side by side and each point is labelled with its value.
- `optimum_plot`: the transfer plot: the fitted optimum log2(lr) against
  log2(size), one line per row label, the bootstrap interval as a band, the
  least-squares slope in the legend; censored optima drawn hollow.
- `fwd_norm_plot`: the forward RMS norm per block at initialization (history
  step 0, columns ``fwd_norm.<i>``), one line per size, one panel per row label,
  averaged over the runs read.
- `divergence_plot`: the fraction of runs that diverged, size x learning rate,
  one panel per row label; without a transfer axis one map, row label x
  learning rate. The figure grows with the grid, tick labels are thinned to
  fit, and cells carry their percentage only when it fits.

Panel titles name the row by its values, with the keys shortened to their last
dotted part (``skip=rskip_ln, skip_lambda=2``; the full keys are in the figure
title) and wrapped to the panel's width. Figures use matplotlib's constrained
layout, so no title, label or legend is cut off.

Each ``*_plot`` returns PNG bytes, or None when there is nothing to draw; the
matching ``*_figure`` returns the matplotlib Figure (for tests and notebooks).
"""
from __future__ import annotations

import io
import math
import textwrap
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from nas_stab.metrics import value_range
from nas_stab.results.analysis import Analysis
from nas_stab.results.values import fmt_value
from nas_stab.results.reader import history_frame

__all__ = [
    "divergence_figure", "divergence_plot", "fwd_norm_figure", "fwd_norm_plot", "init_fwd_norms", "optimum_figure",
    "optimum_plot", "transfer_figure", "transfer_plot",
]

_MAX_PANELS = 24
_MAX_MAP_ROWS = 100
_COLS = 4
_DPI = 90
_TITLE_PT = 9
_TICK_PT = 7
_CHAR_EM = 0.62  # average glyph width of DejaVu Sans, in em (a little generous)


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _figure(n_panels: int, w: float = 4.2, h: float = 3.2, *, cols: int | None = None, extra_w: float = 0.0,
            extra_h: float = 0.6):
    """A constrained-layout grid of `n_panels` panels of about w x h inches each."""
    plt = _plt()
    cols = max(1, min(cols or _COLS, n_panels))
    rows = math.ceil(n_panels / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols + extra_w, h * rows + extra_h), squeeze=False,
                             layout="constrained")
    for ax in axes.flat[n_panels:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n_panels])


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    _plt().close(fig)
    return buf.getvalue()


def _wrap(text: str, width_in: float, pt: float) -> str:
    """Wrap `text` to lines that fit `width_in` inches at `pt` points (breaking after ", " first)."""
    chars = max(8, int(width_in * 72 / (pt * _CHAR_EM)))
    return _plain("\n".join(textwrap.wrap(text, chars, break_long_words=True, break_on_hyphens=False)) or text)


def _plain(text: str) -> str:
    """User values drawn as written: a `$` would start matplotlib's mathtext (a categorical `$\\foo{x}$`
    once crashed the whole leaderboard there), so it is escaped."""
    return str(text).replace("$", r"\$")


def _short_keys(keys: Sequence[str]) -> list[str]:
    """The last dotted part of each key, unless two keys would then look the same."""
    short = [k.rsplit(".", 1)[-1] for k in keys]
    return short if len(set(short)) == len(short) else list(keys)


def _labels(a: Analysis, limit: int = _MAX_PANELS) -> list[tuple[int, str]]:
    """(label code, panel title) in leaderboard rank order, at most `limit`."""
    st = a.settings
    out = []
    short = _short_keys(st.compare)
    for r in a.rows.head(limit).to_dict("records"):
        if st.compare:
            title = ", ".join(f"{s}={fmt_value(r[k])}" for s, k in zip(short, st.compare))
        else:
            title = str(r["label"])
        out.append((int(r["_k"]), title))
    return out


def _row_keys_line(a: Analysis, limit: int = _MAX_PANELS) -> str:
    """Second line of a figure title: which keys label the rows (and how many are shown)."""
    st = a.settings
    n = len(a.rows)
    line = ("rows: " + ", ".join(st.compare)) if st.compare else "one row"
    if n > limit:
        line += f" (the first {limit} of {n} rows, in leaderboard order)"
    return line


def _suptitle(fig, a: Analysis, first: str, limit: int = _MAX_PANELS, reserve: float = 0.0) -> None:
    width = fig.get_figwidth() - 0.3 - reserve  # reserve: inches the legend takes at the right
    fig.suptitle(_wrap(first, width, 10) + "\n" + _wrap(_row_keys_line(a, limit), width, 8), fontsize=10)


def _size_colors(sizes: Sequence):
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    n = max(1, len(sizes) - 1)
    return {s: cmap(0.9 * i / n) for i, s in enumerate(sizes)}


def _size_name(a: Analysis, value) -> str:
    st = a.settings
    return f"{st.transfer_key.rsplit('.', 1)[-1]}={fmt_value(value)}" if st.transfer_key else "all"


def _size_legend(fig, axes, a: Analysis) -> None:
    """One legend for the figure, outside the panels (only with a transfer axis: else one line per panel)."""
    if not a.settings.transfer_key:
        return
    handles, names = [], []
    for ax in axes:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    if handles:
        fig.legend(handles, names, loc="outside right upper", fontsize=8, title=a.settings.transfer_key,
                   title_fontsize=8)


def _optima(a: Analysis, k: int) -> pd.DataFrame:
    """The per-size optima of row `k` (x_star, x_lo, x_hi, m_star, censored, trains), by size code."""
    if a.sizes is None or a.sizes.empty:
        return pd.DataFrame(columns=["x_star", "x_lo", "x_hi", "m_star", "censored", "trains"])
    return a.sizes[a.sizes["_k"] == k].set_index("_s")


# ---------------------------------------------------------------- transfer


def transfer_figure(a: Analysis):
    """The Figure of `transfer_plot`, or None without cells."""
    cells = a.cells
    if cells.empty:
        return None
    st = a.settings
    labels = _labels(a)
    panel_w, panel_h = 4.2, 3.2
    fig, axes = _figure(len(labels), panel_w, panel_h, extra_w=1.3 if st.transfer_key else 0.0)
    sizes = sorted(cells["_s"].unique())
    colors = _size_colors(sizes)
    size_name = dict(zip(cells["_s"], cells["size"]))

    # one y range for every panel, error bars included (clipped to the values the metric can take)
    bounds = value_range(st.metric)
    mean = cells["mean"].to_numpy(dtype=float)
    err_lo, err_hi = _bars(mean, cells["std"].to_numpy(dtype=float), bounds)
    ok = np.isfinite(mean)
    lo, hi = (float((mean - err_lo)[ok].min()), float((mean + err_hi)[ok].max())) if ok.any() else (0.0, 1.0)
    span = hi - lo or max(abs(hi), 1.0)
    ylim = (lo - 0.06 * span, hi + 0.06 * span)
    # one x range: the learning rates tried; a single learning rate gets an octave either side
    xs = np.log2(np.sort(cells["lr"].unique()))
    single = len(xs) == 1
    if single:
        xlim = (xs[0] - 1.0, xs[0] + 1.0)
        dodge = {s: (i - (len(sizes) - 1) / 2) * min(0.25, 1.2 / max(1, len(sizes))) for i, s in enumerate(sizes)}
    else:
        pad = max(0.25, 0.04 * (xs[-1] - xs[0]))
        xlim = (xs[0] - pad, xs[-1] + pad)
        dodge = {s: 0.0 for s in sizes}
    for ax, (k, title) in zip(axes, labels):
        sub = cells[cells["_k"] == k]
        opt = _optima(a, k)
        for s, grp in sub.groupby("_s", sort=True):
            x = np.log2(grp["lr"].to_numpy()) + dodge[s]
            y = grp["mean"].to_numpy()
            e = np.nan_to_num(grp["std"].to_numpy())
            ax.errorbar(x, y, yerr=np.vstack(_bars(y, e, bounds)), marker="o", ms=4 if single else 3, lw=1.4, capsize=2, color=colors[s],
                        label=_plain(_size_name(a, size_name[s])), alpha=0.85)
            div = grp["n_diverged"].to_numpy() > 0
            if div.any():
                ax.scatter(x[div], y[div], marker="x", s=40, color="red", zorder=5)
            if s in opt.index and bool(opt.loc[s, "trains"]) and np.isfinite(opt.loc[s, "x_star"]):
                xo, yo = float(opt.loc[s, "x_star"]) + dodge[s], float(opt.loc[s, "m_star"])
                lo, hi = float(opt.loc[s, "x_lo"]), float(opt.loc[s, "x_hi"])
                if np.isfinite(lo) and np.isfinite(hi):  # the optimum's bootstrap interval
                    ax.plot([lo + dodge[s], hi + dodge[s]], [yo, yo], color=colors[s], lw=4, alpha=0.45, solid_capstyle="butt", zorder=6)
                hollow = bool(opt.loc[s, "censored"])
                ax.scatter([xo], [yo], marker="*", s=130, facecolor="white" if hollow else colors[s], edgecolor="black",
                           linewidth=0.8, zorder=7)
            if single:
                for xi, yi, ei in zip(x, y, e):
                    text = f"{yi:.4g}" + (f" ± {ei:.2g}" if ei > 0 else "")
                    ax.annotate(text, (xi, yi), xytext=(5, 0), textcoords="offset points", fontsize=_TICK_PT,
                                va="center", ha="left", clip_on=True)
        ax.set_title(_wrap(title, panel_w - 0.4, _TITLE_PT), fontsize=_TITLE_PT)
        ax.set_xlabel("log2(lr)")
        ax.set_ylabel(st.metric)
        ax.set_xlim(*xlim)
        ax.set_ylim(*ylim)
        if single:
            lr0 = float(cells["lr"].iloc[0])
            ax.set_xticks([xs[0]], [f"{xs[0]:.2f}\n(lr {lr0:.3g})"])
        ax.grid(alpha=0.3)
    _size_legend(fig, axes, a)
    head = (f"{st.metric} vs log2(lr).  *: fitted optimum of each size (hollow: censored at the grid's end), "
            f"thick bar: its 90% interval;  x: a run diverged;  error bars: std over seeds")
    _suptitle(fig, a, head, reserve=2.2 if st.transfer_key else 0.0)
    return fig


def optimum_figure(a: Analysis):
    """The Figure of `optimum_plot`, or None without a size axis or without two sizes with an optimum."""
    st = a.settings
    sz = a.sizes
    if not st.transfer_key or sz is None or sz.empty:
        return None
    try:
        u = np.log2(np.array([float(v) for v in sz["size"]], dtype=float))
    except (TypeError, ValueError):
        return None  # sizes that are not numbers have no log2
    sz = sz.assign(u=u)
    labels = [(k, t) for k, t in _labels(a) if np.isfinite(sz.loc[sz["_k"] == k, "x_star"]).sum() >= 2]
    if not labels:
        return None
    plt = _plt()
    n_leg = len(labels)
    fig, ax = plt.subplots(figsize=(7.0, 4.4 + 0.28 * n_leg), layout="constrained")
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    rows = a.rows.set_index("_k")
    for i, (k, title) in enumerate(labels):
        g = sz[(sz["_k"] == k) & np.isfinite(sz["x_star"])].sort_values("u")
        c = cmap(i % 10)
        r = rows.loc[k]
        slope = r["lr_slope"]
        s_ci = f" [{r['lr_slope_lo']:.2f}, {r['lr_slope_hi']:.2f}]" if np.isfinite(r["lr_slope_lo"]) else ""
        name = f"{title}: {r['transfers']}, slope {slope:+.2f}{s_ci} octaves per doubling"
        ax.plot(g["u"], g["x_star"], marker="o", color=c, lw=1.6, label=_wrap(name, 6.5, 8))
        band = np.isfinite(g["x_lo"]) & np.isfinite(g["x_hi"])
        if band.any():
            ax.fill_between(g["u"][band], g["x_lo"][band], g["x_hi"][band], color=c, alpha=0.15, lw=0)
        cen = g["censored"].astype(bool).to_numpy()
        if cen.any():
            ax.scatter(g["u"][cen], g["x_star"][cen], marker="o", s=60, facecolor="white", edgecolor=c, zorder=5, linewidth=1.5)
        if np.isfinite(slope):  # the least-squares line
            uu = g["u"].to_numpy()
            xx = g["x_star"].to_numpy()
            ax.plot(uu, xx.mean() + slope * (uu - uu.mean()), color=c, lw=0.9, ls="--", alpha=0.8)
    lrs = np.log2(np.sort(a.cells["lr"].unique()))
    ax.axhspan(lrs[0] - 0.05, lrs[0], color="0.85", lw=0)
    ax.axhspan(lrs[-1], lrs[-1] + 0.05, color="0.85", lw=0)
    ax.set_ylim(lrs[0] - 0.3, lrs[-1] + 0.3)
    sizes = sorted(set(zip(sz["u"], sz["size"])), key=lambda p: p[0])
    ax.set_xticks([p[0] for p in sizes], [f"{p[0]:.2g}\n({fmt_value(p[1])})" for p in sizes], fontsize=_TICK_PT)
    ax.set_xlabel(f"log2({st.transfer_key})")
    ax.set_ylabel(f"fitted optimum log2({st.lr_key})")
    ax.grid(alpha=0.3)
    fig.legend(loc="outside lower center", fontsize=8, title=_plain(_row_keys_line(a)), title_fontsize=8, ncols=1)
    fig.suptitle(_wrap(f"transfer plot: the fitted optimum lr of {st.metric} against size. Band: 90% interval; "
                       f"dashed: least-squares slope; hollow: censored at the grid's end (grey lines)", 6.6, 10), fontsize=10)
    return fig


def optimum_plot(a: Analysis) -> bytes | None:
    """The fitted optimum log2(lr) against log2(size), one line per row, with its interval band and slope."""
    fig = optimum_figure(a)
    return None if fig is None else _png(fig)


def _bars(mean, std, bounds: tuple[float, float]):
    """(below, above) lengths of mean +- std error bars, cut at the metric's range: an accuracy bar
    does not go above 1 or below 0 (a cell with a diverged seed, counted at 0, has a large std)."""
    std = np.nan_to_num(np.asarray(std, dtype=float))
    mean = np.asarray(mean, dtype=float)
    with np.errstate(invalid="ignore"):
        below = np.clip(np.minimum(std, mean - bounds[0]), 0.0, None)
        above = np.clip(np.minimum(std, bounds[1] - mean), 0.0, None)
    return np.nan_to_num(below), np.nan_to_num(above)


def transfer_plot(a: Analysis) -> bytes | None:
    """Metric vs log2(lr), one line per size, one panel per row label."""
    fig = transfer_figure(a)
    return None if fig is None else _png(fig)


# ---------------------------------------------------------------- divergence


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
    li = {v: i for i, v in enumerate(lrs)}
    lr_text = [f"{v:.3g}" for v in lrs]
    limit = _MAX_PANELS if st.transfer_key else _MAX_MAP_ROWS  # one map holds many more rows than panels
    labels = _labels(a, limit)

    if st.transfer_key:  # one panel per row label: size x lr
        sizes = sorted(cells["_s"].unique())
        size_name = dict(zip(cells["_s"], cells["size"]))
        row_text = [fmt_value(size_name[s]) for s in sizes]
        panels = []
        for k, title in labels:
            grid = np.full((len(sizes), len(lrs)), np.nan)
            wgrid = np.full(grid.shape, -1)
            sub = cells[cells["_k"] == k]
            si = {v: i for i, v in enumerate(sizes)}
            for s, lc, lr, f in zip(sub["_s"], sub["_l"], sub["lr"], sub["frac_diverged"]):
                grid[si[s], li[lr]] = f
                if (k, s, lc) in dominant:
                    wgrid[si[s], li[lr]] = why_names.index(dominant[(k, s, lc)])
            panels.append((title, grid, wgrid))
        ylabel = st.transfer_key
    else:  # no size axis: one map, row label x lr (rank 1 at the top)
        short = _short_keys(st.compare)
        row_text = []
        grid = np.full((len(labels), len(lrs)), np.nan)
        wgrid = np.full(grid.shape, -1)
        for i, (k, _) in enumerate(labels):
            r = a.rows.loc[a.rows["_k"] == k].iloc[0]
            row_text.append(", ".join(fmt_value(r[c]) for c in st.compare) if st.compare else str(r["label"]))
            sub = cells[cells["_k"] == k]
            for s, lc, lr, f in zip(sub["_s"], sub["_l"], sub["lr"], sub["frac_diverged"]):
                grid[i, li[lr]] = f
                if (k, s, lc) in dominant:
                    wgrid[i, li[lr]] = why_names.index(dominant[(k, s, lc)])
        panels = [("", grid[::-1], wgrid[::-1])]
        row_text = row_text[::-1]
        ylabel = ", ".join(short) if st.compare else ""

    n_rows, n_cols = len(row_text), len(lrs)
    cell_w = _clamp(6.0 / n_cols, 0.14, 0.55)
    cell_h = _clamp(6.0 / n_rows, 0.14, 0.42)
    tick_chars = max(len(t) for t in row_text)
    left = 0.45 + min(3.0, tick_chars * _TICK_PT * _CHAR_EM / 72)  # y tick labels and y label
    rotate = n_cols * cell_w < sum(len(t) for t in lr_text) * _TICK_PT * _CHAR_EM / 72 + 0.1 * n_cols
    bottom = 0.55 + (max(len(t) for t in lr_text) * _TICK_PT * _CHAR_EM / 72 * 0.75 if rotate else 0.15)
    panel_w = max(3.0, n_cols * cell_w + left + 0.2)
    title_lines = max((len(_wrap(t, panel_w - 0.2, _TITLE_PT).splitlines()) for t, _, _ in panels if t), default=0)
    panel_h = max(2.2, n_rows * cell_h + bottom + 0.2 + 0.2 * title_lines)
    cols = max(1, min(_COLS, len(panels), int(16.0 // panel_w)))
    # at least 6.5 inches wide, so the figure title fits on one line
    fig, axes = _figure(len(panels), panel_w, panel_h, cols=cols, extra_w=max(1.2, 6.5 - cols * panel_w), extra_h=0.7)

    annotate = cell_w >= 0.28 and cell_h >= 0.17
    x_step = _thin(n_cols, n_cols * cell_w, 0.17 if rotate else max(0.3, max(len(t) for t in lr_text) * 0.07))
    y_step = _thin(n_rows, n_rows * cell_h, 0.15)
    im = None
    why_colors = [_tab10(i) for i in range(len(why_names))] if color_by else []
    for ax, (title, grid, wgrid) in zip(axes, panels):
        if color_by:  # white -> the label's colour with the fraction diverged; light grey: tried, none diverged
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
        else:
            im = ax.imshow(np.ma.masked_invalid(grid), vmin=0, vmax=1, cmap="Reds", aspect="auto", origin="lower",
                           interpolation="nearest")
        xt = list(range(0, n_cols, x_step))
        ax.set_xticks(xt, [lr_text[i] for i in xt], fontsize=_TICK_PT, rotation=60 if rotate else 0,
                      ha="right" if rotate else "center", rotation_mode="anchor" if rotate else "default")
        yt = list(range(0, n_rows, y_step))
        ax.set_yticks(yt, [row_text[i] for i in yt], fontsize=_TICK_PT)
        ax.set_xlabel(st.lr_key, fontsize=8)
        ax.set_ylabel(ylabel, fontsize=8)
        if title:
            ax.set_title(_wrap(title, panel_w - 0.2, _TITLE_PT), fontsize=_TITLE_PT)
        if annotate:
            for (r, c), v in np.ndenumerate(grid):
                if not np.isnan(v):
                    ax.text(c, r, f"{v:.0%}" if v else "0", ha="center", va="center", fontsize=6,
                            color="white" if v > 0.6 else "black")
    if im is not None:
        fig.colorbar(im, ax=axes, shrink=0.8 if len(axes) > 1 or n_rows > 3 else 1.0, label="fraction diverged")
    if color_by and why_names:
        from matplotlib.patches import Patch

        fig.legend(handles=[Patch(color=c, label=n) for n, c in zip(why_names, why_colors)], loc="lower right",
                   fontsize=7, title="diverged_why (most frequent)", title_fontsize=7)
    what = "coloured by why (shade: fraction diverged)" if color_by else "fraction of runs diverged"
    _suptitle(fig, a, f"divergence map: {what} (blank: not tried)", limit)
    return fig


def _tab10(i: int):
    import matplotlib

    return matplotlib.colormaps["tab10"](i % 10)


def divergence_plot(a: Analysis, color_by: str | None = None, why=None) -> bytes | None:
    """Fraction of runs diverged, size x learning rate, one panel per row label
    (row label x learning rate in one map without a transfer axis); with
    `color_by="diverged_why"` each cell coloured by why its runs diverged."""
    fig = divergence_figure(a, color_by, why)
    return None if fig is None else _png(fig)


# ---------------------------------------------------------------- forward norms


def init_fwd_norms(a: Analysis, history_dirs: dict[str, Path], *, per_cell: int = 3) -> pd.DataFrame:
    """Per-block forward RMS norms at step 0, read from at most `per_cell` history files
    per (row label, size). `history_dirs` maps the records' ``_run`` value to its
    ``history/`` directory. Returns long rows (_k, _s, block, norm); unreadable files are skipped."""
    rec = a.records
    if "run_id" not in rec.columns:
        return pd.DataFrame(columns=["_k", "_s", "block", "norm"])
    runs = rec["_run"] if "_run" in rec.columns else pd.Series("", index=rec.index)
    pick = rec.assign(_runkey=runs).dropna(subset=["run_id"]).groupby(["_k", "_s"], sort=True).head(per_cell)
    out = []
    for k, s, run, rid in zip(pick["_k"], pick["_s"], pick["_runkey"], pick["run_id"]):
        hdir = history_dirs.get(run)
        h = None if hdir is None else history_frame(hdir, rid, nrows=50)
        if h is None:
            continue
        cols = [c for c in h.columns if str(c).startswith("fwd_norm.")]
        if not cols or "step" not in h.columns:
            continue
        first = h[pd.to_numeric(h["step"], errors="coerce") == 0]
        if first.empty:
            continue
        for c in cols:
            try:
                block = int(str(c).split(".", 1)[1])
            except ValueError:
                continue
            v = pd.to_numeric(first[c], errors="coerce").iloc[0]
            out.append((k, s, block, float(v)))
    return pd.DataFrame(out, columns=["_k", "_s", "block", "norm"])


def fwd_norm_figure(a: Analysis, norms: pd.DataFrame):
    """The Figure of `fwd_norm_plot`, or None when there is no finite positive norm."""
    if norms.empty:
        return None
    norms = norms[np.isfinite(norms["norm"]) & (norms["norm"] > 0)]
    if norms.empty:
        return None
    st = a.settings
    labels = [(k, t) for k, t in _labels(a) if k in set(norms["_k"])]
    if not labels:
        return None
    from matplotlib.ticker import MaxNLocator

    panel_w = 4.2
    fig, axes = _figure(len(labels), panel_w, 3.2, extra_w=1.3 if st.transfer_key else 0.0)
    mean = norms.groupby(["_k", "_s", "block"], sort=True)["norm"].mean().reset_index()
    sizes = sorted(mean["_s"].unique())
    colors = _size_colors(sizes)
    size_name = dict(zip(a.cells["_s"], a.cells["size"]))
    for ax, (k, title) in zip(axes, labels):
        for s, grp in mean[mean["_k"] == k].groupby("_s", sort=True):
            ax.plot(grp["block"], grp["norm"], marker="o", ms=3, color=colors[s], label=_plain(_size_name(a, size_name.get(s))))
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("block")
        ax.set_ylabel("forward RMS norm at init")
        ax.set_title(_wrap(title, panel_w - 0.4, _TITLE_PT), fontsize=_TITLE_PT)
        ax.grid(alpha=0.3, which="both")
    lo, hi = float(mean["norm"].min()), float(mean["norm"].max())
    for ax in axes:  # one scale for all panels, so the rows compare at a glance
        ax.set_ylim(lo / 1.2, hi * 1.2)
    _size_legend(fig, axes, a)
    _suptitle(fig, a, "forward RMS norm per block at initialization")
    return fig


def fwd_norm_plot(a: Analysis, norms: pd.DataFrame) -> bytes | None:
    """Forward RMS norm per block at init, one line per size, one panel per row label."""
    fig = fwd_norm_figure(a, norms)
    return None if fig is None else _png(fig)
