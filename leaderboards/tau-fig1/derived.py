"""The figures of tau-fig1's README that no CSV of the table holds (run by leaderboards/derive.py).

The differences of two depths' mean final training loss with their 90% intervals (the README's former code
block, unchanged: an unpaired bootstrap over the seeds that completed, each depth's seeds resampled separately,
1000 replicates, numpy's generator seeded 0 for each pair, widened for the seed count), a spread of seeds, the
compute, and the branch scale 1/L at the deepest depth. Reads trials.csv and confirm.csv of this folder.
Exploratory: computed after the data, not declared claims (those are in claims.csv).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from nas_stab.analysis.intervals import widen_replicates

PAIRS = [("sqrt", ("plain", "1/sqrt(L)"), 100, 3), ("inv-l", ("plain", "1/L"), 100, 3), ("feedforward", ("none", "1"), 100, 30)]


def _row(name: str, value: float, lo: float = math.nan, hi: float = math.nan) -> dict[str, object]:
    return {"name": name, "value": float(value), "lo": float(lo), "hi": float(hi)}


def derive(table: Path) -> pd.DataFrame:
    d = pd.read_csv(table / "trials.csv")
    confirm = pd.read_csv(table / "confirm.csv")
    rows = []
    done = d[d.status == "complete"]
    loss = done.pivot_table(index="seed", columns=["model.skip", "model.tau", "model.depth"], values="train_loss")
    for name, net, a, b in PAIRS:
        x, y = loss[(*net, a)].to_numpy(), loss[(*net, b)].to_numpy()
        rng = np.random.default_rng(0)
        reps = [rng.choice(x, x.size).mean() - rng.choice(y, y.size).mean() for _ in range(1000)]
        lo, hi = widen_replicates(reps, x.size)  # 90%, widened for the seed count (docs/leaderboard.md)
        rows.append(_row(f"{name}-loss-L{a}-minus-L{b}", x.mean() - y.mean(), lo, hi))
        rows.append(_row(f"{name}-loss-L{a}-minus-L{b}-relative", (x.mean() - y.mean()) / y.mean()))

    ff100 = done[(done["model.skip"] == "none") & (done["model.depth"] == 100)]
    rows.append(_row("feedforward-L100-val-acc-sd", ff100["val_acc"].std()))  # the seeds' spread (sample sd)

    rows += [_row("wall-min-table", d["wall_s"].sum() / 60),
             _row("wall-min-mean-L100-complete", d.loc[(d.status == "complete") & (d["model.depth"] == 100), "wall_s"].mean() / 60),
             _row("wall-min-confirm", confirm["wall_s"].sum() / 60),
             _row("inv-l-tau-at-deepest", 1 / d["model.depth"].max())]
    return pd.DataFrame(rows)
