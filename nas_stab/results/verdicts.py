"""The verdict rules of the leaderboard (yes / no / inconclusive, with why) and the stable lr range
(docs/leaderboard.md)."""
from __future__ import annotations

import numpy as np
import pandas as pd

from nas_stab.results.optimum import EPS
from nas_stab.results.values import fmt_value

__all__ = ["VERDICT_ORDER", "stable", "verdicts"]

VERDICT_ORDER = {"yes": 0, "inconclusive": 1, "no": 2}


def verdicts(rows: pd.DataFrame, sizes: pd.DataFrame, size_vals: list, lr_float: np.ndarray, *, tolerance: float,
              sized: bool) -> None:
    """Fill ``transfers`` (yes / no / inconclusive) and ``why`` (docs/leaderboard.md)."""
    tol = tolerance
    said, whys = [], []
    sz = sizes.sort_values(["_k", "_s"], kind="mergesort")
    bounds = np.searchsorted(sz["_k"].to_numpy(), rows.index.to_numpy(), side="left")
    ends = np.searchsorted(sz["_k"].to_numpy(), rows.index.to_numpy(), side="right")
    cols = {c: sz[c].to_numpy() for c in ("_s", "trains", "all_diverged", "censored", "grid_lr")}
    cols["end"] = sz["bracket_end"].to_numpy() if "bracket_end" in sz.columns else np.full(len(sz), "", dtype=object)
    names = np.array([fmt_value(v[1]) for v in size_vals], dtype=object)
    for i, r in enumerate(rows[["lr_drift_lo", "lr_drift_hi", "seeds", "sizes", "grid_max_step"]].to_dict("records")):
        g = {c: v[bounds[i]:ends[i]] for c, v in cols.items()}
        g["all_diverged"] = pd.Series(g["all_diverged"])
        name = names[g["_s"]]
        lo, hi = r["lr_drift_lo"], r["lr_drift_hi"]
        ci = f"lr_drift {lo:.2f}-{hi:.2f}" if np.isfinite(lo) else ""
        dead = [f"{n}: {'diverged' if d else 'no lr trains'}" for n, t, d in zip(name, g["trains"], g["all_diverged"]) if not t]
        no, inc = [], []
        if sized and dead:
            no.append(("size " if len(dead) == 1 else "sizes ") + ", ".join(dead))
        elif dead:
            no.append("no lr trains" if not g["all_diverged"].all() else "diverged at every lr")
        if sized and np.isfinite(lo) and r["seeds"] >= 3 and lo > tol + EPS:
            no.append(f"{ci} > {tol:g} oct")
        if no:
            said.append("no")
            whys.append("; ".join(no))
            continue
        if not sized:
            inc.append("no size axis")
        elif r["sizes"] < 2:
            inc.append("1 size")
        if r["seeds"] < 3:
            inc.append(f"{int(r['seeds'])} seed{'s' if r['seeds'] != 1 else ''}")
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
            if not np.isfinite(hi):
                if r["seeds"] >= 3:
                    inc.append("no lr_drift interval")
            elif hi > tol + EPS:
                inc.append(f"{ci} above {tol:g} oct" if lo > tol + EPS else f"{ci} straddles {tol:g} oct")
        if inc:
            said.append("inconclusive")
            whys.append("; ".join(inc))
        else:
            said.append("yes")
            whys.append(f"{ci} <= {tol:g} oct")
    rows["transfers"] = said
    rows["why"] = whys


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
