"""The figures of stam-init's README that no CSV of the probe holds (run by leaderboards/derive.py).

The "predicted" slopes of the forward ratio: with the identity path each of the L blocks multiplies the
stream's squared norm by about ``1 + s(C)``, s(C) = sum_k alpha_k^2 x (the branch's squared gain from its init
scaling), so the prediction for the stream is the least-squares slope of log2((1 + s(C))^(L/2)) on log2(C) over
the probe's C values (L: probe.csv's ``blocks``). Per row:

- sum (Kaiming): alpha = 1, s = C;  average: alpha = 1/C, s = 1/C;  STAM: alpha = 1/sqrt(C), s = 1;
- sum with the forward-stable init (each of the b layers of a branch scaled by C^(-1/(2b))): s = C x C^(-1) = 1;
- sum with the update-stable init (each layer scaled by (bC)^(-1/(2(b-1)))): s = C x (bC)^(-b/(b-1)).

Also the largest gap between the measured forward slope (probe_slopes.csv) and that prediction over the sum,
average and STAM rows (both b), and the sum's shortfall at b = 2 as a fraction of its prediction. Deterministic.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

NAN = math.nan


def _gain(row: str, c: np.ndarray, b: int) -> np.ndarray:
    if row == "sum":
        return c
    if row == "avg":
        return 1.0 / c
    if row in ("stam", "sum-stam_forward"):
        return np.ones_like(c)
    if row == "sum-stam_update":
        return c * (b * c) ** (-b / (b - 1))
    raise ValueError(row)


def derive(table: Path) -> pd.DataFrame:
    probe = pd.read_csv(table / "probe.csv")
    slopes = pd.read_csv(table / "probe_slopes.csv", keep_default_na=False)
    c = np.array(sorted(probe["model.branches"].unique()), dtype=float)
    blocks = probe["blocks"].unique()
    assert len(blocks) == 1, blocks
    depth = float(blocks[0])
    rows: list[dict] = []
    measured = {"sum": ("sum", "kaiming"), "avg": ("avg", ""), "stam": ("stam", ""),
                "sum-stam_forward": ("sum", "stam_forward"), "sum-stam_update": ("sum", "stam_update")}
    gaps = []
    for b in sorted(probe["model.branch_depth"].unique()):
        for row, (agg, init) in measured.items():
            y = (depth / 2) * np.log2(1 + _gain(row, c, int(b)))
            predicted = round(float(np.polyfit(np.log2(c), y, 1)[0]), 12)  # a flat prediction is 0, not 1e-16
            rows.append({"name": f"predicted-fwd-slope-{row}-b{b}", "value": predicted, "lo": NAN, "hi": NAN})
            m = slopes[(slopes["model.aggregation"] == agg) & (slopes["model.init"] == init)
                       & (slopes["model.branch_depth"].astype(int) == b) & (slopes["metric"] == "init_fwd_ratio")]
            assert len(m) == 1, (row, b)
            if row in ("sum", "avg", "stam"):
                gaps.append(abs(float(m["slope"].iloc[0]) - predicted))
            if row == "sum" and b == 2:
                rows.append({"name": "sum-fwd-slope-b2-shortfall", "value": 1 - float(m["slope"].iloc[0]) / predicted,
                             "lo": NAN, "hi": NAN})
    rows.append({"name": "fwd-slope-largest-gap-to-predicted", "value": max(gaps), "lo": NAN, "hi": NAN})
    return pd.DataFrame(rows)
