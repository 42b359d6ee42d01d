"""The verdict rules of the leaderboard (yes / no / inconclusive, with why) and the stable lr range
(docs/leaderboard.md)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from nas_stab.analysis.optimum import EPS
from nas_stab.analysis.values import fmt_value
from nas_stab.metrics import parse_epsilon

__all__ = ["CARRIED_SEEDS", "CRITERIA", "DEFAULT_EPSILON", "MIN_SEEDS", "VERDICT_ORDER", "parse_epsilon", "rank", "stable", "verdicts"]

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


def verdicts(rows: pd.DataFrame, sizes: pd.DataFrame, size_vals: list, lr_float: np.ndarray, *, tolerance: float,
             sized: bool, criterion: str = "regret") -> None:
    """Fill ``transfers`` (yes / no / inconclusive) and ``why`` (docs/leaderboard.md)."""
    tol = tolerance
    said, whys = [], []
    sz = sizes.sort_values(["_k", "_s"], kind="mergesort")
    bounds = np.searchsorted(sz["_k"].to_numpy(), rows.index.to_numpy(), side="left")
    ends = np.searchsorted(sz["_k"].to_numpy(), rows.index.to_numpy(), side="right")
    cols = _size_columns(sz)
    names = np.array([fmt_value(v[1]) for v in size_vals], dtype=object)
    need = ["lr_drift_lo", "lr_drift_hi", "worst_regret_lo", "worst_regret_hi", "epsilon", "seeds", "min_seeds", "sizes",
            "grid_max_step", "grid_step", "_unrefined"]
    for i, r in enumerate(rows[need].to_dict("records")):
        g = {c: v[bounds[i]:ends[i]] for c, v in cols.items()}
        g["all_diverged"] = pd.Series(g["all_diverged"])
        name = names[g["_s"]]
        if criterion == "drift":
            lo, hi, bound = r["lr_drift_lo"], r["lr_drift_hi"], tol
            ci = f"lr_drift {lo:.2f}-{hi:.2f}" if np.isfinite(lo) else ""
            unit = f"{tol:g} oct"
        else:
            lo, hi, bound = r["worst_regret_lo"], r["worst_regret_hi"], r["epsilon"]
            ci = f"worst_regret {_n(lo)}-{_n(hi)}" if np.isfinite(lo) else ""
            unit = f"epsilon {_n(bound)}"
        dead = [f"{n}: {'diverged' if d else 'no lr trains'}" for n, t, d in zip(name, g["trains"], g["all_diverged"]) if not t]
        enough = r["min_seeds"] >= MIN_SEEDS
        # a drift verdict resting on optima located only to their grid points needs a step of room
        room = r["grid_step"] if (criterion == "drift" and r["_unrefined"]) else 0.0
        no, inc = [], []
        if sized and dead:
            no.append(("size " if len(dead) == 1 else "sizes ") + ", ".join(dead))
        elif dead:
            no.append("no lr trains" if not g["all_diverged"].all() else "diverged at every lr")
        if sized and np.isfinite(lo) and enough and lo > bound + room + EPS:
            no.append(f"{ci} > {unit}")
        if no:
            said.append("no")
            whys.append("; ".join(no))
            continue
        if not sized:
            inc.append("no size axis")
        elif r["sizes"] < 2:
            inc.append("1 size")
        if r["seeds"] < MIN_SEEDS:
            inc.append(f"{int(r['seeds'])} seed{'s' if r['seeds'] != 1 else ''}")
        elif not enough:
            few = [f"{n} ({int(k)})" for n, k, t in zip(name, g["rest_seeds"], g["trains"]) if t and k < MIN_SEEDS]
            inc.append("too few seeds at the optimum of " + ", ".join(few))
        # a censored optimum is never "yes", whatever stopped the search there (a bracket sweep's end, e.g.
        # "limit", is named beside it)
        cens = [(n, c, lr, f", {e}" if e else "") for n, c, lr, e in zip(name, g["censored"], g["grid_lr"], g["end"]) if c]
        if cens and sized:
            inc.append("censored at " + ", ".join(f"{n} ({c}{lr:.3g}{e})" if c != "=" else f"{n} (one lr{e})"
                                                  for n, c, lr, e in cens))
        elif cens:
            c, lr, e = cens[0][1], cens[0][2], cens[0][3]
            inc.append(f"one lr{e}" if c == "=" else f"censored ({c}{lr:.3g}{e})")
        if sized and r["grid_max_step"] > 1 + EPS:
            inc.append(f"lr grid step {r['grid_max_step']:.2f} > 1 oct")
        if sized and r["sizes"] >= 2:
            inc += _interval_reasons(r, lo, hi, bound, room, ci, unit, bool(cens), criterion, name, g)
        if inc:
            said.append("inconclusive")
            whys.append("; ".join(inc))
        else:
            said.append("yes")
            whys.append(f"{ci} <= {unit}")
    rows["transfers"] = said
    rows["why"] = whys


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
