"""The verdict rules of the leaderboard (yes / no / inconclusive, with why) and the stable lr range
(docs/leaderboard.md)."""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from nas_stab.analysis.carried import NEAR_OCTAVES
from nas_stab.analysis.optimum import EPS
from nas_stab.analysis.values import fmt_value
from nas_stab.metrics import parse_epsilon

__all__ = ["CARRIED_SEEDS", "CRITERIA", "DEFAULT_EPSILON", "MIN_SEEDS", "RULES", "VERDICT_ORDER", "Rule", "parse_epsilon", "rank",
           "rules_markdown", "stable", "verdicts"]

VERDICT_ORDER = {"yes": 0, "inconclusive": 1, "no": 2}
CRITERIA = ("regret", "drift")
# the regret a "yes" allows by default: 3% of the row's gap between its best value and the no-learning
# value m0 (docs/leaderboard.md, Epsilon): 2.4 points of accuracy for a row at 0.90 on 10 classes
DEFAULT_EPSILON = "3%"
MIN_SEEDS = 3  # a yes or a no needs at least this many seeds in every cell its optima rest on
# a yes where a cell near the carried lr partly failed (some seeds learned, others did not: a regime that fails at
# random) needs this many seeds in the carried lr's own cells at every size: 3 clean seeds miss a 20% failure rate
# half the time (docs/leaderboard.md, "Never on an open end"; carried.NEAR_OCTAVES says how near)
CARRIED_SEEDS = 10


@dataclass(frozen=True)
class _Facts:
    """What the rules read of one row: its columns `r`, its per-size columns `g` (`_size_columns`) and the names of
    its sizes, the interval the criterion judges (lo, hi), its bound (epsilon or the tolerance) and how `why` writes
    them (ci, unit), the sizes where no lr trains (dead), whether every optimum rests on enough seeds, the room a
    drift verdict on unrefined optima needs, and the censored optima (name, side, lr, a bracket sweep's end)."""

    r: dict
    g: dict
    name: np.ndarray
    sized: bool
    criterion: str
    lo: float
    hi: float
    bound: float
    ci: str
    unit: str
    dead: list[str]
    enough: bool
    room: float
    cens: list[tuple]


@dataclass(frozen=True)
class Rule:
    """One verdict rule: where it applies (`when`, rendered in docs/leaderboard.md) and `reasons(facts)`, the `why`
    texts it writes where it fires (none: it does not)."""

    verdict: str  # "no" | "inconclusive"
    name: str
    when: str
    reasons: Callable[[_Facts], list[str]]


def _dead(f: _Facts) -> list[str]:
    if f.sized and f.dead:
        return [("size " if len(f.dead) == 1 else "sizes ") + ", ".join(f.dead)]
    if f.dead:
        return ["no lr trains" if not f.g["all_diverged"].all() else "diverged at every lr"]
    return []


def _beyond(f: _Facts) -> list[str]:
    fires = f.sized and np.isfinite(f.lo) and f.enough and f.lo > f.bound + f.room + EPS
    return [f"{f.ci} > {f.unit}"] if fires else []


def _one_size(f: _Facts) -> list[str]:
    if not f.sized:
        return ["no size axis"]
    return ["1 size"] if f.r["sizes"] < 2 else []


def _seeds(f: _Facts) -> list[str]:
    r = f.r
    if r["seeds"] < MIN_SEEDS:
        return [f"{int(r['seeds'])} seed{'s' if r['seeds'] != 1 else ''}"]
    if not f.enough:
        few = [f"{n} ({int(k)})" for n, k, t in zip(f.name, f.g["rest_seeds"], f.g["trains"]) if t and k < MIN_SEEDS]
        return ["too few seeds at the optimum of " + ", ".join(few)]
    return []


def _censored(f: _Facts) -> list[str]:
    # a censored optimum is never "yes", whatever stopped the search there (a bracket sweep's end, e.g. "limit", is
    # named beside it)
    if f.cens and f.sized:
        return ["censored at " + ", ".join(f"{n} ({c}{lr:.3g}{e})" if c != "=" else f"{n} (one lr{e})" for n, c, lr, e in f.cens)]
    if f.cens:
        c, lr, e = f.cens[0][1], f.cens[0][2], f.cens[0][3]
        return [f"one lr{e}" if c == "=" else f"censored ({c}{lr:.3g}{e})"]
    return []


def _coarse(f: _Facts) -> list[str]:
    step = f.r["grid_max_step"]
    return [f"lr grid step {step:.2f} > 1 oct"] if f.sized and step > 1 + EPS else []


