"""Search dimensions (docs/experiment-file.md): parsing, grid enumeration and Optuna define-by-run.

A `Space` is an ordered tuple of `Dimension`s, each keyed by a dotted path
into the base configuration. The same `Space` compiles two ways:

- `Space.grid(base)`: every combination (conditions respected, duplicates
  removed), as a list of ``{key: value}`` dicts;
- `Space.suggest(trial, base)`: an Optuna define-by-run function.

A dimension with ``when: {key: value or [values]}`` is only sampled when the
condition holds against the values chosen so far (or the base value of a key
that is not searched); otherwise the base value stands and the key is absent
from the trial's parameters.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nas_stab.errors import SpecError

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
            return trial.suggest_int(self.key, int(self.low), int(self.high), step=self.step or 1, log=self.log)
        return trial.suggest_float(self.key, self.low, self.high, log=self.log)

    def grid_distribution(self):
        """The numeric Optuna distribution of a discrete dimension's values, or None
        when a value is not a number (strings, booleans, null: categorical)."""
        import optuna.distributions as d

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
        import optuna.distributions as d

        if self.kind in ("values", "log_grid", "grid"):
            return d.CategoricalDistribution(list(self.values))
        if self.kind == "int":
            return d.IntDistribution(int(self.low), int(self.high), step=self.step or 1, log=self.log)
        return d.FloatDistribution(self.low, self.high, log=self.log)


def _suggest_numeric(trial, key: str, dist) -> Any:
    import optuna.distributions as d

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
    def values_of(d: Dimension) -> tuple:
        if d.kind == "int":
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


MAX_GRID_COUNT = 100_000  # points of one grid / log_grid dimension
MAX_BOUND = 10**9  # ends of grid, int, uniform dimensions


def _sig(v: Any) -> Any:
    if isinstance(v, bool):
        return ("b", v)
    if isinstance(v, (int, float)):
        return ("n", float(v))
    return ("o", repr(v))


# ------------------------------------------------------------------ parsing


def parse_space(raw: Any, err: Callable[[tuple, str], SpecError], is_key: Callable[[str], str | None]) -> Space:
    """Parse the `space:` mapping.

    `err(path, message)` builds a located error; `is_key(dotted)` returns None
    for a valid configuration key, or an error message (with a suggestion).
    """
    if raw is None:
        return Space()
    if not isinstance(raw, dict):
        raise err(("space",), "must be a mapping of dotted key -> values or a distribution")
    dims = []
    for key, spec in raw.items():
        path = ("space", key)
        problem = is_key(key)
        if problem:
            raise err(path, problem)
        dims.append(_parse_dim(key, spec, path, err, is_key))
    return Space(_order(dims, err))


def _pair(x: Any, n: int, what: str, path: tuple, err) -> list:
    if not isinstance(x, list) or len(x) != n:
        raise err(path, f"{what} takes a list of {n} numbers, got {x!r}")
    for v in x:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise err(path, f"{what} takes numbers, got {v!r}")
        if abs(v) > MAX_BOUND:
            raise err(path, f"{what} takes numbers between -{MAX_BOUND:g} and {MAX_BOUND:g}, got {v!r}")
    return x


def _parse_dim(key: str, spec: Any, path: tuple, err, is_key) -> Dimension:
    when: tuple = ()
    if isinstance(spec, list):
        spec = {"values": spec}
    if not isinstance(spec, dict):
        raise err(path, f"must be a list of values or a mapping with one of {', '.join(KINDS)}; got {spec!r}")
    spec = dict(spec)
    if "when" in spec:
        w = spec.pop("when")
        if not isinstance(w, dict) or not w:
            raise err(path + ("when",), "must be a mapping {key: value or [values]}")
        conds = []
        for ck, cv in w.items():
            problem = is_key(ck)
            if problem:
                raise err(path + ("when", ck), problem)
            if ck == key:
                raise err(path + ("when", ck), "a dimension cannot be conditioned on itself")
            allowed = tuple(_canon(v) for v in (cv if isinstance(cv, list) else [cv]))
            conds.append((ck, allowed))
        when = tuple(conds)
    kinds = [k for k in KINDS if k in spec]
    if len(kinds) != 1:
        from nas_stab.textfmt import did_you_mean

        extra = [k for k in spec if k not in KINDS and k not in ("step", "log")]
        hint = did_you_mean(extra[0], KINDS) if extra else ""
        raise err(path, f"needs exactly one of {', '.join(KINDS)}, got {sorted(spec) or 'none'}{hint}")
    kind = kinds[0]
    allowed_extra = {"int": {"step", "log"}}.get(kind, set())
    for k in spec:
        if k != kind and k not in allowed_extra:
            raise err(path + (k,), f"unknown option for a {kind} dimension")
    body = spec[kind]
    p = path + (kind,)
    if kind == "values":
        if not isinstance(body, list) or not body:
            raise err(p, "needs a non-empty list of values")
        for v in body:
            if isinstance(v, (dict, list)):
                raise err(p, f"values must be scalars (numbers, strings, booleans, null), got {v!r}")
        vals = tuple(_canon(v) for v in body)
        uniq = []
        for v in vals:
            if not any(_same(v, u) and type(v) is type(u) for u in uniq):
                uniq.append(v)
        return Dimension(key, kind, tuple(uniq), when=when)
    if kind in ("log_grid", "grid"):
        lo, hi, n = _pair(body, 3, kind, p, err)
        if isinstance(n, float) and not n.is_integer() or not 1 <= n <= MAX_GRID_COUNT:
            raise err(p, f"the third entry is a count from 1 to {MAX_GRID_COUNT}, got {n!r}")
        n = int(n)
        if hi < lo:
            raise err(p, f"low {lo} is above high {hi}")
        if kind == "log_grid":
            if lo <= 0:
                raise err(p, f"log_grid needs low > 0, got {lo}")
            vals = [lo] if n == 1 else [math.exp(math.log(lo) + i * (math.log(hi) - math.log(lo)) / (n - 1)) for i in range(n)]
            vals = [float(f"{v:.6g}") for v in vals]
        else:
            vals = [lo] if n == 1 else [lo + i * (hi - lo) / (n - 1) for i in range(n)]
            if all(isinstance(x, int) for x in (lo, hi)) and all(float(v).is_integer() for v in vals):
                vals = [int(v) for v in vals]
            else:
                vals = [float(f"{v:.10g}") for v in vals]
        return Dimension(key, kind, tuple(dict.fromkeys(vals)), when=when)
    if kind in ("uniform", "loguniform"):
        lo, hi = _pair(body, 2, kind, p, err)
        if hi <= lo:
            raise err(p, f"low {lo} must be below high {hi}")
        if kind == "loguniform" and lo <= 0:
            raise err(p, f"loguniform needs low > 0, got {lo}")
        return Dimension(key, kind, low=float(lo), high=float(hi), log=kind == "loguniform", when=when)
    # int
    lo, hi = _pair(body, 2, "int", p, err)
    if not all(float(v).is_integer() for v in (lo, hi)):
        raise err(p, f"int bounds must be integers, got {body!r}")
    step = spec.get("step", 1)
    if isinstance(step, bool) or not isinstance(step, int) or step < 1:
        raise err(path + ("step",), f"must be an integer >= 1, got {step!r}")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise err(path + ("log",), f"must be true or false, got {log!r}")
    if hi < lo:
        raise err(p, f"low {lo} is above high {hi}")
    if log and (lo < 1 or step != 1):
        raise err(p, "log int dimensions need low >= 1 and step 1")
    return Dimension(key, kind, low=int(lo), high=int(hi), log=log, step=step, when=when)


def _order(dims: list[Dimension], err) -> tuple[Dimension, ...]:
    """Topologically order dimensions so conditions see their keys first."""
    by_key = {d.key: d for d in dims}
    done: list[Dimension] = []
    state: dict[str, int] = {}

    def visit(d: Dimension, chain: tuple) -> None:
        if state.get(d.key) == 2:
            return
        if state.get(d.key) == 1:
            raise err(("space", d.key, "when"), "conditions form a cycle: " + " -> ".join(chain + (d.key,)))
        state[d.key] = 1
        for k, _ in d.when:
            if k in by_key:
                visit(by_key[k], chain + (d.key,))
        state[d.key] = 2
        done.append(d)

    for d in dims:
        visit(d, ())
    return tuple(done)


def product_size(space: Space) -> int:
    """Upper bound of the grid size, without conditions (cheap)."""
    n = 1
    for d in space.dims:
        n *= len(Space.values_of(d)) if d.discrete else 1
    return n


__all__ = ["Dimension", "GridTooLarge", "Space", "parse_space", "product_size"]
