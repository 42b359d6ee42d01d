"""Declared claims and their verdicts, sized by power (docs/leaderboard.md, "Claims").

A table's ``claims.yaml`` says, before the runs that test them, what the table claims and how big the
paper says the effect is. Three kinds:

- ``difference``: configuration `a` beats `b` on the table's metric by the paper's `effect` (in the
  metric's units). Each side is trained over the same seeds; its learning rate is chosen on the
  validation metric (``lr: best``, its best grid lr by seed mean), or carried (``lr: a``: `b` at the lr
  chosen for `a`), or fixed (a number, or ``{a: lr, b: lr}``: a confirmation run at the lrs a pilot
  chose). The result is reported on the held-out metric (`report`, by default ``test_acc`` for
  ``val_acc``, ``test_bleu`` for ``bleu``): the lr is never picked and scored on the same split. The
  per-seed difference a - b gives a mean, its 90% interval (a seed bootstrap that chooses the lrs again
  in every replicate; the t-interval where both lrs are fixed: a one-sided test at 5% on each side) and
  a standard deviation, the pilot's, from which `power.seeds_needed` says how many
  seeds the paper's effect needs (power 0.8). Verdicts: ``replicates`` (interval above 0),
  ``reversed`` (below 0), ``does not replicate`` (enough seeds, and the interval's upper end below the
  paper's effect), ``underpowered: needs N seeds`` (fewer seeds run than needed: no verdict), else
  ``inconclusive``.
- ``equivalence``: a and b are "the same", "flat", "independent of": the 90% interval of a - b lies within
  +-`margin` (two one-sided tests at 5%), a margin declared in the file. ``equivalent`` /
  ``not equivalent`` (the interval wholly outside the margin) / ``underpowered: needs N seeds`` (planned
  for a true difference of 0: `seeds_needed(sd, margin, power=0.9)`, each one-sided test at power 0.9)
  / ``inconclusive``.
- ``slope``: a probe's log-log slope (a row of ``probe_slopes.csv`` picked by `a`) is at most / at
  least a bound, or within `margin` of `expect` ("bounded", "flat"): ``holds`` / ``fails`` /
  ``underpowered: needs N seeds`` / ``inconclusive``. The per-seed sd is read back from the interval's
  width (half-width / z_0.95 * sqrt(seeds)); the seeds needed are those that resolve the estimate's
  distance from the bound.
- ``transfer``: a leaderboard row's own verdict (`a` picks the row of ``leaderboard.csv`` by its compare
  values or ``label``): whether the reference size's best lr serves every size (the regret criterion,
  docs/leaderboard.md). Its seeds needed: for a decided row the seeds it ran; for an inconclusive one
  the seed count at which its worst_regret interval, shrinking like a t interval's half-width, first
  clears epsilon (the adaptive-seeds rule, `more_seeds`), or more than the most this reports.

Every claim reads the table's own runs unless it names others: ``runs: confirm`` (a confirmation run at the
lrs a pilot chose, stored beside the table as ``confirm.csv``), or a list (``[trials, postln_grid]``: a
row's grid extended by a later run). For a slope claim the default is ``probe_slopes``.

Pre-registration fields (any kind): ``seeds``, the seed count declared before the runs (a table that ran
fewer says so beside its verdict), and ``rules``, the rules version the claim was declared under (a table
judged under another version says so). A transfer claim may declare ``predicts: yes | no``, the verdict the
paper predicts: its verdict then reads ``yes (as predicted)`` or ``no (predicted yes: contradicted)``.

A ``caveat`` (text) is printed beside a decided verdict: what limits it that the statistic cannot see (a
baseline under the protocol's accuracy bar, an optimum at a collapse edge).

The sd of a pilot is itself an estimate: "needs N seeds" is a plan for the next run, not a guarantee.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from nas_stab.config.yamlio import Lines, line_of, load_yaml, read_text
from nas_stab.errors import SpecError, SpecErrors

__all__ = ["KINDS", "Claim", "load_claims"]

KINDS = ("difference", "equivalence", "slope", "transfer")


@dataclass(frozen=True)
class Claim:
    """One declared claim of a table (the module says what each field means for each kind)."""

    id: str
    paper: str
    says: str
    kind: str
    a: Mapping[str, Any] = field(default_factory=dict)
    b: Mapping[str, Any] = field(default_factory=dict)
    metric: str | None = None
    report: str | None = None
    lr: Any = "best"
    effect: float | None = None
    margin: float | None = None
    expect: float = 0.0
    at_most: float | None = None
    at_least: float | None = None
    runs: tuple[str, ...] = ()
    caveat: str = ""
    predicts: str | None = None  # transfer: the verdict the paper predicts (yes | no), declared before the runs
    seeds: int | None = None  # the seed count declared before the runs (a power calculation's, or the protocol's)
    rules: str | None = None  # the rules version the claim was declared under (analysis/rules.py RULES_VERSION)


_REQUIRED = ("id", "paper", "says", "kind")
_NUMBERS = ("effect", "margin", "expect", "at_most", "at_least")


MAX_NUMBER = 1e9  # an effect, margin or bound beyond this is no metric's (the schema's bound on a number, too)


def load_claims(path: str | Path) -> list[Claim]:
    """The claims of a ``claims.yaml``, validated; every problem is reported with its file, line and key."""
    text = read_text(path)
    data, lines = load_yaml(text, file=str(path))
    if not isinstance(data, Mapping) or not isinstance(data.get("claims"), list) or not data["claims"]:
        raise SpecError("expected a mapping with a non-empty list 'claims:'", file=str(path), line=line_of(lines, ()))
    errors: list[SpecError] = []
    out: list[Claim] = []
    for i, item in enumerate(data["claims"]):
        claim = _claim(item, ("claims", i), str(path), lines, errors)
        if claim is not None:
            out.append(claim)
    ids = [c.id for c in out]
    for i, c in enumerate(out):
        if c.id in ids[:i]:
            errors.append(SpecError(f"duplicate claim id {c.id!r}", file=str(path), line=line_of(lines, ("claims", i)),
                                    key=f"claims[{i}].id"))
    if errors:
        raise errors[0] if len(errors) == 1 else SpecErrors(errors)
    return out


def _claim(item: Any, at: tuple, file: str, lines: Lines, errors: list[SpecError]) -> Claim | None:
    """One entry as a `Claim`, or None after adding its problems to `errors`."""
    where = f"claims[{at[1]}]"

    def err(msg: str, key: str | None = None) -> None:
        errors.append(SpecError(msg, file=file, line=line_of(lines, at + ((key,) if key else ())),
                                key=f"{where}.{key}" if key else where))

    if not isinstance(item, Mapping):
        err("expected a mapping (id, paper, says, kind, ...)")
        return None
    known = {f.name for f in fields(Claim)}
    n0 = len(errors)
    for k in item:
        if k not in known:
            err(f"unknown key {k!r}; expected one of {', '.join(sorted(known))}", str(k))
    if not isinstance(item.get("caveat", ""), str):
        err("must be a text (what limits a decided verdict; it is printed beside it)", "caveat")
    for k in _REQUIRED:
        if not isinstance(item.get(k), str) or not item[k].strip():
            err("required: a non-empty text", k)
    for k in _NUMBERS:
        if item.get(k) is not None and (isinstance(item[k], bool) or not isinstance(item[k], (int, float))):
            err(f"must be a number, got {item[k]!r}", k)
        elif item.get(k) is not None and not (math.isfinite(item[k]) and abs(item[k]) <= MAX_NUMBER):
            err(f"must be a finite number of at most {MAX_NUMBER:g} in size, got {item[k]!r}", k)
    if item.get("predicts") is not None and (item.get("kind") != "transfer" or item["predicts"] not in ("yes", "no")):
        err("a transfer claim's predicted verdict: yes or no", "predicts")
    if item.get("seeds") is not None and (isinstance(item["seeds"], bool) or not isinstance(item["seeds"], int) or item["seeds"] < 1):
        err(f"must be a seed count >= 1, got {item['seeds']!r}", "seeds")
    if item.get("rules") is not None and not isinstance(item["rules"], str):
        err(f"must be a rules version as text (e.g. '2026.12'), got {item['rules']!r}", "rules")
    runs = item.get("runs", [])
    if not (isinstance(runs, str) or (isinstance(runs, list) and all(isinstance(r, str) for r in runs))):
        err("must be the name (or a list of names) of the table's run files, e.g. trials or confirm", "runs")
    for k in ("a", "b"):
        if k in item and not isinstance(item[k], Mapping):
            err("must be a mapping of key: value that selects runs (or a probe's slope row)", k)
    if len(errors) > n0:
        return None
    _kind_rules(item, err)
    if len(errors) > n0:
        return None
    args: dict[str, Any] = {k: (dict(v) if k in ("a", "b") else v) for k, v in item.items()}
    if "runs" in args:
        args["runs"] = (args["runs"],) if isinstance(args["runs"], str) else tuple(args["runs"])
    return Claim(**args)


def _kind_rules(item: Mapping[str, Any], err: Callable[[str, str], None]) -> None:
    """What each kind needs: a difference an effect > 0, an equivalence a margin > 0, a slope one bound."""
    kind = item["kind"]
    if kind not in KINDS:
        err(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}", "kind")
        return
    if not item.get("a"):
        err("required: the runs (or probe slope row) the claim is about", "a")
    if kind in ("difference", "equivalence") and not item.get("b"):
        err("required: the runs a is compared with", "b")
    if kind == "difference" and not (item.get("effect") or 0) > 0:
        err("required: the paper's effect, a number > 0 in the metric's units (a better than b by it)", "effect")
    if kind == "equivalence" and not (item.get("margin") or 0) > 0:
        err("required: the equivalence margin, a number > 0 declared before the runs", "margin")
    if kind == "slope":
        bounds = [k for k in ("at_most", "at_least", "margin") if item.get(k) is not None]
        if len(bounds) != 1:
            err("a slope claim needs exactly one of at_most, at_least, margin (with expect)", "kind")
    lr = item.get("lr", "best")
    if isinstance(lr, Mapping):
        if set(lr) != {"a", "b"} or not all(_positive(v) for v in lr.values()):
            err(f"a mapping of lrs must be {{a: lr, b: lr}} with positive numbers, got {dict(lr)!r}", "lr")
    elif not (lr in ("best", "a") or _positive(lr)):
        err(f"must be best (each side's best lr on the metric), a (b at a's lr), a positive number or {{a: lr, b: lr}}, "
            f"got {lr!r}", "lr")


def _positive(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and 0 < v <= MAX_NUMBER
