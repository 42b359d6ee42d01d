"""Adaptive seeds: which cells of a table get more seeds, and how many (docs/leaderboard.md, Adaptive seeds).

With `seeds: {min: n, max: m}` every run of a search is first trained with n seeds. Then, after each batch,
the table is computed (the leaderboard's own `analyze`, the same call as every table) and `plan` says where
more seeds go:

- only to rows whose verdict is ``inconclusive`` for a reason more seeds can remove: an interval that
  straddles its bound (``worst_regret`` against epsilon, ``lr_drift`` against the tolerance) or too few seeds
  where the optima rest. A censored optimum, one size, a grid step over an octave: more seeds change nothing
  (a bracket search extends the lrs instead);
- only while a power estimate says the row can still be decided within m seeds: the interval's two sides
  shrink from the median like the half-width of a t interval, ``t_{k-1}(0.95) / sqrt(k)`` (the factor of
  `intervals.widen`), and the row is decidable when at some k <= m its predicted interval lies wholly on
  one side of the bound. A row whose estimate sits on its bound is left ``inconclusive`` instead of
  spending m seeds on it;
- where a cell near the carried lr partly failed, up to `verdicts.CARRIED_SEEDS` at once (what a `yes` there
  needs);
- only to the cells the verdict rests on: at every size, its best lr and the nearest lr tried on each side
  (the optimum's fit) and the lrs on both sides of the reference size's optimum (the lr carried to it);
- per batch, the predicted need, but at least half again the seeds and at most twice them (so a row is
  looked at after 3, 6, 12 seeds rather than after every seed: fewer looks, less optional stopping).

Optional stopping: looking after every batch and stopping once a row is decided inflates the error rates
of a fixed-n rule. `calibration.evaluate(..., adaptive=(n, m))` runs this rule on the simulated families
and measures P(false yes) and P(false no) under it (benchmarks/bench_calibration.py --adaptive).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from nas_stab.analysis.optimum import EPS
from nas_stab.analysis.verdicts import CARRIED_SEEDS, MIN_SEEDS

if TYPE_CHECKING:
    from nas_stab.analysis.table import Analysis

__all__ = ["Plan", "outlook", "plan", "shrink"]

_LEVEL = 0.9  # the leaderboard's interval level


def shrink(n: int, k: int, level: float = _LEVEL) -> float:
    """How much an interval's half-width scales from n seeds to k: t_{k-1}(q) sqrt(n) / (t_{n-1}(q) sqrt(k))."""
    from scipy.special import stdtrit  # deferred: loads SciPy only when this runs

    q = (1 + level) / 2
    return float(stdtrit(max(k - 1, 1), q) / stdtrit(max(n - 1, 1), q) * math.sqrt(n / k))


@dataclass(frozen=True)
class Plan:
    """Where the next batch of seeds goes: `cells` [_k, _s, _l, lr, n, target] (n: the seeds the cell has),
    and per row that is still open a line saying what happens to it (`notes`: label -> text)."""

    cells: pd.DataFrame
    notes: dict


def outlook(row: dict, criterion: str, tolerance: float, n: int, n_max: int) -> tuple[int | None, str]:
    """(the seed count at which the row's predicted interval first clears its bound, or None; why)."""
    if criterion == "drift":
        c, lo, hi, bound, name = row["lr_drift"], row["lr_drift_lo"], row["lr_drift_hi"], tolerance, "lr_drift"
    else:
        c, lo, hi, bound, name = row["worst_regret"], row["worst_regret_lo"], row["worst_regret_hi"], row["epsilon"], "worst_regret"
    if not all(np.isfinite(v) for v in (c, lo, hi, bound)):
        return None, f"no finite {name} interval to extrapolate"
    for k in range(n + 1, n_max + 1):
        f = shrink(n, k)
        if c + (hi - c) * f <= bound + EPS or c - (c - lo) * f > bound + EPS:
            return k, ""
    f = shrink(n, n_max)
    return None, (f"its {name} interval {lo:.3g}-{hi:.3g} at {n} seeds would still straddle {bound:.3g} at {n_max} "
                  f"(predicted {max(c - (c - lo) * f, 0.0):.3g}-{c + (hi - c) * f:.3g})")