def _interval(f: _Facts) -> list[str]:
    if not (f.sized and f.r["sizes"] >= 2):
        return []
    return _interval_reasons(f.r, f.lo, f.hi, f.bound, f.room, f.ci, f.unit, bool(f.cens), f.criterion, f.name, f.g)


# the rules in the order they are read: a row is "no" where a "no" rule fires (every one that fires in `why`), else
# "inconclusive" where an "inconclusive" rule fires (every reason in `why`), else "yes" (docs/leaderboard.md renders
# this table: `rules_markdown`)
RULES: tuple[Rule, ...] = (
    Rule("no", "a size does not train", "some size has no lr that trains (every run diverged, or none beats m0 by the margin)", _dead),
    Rule("no", "the interval is beyond the bound",
         f"a size axis, at least {MIN_SEEDS} seeds in every cell an optimum rests on, and the lower end of the judged "
         "interval (worst_regret; lr_drift with criterion drift) above the bound (epsilon; tolerance_octaves, plus a "
         "grid step where a drift verdict's optima are unrefined)", _beyond),
    Rule("inconclusive", "fewer than two sizes", "no size axis, or one size", _one_size),
    Rule("inconclusive", "too few seeds", f"fewer than {MIN_SEEDS} seeds, or fewer than {MIN_SEEDS} in the cells the "
         "optimum of some size that trains rests on (its grid lr and the tried lr on each side)", _seeds),
    Rule("inconclusive", "a censored optimum", "some size's optimum lies at an end of its lr grid (or it has one lr)", _censored),
    Rule("inconclusive", "a coarse grid", "an lr grid step wider than 1 octave (a size axis)", _coarse),
    Rule("inconclusive", "the interval does not decide",
         "with at least two sizes: no interval, an interval open above (never decided on: why says what closes it), "
         "an upper end above the bound (the interval straddles it, or lies above it where rule 2 does not apply); with "
         "the regret "
         f"criterion also a cell within {NEAR_OCTAVES:g} octaves of the carried lr that partly failed, where the carried "
         f"lr's cells hold fewer than {CARRIED_SEEDS} seeds that learn, or a run of the carried lr's cells that did not "
         "learn", _interval),
)


def rules_markdown() -> str:
    """The verdict rules as the table docs/leaderboard.md shows ("The rules, in order")."""
    out = ["| # | verdict | rule | fires when |", "| --- | --- | --- | --- |"]
    out += [f"| {i} | `{r.verdict}` | {r.name} | {r.when} |" for i, r in enumerate(RULES, 1)]
    out.append(f"| {len(RULES) + 1} | `yes` | otherwise | no rule above fires |")
    return "\n".join(out) + "\n"


def verdicts(rows: pd.DataFrame, sizes: pd.DataFrame, size_vals: list, lr_float: np.ndarray, *, tolerance: float,
             sized: bool, criterion: str = "regret") -> None:
    """Fill ``transfers`` (yes / no / inconclusive) and ``why`` by the `RULES` (docs/leaderboard.md)."""
    said, whys = [], []
    sz = sizes.sort_values(["_k", "_s"], kind="mergesort")
    bounds = np.searchsorted(sz["_k"].to_numpy(), rows.index.to_numpy(), side="left")
    ends = np.searchsorted(sz["_k"].to_numpy(), rows.index.to_numpy(), side="right")
    cols = _size_columns(sz)
    names = np.array([fmt_value(v[1]) for v in size_vals], dtype=object)
    need = ["lr_drift_lo", "lr_drift_hi", "worst_regret_lo", "worst_regret_hi", "epsilon", "seeds", "min_seeds", "sizes",
            "grid_max_step", "grid_step", "_unrefined"]
    for i, r in enumerate(rows[need].to_dict("records")):
        f = _facts(r, {c: v[bounds[i]:ends[i]] for c, v in cols.items()}, names, sized, criterion, tolerance)
        verdict, why = "yes", f"{f.ci} <= {f.unit}"
        for level in ("no", "inconclusive"):
            reasons = [text for rule in RULES if rule.verdict == level for text in rule.reasons(f)]
            if reasons:
                verdict, why = level, "; ".join(reasons)
                break
        said.append(verdict)
        whys.append(why)
    rows["transfers"] = said
    rows["why"] = whys


