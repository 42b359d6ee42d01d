"""The searched values' rules: every point of the space must make a valid configuration (checked on a
sample of at most GRID_CHECK_LIMIT points), and values read at run time are checked where they are read."""
from __future__ import annotations

import copy
import dataclasses

from nas_stab.config.build import Ctx
from nas_stab.config.keys import get_key
from nas_stab.config.mode import search_mode
from nas_stab.config.resolve import resolve
from nas_stab.config.schema import Spec
from nas_stab.errors import SpecError, SpecErrors
from nas_stab.space import GridTooLarge

GRID_CHECK_LIMIT = 20_000


def check_space_values(spec: Spec, ctx: Ctx) -> None:
    base = lambda k: get_key(spec, k)  # noqa: E731

    points = None
    if spec.space.discrete and spec.space.dims:
        try:  # stops at the limit: a 10^9-point grid is refused, never enumerated
            points = spec.space.grid(base, limit=GRID_CHECK_LIMIT)
        except GridTooLarge as e:
            if search_mode(spec).job_source:  # every point is trained: too many is an error
                raise ctx.error(("space",), str(e)) from None
    if points is None:  # continuous or too many points to check them all: each dimension's ends and values
        points = []
        for d in spec.space:
            vals = d.values if d.discrete and d.kind != "int" else (d.low, d.high)
            vals = vals if len(vals) <= 1000 else (vals[0], vals[-1])
            points += [{d.key: v} for v in vals]
    if search_mode(spec).brackets:  # the learning rates bracket may add
        points = points + [{spec.leaderboard.lr: v} for v in spec.search.bracket.lr_limits]
    # a problem of the base configuration itself is reported by its own key, not once per searched point; the
    # searched values are then checked on the base with each such key removed (at its default), so that a wrong
    # searched value shows in the same report rather than once the base is fixed
    base_problems: set = set()
    repaired = spec
    for _ in range(20):
        try:
            resolve(repaired, {d.key: base(d.key) for d in spec.space})
            break
        except SpecError as err:
            errs = err.errors if isinstance(err, SpecErrors) else [err]
            base_problems |= {(e.key, e.message) for e in errs}
            raw = copy.deepcopy(repaired.raw)
            popped = [e for e in errs if e.key and _pop_path(raw, e.key.split("."))]
            if not popped:  # a rule between keys, none of them written: the others are still popped where they come
                break
            repaired = dataclasses.replace(repaired, raw=raw)
    # each point resolved once: a dimension's value that fails on its own key at every point it is in is a bad value
    # (all of them named, one line per dimension); another problem is a combination's, reported by its first point
    tried: dict[tuple[str, str], list[SpecError | None]] = {}  # (key, repr(value)) -> its own-key error per point
    combo_error = None
    for params in points:
        try:
            resolve(repaired, params)
            for k, v in params.items():
                tried.setdefault((k, repr(v)), []).append(None)
        except SpecError as err:
            new = [e for e in (err.errors if isinstance(err, SpecErrors) else [err]) if (e.key, e.message) not in base_problems]
            for k, v in params.items():  # a point that failed on another key says nothing of this value
                own = next((e for e in new if e.key == k or str(e.key).startswith(k + ".")), None)
                if own is not None:
                    tried.setdefault((k, repr(v)), []).append(own)
            if new and combo_error is None:
                bad = new[0]
                culprit = next((k for k in params if bad.key and (bad.key == k or bad.key.startswith(k + "."))), None)
                culprit = culprit or next(iter(params))
                combo = ", ".join(f"{k}={v!r}" for k, v in params.items())
                combo_error = ctx.error(("space", culprit), f"the configuration {{{combo}}} is invalid: "
                                        f"{bad.key + ': ' if bad.key else ''}{bad.message}")
    errors = []
    for d in spec.space:
        bad_values = [(v, first) for (k, v), errs in tried.items()
                      if k == d.key and errs and all(errs) and (first := errs[0]) is not None]
        if len(bad_values) == 1:
            v, why = bad_values[0]
            errors.append(ctx.error(("space", d.key), f"the value {v} is invalid: {why.key}: {why.message}"))
        elif bad_values:
            errors.append(ctx.error(("space", d.key), f"{len(bad_values)} values are invalid: " + "; ".join(
                f"{v} ({why.key}: {why.message})" for v, why in bad_values[:8]) + ("; ..." if len(bad_values) > 8 else "")))
    if errors:
        raise errors[0] if len(errors) == 1 else SpecErrors(errors)
    if combo_error is not None:
        raise combo_error


def _pop_path(data, parts: list) -> bool:
    """Remove a dotted key from nested mappings; whether it was there."""
    for p in parts[:-1]:
        data = data.get(p) if isinstance(data, dict) else None
    return isinstance(data, dict) and data.pop(parts[-1], None) is not None
