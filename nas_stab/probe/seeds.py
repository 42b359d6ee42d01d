"""`nas-stab probe` over several seeds: per-configuration medians and ranges, and log-log slopes.

A probe row is one (configuration, seed). Two summaries are computed from them:

- `aggregate(rows)`: one row per configuration with, for every measured value
  (`init_*`, `final_*`), the median over the seeds that measured it and the
  range (`<column>_lo`, `<column>_hi`); `seeds` counts the seeds, `status` is
  the configuration's worst (failed > invalid > nonfinite > ok).
- `slopes(rows, size_key, line_keys)`: for each row of the table (a value of
  the other keys) and each stability metric, the least-squares slope of
  log2(metric) against log2(size) -- how the metric scales with the size axis,
  the exponent the papers' theorems predict (STAM Theorem 1: the forward norm
  grows as C^(1/2) with the sum, C^0 with 1/sqrt(C)) -- fitted to the per-size
  mean of log2(metric) over seeds, with a 90% interval from a paired bootstrap
  over seeds (one draw of seeds per replicate, used at every size, as the
  leaderboard's intervals; the percentile interval widened for the seed count
  as there: `nas_stab/analysis/intervals.py`). Only positive finite values enter; a slope needs
  at least two sizes with values, an interval at least two seeds.
"""
from __future__ import annotations

import math
import random
import statistics
from typing import Any, TypeGuard

from nas_stab.analysis.intervals import widen_replicates
from nas_stab.metrics import STABILITY_METRICS

_WORST = {"failed": 3, "invalid": 2, "nonfinite": 1, "ok": 0}
BOOTSTRAP = 1000
LEVEL = 0.90


def _is_num(v: Any) -> TypeGuard[int | float]:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def measured(rows: list[dict]) -> list[str]:
    """The measured columns (init_/final_ values and per-block values), in first-seen order."""
    seen: dict[str, None] = {}
    for r in rows:
        for k, v in r.items():
            if k.startswith(("init_", "final_")) and _is_num(v):
                seen.setdefault(k, None)
    return list(seen)


def aggregate(rows: list[dict]) -> list[dict]:
    """One row per configuration (`config`): medians and ranges over its seeds."""
    by: dict[int, list[dict]] = {}
    for r in rows:
        by.setdefault(r["config"], []).append(r)
    cols = measured(rows)
    out = []
    for cfg in sorted(by):
        rs = by[cfg]
        first = rs[0]
        row = {k: v for k, v in first.items() if not k.startswith(("init_", "final_")) and k not in ("seed", "seconds", "error")}
        row["seeds"] = len(rs)
        row["status"] = max((r["status"] for r in rs), key=lambda s: _WORST.get(s, 3))
        bad = [r for r in rs if r["status"] != "ok"]
        row["error"] = "; ".join(f"seed {r.get('seed')}: {r.get('error')}" for r in bad if r.get("error"))
        row["seconds"] = round(sum(r.get("seconds", 0.0) for r in rs), 3)
        for c in cols:
            vals = [float(r[c]) for r in rs if _is_num(r.get(c)) and not math.isnan(r[c])]
            if not vals:
                continue
            row[c] = statistics.median(vals)
            if len(vals) > 1:
                row[c + "_lo"], row[c + "_hi"] = min(vals), max(vals)
        out.append(row)
    return out


def _fit(points: list[tuple[float, float]]) -> float | None:
    """Least-squares slope of y on x; None with fewer than two distinct x."""
    xs = {x for x, _ in points}
    if len(xs) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def _slope(cells: dict[float, dict[Any, float]], seeds: list) -> float | None:
    """cells: log2(size) -> {seed: log2(metric)}; the slope through the per-size means of the given seeds
    (a seed drawn twice counts twice)."""
    pts = []
    for x, by_seed in cells.items():
        ys = [by_seed[s] for s in seeds if s in by_seed]
        if ys:
            pts.append((x, sum(ys) / len(ys)))
    return _fit(pts)


def slopes(rows: list[dict], size_key: str | None, line_keys: list[str], *, prefixes=("init_", "final_"),
           seed: int = 0) -> list[dict]:
    """log2(metric) vs log2(size) slopes per table row and metric, with paired-bootstrap intervals over seeds."""
    if size_key is None:
        return []
    ok = [r for r in rows if r.get("status") in ("ok", "nonfinite") and _is_num(r.get(size_key)) and r[size_key] > 0]
    sizes = {r[size_key] for r in ok}
    if len(sizes) < 2:
        return []
    lines: dict[tuple, list[dict]] = {}
    for r in ok:
        lines.setdefault(tuple(r.get(k) for k in line_keys), []).append(r)
    rng = random.Random(seed)
    out = []
    for label in sorted(lines, key=lambda t: tuple(str(v) for v in t)):
        rs = lines[label]
        all_seeds = sorted({r.get("seed") for r in rs}, key=str)
        for prefix in prefixes:
            for m in STABILITY_METRICS:
                col = prefix + m
                cells: dict[float, dict[Any, float]] = {}
                for r in rs:
                    v = r.get(col)
                    if _is_num(v) and math.isfinite(v) and v > 0:
                        cells.setdefault(math.log2(r[size_key]), {})[r.get("seed")] = math.log2(v)
                if len(cells) < 2:
                    continue
                est = _slope(cells, all_seeds)
                if est is None:
                    continue
                lo = hi = None
                if len(all_seeds) > 1:
                    reps = []
                    for _ in range(BOOTSTRAP):
                        draw = [rng.choice(all_seeds) for _ in all_seeds]
                        s = _slope(cells, draw)
                        if s is not None:
                            reps.append(s)
                    if reps:  # widened for the seed count (nas_stab/analysis/intervals.py)
                        lo, hi = widen_replicates(reps, len(all_seeds), LEVEL)
                out.append({**dict(zip(line_keys, label)), "metric": col, "slope": est, "lo": lo, "hi": hi,
                            "sizes": len(cells), "seeds": len(all_seeds)})
    return out