def _facts(r: dict, g: dict, names: np.ndarray, sized: bool, criterion: str, tolerance: float) -> _Facts:
    g["all_diverged"] = pd.Series(g["all_diverged"])
    name = names[g["_s"]]
    if criterion == "drift":
        lo, hi, bound = r["lr_drift_lo"], r["lr_drift_hi"], tolerance
        ci = f"lr_drift {lo:.2f}-{hi:.2f}" if np.isfinite(lo) else ""
        unit = f"{tolerance:g} oct"
    else:
        lo, hi, bound = r["worst_regret_lo"], r["worst_regret_hi"], r["epsilon"]
        ci = f"worst_regret {_n(lo)}-{_n(hi)}" if np.isfinite(lo) else ""
        unit = f"epsilon {_n(bound)}"
    dead = [f"{n}: {'diverged' if d else 'no lr trains'}" for n, t, d in zip(name, g["trains"], g["all_diverged"]) if not t]
    # a drift verdict resting on optima located only to their grid points needs a step of room
    room = r["grid_step"] if (criterion == "drift" and r["_unrefined"]) else 0.0
    cens = [(n, c, lr, f", {e}" if e else "") for n, c, lr, e in zip(name, g["censored"], g["grid_lr"], g["end"]) if c]
    return _Facts(r=r, g=g, name=name, sized=sized, criterion=criterion, lo=lo, hi=hi, bound=bound, ci=ci, unit=unit,
                  dead=dead, enough=r["min_seeds"] >= MIN_SEEDS, room=room, cens=cens)


def _size_columns(sz: pd.DataFrame) -> dict[str, np.ndarray]:
    """The per-size columns the verdicts read, sorted like `sz` (defaults where an older table lacks one)."""
    cols = {c: sz[c].to_numpy() for c in ("_s", "trains", "all_diverged", "censored", "grid_lr", "rest_seeds")}
    n = len(sz)
    cols["end"] = sz["bracket_end"].to_numpy() if "bracket_end" in sz.columns else np.full(n, "", dtype=object)
    cols["open"] = sz["open_above"].to_numpy(bool) if "open_above" in sz.columns else np.zeros(n, bool)
    cols["fail_near"] = sz["fail_near_carried"].to_numpy(bool) if "fail_near_carried" in sz.columns else np.zeros(n, bool)
    cols["carried_seeds"] = sz["carried_seeds"].to_numpy() if "carried_seeds" in sz.columns else np.full(n, CARRIED_SEEDS)
    cols["carried_fails"] = sz["carried_fails"].to_numpy(bool) if "carried_fails" in sz.columns else np.zeros(n, bool)
    return cols


def _interval_reasons(r: dict, lo: float, hi: float, bound: float, room: float, ci: str, unit: str, cens: bool,
                      criterion: str, name: np.ndarray, g: dict) -> list[str]:
    """Why the interval a sized row's verdict rests on does not decide a yes: none, an open end (never decided on:
    `_open_above` says what closes it), an end beyond the bound, or seeds too few beside a partly failing cell."""
    inc = []
    if not np.isfinite(hi):
        if r["seeds"] >= MIN_SEEDS and not cens and np.isnan(hi):
            inc.append(f"no {'lr_drift' if criterion == 'drift' else 'worst_regret'} interval")
        elif np.isinf(hi) and not cens:
            inc.append(_open_above(ci, name, g))
    elif hi > bound - room + EPS:
        inc.append(f"{ci} above {unit}" if lo > bound + EPS else f"{ci} straddles {unit}")
        if room and lo <= bound + room + EPS and hi > bound - room + EPS and hi <= bound + EPS:
            inc[-1] = f"{ci} within a grid step of {unit} (optima at grid points)"
    thin = [f"{n} ({int(c)})" if c > 0 else f"{n} (the carried lr not tried)"
            for n, f, c in zip(name, g["fail_near"], g["carried_seeds"]) if f and c < CARRIED_SEEDS]
    if thin and criterion == "regret":
        inc.append(f"a cell near the carried lr partly failed; its cells at {', '.join(thin)} need {CARRIED_SEEDS} seeds "
                   "that learn to show it trains")
    # a yes needs the evidence that the carried lr trains at every size: every run of the cells it lies between
    beside = [str(n) for n, f in zip(name, g["carried_fails"]) if f]
    if beside and criterion == "regret":
        inc.append(f"a run of the carried lr's cells at {', '.join(beside)} did not learn: runs at the carried lr there "
                   "would show whether it trains")
    return inc


def _open_above(ci: str, name: np.ndarray, g: dict) -> str:
    """`why` for an interval open above: the sizes whose optimum is bounded by untrained lrs only, and what closes it."""
    opened = [f"{n} ({lr:.3g})" for n, o, lr in zip(name, g["open"], g["grid_lr"]) if o]
    if opened:
        return (f"{ci} open above: the optimum of {', '.join(opened)} trains only at that lr among its neighbours; "
                "lrs tried between it and its untrained neighbours would bound it")
    return f"{ci} open above"


def _n(x: float) -> str:
    return "inf" if np.isinf(x) else f"{x:.3g}"


