"""The pathbn README's figures that no CSV of the leaderboard holds (run by leaderboards/derive.py into derived.csv).

- ``d{10,30}-A-minus-B``: the best validation accuracy of row A minus row B at that depth (each row's best seed
  mean over the lrs it tried; a diverged run counts at 0.1), with a 90% paired bootstrap over the 5 seeds (2000
  replicates, seed 0, each replicate re-picking each row's best lr), widened for the seed count
  (``widen_replicates``, docs/leaderboard.md). Rows: ``sgdbn`` (bn, weight, false), ``gsgdbn`` (bn, path,
  false), ``pathbn`` (path_bn, path, false), ``control`` (bn, weight, true). The code the README carried before
  these figures were generated; the replicates are drawn in the same order, so the values are the same.
- ``run-wall-minutes``: the table's runs' wall time summed, in minutes.
- ``init-loss-identity-path-min`` / ``-max``: the range of the loss at init over the Path-BN and control runs (the
  two rows with the identity path).
- ``equivalence-test-acc-trained-pathbn`` / ``-control``: equivalence.csv's mean test accuracy over the runs that
  completed (the diverged ones left out), per row.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from nas_stab.analysis.intervals import widen_replicates

ROWS = {"sgdbn": ("bn", "weight", False), "gsgdbn": ("bn", "path", False),
        "pathbn": ("path_bn", "path", False), "control": ("bn", "weight", True)}
PAIRS = (("pathbn", "control"), ("pathbn", "sgdbn"), ("control", "sgdbn"), ("gsgdbn", "sgdbn"), ("pathbn", "gsgdbn"))


def derive(table: Path) -> pd.DataFrame:
    d = pd.read_csv(table / "trials.csv")
    d["lr"] = d["train.lr"].round(5)
    d["val_acc"] = d["val_acc"].fillna(0.1)  # a diverged run counts at 0.1
    cube = {k: g.pivot_table(index="seed", columns="lr", values="val_acc")
            for k, g in d.groupby(["model.norm", "model.parametrization", "model.layer_skip", "model.depth"])}
    rng = np.random.default_rng(0)

    def best(r: str, depth: int, idx: object) -> float:  # best seed-mean over the lrs tried, on resampled seeds
        return float(cube[ROWS[r] + (depth,)].iloc[idx].mean(axis=0).max())

    out = []
    for depth in (10, 30):
        for a, b in PAIRS:
            reps = [best(a, depth, i) - best(b, depth, i) for i in (rng.integers(0, 5, 5) for _ in range(2000))]
            lo, hi = widen_replicates(reps, 5)
            out.append((f"d{depth}-{a}-minus-{b}", best(a, depth, range(5)) - best(b, depth, range(5)), lo, hi))

    nan = float("nan")
    out.append(("run-wall-minutes", d["wall_s"].sum() / 60, nan, nan))
    skip = d[(d["model.norm"] == "path_bn") | (d["model.layer_skip"].astype(str) == "True")]
    out.append(("init-loss-identity-path-min", skip["init_loss"].min(), nan, nan))
    out.append(("init-loss-identity-path-max", skip["init_loss"].max(), nan, nan))
    e = pd.read_csv(table / "equivalence.csv")
    ok = e[e["status"] == "complete"]
    out.append(("equivalence-test-acc-trained-pathbn", ok.loc[ok["model.norm"] == "path_bn", "test_acc"].mean(), nan, nan))
    out.append(("equivalence-test-acc-trained-control", ok.loc[ok["model.norm"] == "bn", "test_acc"].mean(), nan, nan))
    return pd.DataFrame(out, columns=["name", "value", "lo", "hi"])
