"""The pathbn-fig4 README's figures (run by leaderboards/derive.py into derived.csv), from probe.csv.

Per row (``bn``: conventional BN in the path space, ``pathbn``: Path-BN), the mean over the 5 init seeds with a 90%
bootstrap over the seeds of that mean (2000 replicates, one generator seeded 0 for the whole table, drawn in the order
below), widened for the seed count (``widen_replicates``, docs/leaderboard.md). The code the README carried before
these figures were generated; the draws are in the same order, so the values are the same.

- ``{row}-mean-sigma``: the BN sigma averaged over layers 1-49 (layer 0 has ordinary BN in both rows);
- ``{row}-sigma-slope``: the least-squares slope of sigma over the layer index (0-49), per layer;
- ``{row}-log-grad-growth``: minus the slope of log(gradient norm) over the layer index: the log of the factor by
  which the gradient norm grows per layer from the output back to the input; ``{row}-grad-growth-factor`` is its
  exp (value and interval ends);
- ``{row}-log10-grad-0-over-49``: log10 of the gradient norm at layer 0 over layer 49; ``{row}-grad-0-over-49`` is
  10 to that power (the geometric mean of the ratio over the seeds, and its interval ends);
- ``bn-minus-pathbn-log10-grad-0-over-49``: the paired difference of that log10 growth, BN minus Path-BN;
- ``{row}-layers-sigma-below-1``: how many of layers 1-49 have a median sigma (over the seeds) below 1;
  ``{row}-frac-sigma-below-1`` the fraction of the 49; ``{row}-first-layer-sigma-below-1`` the first such layer;
- ``probe-minutes``: the probes' wall time (probe.csv's ``seconds``) summed, in minutes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from nas_stab.analysis.intervals import widen_replicates

L = 50  # layers 0-49
NAMES = {"bn": "bn", "path_bn": "pathbn"}


def derive(table: Path) -> pd.DataFrame:
    d = pd.read_csv(table / "probe.csv")
    layers = np.arange(L)
    rng = np.random.default_rng(0)

    def slope(y: np.ndarray) -> np.ndarray:  # least-squares slope over the layer index, per seed
        x = layers - layers.mean()
        return ((y - y.mean(1, keepdims=True)) * x).sum(1) / (x * x).sum()

    def ci(v: np.ndarray) -> tuple[float, float]:  # 90% bootstrap over the seeds of the mean, widened for the seed count
        return widen_replicates([v[rng.integers(0, len(v), len(v))].mean() for _ in range(2000)], len(v))

    out: list[tuple[str, float, float, float]] = []
    nan = float("nan")
    for norm, g in d.sort_values("seed").groupby("model.norm"):
        row = NAMES[str(norm)]
        sig = g[[f"init_bn_sigma.{i}" for i in range(L)]].to_numpy()
        grad = g[[f"init_grad_stream.{i}" for i in range(L)]].to_numpy()
        for name, v in (("mean-sigma", sig[:, 1:].mean(1)), ("sigma-slope", slope(sig)),
                        ("log-grad-growth", -slope(np.log(grad))),
                        ("log10-grad-0-over-49", np.log10(grad[:, 0] / grad[:, L - 1]))):
            lo, hi = ci(v)
            out.append((f"{row}-{name}", float(v.mean()), lo, hi))
            if name == "log-grad-growth":
                out.append((f"{row}-grad-growth-factor", float(np.exp(v.mean())), float(np.exp(lo)), float(np.exp(hi))))
            if name == "log10-grad-0-over-49":
                out.append((f"{row}-grad-0-over-49", float(10 ** v.mean()), float(10 ** lo), float(10 ** hi)))
        below = [i for i in range(1, L) if np.median(sig[:, i]) < 1]
        out.append((f"{row}-layers-sigma-below-1", float(len(below)), nan, nan))
        out.append((f"{row}-frac-sigma-below-1", len(below) / (L - 1), nan, nan))
        out.append((f"{row}-first-layer-sigma-below-1", float(below[0]) if below else nan, nan, nan))
    growth = {n: np.log10(g["init_grad_stream.0"] / g[f"init_grad_stream.{L - 1}"]).to_numpy()
              for n, g in d.sort_values("seed").groupby("model.norm")}
    v = growth["bn"] - growth["path_bn"]
    lo, hi = ci(v)
    out.append(("bn-minus-pathbn-log10-grad-0-over-49", float(v.mean()), lo, hi))
    out.append(("probe-minutes", float(d["seconds"].sum()) / 60, nan, nan))
    return pd.DataFrame(out, columns=["name", "value", "lo", "hi"])
