"""Leaderboard figures (matplotlib, Agg backend, PNG bytes).

- `transfer_plot`: the metric against log2(lr), one line per size, one panel
  per row label (the muP style); error bars are the standard deviation over
  seeds; a cell where any run diverged is marked with a red cross, and each
  size's best learning rate with a star.
- `fwd_norm_plot`: the forward RMS norm per block at initialization (history
  step 0, columns ``fwd_norm.<i>``), one line per size, one panel per row label,
  averaged over the runs read.
- `divergence_plot`: size x learning rate map of the fraction of runs that
  diverged, one panel per row label.

Each returns PNG bytes, or None when there is nothing to draw.
"""
from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from nas_stab.results.analysis import Analysis, fmt_value

__all__ = ["divergence_plot", "fwd_norm_plot", "init_fwd_norms", "transfer_plot"]

_MAX_PANELS = 24
_COLS = 4


def _figure(n_panels: int, w: float = 4.2, h: float = 3.2):
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    cols = min(_COLS, n_panels)
    rows = math.ceil(n_panels / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols, h * rows), squeeze=False)
    for ax in axes.flat[n_panels:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n_panels])


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    return buf.getvalue()


def _labels(a: Analysis) -> list[tuple[int, str]]:
    """(label code, text) in leaderboard rank order, at most _MAX_PANELS."""
    return list(zip(a.rows["_k"].tolist(), a.rows["label"].tolist()))[:_MAX_PANELS]


def _title(a: Analysis, label: str) -> str:
    keys = ", ".join(a.settings.compare)
    return f"{keys} = {label}" if keys else label


def _size_colors(sizes: Sequence):
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    n = max(1, len(sizes) - 1)
    return {s: cmap(0.9 * i / n) for i, s in enumerate(sizes)}


def transfer_plot(a: Analysis) -> bytes | None:
    """Metric vs log2(lr), one line per size, one panel per row label."""
    cells = a.cells
    if cells.empty:
        return None
    st = a.settings
    labels = _labels(a)
    fig, axes = _figure(len(labels))
    sizes = sorted(cells["_s"].unique())
    colors = _size_colors(sizes)
    size_name = dict(zip(cells["_s"], cells["size"]))
    finite = cells["mean"][np.isfinite(cells["mean"])]
    lo, hi = (float(finite.min()), float(finite.max())) if len(finite) else (0.0, 1.0)
    pad = 0.05 * (hi - lo or 1.0)
    for ax, (k, label) in zip(axes, labels):
        sub = cells[cells["_k"] == k]
        for s, grp in sub.groupby("_s", sort=True):
            x = np.log2(grp["lr"].to_numpy())
            y = grp["mean"].to_numpy()
            err = np.nan_to_num(grp["std"].to_numpy())
            name = f"{st.transfer_key.split('.')[-1]}={fmt_value(size_name[s])}" if st.transfer_key else "all"
            ax.errorbar(x, y, yerr=err, marker="o", ms=3, lw=1.4, capsize=2, color=colors[s], label=name)
            div = grp["n_diverged"].to_numpy() > 0
            if div.any():
                ax.scatter(x[div], y[div], marker="x", s=40, color="red", zorder=5)
            best = int(np.argmax((1 if st.direction == "maximize" else -1) * y))
            ax.scatter([x[best]], [y[best]], marker="*", s=90, color=colors[s], edgecolor="black", zorder=6)
        ax.set_title(_title(a, label), fontsize=9)
        ax.set_xlabel("log2(lr)")
        ax.set_ylabel(st.metric)
        ax.set_ylim(lo - pad, hi + pad)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=7, loc="best")
    fig.suptitle(f"{st.metric} vs learning rate (x: any run diverged; *: best lr per size)", fontsize=10)
    return _png(fig)


def divergence_plot(a: Analysis) -> bytes | None:
    """Fraction of runs diverged, size x learning rate, one panel per row label."""
    cells = a.cells
    if cells.empty:
        return None
    st = a.settings
    labels = _labels(a)
    fig, axes = _figure(len(labels), w=4.2, h=2.8)
    lrs = np.sort(cells["lr"].unique())
    sizes = sorted(cells["_s"].unique())
    size_name = dict(zip(cells["_s"], cells["size"]))
    li = {v: i for i, v in enumerate(lrs)}
    si = {v: i for i, v in enumerate(sizes)}
    im = None
    for ax, (k, label) in zip(axes, labels):
        grid = np.full((len(sizes), len(lrs)), np.nan)
        sub = cells[cells["_k"] == k]
        for s, lr, f in zip(sub["_s"], sub["lr"], sub["frac_diverged"]):
            grid[si[s], li[lr]] = f
        im = ax.imshow(np.ma.masked_invalid(grid), vmin=0, vmax=1, cmap="Reds", aspect="auto", origin="lower")
        step = max(1, len(lrs) // 8)
        ax.set_xticks(range(0, len(lrs), step))
        ax.set_xticklabels([f"{math.log2(v):.1f}" for v in lrs[::step]], fontsize=7)
        ax.set_yticks(range(len(sizes)))
        ax.set_yticklabels([fmt_value(size_name[s]) for s in sizes], fontsize=7)
        ax.set_xlabel("log2(lr)")
        ax.set_ylabel(st.transfer_key or "")
        ax.set_title(_title(a, label), fontsize=9)
        if len(lrs) * len(sizes) <= 120:
            for (r, c), v in np.ndenumerate(grid):
                if not np.isnan(v):
                    ax.text(c, r, f"{v:.0%}" if v else "0", ha="center", va="center", fontsize=6,
                            color="white" if v > 0.6 else "black")
    if im is not None:
        fig.colorbar(im, ax=axes, shrink=0.8, label="fraction diverged")
    fig.suptitle("divergence map (blank: not tried)", fontsize=10, y=1.04)
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


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
        if hdir is None:
            continue
        path = Path(hdir) / f"{rid}.csv"
        name = Path(str(rid)).name
        if name != str(rid) or not path.is_file():
            continue  # a run_id never names a path outside history/
        try:
            h = pd.read_csv(path, nrows=50)
        except (OSError, ValueError, pd.errors.ParserError):
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


def fwd_norm_plot(a: Analysis, norms: pd.DataFrame) -> bytes | None:
    """Forward RMS norm per block at init, one line per size, one panel per row label."""
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

    fig, axes = _figure(len(labels))
    mean = norms.groupby(["_k", "_s", "block"], sort=True)["norm"].mean().reset_index()
    sizes = sorted(mean["_s"].unique())
    colors = _size_colors(sizes)
    size_name = dict(zip(a.cells["_s"], a.cells["size"]))
    for ax, (k, label) in zip(axes, labels):
        for s, grp in mean[mean["_k"] == k].groupby("_s", sort=True):
            name = f"{st.transfer_key.split('.')[-1]}={fmt_value(size_name.get(s))}" if st.transfer_key else "all"
            ax.plot(grp["block"], grp["norm"], marker="o", ms=3, color=colors[s], label=name)
        ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("block")
        ax.set_ylabel("forward RMS norm at init")
        ax.set_title(_title(a, label), fontsize=9)
        ax.grid(alpha=0.3, which="both")
    lo, hi = float(mean["norm"].min()), float(mean["norm"].max())
    for ax in axes:  # one scale for all panels, so the rows compare at a glance
        ax.set_ylim(lo / 1.2, hi * 1.2)
    axes[0].legend(fontsize=7, loc="best")
    fig.suptitle("forward norm per block at initialization", fontsize=10)
    return _png(fig)
