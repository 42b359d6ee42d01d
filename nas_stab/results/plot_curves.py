"""Training-loss curves (history column ``train_loss``): one panel per row label, one line per
size, at each size's best learning rate (the tried lr with the best seed-mean metric; the only
one for a fixed-lr experiment), the median over seeds with a min-max band.

The tau paper's Figure 1 is this figure: training loss against steps for depths 3..100 at a
fixed learning rate. A run that diverged ends its line with a cross at its last finite loss; one
that diverged before its first finite loss (a forward explosion at init) has its cross on the
panel's top edge at the step it diverged. Where some seeds of a cell have stopped, the median
line continues dashed over the seeds still running.
Each run's losses are averaged in at most `points` equal step bins, so that SGD's step-to-step
noise does not hide the trend (the bin is named on the x-axis label).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from nas_stab.analysis.table import Analysis
from nas_stab.results._plotbase import _TITLE_PT, _figure, _labels, _plain, _png, _size_colors, _size_legend, _size_name, _suptitle, _wrap
from nas_stab.store.reader import history_path

COLUMN = "train_loss"


def best_lr_codes(a: Analysis) -> dict[tuple[int, int], int]:
    """(row label, size) -> the lr code of the analysis's best tried lr there (`grid_lr`: the best
    seed-mean metric, ties to the smaller lr)."""
    code = {float(lr): int(lc) for lc, lr in zip(a.cells["_l"], a.cells["lr"])}
    return {(int(k), int(s)): code[float(lr)] for k, s, lr in zip(a.sizes["_k"], a.sizes["_s"], a.sizes["grid_lr"])
            if float(lr) in code}


def loss_curves(a: Analysis, history_dirs: dict[str, Path], *, points: int = 100) -> pd.DataFrame:
    """Long rows (_k, _s, _seed, step, loss, diverged) of the binned training loss of every seed at
    each cell's best lr. `history_dirs` maps the records' ``_run`` value to its ``history/``
    directory; runs without a readable history (or without the column) are skipped."""
    rec = a.records
    cols = ["_k", "_s", "_seed", "step", "loss", "diverged"]
    if "run_id" not in rec.columns or a.cells.empty:
        return pd.DataFrame(columns=cols)
    best = best_lr_codes(a)
    runs = rec["_run"] if "_run" in rec.columns else pd.Series("", index=rec.index)
    keep = [best.get((int(k), int(s))) == int(lc) for k, s, lc in zip(rec["_k"], rec["_s"], rec["_l"])]
    pick = rec.assign(_runkey=runs).loc[keep].dropna(subset=["run_id"])
    dsteps = pd.to_numeric(pick["diverged_step"], errors="coerce") if "diverged_step" in pick.columns else \
        pd.Series(np.nan, index=pick.index)
    out: list[tuple] = []
    for k, s, seed, run, rid, div, dstep in zip(pick["_k"], pick["_s"], pick["_seed"], pick["_runkey"], pick["run_id"],
                                                pick["_div"], dsteps):
        hdir = history_dirs.get(run)
        path = None if hdir is None else history_path(hdir, rid)
        if path is None:
            continue
        try:
            h = pd.read_csv(path, usecols=lambda c: c in ("step", COLUMN))
        except (OSError, ValueError, pd.errors.ParserError):
            continue
        if COLUMN not in h.columns or "step" not in h.columns:
            _no_curve(out, k, s, seed, bool(div), dstep)
            continue
        step = pd.to_numeric(h["step"], errors="coerce").to_numpy(dtype=float)
        loss = pd.to_numeric(h[COLUMN], errors="coerce").to_numpy(dtype=float)
        have = np.isfinite(step) & ~np.isnan(loss)  # rows without a loss are snapshots; inf stays (divergence)
        step, loss = step[have], loss[have]
        finite = np.isfinite(loss)
        last = int(np.flatnonzero(~finite)[0]) if not finite.all() else step.size
        if last == 0:  # no finite loss: diverged at once (an inf first loss is a divergence too)
            first = step[0] if step.size else 0.0
            _no_curve(out, k, s, seed, bool(div) or step.size > 0, dstep if np.isfinite(dstep) else first)
            continue
        step, loss = step[:last], loss[:last]
        edges = np.linspace(step[0], step[-1] + 1, min(points, step.size) + 1)
        idx = np.clip(np.searchsorted(edges, step, side="right") - 1, 0, len(edges) - 2)
        for b in np.unique(idx):
            sel = idx == b
            out.append((k, s, seed, float(step[sel].max()), float(loss[sel].mean()), False))
        if bool(div) or last < int(have.sum()):
            k_, s_, seed_, st, lo, _ = out[-1]
            out[-1] = (k_, s_, seed_, st, lo, True)
    return pd.DataFrame(out, columns=cols)


def _no_curve(out: list, k, s, seed, div: bool, dstep: float) -> None:
    """A run with no finite training loss to draw: diverged before the first one (its cross goes on
    the top edge at the step it diverged), else nothing."""
    if div:
        out.append((k, s, seed, float(dstep) if np.isfinite(dstep) else 0.0, math.nan, True))


def loss_curve_figure(a: Analysis, curves: pd.DataFrame):
    """The Figure of `loss_curve_plot`, or None when there is no positive finite loss to draw."""
    if curves.empty:
        return None
    early = curves[curves["diverged"] & curves["loss"].isna()]  # diverged before any finite loss
    curves = curves[np.isfinite(curves["loss"]) & (curves["loss"] > 0)]
    if curves.empty:
        return None
    labels = [(k, t) for k, t in _labels(a) if k in set(curves["_k"])]
    if not labels:
        return None
    panel_w = 4.2
    fig, axes = _figure(len(labels), panel_w, 3.2, extra_w=1.3 if a.settings.transfer_key else 0.0)
    sizes = sorted(curves["_s"].unique())
    colors = _size_colors(sizes)
    size_name = dict(zip(a.cells["_s"], a.cells["size"]))
    best = best_lr_codes(a)
    lr_of = dict(zip(a.cells["_l"], a.cells["lr"]))
    lo, hi = float(curves["loss"].min()), float(curves["loss"].max())
    partial = False
    for ax, (k, title) in zip(axes, labels):
        lrs = set()
        mine = curves[curves["_k"] == k]
        gone = early[early["_k"] == k]
        for s in sorted(set(mine["_s"]) | set(gone["_s"])):
            grp, c = mine[mine["_s"] == s], colors[s]
            label = _plain(_size_name(a, size_name.get(s)))
            if not grp.empty:
                band = grp.groupby("step", sort=True)["loss"].agg(["median", "min", "max", "size"])
                # seeds whose runs diverged stop early: the median line is over the seeds still running,
                # dashed when it no longer covers every seed of the cell
                n_all = len(set(grp["_seed"]) | set(gone.loc[gone["_s"] == s, "_seed"]))
                full = band["size"] == n_all
                ax.plot(band.index[full], band["median"][full], color=c, lw=1.2, label=label)
                if (~full).any():
                    partial = True
                    ax.plot(band.index[~full], band["median"][~full], color=c, lw=1.0, ls="--",
                            label=None if full.any() else label)
                ax.fill_between(band.index, band["min"], band["max"], color=c, alpha=0.15, lw=0)
                ends = grp[grp["diverged"]]
                if not ends.empty:
                    ax.plot(ends["step"], ends["loss"], "x", color=c, ms=6, mew=1.5)
            top = gone[gone["_s"] == s]
            if not top.empty:  # on the top edge: no finite loss to place them at
                ax.plot(top["step"], np.full(len(top), hi * 1.3), "x", color=c, ms=6, mew=1.5, clip_on=False,
                        label=label if grp.empty else None)
            lc = best.get((int(k), int(s)))
            if lc is not None:
                lrs.add(lr_of.get(lc))
        ax.set_yscale("log")
        ax.set_xlabel("step")
        ax.set_ylabel("training loss (binned)")
        lr_text = ", ".join(f"{v:.3g}" for v in sorted(x for x in lrs if x is not None))
        head = f"{title}\nlr {lr_text}" if len(lrs) == 1 else f"{title}\nbest lr per size"
        ax.set_title(_wrap(head, panel_w - 0.4, _TITLE_PT), fontsize=_TITLE_PT)
        ax.grid(alpha=0.3, which="both")
    for ax in axes:  # one scale for all panels
        ax.set_ylim(lo / 1.3, hi * 1.3)
    _size_legend(fig, axes, a)
    what = "training loss over steps (median over seeds, band min-max; x: diverged, on the top edge before any loss"
    _suptitle(fig, a, what + ("; dashed: median of the seeds still running)" if partial else ")"))
    return fig


def loss_curve_plot(a: Analysis, curves: pd.DataFrame) -> bytes | None:
    """Training loss over steps at each size's best lr, one line per size, one panel per row label."""
    fig = loss_curve_figure(a, curves)
    return None if fig is None else _png(fig)
