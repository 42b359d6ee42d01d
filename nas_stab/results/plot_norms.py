"""The forward RMS norm per block at initialization (history step 0, columns ``fwd_norm.<i>``),
one line per size, one panel per row label, averaged over the runs read."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from nas_stab.analysis.table import Analysis
from nas_stab.results._plotbase import _TITLE_PT, _figure, _labels, _plain, _png, _size_colors, _size_legend, _size_name, _suptitle, _wrap
from nas_stab.store.reader import history_frame


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
    from matplotlib.ticker import MaxNLocator  # deferred: loads matplotlib only when this runs

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
