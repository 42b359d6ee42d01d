"""The coordinate check of one axis (Tensor Programs V, Figure 5): every layer's output RMS at init and its change
after the steps, seed means, against the size on log-log axes; a flat line is what muP (over width) and Depth-muP
(over depth) prescribe for the change."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from nas_stab.conform.measure import Point


def coord_plot(points: list[Point], axis: str, key: str, path: Path) -> Path:
    """The plot of one axis (`axis`: width or depth; `key`: the model key varied) from its measured points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, panels = plt.subplots(1, 2, figsize=(10, 4), constrained_layout=True)
    sizes = sorted({p.size for p in points})
    for ax, what, title in ((panels[0], "act0", "output RMS at init"), (panels[1], "delta", "RMS of the output's change")):
        layers = sorted({n for p in points for n in getattr(p, what)})
        for name in layers:
            ys = [np.mean([getattr(p, what).get(name, np.nan) for p in points if p.size == s]) for s in sizes]
            ax.plot(sizes, ys, marker="o", lw=1, alpha=0.8, label=name)
        logits = [np.mean([p.logits0 if what == "act0" else p.dlogits for p in points if p.size == s]) for s in sizes]
        ax.plot(sizes, logits, marker="s", lw=2.5, color="black", label="logits")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel(key if axis == "width" else "residual blocks L")
        ax.set_title(title)
    handles, labels = panels[1].get_legend_handles_labels()
    if len(labels) <= 24:
        fig.legend(handles, labels, loc="outside right center", fontsize=6)
    fig.suptitle(f"coordinate check over {axis} (seed means)")
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
