"""The figures of stam-fig4-mnist's README that no CSV of the leaderboard holds (run by leaderboards/derive.py).

- the paired bootstraps of the verdicts table (the code that closed the README before, ported: the
  same cube, the same RNG seed 0 drawn in the same order, 2000 replicates, widened for the seed count; C = 1's
  best grid lr, hard-coded there as 0.064, read from leaderboard_sizes.csv):
  ``best-{row}-c{C2}-minus-c{C1}`` (each side's best grid lr re-chosen inside every replicate) and
  ``carried-{row}-c{C}-minus-c1`` (both at C = 1's best grid lr, from leaderboard_sizes.csv);
- the runs that completed at the no-learning level (val_acc <= m0 + margin, leaderboard.csv): their count,
  their final training loss and validation accuracy, and per cell the lowest lr where a seed was stuck;
- the learning rates every configuration ran (the start grid), the final training loss at each configuration's
  best grid lr;
- confirm.csv (the 10-seed confirmation of the sum's failure): stuck seeds per C, the sharpness at init, the
  largest update ratio of the stuck and the trained seeds.

Every figure is computed from files in this folder; nothing here is random except the bootstraps (seed 0).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from nas_stab.analysis.intervals import widen_replicates

NAN = math.nan


def derive(table: Path) -> pd.DataFrame:
    rows: list[dict] = []

    def add(name: str, value: float, lo: float = NAN, hi: float = NAN) -> None:
        rows.append({"name": name, "value": float(value), "lo": float(lo), "hi": float(hi)})

    d = pd.read_csv(table / "trials.csv")
    d["lr"] = d["train.lr"].round(5)
    sizes = pd.read_csv(table / "leaderboard_sizes.csv", comment="#")
    board = pd.read_csv(table / "leaderboard.csv", comment="#")
    cells = pd.read_csv(table / "leaderboard_cells.csv", comment="#")

    # -- the verdicts table's bootstraps (the README's former closing code block) --
    carried = round(float(sizes.loc[(sizes["label"] == "sum") & (sizes["model.branches"] == 1), "grid_lr"].iloc[0]), 5)
    cube = {k: g.pivot_table(index="seed", columns="lr", values="val_acc")
            for k, g in d.groupby(["model.aggregation", "model.branches"])}
    rng = np.random.default_rng(0)

    def best(a: str, c: int, idx) -> float:  # best seed-mean over the lrs tried, on resampled seeds
        return cube[(a, c)].iloc[idx].mean(axis=0).max()

    def at(a: str, c: int, lr: float) -> np.ndarray:  # per-seed values at one lr, seeds in order
        return cube[(a, c)][lr].to_numpy()

    for a in ("sum", "avg", "stam"):
        for c1, c2 in ((1, 4), (4, 16), (1, 16)):
            reps = [best(a, c2, i) - best(a, c1, i) for i in (rng.integers(0, 5, 5) for _ in range(2000))]
            lo, hi = widen_replicates(reps, 5)
            add(f"best-{a}-c{c2}-minus-c{c1}", best(a, c2, range(5)) - best(a, c1, range(5)), lo, hi)
        for c in (4, 16):
            diff = at(a, c, carried) - at(a, 1, carried)
            reps = [diff[rng.integers(0, 5, 5)].mean() for _ in range(2000)]
            lo, hi = widen_replicates(reps, 5)
            add(f"carried-{a}-c{c}-minus-c1", diff.mean(), lo, hi)
            # the lowest value a resampled mean of these per-seed differences can take: its lowest seed
            add(f"carried-{a}-c{c}-minus-c1-lowest-seed", diff.min())

    # -- runs stuck at the no-learning level --
    bar = float(board["m0"].iloc[0] + board["margin"].iloc[0])
    stuck = d[d["val_acc"] <= bar]
    add("stuck-runs", len(stuck))
    add("stuck-train-loss-min", stuck["train_loss"].min())
    add("stuck-train-loss-max", stuck["train_loss"].max())
    add("stuck-val-acc-min", stuck["val_acc"].min())
    add("stuck-val-acc-max", stuck["val_acc"].max())
    for (label, c), g in cells[cells["n_stuck"] > 0].groupby(["label", "model.branches"]):
        first = g.sort_values("train.lr").iloc[0]
        add(f"first-stuck-lr-{label}-c{c}", first["train.lr"])
        add(f"first-stuck-n-{label}-c{c}", first["n_stuck"])

    # -- the start grid: the lrs every configuration ran --
    per_config = [set(g["lr"]) for _, g in d.groupby(["model.aggregation", "model.branches"])]
    common = sorted(set.intersection(*per_config))
    add("lrs-every-config-min", common[0])
    add("lrs-every-config-max", common[-1])
    add("lrs-every-config-count", len(common))

    # -- the final training loss at each configuration's best grid lr (seed mean) --
    losses = []
    for _, r in sizes.iterrows():
        g = d[(d["model.aggregation"] == r["label"]) & (d["model.branches"] == r["model.branches"])
              & (d["lr"] == round(float(r["grid_lr"]), 5))]
        losses.append(g["train_loss"].mean())
    add("train-loss-at-best-grid-lr-min", min(losses))
    add("train-loss-at-best-grid-lr-max", max(losses))

    # -- the confirmation run (sum at C = 1's best lr, C = 1 and 16, 10 fresh seeds, Hessian on) --
    k = pd.read_csv(table / "confirm.csv")
    k_stuck = k["val_acc"] <= bar
    c16, c1 = k["model.branches"] == 16, k["model.branches"] == 1
    add("confirm-stuck-c16", (k_stuck & c16).sum())
    add("confirm-stuck-c1", (k_stuck & c1).sum())
    add("confirm-trained-c16", (~k_stuck & c16).sum())
    add("confirm-init-sharpness-c16-over-c1", k.loc[c16, "init_sharpness"].mean() / k.loc[c1, "init_sharpness"].mean())
    upd = k.loc[k_stuck & c16, "max_update_ratio"].sort_values()
    add("confirm-max-update-ratio-stuck-c16-lowest", upd.iloc[0])
    add("confirm-max-update-ratio-stuck-c16-others-count", len(upd) - 1)
    add("confirm-max-update-ratio-stuck-c16-others-min", upd.iloc[1])
    add("confirm-max-update-ratio-stuck-c16-others-max", upd.iloc[-1])
    ok = k.loc[~k_stuck & c16, "max_update_ratio"]
    add("confirm-max-update-ratio-trained-c16-min", ok.min())
    add("confirm-max-update-ratio-trained-c16-max", ok.max())
    return pd.DataFrame(rows)
