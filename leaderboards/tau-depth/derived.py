"""tau-depth: the README's figures that no CSV of the table holds (run by leaderboards/derive.py).

Rows are named by tau: ``inv`` (1/L), ``sqrt`` (1/sqrt(L)), ``quarter`` (L^-0.25).

- ``start-grid-lo`` / ``start-grid-hi``: the lowest and highest lr tried at every (tau, depth) (the start grid, which
  the bracket extended where an optimum lay at an edge; leaderboard_cells.csv);
- ``lr-below-divergence-TAU-LDEPTH``: the largest lr tried below the smallest lr at which a seed diverged (the
  largest lr tried where none diverged); absent where seeds diverged at every lr;
- ``TAU-optimum-drop-octaves-L3-to-LDEPTH``: how far the fitted optimum (x_star, log2 lr; leaderboard_sizes.csv)
  lies below depth 3's;
- ``best-acc-spread-up-to-L10``: the largest spread (max - min) of the three taus' best validation accuracy
  (m_star) at one depth, over depths 3 and 10; ``best-acc-inv-sqrt-min`` / ``-max``: the range of 1/L's and
  1/sqrt(L)'s best validation accuracy over every depth;
- ``final-sharpness-median-sqrt-lr0.5-min`` / ``-max``: the smallest and largest, over depths, of the seed median
  of 1/sqrt(L)'s top Hessian eigenvalue at the end of training at lr 0.5 (sharpness.csv).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

TAUS = {"1/L": "inv", "1/sqrt(L)": "sqrt", "L^-0.25": "quarter"}


def derive(table: Path) -> pd.DataFrame:
    cells = pd.read_csv(table / "leaderboard_cells.csv", comment="#")
    sizes = pd.read_csv(table / "leaderboard_sizes.csv", comment="#")
    sharp = pd.read_csv(table / "sharpness.csv")
    out: list[dict] = []
    common = set.intersection(*(set(g["train.lr"].round(6)) for _, g in cells.groupby(["label", "model.depth"])))
    out.append({"name": "start-grid-lo", "value": min(common)})
    out.append({"name": "start-grid-hi", "value": max(common)})
    for (label, depth), g in cells.groupby(["label", "model.depth"], sort=False):
        g = g.sort_values("train.lr")
        failed = g[g["n_diverged"] > 0]
        below = g[g["train.lr"] < failed["train.lr"].min()] if len(failed) else g
        if len(below):
            out.append({"name": f"lr-below-divergence-{TAUS[label]}-L{depth}", "value": below["train.lr"].max()})
    for label, g in sizes.groupby("label", sort=False):
        x = g.set_index("model.depth")["x_star"]
        for depth in x.index[1:]:
            if pd.notna(x[depth]):
                out.append({"name": f"{TAUS[label]}-optimum-drop-octaves-L3-to-L{depth}", "value": x[3] - x[depth]})
    m = sizes.pivot(index="model.depth", columns="label", values="m_star")
    low = m.loc[m.index <= 10]
    out.append({"name": "best-acc-spread-up-to-L10", "value": (low.max(axis=1) - low.min(axis=1)).max()})
    pair = m[["1/L", "1/sqrt(L)"]]
    out.append({"name": "best-acc-inv-sqrt-min", "value": pair.min().min()})
    out.append({"name": "best-acc-inv-sqrt-max", "value": pair.max().max()})
    fin = sharp[(sharp["model.tau"] == "1/sqrt(L)") & (sharp["train.lr"] == 0.5)].groupby("model.depth")["final_sharpness"].median()
    out.append({"name": "final-sharpness-median-sqrt-lr0.5-min", "value": fin.min()})
    out.append({"name": "final-sharpness-median-sqrt-lr0.5-max", "value": fin.max()})
    frame = pd.DataFrame(out)
    frame["lo"] = np.nan
    frame["hi"] = np.nan
    return frame
