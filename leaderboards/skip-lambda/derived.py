"""The figures of skip-lambda's README that no leaderboard or claims CSV holds, from this table's own files.

- ``best-val-acc-ROW-dL``: each row's best seed mean of val_acc over the lrs tried at depth L (kind
  ``best-val-acc``, with its ``row`` and ``depth``);
- ``dL-A-minus-B`` and ``ROW-d32-minus-d8``: the differences of those bests between two rows at one depth, and
  between the two depths of one row, with 90% paired seed bootstraps (2000 replicates, numpy seed 0; each
  replicate re-picks each row's best lr, so the choice of the lr is inside the interval), widened for the seed
  count (`widen_replicates`): the code that was printed at the end of the README, run as it was (same order of
  draws, same seed), so its values reproduce;
- ``start-grid-lo`` / ``-hi``: the ends of the lrs every row tried at every depth (the start grid the bracket
  extended);
- ``xskip2-d32-split-*``: 2xSkip+LN at depth 32, the lrs where some seeds end below ``SPLIT`` validation accuracy
  and some above it (the lowest and highest such lr, how many, and the seed sd there, lowest and highest);
- ``postln-d32-train-loss-min`` / ``-max``: the post-LN block's training loss at depth 32, the lowest and highest
  seed mean over the lrs tried;
- ``confirm-first-look-*``: the confirmation's first look (confirm.csv, 30 seeds, before confirm2.csv's 15 were
  added): the per-seed sd of the test_acc gap (2rSkip+LN minus 2xSkip+LN, each at its lr) and the seeds that sd
  needs against the paper's effect (`seeds_needed`, as claims.py sizes a claim);
- ``confirm-runs``, ``confirm-minutes``: the two confirmation runs together (confirm.csv and confirm2.csv), their
  run count and summed run wall time.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from nas_stab.analysis.intervals import widen_replicates
from nas_stab.analysis.power import seeds_needed

SHORT = {"xskip_ln 1": "xskip1", "xskip_ln 2": "xskip2", "rskip_ln 2": "rskip2"}
NAN = float("nan")
SPLIT = 0.5  # a seed under this validation accuracy has not trained (2xSkip+LN reaches 0.8 where it does)


def derive(table: Path) -> pd.DataFrame:
    rows: list[dict] = []
    d = pd.read_csv(table / "trials.csv")
    d["lr"] = d["train.lr"].round(5)
    d["row"] = d["model.skip"] + " " + d["model.skip_lambda"].astype(str)
    cube = {k: g.pivot_table(index="seed", columns="lr", values="val_acc") for k, g in d.groupby(["row", "model.depth"])}

    def best(r: str, depth: int, idx) -> float:  # best seed-mean over the lrs tried, on (resampled) seeds
        return float(cube[(r, depth)].iloc[idx].mean(axis=0).max())

    for (r, depth) in sorted(cube):
        rows.append({"name": f"best-val-acc-{SHORT[r]}-d{depth}", "value": best(r, depth, range(5)), "lo": NAN, "hi": NAN,
                     "kind": "best-val-acc", "row": r, "depth": depth})
    rng = np.random.default_rng(0)
    for depth in (8, 32):
        for a, b in (("xskip_ln 2", "xskip_ln 1"), ("rskip_ln 2", "xskip_ln 1"), ("rskip_ln 2", "xskip_ln 2")):
            reps = [best(a, depth, i) - best(b, depth, i) for i in (rng.integers(0, 5, 5) for _ in range(2000))]
            lo, hi = widen_replicates(reps, 5)
            rows.append({"name": f"d{depth}-{SHORT[a]}-minus-{SHORT[b]}", "value": best(a, depth, range(5)) - best(b, depth, range(5)),
                         "lo": lo, "hi": hi, "kind": "gap", "row": f"{a} - {b}", "depth": depth})
    for r in ("xskip_ln 1", "xskip_ln 2", "rskip_ln 2"):
        reps = [best(r, 32, i) - best(r, 8, i) for i in (rng.integers(0, 5, 5) for _ in range(2000))]
        lo, hi = widen_replicates(reps, 5)
        rows.append({"name": f"{SHORT[r]}-d32-minus-d8", "value": best(r, 32, range(5)) - best(r, 8, range(5)),
                     "lo": lo, "hi": hi, "kind": "depth-gap", "row": r, "depth": NAN})

    sweeps = [set(g["lr"]) for _, g in d.groupby(["row", "model.depth"])]  # the start grid: what every sweep tried
    common = sorted(set.intersection(*sweeps))
    rows.append({"name": "start-grid-lo", "value": common[0], "lo": NAN, "hi": NAN})
    rows.append({"name": "start-grid-hi", "value": common[-1], "lo": NAN, "hi": NAN})

    # 2xSkip+LN at depth 32: the lrs where some seeds end below SPLIT validation accuracy and some above it
    x2 = d[(d["row"] == "xskip_ln 2") & (d["model.depth"] == 32)].pivot_table(index="seed", columns="lr", values="val_acc")
    split = [lr for lr in x2.columns if (x2[lr] < SPLIT).any() and (x2[lr] >= SPLIT).any()]
    rows.append({"name": "xskip2-d32-split-bar", "value": SPLIT, "lo": NAN, "hi": NAN})
    rows.append({"name": "xskip2-d32-split-lr-min", "value": min(split), "lo": NAN, "hi": NAN})
    rows.append({"name": "xskip2-d32-split-lr-max", "value": max(split), "lo": NAN, "hi": NAN})
    rows.append({"name": "xskip2-d32-split-sd-min", "value": float(x2[split].std(ddof=1).min()), "lo": NAN, "hi": NAN})
    rows.append({"name": "xskip2-d32-split-sd-max", "value": float(x2[split].std(ddof=1).max()), "lo": NAN, "hi": NAN})
    rows.append({"name": "xskip2-d32-split-cells", "value": float(len(split)), "lo": NAN, "hi": NAN})

    post = d[(d["row"] == "xskip_ln 1") & (d["model.depth"] == 32)].groupby("lr")["train_loss"].mean()
    rows.append({"name": "postln-d32-train-loss-min", "value": float(post.min()), "lo": NAN, "hi": NAN})
    rows.append({"name": "postln-d32-train-loss-max", "value": float(post.max()), "lo": NAN, "hi": NAN})

    first = pd.read_csv(table / "confirm.csv")
    gap = first.pivot_table(index="seed", columns="model.skip", values="test_acc")
    gap = gap["rskip_ln"] - gap["xskip_ln"]  # each side at its one lr (2rSkip+LN 0.05, 2xSkip+LN 0.0354)
    claims = yaml.safe_load((table / "claims.yaml").read_text(encoding="utf-8"))["claims"]
    effect = next(c["effect"] for c in claims if c["id"] == "rskip-beats-xskip-d8-confirmed")
    sd = float(gap.std(ddof=1))
    rows.append({"name": "confirm-first-look-seeds", "value": float(len(gap)), "lo": NAN, "hi": NAN})
    rows.append({"name": "confirm-first-look-sd", "value": sd, "lo": NAN, "hi": NAN})
    rows.append({"name": "confirm-first-look-needed", "value": float(seeds_needed(sd, float(effect))), "lo": NAN, "hi": NAN})

    both = pd.concat([first, pd.read_csv(table / "confirm2.csv")], ignore_index=True)
    rows.append({"name": "confirm-runs", "value": float(len(both)), "lo": NAN, "hi": NAN})
    rows.append({"name": "confirm-minutes", "value": float(both["wall_s"].sum()) / 60, "lo": NAN, "hi": NAN})
    return pd.DataFrame(rows)
