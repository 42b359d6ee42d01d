"""The figures of skip-lambda-mnist1d's README that no leaderboard or claims CSV holds, from this table's own files.

- ``adaptive-*``: the runs the adaptive-seeds rule added (the seeds that not every cell has: seeds 5-7 at the
  cells the lambda-2 rows' transfer verdicts rest on): their count, their seeds, how many seeds;
- ``all-runs``, ``all-minutes``: the table's runs and its confirmation's together (trials.csv and confirm.csv),
  their count and summed run wall time;
- ``rskip-d8-first-seeds``: the claim ``rskip-beats-xskip-d8`` judged as claims.py judges it
  (`claim_verdicts.evaluate`, the same bootstrap and seed), on the seeds every cell has (0-4), before the
  adaptive seeds: its estimate, interval (lo, hi) and per-seed sd (column ``sd``);
- ``d32-sharpness-ratio``: the end-of-training sharpness at 2xSkip+LN's depth-32 optimum over 2rSkip+LN's
  (leaderboard_edges.csv);
- ``x-paper-*``: figures of claims.csv over the paper's effect (its ``target``): the measured gap, or the
  per-seed sd of the gap, in multiples of the paper's gap.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from nas_stab.analysis.claim_verdicts import evaluate
from nas_stab.analysis.claims import load_claims

NAN = float("nan")
KEYS = ["model.skip", "model.skip_lambda", "model.depth", "train.lr"]


def _row(name: str, value: float, lo: float = NAN, hi: float = NAN, **extra) -> dict:
    return {"name": name, "value": float(value), "lo": float(lo), "hi": float(hi), **extra}


def derive(table: Path) -> pd.DataFrame:
    rows: list[dict] = []
    trials = pd.read_csv(table / "trials.csv")
    confirm = pd.read_csv(table / "confirm.csv")

    every = set.intersection(*(set(g["seed"]) for _, g in trials.groupby(KEYS)))  # the seeds every cell has
    added = trials[~trials["seed"].isin(every)]
    rows += [_row("adaptive-runs", len(added)), _row("adaptive-seeds", added["seed"].nunique()),
             _row("adaptive-seed-min", added["seed"].min()), _row("adaptive-seed-max", added["seed"].max()),
             _row("first-seeds", len(every))]

    rows += [_row("all-runs", len(trials) + len(confirm)),
             _row("all-minutes", (trials["wall_s"].sum() + confirm["wall_s"].sum()) / 60)]

    claim = [c for c in load_claims(table / "claims.yaml") if c.id == "rskip-beats-xskip-d8"]
    first = evaluate(claim, {"trials": trials[trials["seed"].isin(every)]}, metric="val_acc", classes=10).iloc[0]
    rows.append(_row("rskip-d8-first-seeds", first["estimate"], first["lo"], first["hi"], sd=first["sd"],
                     seeds=first["seeds"], needed=first["needed"]))

    edges = pd.read_csv(table / "leaderboard_edges.csv")
    opt = edges[(edges["where"] == "optimum") & (edges["model.depth"] == 32)].set_index("label")["final_sharpness"]
    rows.append(_row("d32-sharpness-ratio", opt["xskip_ln, 2"] / opt["rskip_ln, 2"]))

    claims = pd.read_csv(table / "claims.csv").set_index("id")
    for cid in ("lambda2-beats-lambda1-d8", "rskip-beats-xskip-d8", "rskip-beats-xskip-d8-confirmed"):
        r = claims.loc[cid]
        rows.append(_row(f"x-paper-gap-{cid}", r["estimate"] / r["target"]))
        rows.append(_row(f"x-paper-sd-{cid}", r["sd"] / r["target"]))
    return pd.DataFrame(rows)
