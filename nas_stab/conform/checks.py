"""The slopes of a conformance check with their intervals, and each check's decision.

Every series (one quantity of one parameter, layer or group, at every size and seed) is fitted by least squares,
log2(value) against log2(size), on the seed means of the log values; its 90% interval is a bootstrap that
resamples each size's seeds (1000 replicates, widened for the seed count as every interval nas_stab prints:
`analysis.intervals.widen_replicates`). A check passes when the whole interval lies within its tolerance of the
prescribed slope, fails when the whole interval lies outside it, and is inconclusive otherwise (more seeds or
sizes decide it): nothing is decided on an interval that straddles the bound.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from nas_stab.analysis.intervals import widen_replicates
from nas_stab.conform.expect import Expectation, roles
from nas_stab.conform.measure import Point

N_BOOT = 1000


@dataclass(frozen=True)
class Result:
    check: str
    what: str  # the role or group checked
    series: str  # the parameter or layer measured (or the group)
    expected: float
    slope: float
    lo: float
    hi: float
    tol: float
    status: str  # pass | fail | inconclusive | not measured


def slope_interval(sizes: list[float], values: list[list[float]], n_boot: int = N_BOOT, seed: int = 0) -> tuple[float, float, float]:
    """(slope, lo, hi) of log2(value) vs log2(size): `values[i]` are size i's seeds' values (all > 0)."""
    x = np.log2(np.asarray(sizes, dtype=float))
    logs = [np.log2(np.asarray(v, dtype=float)) for v in values]
    xc = x - x.mean()
    den = float((xc ** 2).sum())

    def fit(means: np.ndarray) -> float:
        return float((xc * (means - means.mean())).sum() / den)

    slope = fit(np.array([v.mean() for v in logs]))
    rng = np.random.default_rng(seed)
    reps = np.empty(n_boot)
    for b in range(n_boot):
        reps[b] = fit(np.array([v[rng.integers(0, len(v), len(v))].mean() for v in logs]))
    n = min(len(v) for v in logs)
    lo, hi = widen_replicates(reps, n) if n > 1 else (slope, slope)
    return slope, float(lo), float(hi)


def decide(slope: float, lo: float, hi: float, expected: float, tol: float, sided: str = "both") -> str:
    if not all(math.isfinite(v) for v in (slope, lo, hi)):
        return "not measured"
    if sided == "upper":
        return "pass" if hi <= expected + tol else "fail" if lo > expected + tol else "inconclusive"
    if expected - tol <= lo and hi <= expected + tol:
        return "pass"
    if hi < expected - tol or lo > expected + tol:
        return "fail"
    return "inconclusive"


def _grid(points: list[Point], value: Callable[[Point], float]) -> tuple[list[float], list[list[float]]] | None:
    """(sizes, per-size seed values) of one series; None where a value is missing, zero or not finite."""
    by: dict[float, list[float]] = {}
    for p in points:
        v = value(p)
        if not (isinstance(v, float | int) and math.isfinite(v) and v > 0):
            return None
        by.setdefault(p.size, []).append(float(v))
    if len(by) < 2:
        return None
    sizes = sorted(by)
    return sizes, [by[s] for s in sizes]


def _median(values: list[float]) -> float:
    vals = [v for v in values if math.isfinite(v)]
    return float(np.median(vals)) if vals else math.nan


def _blocks(values: dict[str, float]) -> float:
    """The median over the residual blocks' parameters (`blocks.`): their count changes with depth."""
    return _median([v for n, v in values.items() if n.startswith("blocks.")])


def _branch(p: Point) -> float:
    return _median(list(p.branch.values()))


def _block_lr(p: Point) -> float:
    return _blocks(p.lr)


def _block_eps(p: Point) -> float:
    return _blocks(p.eps)


def _logits0(p: Point) -> float:
    return p.logits0


def _dlogits(p: Point) -> float:
    return p.dlogits


DEPTH_SERIES: dict[str, Callable[[Point], float]] = {"branch": _branch, "lr": _block_lr, "eps": _block_eps}


def _logits(check: str) -> Callable[[Point], float]:
    return _logits0 if check == "logits_init" else _dlogits


def _entry(quantity: str, name: str) -> Callable[[Point], float]:
    """A point's `quantity` (a dict: init_std, lr, act0, delta) at `name`."""
    def value(p: Point) -> float:
        return float(getattr(p, quantity).get(name, math.nan))
    return value


def _effective_readout(check: str, head: str, adam: bool) -> Callable[[Point], float]:
    """The readout's effective init (multiplier x RMS) or lr (Adam: multiplier x lr; SGD: multiplier^2 x lr)."""
    def value(p: Point) -> float:
        m = abs(p.readout_mult)
        if check == "readout_init":
            return p.init_std.get(head, math.nan) * m
        return p.lr.get(head, math.nan) * m ** (1 if adam else 2)
    return value


def series(e: Expectation, points: list[Point], readout: str, adam: bool, axis: str) -> dict[str, Callable[[Point], float]]:
    """The series one expectation judges: name -> the value of a point."""
    small, large = min(points, key=lambda p: p.size), max(points, key=lambda p: p.size)
    head = readout + ".weight"
    if axis == "depth":
        return {"residual blocks" if e.check in DEPTH_SERIES else "logits": DEPTH_SERIES.get(e.check) or _logits(e.check)}
    role = roles(large.shapes, small.shapes, readout)
    if e.check in ("init_std", "lr"):
        return {n: _entry(e.check, n) for n, r in role.items() if r == e.what}
    if e.check in ("readout_init", "readout_lr"):
        return {head: _effective_readout(e.check, head, adam)}
    attention = [n for n in small.act0 if n.endswith(".logits")]
    layers = [n for n in small.act0 if n != readout and not n.startswith(readout + ".") and n not in attention]
    if e.check in ("act_init", "update"):
        return {n: _entry("act0" if e.check == "act_init" else "delta", n) for n in layers}
    if e.check == "attn_init":
        return {n: _entry("act0", n) for n in attention}
    if e.check in ("logits_init", "logits_update"):
        return {"logits": _logits(e.check)}
    raise ValueError(f"unknown check {e.check!r}")


def judge(expectations: list[Expectation], points: list[Point], readout: str, adam: bool, axis: str) -> list[Result]:
    """One result per (expectation, series); an expectation with no series to measure says so."""
    out = []
    for e in expectations:
        got = series(e, points, readout, adam, axis)  # none: the model has no such parameter (no vector, say)
        for name, value in got.items():
            grid = _grid(points, value)
            if grid is None:
                out.append(Result(e.check, e.what, name, e.slope, math.nan, math.nan, math.nan, e.tol, "not measured"))
                continue
            s, lo, hi = slope_interval(*grid)
            out.append(Result(e.check, e.what, name, e.slope, s, lo, hi, e.tol, decide(s, lo, hi, e.slope, e.tol, e.sided)))
    return out
