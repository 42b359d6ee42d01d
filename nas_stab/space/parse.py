"""The `space:` section of an experiment file: `parse_space` reads it into a `Space` (docs/experiment-file.md)."""
from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from nas_stab.errors import SpecError
from nas_stab.space.dimensions import KINDS, Dimension, Space, _canon, _same
from nas_stab.textfmt import did_you_mean

MAX_GRID_COUNT = 100_000  # points of one grid / log_grid dimension
MAX_BOUND = 10**9  # ends of grid, int, uniform dimensions


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
    if isinstance(spec, list):
        spec = {"values": spec}
    if not isinstance(spec, dict):
        raise err(path, f"must be a list of values or a mapping with one of {', '.join(KINDS)}; got {spec!r}")
    spec = dict(spec)
    when = _parse_when(key, spec.pop("when"), path + ("when",), err, is_key) if "when" in spec else ()
    kind = _kind_of(spec, path, err)
    body, p = spec[kind], path + (kind,)
    if kind == "values":
        return Dimension(key, kind, _parse_values(body, p, err), when=when)
    if kind in ("log_grid", "grid"):
        return Dimension(key, kind, _parse_grid(kind, body, p, err), when=when)
    if kind in ("uniform", "loguniform"):
        lo, hi = _parse_range(kind, body, p, err)
        return Dimension(key, kind, low=lo, high=hi, log=kind == "loguniform", when=when)
    return _parse_int(key, spec, body, path, err, when)


def _parse_when(key: str, w: Any, path: tuple, err, is_key) -> tuple:
    """`when: {key: value or [values]}`: ((key, (allowed values...)), ...)."""
    if not isinstance(w, dict) or not w:
        raise err(path, "must be a mapping {key: value or [values]}")
    conds = []
    for ck, cv in w.items():
        problem = is_key(ck)
        if problem:
            raise err(path + (ck,), problem)
        if ck == key:
            raise err(path + (ck,), "a dimension cannot be conditioned on itself")
        allowed = tuple(_canon(v) for v in (cv if isinstance(cv, list) else [cv]))
        conds.append((ck, allowed))
    return tuple(conds)


def _kind_of(spec: dict, path: tuple, err) -> str:
    """The one kind of KINDS the mapping (`when` taken out) gives, with no option that kind does not take."""
    kinds = [k for k in KINDS if k in spec]
    if len(kinds) != 1:
        extra = [k for k in spec if k not in KINDS and k not in ("step", "log")]
        hint = did_you_mean(extra[0], KINDS) if extra else ""
        raise err(path, f"needs exactly one of {', '.join(KINDS)}, got {sorted(spec) or 'none'}{hint}")
    kind = kinds[0]
    allowed_extra = {"int": {"step", "log"}}.get(kind, set())
    for k in spec:
        if k != kind and k not in allowed_extra:
            raise err(path + (k,), f"unknown option for a {kind} dimension")
    return kind


def _parse_values(body: Any, p: tuple, err) -> tuple:
    """`values: [...]`: scalars, in order, duplicates removed."""
    if not isinstance(body, list) or not body:
        raise err(p, "needs a non-empty list of values")
    for v in body:
        if isinstance(v, (dict, list)):
            raise err(p, f"values must be scalars (numbers, strings, booleans, null), got {v!r}")
    vals = tuple(_canon(v) for v in body)
    uniq: list = []
    for v in vals:
        if not any(_same(v, u) and type(v) is type(u) for u in uniq):
            uniq.append(v)
    return tuple(uniq)


def _parse_grid(kind: str, body: Any, p: tuple, err) -> tuple:
    """`grid` or `log_grid: [low, high, count]`: the values, evenly spaced (log-spaced), duplicates removed."""
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
    return tuple(dict.fromkeys(vals))


def _parse_range(kind: str, body: Any, p: tuple, err) -> tuple[float, float]:
    """`uniform` or `loguniform: [low, high]`."""
    lo, hi = _pair(body, 2, kind, p, err)
    if hi <= lo:
        raise err(p, f"low {lo} must be below high {hi}")
    if kind == "loguniform" and lo <= 0:
        raise err(p, f"loguniform needs low > 0, got {lo}")
    return float(lo), float(hi)


def _parse_int(key: str, spec: dict, body: Any, path: tuple, err, when: tuple) -> Dimension:
    """`int: [low, high]` with the options `step` and `log`."""
    p = path + ("int",)
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
    return Dimension(key, "int", low=int(lo), high=int(hi), log=log, step=step, when=when)


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
