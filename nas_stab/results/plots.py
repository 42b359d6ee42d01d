"""Leaderboard figures (matplotlib, Agg backend, PNG bytes).

- `transfer_plot`: the metric against log2(lr), one line per size, one panel
  per row label (the muP style); error bars are the standard deviation over
  seeds, cut at the metric's range (accuracy in [0, 1], BLEU in [0, 100]); a cell where any run diverged is marked with a red cross,
  one where a run was pruned with a hollow orange triangle, and each
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
- `loss_curve_plot`: training loss over steps at each size's best learning rate
  (history column ``train_loss``, binned), the median over seeds with a min-max
  band, one line per size, one panel per row label; a cross where a run diverged.

Panel titles name the row by its values, with the keys shortened to their last
dotted part (``skip=rskip_ln, skip_lambda=2``; the full keys are in the figure
title) and wrapped to the panel's width. Figures use matplotlib's constrained
layout, so no title, label or legend is cut off.

Each ``*_plot`` returns PNG bytes, or None when there is nothing to draw; the
matching ``*_figure`` returns the matplotlib Figure (for tests and notebooks).
This module draws the transfer and optimum plots and re-exports the others
(`plot_divergence.py`, `plot_norms.py`, `plot_curves.py`); `_plotbase.py` holds what they share.
"""
from __future__ import annotations

import numpy as np

from nas_stab.analysis.table import Analysis
from nas_stab.analysis.values import fmt_value
from nas_stab.metrics import value_range
from nas_stab.results._plotbase import (
    _TICK_PT,
    _TITLE_PT,
    _figure,
    _labels,
    _optima,
    _plain,
    _plt,
    _png,
    _row_keys_line,
    _size_colors,
    _size_legend,
    _size_name,
    _suptitle,
    _wrap,
)
from nas_stab.results.plot_curves import loss_curve_figure, loss_curve_plot, loss_curves
from nas_stab.results.plot_divergence import divergence_figure, divergence_plot
from nas_stab.results.plot_norms import fwd_norm_figure, fwd_norm_plot, init_fwd_norms

__all__ = [
    "divergence_figure", "divergence_plot", "fwd_norm_figure", "fwd_norm_plot", "init_fwd_norms", "loss_curve_figure",
    "loss_curve_plot", "loss_curves", "optimum_figure",
    "optimum_plot", "transfer_figure", "transfer_plot",
]

# ---------------------------------------------------------------- transfer

PRUNED_MARKER = "v"  # marks a cell where a run was pruned (a hollow orange triangle); diverged is a red x


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
                ax.scatter(x[div], y[div], marker="x", s=40, color="red", zorder=5, gid="diverged")
            pru = grp["n_pruned"].to_numpy() > 0  # a run stopped by the pruner: not diverged, its value where it stopped
            if pru.any():
                ax.scatter(x[pru], y[pru], marker=PRUNED_MARKER, s=46, facecolor="none", edgecolor="darkorange",
                           linewidth=1.3, zorder=5, gid="pruned")
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
        ax.set_xlabel(f"{st.lr_key} (log scale)")
        ax.set_ylabel(st.metric)
        ax.set_xlim(*xlim)
        ax.set_ylim(*ylim)
        if single:
            lr0 = float(cells["lr"].iloc[0])
            ax.set_xticks([xs[0]], [f"{lr0:.3g}"])
        else:
            _lr_ticks(ax.xaxis, *xlim)
        ax.grid(alpha=0.3)
    _size_legend(fig, axes, a)
    head = (f"{st.metric} against the learning rate.  *: each size's fitted optimum (hollow: censored), bar: its "
            f"90% interval; x: diverged; "
            + ("hollow triangle: pruned (where it stopped); " if (cells["n_pruned"] > 0).any() else "")
            + "error bars: std over seeds")
    _suptitle(fig, a, head, reserve=2.2 if st.transfer_key else 0.0)
    return fig


def _lr_ticks(axis, lo: float, hi: float) -> None:
    """Ticks of a log2(lr) axis labelled with learning rates (0.001, not -9.97): at whole octaves, thinned to
    at most 6."""
    first, last = int(np.ceil(lo)), int(np.floor(hi))
    if last < first:
        return
    step = max(1, int(np.ceil((last - first + 1) / 6)))
    ticks = list(range(first, last + 1, step))
    axis.set_ticks(ticks, [f"{2.0 ** t:.2g}" for t in ticks])


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
    import matplotlib  # deferred: loads matplotlib only when this runs

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
    # every band inside the axes (an interval may reach beyond the grid: an unrefined optimum's neighbourhood)
    ends = np.concatenate([lrs, sz["x_lo"].to_numpy(float), sz["x_hi"].to_numpy(float)])
    ends = ends[np.isfinite(ends)]
    ax.set_ylim(ends.min() - 0.3, ends.max() + 0.3)
    _lr_ticks(ax.yaxis, ends.min() - 0.3, ends.max() + 0.3)
    sizes = sorted(set(zip(sz["u"], sz["size"])), key=lambda p: p[0])
    ax.set_xticks([p[0] for p in sizes], [f"{p[0]:.2g}\n({fmt_value(p[1])})" for p in sizes], fontsize=_TICK_PT)
    ax.set_xlabel(f"log2({st.transfer_key})")
    ax.set_ylabel(f"fitted optimum {st.lr_key} (log scale)")
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
