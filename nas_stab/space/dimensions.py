"""The searched dimensions: `Dimension`, `Space` (grid enumeration, Optuna define-by-run) and `GridTooLarge`."""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

KINDS = ("values", "log_grid", "grid", "uniform", "loguniform", "int")
DISCRETE = ("values", "log_grid", "grid", "int")


@dataclass(frozen=True)
class Dimension:
    """One searched key."""

    key: str
    kind: str  # one of KINDS
    values: tuple = ()  # discrete kinds: the values, in order
    low: float | None = None  # continuous and int kinds
    high: float | None = None
    log: bool = False
    step: int | None = None
    when: tuple = ()  # ((key, (allowed values...)), ...)

    @property
    def discrete(self) -> bool:
        return self.kind in DISCRETE

    def active(self, assignment: Callable[[str], Any]) -> bool:
        return all(_matches(assignment(k), allowed) for k, allowed in self.when)

    def suggest(self, trial, grid: bool = False) -> Any:
        """Ask an Optuna trial for this dimension's value.

        `grid=True` is for a grid point enqueued into the study: its value is
        fixed, and a numeric dimension is recorded with an Int/Float
        distribution over its values (log-scaled when they are log-spaced) so
        optuna-dashboard and `optuna` plots order and scale it as a number. A
        sampler choosing among listed values (`grid=False`) still sees them as
        categorical: a list means "one of these", not an interval.
        """
        if grid and self.kind != "int":
            dist = self.grid_distribution()
            if dist is not None:
                try:
                    return _suggest_numeric(trial, self.key, dist)
                except ValueError as e:
                    if "distribution" not in str(e):
                        raise
                    # a study made before numeric grid distributions records this key as
                    # categorical, and Optuna refuses to mix kinds: keep the old one
        if self.kind in ("values", "log_grid", "grid"):
            return trial.suggest_categorical(self.key, list(self.values))
        if self.kind == "int":
            assert self.low is not None and self.high is not None, "an int dimension has its bounds (parsed)"
            return trial.suggest_int(self.key, int(self.low), int(self.high), step=self.step or 1, log=self.log)
        return trial.suggest_float(self.key, self.low, self.high, log=self.log)

    def grid_distribution(self):
        """The numeric Optuna distribution of a discrete dimension's values, or None
        when a value is not a number (strings, booleans, null: categorical)."""
        import optuna.distributions as d  # deferred: loads Optuna only when this runs

        vals = self.values
        if not vals or any(isinstance(v, bool) or not isinstance(v, (int, float)) for v in vals):
            return None
        lo, hi = min(vals), max(vals)
        log = self.kind == "log_grid" or (self.kind == "values" and is_log_spaced(vals))
        if all(isinstance(v, int) for v in vals):
            return d.IntDistribution(int(lo), int(hi), log=log and lo >= 1)
        return d.FloatDistribution(float(lo), float(hi), log=log and lo > 0)

    def distribution(self):
        """The Optuna distribution of this dimension (for enqueued or fixed trials)."""
        import optuna.distributions as d  # deferred: loads Optuna only when this runs

        if self.kind in ("values", "log_grid", "grid"):
            return d.CategoricalDistribution(list(self.values))
        if self.kind == "int":
            return d.IntDistribution(int(self.low), int(self.high), step=self.step or 1, log=self.log)
        return d.FloatDistribution(self.low, self.high, log=self.log)


def _suggest_numeric(trial, key: str, dist) -> Any:
    import optuna.distributions as d  # deferred: loads Optuna only when this runs

    if isinstance(dist, d.IntDistribution):
        return trial.suggest_int(key, dist.low, dist.high, log=dist.log)
    return trial.suggest_float(key, dist.low, dist.high, log=dist.log)


