"""The verdict of each declared claim (`claims.py` defines the kinds and the words), from a table's runs.

`evaluate` takes the runs (trials.csv) and, for probes, the slopes (probe_slopes.csv), and returns one row
per claim: the learning rates chosen, the seeds paired, the estimate and its 90% interval, the per-seed sd,
the seeds the paper's effect (or the margin, or the distance from the bound) needs, the power of the seeds
run, and the verdict.
"""
from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from nas_stab import metrics
from nas_stab.analysis.claims import Claim
from nas_stab.analysis.intervals import widen_replicates
from nas_stab.analysis.more_seeds import outlook
from nas_stab.analysis.no_learning import counted_values, no_learning_level
from nas_stab.analysis.power import MAX_SEEDS, power_at, seeds_needed
from nas_stab.analysis.rules import RULES_VERSION
from nas_stab.analysis.values import fill_base, fmt_value
from nas_stab.errors import RunError

__all__ = ["COLUMNS", "evaluate"]

LEVEL = 0.9
N_BOOT = 2000
COLUMNS = ("id", "paper", "says", "kind", "metric", "report", "lr_a", "lr_b", "seeds", "estimate", "lo", "hi", "sd",
           "target", "criterion", "needed", "power", "verdict", "p", "rules")


def evaluate(claims: Sequence[Claim], files: Mapping[str, pd.DataFrame], *, metric: str = "val_acc",
             lr_key: str = "train.lr", classes: int | None = None, base: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """One row per claim (columns `COLUMNS`). `files` maps a table's file names (without .csv) to their
    contents: ``trials`` (the runs), ``probe_slopes``, ``leaderboard`` and any run a claim names (`Claim.runs`).
    `metric` is the table's validation metric (a claim may name another), `base` the resolved spec (values
    of keys the runs do not search), `classes` the class count."""
    out = []
    for c in claims:
        default = {"transfer": ("leaderboard",), "slope": ("probe_slopes",)}.get(c.kind, ("trials",))
        names = c.runs or default
        missing = [n for n in names if files.get(n) is None]
        if missing:
            raise RunError(f"claim {c.id}: the table has no {', '.join(n + '.csv' for n in missing)}")
        data = pd.concat([files[n] for n in names], ignore_index=True) if len(names) > 1 else files[names[0]]
        if c.kind == "transfer":
            row = _transfer(c, data)
        elif c.kind == "slope":
            row = _slope(c, data)
        else:
            row = _paired(c, data, metric=c.metric or metric, lr_key=lr_key, classes=classes, base=base)
        if c.caveat and not row["verdict"].startswith("underpowered"):
            row["verdict"] = f"{row['verdict']} ({c.caveat})"
        row["verdict"] += _preregistered(c, row)
        out.append({**row, "criterion": criterion(c, row["target"]), "rules": RULES_VERSION})
    return pd.DataFrame(out, columns=list(COLUMNS))


def _preregistered(c: Claim, row: Mapping[str, Any]) -> str:
    """What the declaration adds to a verdict: the predicted transfer verdict met or contradicted, fewer seeds
    than declared, another rules version than the one declared under."""
    notes = []
    if c.predicts is not None:
        got = str(row["verdict"]).split(" ")[0]
        if got in ("yes", "no"):
            notes.append("as predicted" if got == c.predicts else f"predicted {c.predicts}: contradicted")
    if c.seeds is not None and int(row["seeds"]) < c.seeds:
        notes.append(f"ran {int(row['seeds'])} of the {c.seeds} seeds declared")
    if c.rules is not None and c.rules != RULES_VERSION:
        notes.append(f"declared under rules {c.rules}, judged under {RULES_VERSION}")
    return f" ({'; '.join(notes)})" if notes else ""


def criterion(c: Claim, target: float) -> str:
    """What the claim is judged against, in words: the paper's effect, the margin, the bound, epsilon."""
    if c.kind == "difference":
        return f"effect {c.effect:g}"
    if c.kind == "equivalence":
        return f"within +-{c.margin:g}"
    if c.kind == "transfer":
        return f"regret within epsilon {target:.3g}"
    if c.at_most is not None:
        return f"slope <= {c.at_most:g}"
    if c.at_least is not None:
        return f"slope >= {c.at_least:g}"
    return f"slope {c.expect:g} +- {c.margin:g}"


def _select(df: pd.DataFrame, sel: Mapping[str, Any], what: str) -> pd.DataFrame:
    """The rows of `df` whose columns match every key: value of `sel` (compared as the leaderboard prints them)."""
    mask = np.ones(len(df), dtype=bool)
    for k, v in sel.items():
        if k not in df.columns:
            raise RunError(f"{what}: no column {k!r} to select on (columns: {', '.join(map(str, df.columns))})")
        mask &= df[k].map(fmt_value).to_numpy() == fmt_value(v)
    if not mask.any():
        raise RunError(f"{what}: no row matches {dict(sel)}")
    return df.loc[mask]


def _counted(df: pd.DataFrame, metric: str, classes: int | None) -> np.ndarray:
    """Each run's value as the leaderboard counts it: diverged and failed runs at the no-learning value."""
    if metric not in df.columns:
        raise RunError(f"the runs have no column {metric!r}")
    sign = 1.0 if metrics.direction(metric) == "maximize" else -1.0
    status = df["status"].astype(str).str.lower().to_numpy() if "status" in df.columns else np.full(len(df), "complete")
    value = pd.to_numeric(df[metric], errors="coerce").to_numpy(dtype=float)
    finite = np.isfinite(value)
    ok = (status == "complete") & finite
    level = no_learning_level(metric, classes, None, None, value, ok, finite)
    return counted_values(value, ok, status == "pruned", finite, sign, level)[0]


def _grid(side: pd.DataFrame, lr_key: str, seeds: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The side's lrs and its counted values as [lr, seed] matrices (NaN where a run is missing): the
    metric the lr is chosen on and the metric reported."""
    lrs = np.sort(side[lr_key].dropna().unique().astype(float))
    choose = np.full((len(lrs), len(seeds)), np.nan)
    rep = np.full_like(choose, np.nan)
    g = side.groupby([lr_key, "seed"])[["_choose", "_report"]].mean()
    pos = {s: i for i, s in enumerate(seeds)}
    for (lr, seed), (c, r) in g.iterrows():
        if seed in pos:
            j = int(np.argmin(np.abs(lrs - float(lr))))
            choose[j, pos[seed]], rep[j, pos[seed]] = c, r
    return lrs, choose, rep


def _pick(lrs: np.ndarray, choose: np.ndarray, lr: Any, sign: float, cols: np.ndarray) -> int:
    """The index of the side's lr: the given one, else its best seed mean of the chosen metric over `cols`."""
    if lr is not None:
        return int(np.argmin(np.abs(np.log(lrs) - np.log(float(lr)))))
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        m = np.nanmean(choose[:, cols], axis=1)
    return int(np.nanargmax(sign * m)) if np.isfinite(m).any() else 0


def _two_sided_p(mean: float, sd: float, n: int) -> float:
    """The two-sided p-value of the per-seed differences' t statistic (a decided difference has its 90% interval
    off 0, about p < 0.10), for the Benjamini-Hochberg q-values over the published claims (leaderboards/claims.py).
    Where a side's lr is chosen from the runs the choice is not in it (the bootstrap interval has it): approximate."""
    if n < 2 or not math.isfinite(sd):
        return math.nan
    if sd == 0:
        return 0.0 if mean != 0 else 1.0
    return float(2 * stats.t.sf(abs(mean) / (sd / math.sqrt(n)), n - 1))


def _paired(c: Claim, trials: pd.DataFrame, *, metric: str, lr_key: str, classes: int | None,
            base: Mapping[str, Any] | None) -> dict[str, Any]:
    """A difference or equivalence claim: a - b per seed, each side at its lr, reported on the held-out metric.

    Where a side's lr is chosen from the runs (``lr: best``, or ``a``), the interval is a paired seed
    bootstrap that chooses it again in every replicate (the choice is part of the uncertainty), widened
    for the seed count; where both lrs are given, the t-interval of the per-seed differences."""
    counterpart = metrics.held_out(metric)  # the leaderboard's default report metric (analysis/report.py)
    report: str = c.report or (counterpart if counterpart and counterpart in trials.columns else metric)
    df = fill_base(trials, [*c.a, *c.b, lr_key], base)
    if "seed" not in df.columns:
        df["seed"] = 0
    df[lr_key] = pd.to_numeric(df[lr_key], errors="coerce")
    df["_choose"], df["_report"] = _counted(df, metric, classes), _counted(df, report, classes)
    a, b = _select(df, c.a, f"claim {c.id}, a"), _select(df, c.b, f"claim {c.id}, b")
    seeds = np.array(sorted(set(a["seed"]) & set(b["seed"])))
    (la, ca, ra), (lb, cb, rb) = _grid(a, lr_key, seeds), _grid(b, lr_key, seeds)
    sign = 1.0 if metrics.direction(metric) == "maximize" else -1.0
    fixed = isinstance(c.lr, Mapping) or (isinstance(c.lr, (int, float)) and not isinstance(c.lr, bool))
    given_a = c.lr["a"] if isinstance(c.lr, Mapping) else (c.lr if fixed else None)
    given_b = c.lr["b"] if isinstance(c.lr, Mapping) else (c.lr if fixed else None)
    for side, lrs, given in (("a", la, given_a), ("b", lb, given_b)):
        if given is not None and not np.isclose(lrs, float(given), rtol=1e-3).any():
            raise RunError(f"claim {c.id}: side {side} has no runs at lr {given} (its lrs: {', '.join(f'{x:.6g}' for x in lrs)})")
    flip = -1.0 if metrics.direction(report) == "minimize" else 1.0  # the estimate is better-is-positive

    def diff(cols: np.ndarray) -> np.ndarray:
        ia = _pick(la, ca, given_a, sign, cols)
        ib = _pick(lb, cb, la[ia] if c.lr == "a" else given_b, sign, cols)
        return flip * (ra[ia, cols] - rb[ib, cols])

    n = len(seeds)
    all_cols = np.arange(n)
    d = diff(all_cols)
    d = d[np.isfinite(d)]
    ia = _pick(la, ca, given_a, sign, all_cols)
    ib = _pick(lb, cb, la[ia] if c.lr == "a" else given_b, sign, all_cols)
    n = len(d)
    mean = float(d.mean()) if n else math.nan
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    if n < 2:
        lo, hi = -math.inf, math.inf
    elif fixed:
        half = float(stats.t.ppf(0.5 + LEVEL / 2, n - 1)) * sd / math.sqrt(n)
        lo, hi = mean - half, mean + half
    else:
        rng = np.random.default_rng(0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            reps = np.array([np.nanmean(diff(rng.integers(0, len(seeds), len(seeds)))) for _ in range(N_BOOT)])
        lo, hi = widen_replicates(reps[np.isfinite(reps)], n)
    row = {"id": c.id, "paper": c.paper, "says": c.says, "kind": c.kind, "metric": metric, "report": report,
           "lr_a": float(la[ia]) if len(la) else math.nan, "lr_b": float(lb[ib]) if len(lb) else math.nan,
           "seeds": n, "estimate": mean, "lo": lo, "hi": hi, "sd": sd}
    if c.kind == "difference":
        row.update(_difference_verdict(n, sd, lo, hi, float(c.effect or 0)))
        row["p"] = _two_sided_p(mean, sd, n)
    else:
        row.update(_equivalence_verdict(n, sd, lo, hi, float(c.margin or 0)))
    return row


def _needed(sd: float, target: float, power: float = 0.8) -> int:
    """Seeds to detect `target` with per-seed sd `sd` (MAX_SEEDS when it cannot be resolved)."""
    if not (sd > 0 and target > 0 and math.isfinite(sd)):
        return 2 if sd == 0 else MAX_SEEDS
    try:
        return seeds_needed(sd, target, power=power)
    except ValueError:
        return MAX_SEEDS


def _difference_verdict(n: int, sd: float, lo: float, hi: float, effect: float) -> dict[str, Any]:
    need = _needed(sd, effect)
    pw = power_at(n, sd, effect) if n > 1 and sd > 0 else (1.0 if n > 1 else 0.0)
    if lo > 0:
        verdict = "replicates"
    elif hi < 0:
        verdict = "reversed"
    elif n < need:
        verdict = f"underpowered: needs {_count(need)} seeds"
    elif hi < effect:
        verdict = "does not replicate"
    else:
        verdict = "inconclusive"
    return {"target": effect, "needed": need, "power": pw, "verdict": verdict}


def _equivalence_verdict(n: int, sd: float, lo: float, hi: float, margin: float) -> dict[str, Any]:
    need = _needed(sd, margin, power=0.9)
    # both one-sided tests must reject at a true difference of 0: at least 2 p1 - 1 (nearly exact)
    pw = max(0.0, 2 * power_at(n, sd, margin) - 1) if n > 1 and sd > 0 else 0.0
    if -margin < lo and hi < margin:
        verdict = f"equivalent (within +-{margin:g})"
    elif lo >= margin or hi <= -margin:
        verdict = "not equivalent"
    elif n < need:
        verdict = f"underpowered: needs {_count(need)} seeds"
    else:
        verdict = "inconclusive"
    return {"target": margin, "needed": need, "power": pw, "verdict": verdict}


def _slope(c: Claim, slopes: pd.DataFrame) -> dict[str, Any]:
    """A probe's slope against its bound (`claims.py`)."""
    row = _select(slopes, c.a, f"claim {c.id}, a")
    if len(row) != 1:
        raise RunError(f"claim {c.id}: a selects {len(row)} slope rows; name every column that tells them apart")
    r = row.iloc[0]
    est, lo, hi, n = float(r["slope"]), float(r["lo"]), float(r["hi"]), int(r["seeds"])
    sd = (hi - lo) / (2 * float(stats.norm.ppf(0.5 + LEVEL / 2))) * math.sqrt(n)
    if c.at_most is not None:
        bound, holds, fails = float(c.at_most), hi < c.at_most, lo > c.at_most
        target = abs(float(c.at_most) - est)
    elif c.at_least is not None:
        bound, holds, fails = float(c.at_least), lo > c.at_least, hi < c.at_least
        target = abs(est - float(c.at_least))
    else:
        m = float(c.margin or 0)
        bound, holds = m, (c.expect - m < lo and hi < c.expect + m)
        fails = lo >= c.expect + m or hi <= c.expect - m
        target = max(m - abs(est - c.expect), abs(est - c.expect) - m)
    need = _needed(sd, target)
    verdict = ("holds" if holds else "fails" if fails else
               f"underpowered: needs {_count(need)} seeds" if n < need else "inconclusive")
    metric = str(r.get("metric", ""))
    return {"id": c.id, "paper": c.paper, "says": c.says, "kind": c.kind, "metric": metric, "report": metric,
            "lr_a": math.nan, "lr_b": math.nan, "seeds": n, "estimate": est, "lo": lo, "hi": hi, "sd": sd,
            "target": bound, "needed": need, "power": power_at(n, sd, target) if n > 1 and sd > 0 and target > 0 else 0.0,
            "verdict": verdict}


def _transfer(c: Claim, board: pd.DataFrame) -> dict[str, Any]:
    """A leaderboard row's transfer verdict, with the seeds it ran and the seeds an inconclusive one needs."""
    r = _select(board, c.a, f"claim {c.id}, a")
    if len(r) != 1:
        raise RunError(f"claim {c.id}: a selects {len(r)} leaderboard rows; name every compare value (or the label)")
    row = r.iloc[0].to_dict()
    n = int(row["min_seeds"]) if pd.notna(row.get("min_seeds")) else int(row["seeds"])
    need: int = n
    if row["transfers"] == "inconclusive":  # the adaptive-seeds rule's prediction (more_seeds.outlook)
        k = outlook(row, "regret", 1.0, n, MAX_SEEDS - 1)[0] if n > 1 else None
        need = MAX_SEEDS if k is None else k
    verdict = str(row["transfers"])
    if verdict == "inconclusive":
        verdict = f"underpowered: needs {_count(need)} seeds"
    plateaus = int(row.get("plateaus") or 0) if pd.notna(row.get("plateaus")) else 0
    if plateaus:  # the regret is measured at a plateau as well; where the optimum lies is not (docs/leaderboard.md)
        verdict += f" ({plateaus} of {int(row['sizes'])} optima on a plateau: where the optimum lies is not resolved)"
    return {"id": c.id, "paper": c.paper, "says": c.says, "kind": c.kind, "metric": "worst_regret", "report": "",
            "lr_a": math.nan, "lr_b": math.nan, "seeds": n, "estimate": float(row["worst_regret"]),
            "lo": float(row["worst_regret_lo"]), "hi": float(row["worst_regret_hi"]), "sd": math.nan,
            "target": float(row["epsilon"]), "needed": need, "power": math.nan, "verdict": verdict}


def _count(n: int) -> str:
    return f"> {MAX_SEEDS}" if n >= MAX_SEEDS else str(n)
