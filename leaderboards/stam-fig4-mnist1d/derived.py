"""The figures of stam-fig4-mnist1d's README that no CSV of the table holds (run by leaderboards/derive.py).

Compute (runs and wall time of the table's seeds 0-4, of its extra seeds and of the two confirmations), the
learning-rate grid every configuration was tried at, where the sum at C = 16 stops training, and descriptions of
the confirmation runs (the average's failures at C = 16, the paired test-accuracy gap's median, STAM's
eos_ratio). Everything reads trials.csv, confirm.csv and confirm_avg.csv of this folder; nothing is random.
Exploratory: computed after the data, not declared claims.
"""
from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

CHANCE = 0.1  # the no-learning value of val_acc / test_acc (1 / 10 classes)
MARGIN = 0.09  # a run that completed at or below CHANCE + MARGIN did not learn (stuck), as in the leaderboard
TRAINED = 0.75  # "both trained": both runs of a seed complete with test_acc at least this (the average's confirmation)


def _row(name: str, value: float) -> dict[str, object]:
    return {"name": name, "value": float(value), "lo": math.nan, "hi": math.nan}


def _counted(frame: pd.DataFrame, col: str) -> pd.Series:
    """`col` with diverged or failed runs at chance and worse values clamped to it (the leaderboard's rule)."""
    return frame[col].where(frame["status"] == "complete").fillna(CHANCE).clip(lower=CHANCE)


def derive(table: Path) -> pd.DataFrame:
    trials = pd.read_csv(table / "trials.csv")
    confirm = pd.read_csv(table / "confirm.csv")
    avg = pd.read_csv(table / "confirm_avg.csv")
    rows = []

    # compute: the 5-seed table, the extra seeds 5-7, the table as published, the confirmations, the total
    first = trials[trials["seed"] < 5]
    rows += [_row("runs-seeds0-4", len(first)), _row("wall-s-seeds0-4", first["wall_s"].sum()),
             _row("wall-min-seeds0-4", first["wall_s"].sum() / 60)]
    for c, at in first.groupby("model.branches"):
        rows.append(_row(f"wall-s-median-c{c}-seeds0-4", at["wall_s"].median()))
    extra = trials[trials["seed"] >= 5]
    rows += [_row("runs-extra-seeds", len(extra)), _row("runs-table", len(trials)),
             _row("wall-min-table", trials["wall_s"].sum() / 60),
             _row("runs-confirm", len(confirm)), _row("wall-min-confirm", confirm["wall_s"].sum() / 60),
             _row("runs-confirm-avg", len(avg)), _row("wall-min-confirm-avg", avg["wall_s"].sum() / 60)]
    every = pd.concat([trials, confirm, avg])
    rows += [_row("runs-total", len(every)), _row("wall-h-total", every["wall_s"].sum() / 3600)]

    # the learning rates every configuration was tried at with every seed 0-4 (the start grid, as run)
    per_config = first.groupby(["model.aggregation", "model.branches", "seed"])["train.lr"].apply(set)
    common = set.intersection(*per_config)
    rows += [_row("lr-common-min", min(common)), _row("lr-common-max", max(common))]

    # the sum at C = 16: the smallest lr from which every seed of every larger lr fails (stuck or diverged)
    s16 = trials[(trials["model.aggregation"] == "sum") & (trials["model.branches"] == 16)].copy()
    s16["failed"] = _counted(s16, "val_acc") <= CHANCE + MARGIN
    fails = s16.groupby("train.lr")["failed"].all().sort_index()
    first_fail = min(lr for lr in fails.index if fails[fails.index >= lr].all())
    rows.append(_row("sum-c16-all-seeds-fail-from-lr", first_fail))

    # the average's confirmation (C = 4 at 0.181, C = 16 at 0.724, 15 fresh seeds, paired)
    c4, c16 = (avg[avg["model.branches"] == c].set_index("seed") for c in (4, 16))
    stuck16 = (c16["status"] == "complete") & (c16["val_acc"] <= CHANCE + MARGIN)
    finished16 = c16[c16["status"] == "complete"]
    rows += [_row("avg-confirm-c16-diverged", (c16["status"] == "diverged").sum()),
             _row("avg-confirm-c16-stuck", stuck16.sum()),
             _row("avg-confirm-c16-failed", (c16["status"] == "diverged").sum() + stuck16.sum()),
             _row("avg-confirm-c16-lowest-trained-test-acc", finished16.loc[~stuck16[finished16.index], "test_acc"].min()),
             _row("avg-confirm-c16-finished", len(finished16)),
             _row("avg-confirm-c16-above-edge", (finished16["final_eos_ratio"] > 1).sum()),
             _row("avg-confirm-c4-runs", len(c4)),
             _row("avg-confirm-c4-above-edge", (c4["final_eos_ratio"] > 1).sum()),
             _row("avg-confirm-c16-runs-with-loss-spikes", (c16["loss_spikes"] > 0).sum()),
             _row("avg-confirm-c16-stuck-max-update-ratio", c16.loc[stuck16, "max_update_ratio"].max())]
    gap = (_counted(c4.reset_index(), "test_acc").values - _counted(c16.loc[c4.index].reset_index(), "test_acc").values)
    gap = pd.Series(gap, index=c4.index)
    both = (c4["status"] == "complete") & (c16["status"] == "complete") & (c4["test_acc"] >= TRAINED) & (c16["test_acc"] >= TRAINED)
    rows += [_row("avg-confirm-gap-median", gap.median()),
             _row("avg-confirm-both-trained-threshold", TRAINED),
             _row("avg-confirm-both-trained-seeds", both.sum()),
             _row("avg-confirm-gap-mean-both-trained", gap[both].mean()),
             _row("avg-confirm-gap-median-both-trained", gap[both].median())]

    # STAM's confirmation: the median eos_ratio at the end of the runs, per C (its range over C)
    eos = confirm.groupby("model.branches")["final_eos_ratio"].median()
    rows += [_row("stam-confirm-eos-median-min-over-c", eos.min()), _row("stam-confirm-eos-median-max-over-c", eos.max())]
    return pd.DataFrame(rows)
