"""The depth-mup README's figures that the leaderboard's CSVs do not hold (run by leaderboards/derive.py into derived.csv).

- ``run-wall-minutes``: the runs' wall time (trials.csv ``wall_s``) summed, in minutes.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd


def derive(table: Path) -> pd.DataFrame:
    trials = pd.read_csv(table / "trials.csv")
    nan = float("nan")
    return pd.DataFrame([("run-wall-minutes", trials["wall_s"].sum() / 60, nan, nan)], columns=["name", "value", "lo", "hi"])