def _open(row: dict, sized: bool) -> bool:
    """Whether more seeds can change the row's verdict: inconclusive, sizes to compare, no censored optimum, a
    fine enough grid."""
    return (row["transfers"] == "inconclusive" and sized and row["sizes"] >= 2 and not row["censored"]
            and not row["grid_max_step"] > 1 + EPS)


def _verdict_cells(cells: pd.DataFrame, sizes: pd.DataFrame, ref_x: float) -> list[tuple[int, int]]:
    """(_s, _l) of the cells one row's verdict rests on: every training size's best lr, its nearest tried lr on
    each side, and the tried lrs on both sides of (or at) the carried lr `ref_x` (log2)."""
    out = []
    for s, size in sizes.groupby("_s"):
        if not bool(size["trains"].iloc[0]):
            continue
        here = cells[cells["_s"] == s].sort_values("lr")
        x = np.log2(here["lr"].to_numpy(dtype=float))
        ls = here["_l"].to_numpy()
        j = int(np.argmin(np.abs(here["lr"].to_numpy(dtype=float) - float(size["grid_lr"].iloc[0]))))
        pick = {j, max(j - 1, 0), min(j + 1, len(ls) - 1)}
        if np.isfinite(ref_x):
            below = np.nonzero(x <= ref_x + 1e-9)[0]
            above = np.nonzero(x >= ref_x - 1e-9)[0]
            pick |= {int(below[-1])} if below.size else set()
            pick |= {int(above[0])} if above.size else set()
        out += [(int(s), int(ls[i])) for i in sorted(pick)]
    return out


def plan(a: Analysis, n_max: int) -> Plan:
    """Where the next batch of seeds goes, from an `Analysis` (see the module docstring); empty when every row
    is decided or cannot be decided within `n_max` seeds."""
    st = a.settings
    sized = st.transfer_key is not None
    out, notes = [], {}
    cells = a.cells
    for row in a.rows.to_dict("records"):
        if not _open(row, sized):
            if row["transfers"] == "inconclusive":
                notes[row["label"]] = f"more seeds cannot decide it ({row['why']})"
            continue
        k, n = int(row["_k"]), int(row["min_seeds"])
        if n >= n_max:
            notes[row["label"]] = f"inconclusive at {n} seeds, the most allowed (seeds.max {n_max})"
            continue
        if n < MIN_SEEDS:
            target = min(n_max, MIN_SEEDS)
        else:
            need, why = outlook(row, st.criterion, st.tolerance, n, n_max)
            if need is None:
                notes[row["label"]] = f"left inconclusive: {why}"
                continue
            target = min(n_max, max(math.ceil(1.5 * n), min(need, 2 * n)))
        sz = a.sizes[a.sizes["_k"] == k]
        if "fail_near_carried" in sz.columns and (sz["fail_near_carried"] & (sz["carried_seeds"] < CARRIED_SEEDS)).any():
            # a yes beside a partly failing cell needs CARRIED_SEEDS at the carried lr (verdicts.CARRIED_SEEDS)
            target = max(target, min(n_max, CARRIED_SEEDS))
        ref = sz[sz["size"].map(lambda v, want=row["reference_size"]: v == want)]
        ref_x = float(ref["x_star"].iloc[0]) if len(ref) and st.criterion == "regret" else math.nan
        mine = cells[cells["_k"] == k]
        want = _verdict_cells(mine, sz, ref_x)
        got = mine.set_index(["_s", "_l"])
        rows = [(k, s, l_, float(got.at[(s, l_), "lr"]), int(got.at[(s, l_), "n"]), target) for s, l_ in want]
        rows = [r for r in rows if r[4] < target]
        if rows:
            out += rows
            notes[row["label"]] = f"{n} -> {target} seeds at {len(rows)} cells"
    return Plan(pd.DataFrame(out, columns=["_k", "_s", "_l", "lr", "n", "target"]), notes)
