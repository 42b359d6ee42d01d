"""The rules of the ``leaderboard:`` section: the size axis, the learning rate, the compared keys, the
reference row, and the warnings a valid table can still earn (only `inconclusive` verdicts)."""
from __future__ import annotations

import math
from typing import Protocol

from nas_stab import metrics
from nas_stab.config.keys import check_key
from nas_stab.config.mode import search_mode
from nas_stab.config.schema import Spec
from nas_stab.errors import SpecError, SpecErrors
from nas_stab.metrics import parse_epsilon
from nas_stab.space import Space
from nas_stab.textfmt import did_you_mean


class RuleCtx(Protocol):
    """What the leaderboard rules ask of their context: the error naming a broken key (a `build.Ctx`, or
    results/leaderboard.py's, which names the flag that set it)."""

    def error(self, path: tuple, message: str) -> SpecError: ...


def check_leaderboard(spec: Spec, ctx: RuleCtx, *, stored: bool = False, axes: bool = True) -> None:
    """The rules of ``leaderboard:``: of an experiment file, and of the same values given as flags of
    `nas-stab leaderboard` (results/leaderboard.py checks them with a Ctx that names the flags).
    `stored`: a run directory's spec.yaml, which opens even if it predates a rule. `axes`: also the
    rules against this spec's space (the searched sizes and lrs), which a table of several runs
    (each may search other sizes, or none) does not follow."""
    errors: list[SpecError] = []
    for part in (lambda: _check_axis_keys(spec, ctx, stored, axes), lambda: _check_values(spec, ctx)):
        try:  # independent: both reported
            part()
        except SpecError as e:
            errors.append(e)
    if errors:
        raise errors[0] if len(errors) == 1 else SpecErrors(errors)


def _check_axis_keys(spec: Spec, ctx: RuleCtx, stored: bool, axes: bool) -> None:
    """The table's keys exist, each has its role, and (`axes`) the space searches them as a table needs."""
    lb = spec.leaderboard
    for path, key in [(("leaderboard", "lr"), lb.lr), (("leaderboard", "transfer"), lb.transfer)] + [
        (("leaderboard", "compare", i), k) for i, k in enumerate(lb.compare)
    ]:
        if key is None:
            continue
        problem = check_key(spec, key)
        if problem:
            raise ctx.error(path, problem)
    if not stored:
        _check_roles(spec, ctx)
        if axes:
            _check_axes(spec, ctx)
            _check_reference(spec, ctx)


def _check_values(spec: Spec, ctx: RuleCtx) -> None:
    """epsilon, metric and report are values the table's keys do not decide."""
    lb = spec.leaderboard
    try:
        parse_epsilon(lb.epsilon)
    except ValueError as e:
        raise ctx.error(("leaderboard", "epsilon"), str(e)) from None
    if lb.metric is not None and lb.metric not in metrics.OBJECTIVES:
        raise ctx.error(("leaderboard", "metric"), f"unknown metric {lb.metric!r}" + did_you_mean(lb.metric, metrics.OBJECTIVES))
    if lb.report is not None and lb.report != "none" and lb.report not in metrics.REPORTS:
        raise ctx.error(("leaderboard", "report"), f"unknown metric {lb.report!r} (or 'none')" + did_you_mean(lb.report, metrics.REPORTS))


def is_lr_key(key: str) -> bool:
    """Whether a dotted key holds a learning rate (``train.lr``; a future ``*_lr`` key too)."""
    leaf = key.split(".")[-1]
    return leaf == "lr" or leaf.endswith("_lr")


def _check_roles(spec: Spec, ctx: RuleCtx) -> None:
    """Each key of the table has one role: the lr is a learning rate, the size axis is not the lr,
    the row labels are neither; the tolerance is a finite number of octaves; a reference size needs
    a size axis."""
    lb = spec.leaderboard
    if not is_lr_key(lb.lr):
        raise ctx.error(("leaderboard", "lr"), f"{lb.lr!r} is not a learning rate (the table's lr axis is train.lr)")
    if lb.transfer is not None and lb.transfer == lb.lr:
        raise ctx.error(("leaderboard", "transfer"), f"{lb.transfer!r} is the learning rate (leaderboard.lr): the size "
                        "axis across which one lr should transfer must be another searched key")
    for i, k in enumerate(lb.compare):
        if k in (lb.lr, lb.transfer):
            role = "the learning rate (leaderboard.lr)" if k == lb.lr else "the size axis (leaderboard.transfer)"
            raise ctx.error(("leaderboard", "compare", i), f"{k!r} is {role}: the row labels are the other keys")
    tol = lb.tolerance_octaves
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not math.isfinite(tol) or not tol > 0:
        raise ctx.error(("leaderboard", "tolerance_octaves"), f"must be a finite number of octaves > 0, got {tol!r}")
    if lb.reference is not None and lb.transfer is None:
        raise ctx.error(("leaderboard", "reference"), f"{lb.reference!r} is a size of leaderboard.transfer, which is not set")