def is_log_spaced(values) -> bool:
    """True when positive numbers are closer to a geometric than to an arithmetic
    progression (sorted): [1, 4, 16] and [0.001, 0.01, 0.1] are, [2, 4, 6] is not;
    two values are when one is at least 4 times the other."""
    v = sorted(float(x) for x in values)
    if len(v) < 2 or v[0] <= 0:
        return False
    if len(v) == 2:
        return v[1] / v[0] >= 4
    lin = [b - a for a, b in zip(v, v[1:])]
    geo = [math.log(b / a) for a, b in zip(v, v[1:])]

    def spread(xs):
        m = sum(xs) / len(xs)
        return (max(xs) - min(xs)) / m if m > 0 else math.inf

    return spread(geo) < spread(lin)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0) or a == b
    return a == b


def _matches(value: Any, allowed: tuple) -> bool:
    return any(_same(value, a) for a in allowed)


def _canon(v: Any) -> Any:
    """A value usable as a dict key / Optuna choice, equal for equal values."""
    if isinstance(v, list):
        return tuple(_canon(x) for x in v)
    if isinstance(v, float) and v.is_integer() and abs(v) < 2**53:
        return v  # keep floats as floats; 1 and 1.0 are merged by _same
    return v


@dataclass(frozen=True)
class Space:
    dims: tuple[Dimension, ...] = ()

    def __len__(self) -> int:
        return len(self.dims)

    def __iter__(self):
        return iter(self.dims)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(d.key for d in self.dims)

    def get(self, key: str) -> Dimension | None:
        return next((d for d in self.dims if d.key == key), None)

    @property
    def discrete(self) -> bool:
        return all(d.discrete for d in self.dims)

    # -- compilation -------------------------------------------------------

    def grid(self, base: Callable[[str], Any], limit: int | None = None) -> list[dict[str, Any]]:
        """Enumerate every configuration (conditions respected, duplicates removed).

        `base(key)` returns the base configuration's value of a dotted key. With
        `limit`, raises GridTooLarge as soon as more than `limit` points are found
        (each point is one leaf of the enumeration: the work is bounded by `limit`).
        """
        out: list[dict[str, Any]] = []
        seen: set = set()
        leaves = [0]

        def rec(i: int, params: dict[str, Any]) -> None:
            if i == len(self.dims):
                leaves[0] += 1
                if limit is not None and leaves[0] > limit:
                    raise GridTooLarge(limit, product_size(self))
                sig = tuple(sorted((k, _sig(v)) for k, v in params.items()))
                if sig not in seen:
                    seen.add(sig)
                    out.append(dict(params))
                return
            d = self.dims[i]
            if not d.active(lambda k: params[k] if k in params else base(k)):
                rec(i + 1, params)
                return
            for v in self.values_of(d):
                params[d.key] = v
                rec(i + 1, params)
                del params[d.key]

        rec(0, {})
        return out

    @staticmethod
    def values_of(d: Dimension) -> Sequence[Any]:
        if d.kind == "int":
            assert d.low is not None and d.high is not None, "an int dimension has its bounds (parsed)"
            step = d.step or 1
            return range(int(d.low), int(d.high) + 1, step)  # lazy: its length is arithmetic
        if not d.discrete:
            raise ValueError(f"{d.key} is continuous and has no grid")
        return d.values

    def suggest(self, trial, base: Callable[[str], Any], grid: bool = False) -> dict[str, Any]:
        """Optuna define-by-run: suggest every active dimension, in order
        (`grid=True`: the trial is an enqueued grid point; see `Dimension.suggest`)."""
        params: dict[str, Any] = {}
        for d in self.dims:
            if d.active(lambda k: params[k] if k in params else base(k)):
                params[d.key] = d.suggest(trial, grid=grid)
        return params


class GridTooLarge(ValueError):
    """A grid with more points than a limit (`Space.grid(base, limit)`)."""

    def __init__(self, limit: int, bound: int):
        self.limit, self.bound = limit, bound
        super().__init__(f"the grid has more than {limit} points per seed (up to {bound:.3g} before conditions); "
                         f"the limit is {limit}")



def _sig(v: Any) -> Any:
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, (int, float)):
        return ("n", float(v))
    return ("o", repr(v))


def product_size(space: Space) -> int:
    """Upper bound of the grid size, without conditions (cheap)."""
    n = 1
    for d in space.dims:
        n *= len(Space.values_of(d)) if d.discrete else 1
    return n