def rank(rows: pd.DataFrame, sign: float) -> pd.DataFrame:
    """Order the rows (docs/leaderboard.md, Ranking) and number them.

    0. A row whose carried lr fails at some size (``carried_fails``: a run in the cells the carried lr lies between
       diverged or did not learn) ranks below every row whose carried lr trains at every size.
    1. Tiers by ``transfer_worst``, what the reference size's optimum reaches at the size it serves worst: the
       rows are taken from the best point value down, and a row stays in the current tier while its interval
       reaches the tier leader's (indistinguishable within the noise); a row worse than the leader by more than
       the noise starts the next tier. So a row that collapses at some size never ranks above one that does not.
    2. Inside a tier: the verdict (yes, inconclusive, no), then the largest size's share of diverged runs
       (fewer first), then the width of the lr window in which the largest size trains (wider first), then
       ``worst_regret`` (smaller first), then ``best``.
    """
    rows = rows.copy()
    tw = sign * rows["transfer_worst"].to_numpy(dtype=float)
    tw_lo = sign * np.where(sign > 0, rows["transfer_worst_lo"], rows["transfer_worst_hi"]).astype(float)
    tw_hi = sign * np.where(sign > 0, rows["transfer_worst_hi"], rows["transfer_worst_lo"]).astype(float)
    tw_lo = np.where(np.isfinite(tw_lo), tw_lo, tw)
    tw_hi = np.where(np.isfinite(tw_hi), tw_hi, tw)
    order = np.argsort(-np.nan_to_num(tw, nan=-np.inf), kind="mergesort")
    tier = np.zeros(len(rows), dtype=np.int64)
    t, lead_lo = -1, np.inf
    for i in order:
        if t < 0 or not tw_hi[i] >= lead_lo - EPS:
            t += 1
            lead_lo = tw_lo[i] if np.isfinite(tw_lo[i]) else -np.inf
        tier[i] = t
    rows["_tier"] = tier
    rows["_verdict"] = rows["transfers"].map(VERDICT_ORDER)
    rows["_window"] = -rows["largest_window"]
    rows["_best_sort"] = -sign * rows["best"]
    if "carried_fails" not in rows.columns:
        rows["carried_fails"] = False
    rows = rows.sort_values(["carried_fails", "_tier", "_verdict", "largest_diverged", "_window", "worst_regret", "_best_sort", "_k"],
                            na_position="last", kind="mergesort")
    rows.insert(0, "rank", np.arange(1, len(rows) + 1))
    return rows.drop(columns=["_best_s", "_ref_s", "_verdict", "_best_sort", "_tier", "_window", "_unrefined"],
                     errors="ignore").reset_index(drop=True)


def stable(cells: pd.DataFrame, lr_float: np.ndarray) -> pd.DataFrame:
    """stable_octaves, its range and the grid step, per label: a grid lr is stable when every
    size has a cell there that trains and no run there diverged."""
    n_sizes = cells.groupby("_k")["_s"].nunique()
    good = ((cells["n_diverged"] == 0) & cells["trains"]).astype(int)
    cl = cells.assign(ok=good).groupby(["_k", "_l"], sort=True)["ok"].sum().reset_index()
    cl["stable"] = cl["ok"].to_numpy() == n_sizes.reindex(cl["_k"]).to_numpy()
    cl["log2"] = np.log2(lr_float[cl["_l"].to_numpy()])
    k = cl["_k"].to_numpy()
    st = cl["stable"].to_numpy()
    same = np.r_[False, k[1:] == k[:-1]]
    prev_st = np.r_[False, st[:-1]]
    start = st & ~(same & prev_st)
    run = np.cumsum(start)
    runs = cl.loc[st].assign(run=run[st]).groupby(["_k", "run"], sort=True).agg(lo=("log2", "min"), hi=("log2", "max")).reset_index()
    runs["oct"] = runs["hi"] - runs["lo"]
    best = runs.sort_values(["_k", "oct", "run"], ascending=[True, False, True], kind="mergesort").groupby("_k").head(1).set_index("_k")
    gaps = cl.assign(gap=cl.groupby("_k")["log2"].diff())
    out = pd.DataFrame(index=n_sizes.index)
    out["stable_octaves"] = best["oct"].reindex(out.index).fillna(0.0)
    out["stable_lr_min"] = np.exp2(best["lo"]).reindex(out.index)
    out["stable_lr_max"] = np.exp2(best["hi"]).reindex(out.index)
    out["grid_step"] = gaps.groupby("_k")["gap"].median().reindex(out.index).fillna(0.0)
    out["grid_max_step"] = gaps.groupby("_k")["gap"].max().reindex(out.index).fillna(0.0)
    return out