def _check_reference(spec: Spec, ctx: RuleCtx) -> None:
    """leaderboard.reference is one of the sizes searched (16 and 16.0 are one size)."""
    lb = spec.leaderboard
    ref = lb.reference
    if ref is None or lb.transfer is None:
        return
    d = spec.space.get(lb.transfer)
    if d is None:
        return  # _check_axes names the size axis
    if d.discrete:
        sizes = list(spec.space.values_of(d))
        ok = any(same_value(ref, v) for v in sizes)
        shown = ", ".join(map(str, sizes[:20])) + (", ..." if len(sizes) > 20 else "")
    else:
        ok = isinstance(ref, (int, float)) and not isinstance(ref, bool) and d.low <= ref <= d.high
        shown = f"[{d.low:g}, {d.high:g}]"
    if not ok:
        raise ctx.error(("leaderboard", "reference"), f"{ref!r} is not a searched size of {lb.transfer}: {shown}")


def same_value(a, b) -> bool:
    """16 and 16.0 are one size; a text is itself; nan is none."""
    num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    if num(a) and num(b):
        return float(a) == float(b)
    return type(a) is type(b) and a == b


def n_values(d) -> float:
    """How many values a searched dimension takes (inf for a continuous one)."""
    return len(Space.values_of(d)) if d.discrete else math.inf


def _check_axes(spec: Spec, ctx: RuleCtx) -> None:
    """A transfer leaderboard needs its size axis searched with >= 2 values and its lr with >= 3:
    one size has nothing to transfer to, and with two lrs every optimum is at the grid's end."""
    lb = spec.leaderboard
    if lb.transfer is None:
        return
    d = spec.space.get(lb.transfer)
    if d is None or n_values(d) < 2:
        got = "is not searched" if d is None else f"is searched with only {n_values(d)} value"
        raise ctx.error(("leaderboard", "transfer"), f"{lb.transfer!r} {got}: the size axis of an lr-transfer "
                        f"leaderboard must be a key of space: with at least 2 values")
    d = spec.space.get(lb.lr)
    if d is None:
        return  # a fixed learning rate: the table compares the sizes at it (leaderboard_warnings says so)
    if search_mode(spec).brackets:
        return  # a coarse start: the sampler adds learning rates until each optimum is bracketed
    if n_values(d) < 3:
        raise ctx.error(("leaderboard", "lr"), f"{lb.lr!r} is searched with only {n_values(d)} value(s): an lr-transfer "
                        f"leaderboard needs the learning rate searched with at least 3 values (with fewer, every "
                        f"optimum lies at the grid's end); leave it out of space: to compare the sizes at one fixed lr")


def leaderboard_warnings(spec: Spec) -> list[str]:
    """Settings that are valid but can only give `inconclusive` verdicts (printed, not errors)."""
    lb = spec.leaderboard
    if lb.transfer is None:
        return []
    out = []
    if len(spec.seeds) < 3:
        out.append(f"seeds: {len(spec.seeds)} seed(s); the leaderboard needs at least 3 for a 'yes' or a drift-based "
                   "'no', so its verdicts can only be 'inconclusive' (or 'no' for a size where no lr trains)")
    pruner = spec.search.pruner.name
    if pruner not in ("none", "sweep"):
        out.append(f"search.pruner: {pruner} compares each run with every other trial, other sizes and rows included, "
                   "and stops those that are merely slower (the table counts them as failures); "
                   "pruner sweep compares a run only with the other learning rates of its own configuration")
    d = spec.space.get(lb.lr)
    if d is None:
        out.append(f"leaderboard.lr: {lb.lr} is not searched, so the table compares the sizes at one fixed learning "
                   "rate (a figure such as the tau paper's Figure 1), not an lr-transfer test: a verdict is "
                   "'inconclusive' (one lr), or 'no' for a size that does not train at that lr, never 'yes'")
    elif search_mode(spec).brackets:
        res = spec.search.bracket.resolution_octaves
        if res > 1 + 1e-9:
            out.append(f"search.bracket.resolution_octaves: {res:g} octaves is coarser than 1 octave; optima between "
                       "its points cannot be located to the tolerance, so verdicts may only be 'inconclusive'")
    elif d is not None and d.discrete:
        try:
            lrs = sorted(float(v) for v in spec.space.values_of(d) if float(v) > 0)
        except (TypeError, ValueError):
            lrs = []
        gaps = [math.log2(b / a) for a, b in zip(lrs, lrs[1:])]
        if gaps and max(gaps) > 1 + 1e-9:
            out.append(f"space.{lb.lr}: the lr grid is coarser than 1 octave (largest step {max(gaps):.2f} octaves); "
                       "optima between grid points cannot be located to the tolerance, so verdicts may only be "
                       "'inconclusive'")
    return out
