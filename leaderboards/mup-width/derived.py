"""The mup-width README's figures that the leaderboard's CSVs do not hold (run by leaderboards/derive.py into derived.csv).

Exploratory readings of the same runs (trials.csv), computed after the table was published:

- ``ref128-{row}-worst-regret`` (with its 90% interval) and ``ref128-{row}-epsilon``: the leaderboard analysis
  (`nas_stab.analysis.table.analyze`, the table's own settings: train_loss_tail, 10 classes, the default epsilon
  and bootstrap) with width 128 as the reference size instead of 64 (``nas-stab leaderboard DIR --reference 128``);
- ``valacc-{row}-worst-regret`` (with its interval), ``valacc-{row}-epsilon``, ``valacc-{row}-lr-slope`` (with its
  interval), ``valacc-{row}-transfers`` (in the ``verdict`` column): the same analysis judged by val_acc
  (``--metric val_acc``);
- ``mup-octaves-W1-W2``: how many octaves muP's fitted optimum (leaderboard_sizes.csv, ``x_star`` = log2 lr) moves
  from width W1 to width W2;
- ``sp-carried-trained-loss-1024``: SP's mean train_loss_tail at width 1024 over the seeds that did not diverge, at
  the grid lr nearest width 64's optimum (leaderboard_sizes.csv ``grid_lr``);
- ``run-wall-minutes``: the runs' wall time summed, in minutes.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from nas_stab.analysis.table import analyze

SETTINGS = dict(transfer="model.width", compare=("model.parametrization",), classes=10)


def derive(table: Path) -> pd.DataFrame:
    trials = pd.read_csv(table / "trials.csv")
    nan = float("nan")
    out: list[dict] = []

    def add(name: str, value: float, lo: float = nan, hi: float = nan, verdict: str = "") -> None:
        out.append({"name": name, "value": float(value), "lo": float(lo), "hi": float(hi), "verdict": verdict})

    for tag, kw in (("ref128", {"metric": "train_loss_tail", "reference": 128}), ("valacc", {"metric": "val_acc"})):
        rows = analyze(trials, **SETTINGS, **kw).rows.set_index("label")
        for row, r in rows.iterrows():
            add(f"{tag}-{row}-worst-regret", r["worst_regret"], r["worst_regret_lo"], r["worst_regret_hi"], r["transfers"])
            add(f"{tag}-{row}-epsilon", r["epsilon"])
            add(f"{tag}-{row}-lr-slope", r["lr_slope"], r["lr_slope_lo"], r["lr_slope_hi"])

    sizes = pd.read_csv(table / "leaderboard_sizes.csv", comment="#")
    x = sizes[sizes["label"] == "mup"].set_index("model.width")["x_star"]
    for a, b in ((64, 128), (128, 1024), (128, 256), (256, 512), (512, 1024)):
        add(f"mup-octaves-{a}-{b}", x[b] - x[a])

    sp = sizes[sizes["label"] == "sp"].set_index("model.width")
    carried = sp.loc[64, "grid_lr"]
    at = trials[(trials["model.parametrization"] == "sp") & (trials["model.width"] == 1024)
                & np.isclose(trials["train.lr"], carried, rtol=1e-4) & (trials["status"] == "complete")]
    add("sp-carried-trained-loss-1024", at["train_loss_tail"].mean())
    add("run-wall-minutes", trials["wall_s"].sum() / 60)
    return pd.DataFrame(out)
