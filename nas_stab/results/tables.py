"""The leaderboard as display text, shared by every format: number formats, the settings lines,
the one-line summary, and the rows and per-cell tables as (headers, text, sort keys)."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from nas_stab.analysis.intervals import factor
from nas_stab.analysis.rules import rules_line
from nas_stab.analysis.table import Analysis
from nas_stab.analysis.values import fmt_value

__all__ = ["DEFINITIONS", "END_MARKS", "Provenance", "best_lrs", "bracketed", "cells_table", "display_table", "num", "report_lines",
           "settings_items", "summary", "title"]

DEFINITIONS = "docs/leaderboard.md"

Provenance = Sequence[tuple[str, str]]


def num(x: Any, digits: int = 4) -> str:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(f):
        return "–"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return f"{f:.{digits}g}"


def _oct(x: Any) -> str:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    return "–" if math.isnan(f) else f"{f:.2f}"


def settings_items(a: Analysis) -> list[tuple[str, str]]:
    """The analysis settings as provenance-style pairs."""
    st = a.settings
    better = "above" if st.direction == "maximize" else "below"
    items = [
        ("metric", f"{st.metric} ({st.direction}); no-learning value m0 = {num(st.m0)} ({st.m0_source}): diverged, "
                   f"failed and non-finite runs count as m0, a pruned run with its value where it was stopped (m0 "
                   f"without one), and worse values are clamped to m0; a cell trains "
                   f"when its seed-mean is {better} m0 by more than {num(st.margin)}"),
        ("stuck", f"not counted (–): {st.stuck_na}" if st.stuck_na else
                  f"the fraction of runs that completed with a finite {st.metric} {'at or below' if st.direction == 'maximize' else 'at or above'} "
                  f"m0 {'+' if st.direction == 'maximize' else '-'} margin = {num(st.m0 + (1 if st.direction == 'maximize' else -1) * st.margin)}: "
                  "they did not learn (a diverged run is never stuck)"),
        ("learning rate", st.lr_key),
        ("size axis", st.transfer_key or "none (one size)"),
        ("rows", ", ".join(st.compare) or "one row"),
        ("reference size", fmt_value(st.reference) if st.reference is not None else "smallest"),
        ("verdict", f"criterion {st.criterion}: " + (
            f"'yes' needs the whole worst_regret interval (what the reference size's optimum lr costs at the size it "
            f"serves worst) within epsilon = {st.epsilon}"
            + (" of the row's gap between its best value and m0" if str(st.epsilon).strip().endswith("%") else "")
            + ", 'no' its lower end above it" if st.criterion == "regret" else
            f"'yes' needs the whole lr_drift interval within {num(st.tolerance)} octave(s), 'no' its lower end above it")
            + "; a yes or a no needs at least 3 seeds in every cell an optimum rests on"),
        ("tolerance", f"{num(st.tolerance)} octave(s) of lr_drift (the drift criterion)"),
        ("report", f"lr chosen on {st.metric}, reported on {st.report} at the cells chosen (best_report, report_at_best; never "
                   f"re-optimized on {st.report}); diverged and failed runs count as its no-learning value {num(st.report_m0)}, a complete "
                   f"run without it is left out" if st.report else
                   f"none: lr chosen and reported on {st.metric} (no held-out counterpart recorded, or leaderboard.report: none)"),
        ("intervals", f"{int(round(st.ci * 100))}% bootstrap over each size's seeds (paired across its lrs), {st.n_boot} replicates, seed {st.boot_seed}; "
                      "percentile intervals widened for the seed count (" + ", ".join(f"x{factor(n, st.ci):.2f} at {n} seeds" for n in (3, 5, 10)) + ")"),
        ("definitions", DEFINITIONS),
        ("rules", rules_line()),
    ]
    items += [("note", n) for n in st.notes]
    return items


def summary(a: Analysis) -> str:
    """One line for an index of leaderboards: which rows transfer, which do not, which cannot tell, and the best row.

    Example: ``"val_acc, 3 rows: transfers: stam (drift 0.00 oct, regret 0); does not: sum (size 16: no lr
    trains); inconclusive: avg (2 seeds); best: avg 0.872"``
    """
    st = a.settings
    parts: dict[str, list[str]] = {"yes": [], "no": [], "inconclusive": []}
    for r in a.rows.to_dict("records"):
        if r["transfers"] == "yes":
            parts["yes"].append(f"{r['label']} (drift {_oct(r['lr_drift'])} oct, regret {num(r['transfer_regret'], 2)})")
        else:
            parts.setdefault(r["transfers"], []).append(f"{r['label']} ({r['why']})")
    out = [f"{st.metric}, {len(a.rows)} row{'s' if len(a.rows) != 1 else ''}"]
    if parts["yes"]:
        out.append("transfers: " + ", ".join(parts["yes"]))
    if parts["no"]:
        out.append("does not: " + ", ".join(parts["no"]))
    if parts["inconclusive"]:
        out.append("inconclusive: " + ", ".join(parts["inconclusive"]))
    if len(a.rows):
        sign = 1 if st.direction == "maximize" else -1
        top = a.rows.loc[(sign * a.rows["best"]).idxmax()]
        out.append(f"best: {top['label']} {num(top['best'])}")
    return "; ".join(out)


def report_lines(a: Analysis, most: int = 8) -> list[tuple[str, str]]:
    """(name, text) lines under a leaderboard's summary: the report metric at each row's best cell (``Report``),
    and the sizes whose optimum is a plateau (``Plateaus``); at most `most` rows named in each."""
    st, out = a.settings, []

    def listed(parts: list[str]) -> str:
        return "; ".join(parts[:most]) + (f"; and {len(parts) - most} more" if len(parts) > most else "")

    if st.report:
        vals = [f"{r['label']} {num(r['best_report'])}" for r in a.rows.to_dict("records") if "best_report" in r]
        out.append(("Report", f"lr chosen on {st.metric}, reported on {st.report}" + (f": {listed(vals)}" if vals else "")
                    + f" ({st.report} at the cell of best; each size's at its best grid lr in leaderboard_sizes.csv, report_at_best)"))
    if "bracket" in a.sizes.columns and (a.sizes["bracket"] == "plateau").any():
        flat = a.sizes[a.sizes["bracket"] == "plateau"]
        parts = [f"{lab} at {', '.join(fmt_value(v) for v in g['size'])}" if st.transfer_key else str(lab)
                 for lab, g in flat.groupby("label", sort=False)]
        out.append(("Plateaus", f"{listed(parts)} (the best grid lr within one standard error of a tried neighbour: the seeds do "
                                "not resolve the optimum; bracket in leaderboard_sizes.csv)"))
    if "seeds_stop" in a.rows.columns:
        stops = [f"{r['label']}: {r['seeds_stop']}" for r in a.rows.to_dict("records") if r["seeds_stop"]]
        if stops:
            out.append(("Adaptive seeds", f"{listed(stops)} (why each row still inconclusive got no more seeds, as the search "
                                          "decided on its last stage)"))
    return out


def _no_best(r: Mapping[str, Any]) -> dict[str, str]:
    """{size text: "diverged" or "no lr trains"} for the sizes of a row that have no optimum."""
    return {fmt_value(s): why for s, why in (r.get("no_best_lr") or ())}


# the mark a bracket sweep's end puts after a size's best lr in `best_lr(s)` (none when bracketed, or
# when the size has no optimum: "no lr trains" / "diverged" already say it)
END_MARKS = {"limit": "limit", "divergence wall": "wall", "unfinished": "unfinished"}


def _end_mark(end: str) -> str:
    marks = [END_MARKS[e] for e in str(end or "").split(" / ") if e in END_MARKS]
    return f" ({'/'.join(marks)})" if marks else ""


def bracketed(a: Analysis) -> bool:
    """Whether any size of the table was searched by ``search.sampler: bracket`` or inside a transfer search's
    outer trials (``search.transfer.inner: bracket``): its sweeps' ends are known."""
    return "bracket_end" in a.sizes.columns and bool((a.sizes["bracket_end"].astype(str) != "").any())


def best_lrs(r: Mapping[str, Any], sized: bool, sep: str = " ", lr_fmt=None) -> str:
    """best_lr(s) per size, with ``<=`` / ``>=`` when censored at the grid's end (``=`` when only one lr
    was tried); a size where no lr trains shows "diverged" or "no lr trains", never a learning rate.
    After a run searched with ``search.sampler: bracket`` (or ``search.transfer.inner: bracket``), why its sweep stopped where it did:
    ``16:>=0.05 (limit)``, ``4:0.1 (wall)`` (a divergence wall), ``(unfinished)``."""
    no_best = _no_best(r)
    cens = {fmt_value(s): c for s, c in (r.get("censored") or ())}
    ends = {fmt_value(s): e for s, e in (r.get("bracket_ends") or ())}
    parts = []
    for s, lr in r["best_lrs"]:
        key = fmt_value(s)
        try:
            missing = math.isnan(float(lr))
        except (TypeError, ValueError):
            missing = True
        text = (no_best.get(key, "n/a") if missing
                else cens.get(key, "") + (lr_fmt(lr) if lr_fmt is not None else num(lr, 3)) + _end_mark(ends.get(key, "")))
        parts.append(f"{key}:{text}" if sized else text)
    return sep.join(parts)


def _ci(lo: Any, hi: Any, fmt=None) -> str:
    fmt = fmt or _oct
    a, b = fmt(lo), fmt(hi)
    return "–" if a == "–" and b == "–" else f"{a}–{b}"


def _best_at(r: Mapping[str, Any], st) -> str:
    """The configuration of `best`; "diverged" / "n/a" when no run of the row counted."""
    try:
        missing = math.isnan(float(r["best_lr"]))
    except (TypeError, ValueError):
        missing = True
    if missing:
        whys = set(_no_best(r).values())
        return "diverged" if whys == {"diverged"} else "no run counted"
    sized = st.transfer_key is not None
    return (f"{st.transfer_key}={fmt_value(r['best_size'])}, " if sized else "") + f"lr={num(r['best_lr'], 3)}"


def _nan_none(x: Any) -> float | None:
    """A sort key: None (text, sorted as missing) for NaN, e.g. `stuck` where the no-learning level is undefined."""
    return None if pd.isna(x) else float(x)


def _pct(x: Any) -> str:
    """A fraction as a whole percentage; "–" when undefined (`stuck` without a task-defined no-learning level)."""
    return "–" if pd.isna(x) else f"{100 * float(x):.0f}%"


def _count(x: Any) -> str:
    return "–" if pd.isna(x) else str(int(x))


def display_table(a: Analysis) -> tuple[list[str], list[list[str]], list[list[float | None]]]:
    """Headers, display strings and sort keys (numbers or None) of the leaderboard rows."""
    st = a.settings
    sized = st.transfer_key is not None
    headers = ["rank"] + (list(st.compare) or ["row"]) + [
        "transfers", "why", "transfer_regret", "regret CI", "worst_regret", "worst CI", "epsilon", "at transfer (worst size)",
        "spread", "lr_drift", "lr_drift CI",
        "lr_slope", "lr_slope CI", "best_lr(s)", "lr_sensitivity", "stable_octaves", f"best {st.metric}", "best at",
        "seeds", "diverged", "stuck", "pruned",
    ]
    text: list[list[str]] = []
    keys: list[list[float | None]] = []
    for r in a.rows.to_dict("records"):
        labels = [fmt_value(r[k]) for k in st.compare] or [r["label"]]
        best = num(r["best"])
        if r["best_n"] > 1 and not pd.isna(r["best_std"]):
            best += f" ± {num(r['best_std'], 2)}"
        at = _best_at(r, st)
        num3 = lambda v: num(v, 3)  # noqa: E731
        text.append(
            [str(r["rank"])] + labels + [
                r["transfers"], r["why"], num(r["transfer_regret"], 3),
                _ci(r["transfer_regret_lo"], r["transfer_regret_hi"], num3), num(r["worst_regret"], 3),
                _ci(r["worst_regret_lo"], r["worst_regret_hi"], num3), num(r["epsilon"], 3), num(r["transfer_worst"], 3),
                num(r["spread"], 3), _oct(r["lr_drift"]), _ci(r["lr_drift_lo"], r["lr_drift_hi"]), _oct(r["lr_slope"]),
                _ci(r["lr_slope_lo"], r["lr_slope_hi"]), best_lrs(r, sized), num(r["lr_sensitivity"], 3),
                _oct(r["stable_octaves"]), best, at, str(int(r["seeds"])), f"{100 * r['diverged']:.0f}%",
                _pct(r.get("stuck", math.nan)), f"{100 * r['pruned']:.0f}%",
            ]
        )
        keys.append(
            [float(r["rank"])] + [None] * len(labels) + [
                None, None, r["transfer_regret"], r["transfer_regret_lo"], r["worst_regret"], r["worst_regret_lo"], r["epsilon"],
                r["transfer_worst"], r["spread"], r["lr_drift"],
                r["lr_drift_lo"], r["lr_slope"], r["lr_slope_lo"], None, r["lr_sensitivity"], r["stable_octaves"],
                r["best"], None, float(r["seeds"]), r["diverged"], _nan_none(r.get("stuck", math.nan)), r["pruned"],
            ]
        )
    return headers, text, keys


def cells_table(a: Analysis) -> tuple[list[str], list[list[str]], list[list[float | None]]]:
    st = a.settings
    headers = (list(st.compare) or ["row"]) + ([st.transfer_key] if st.transfer_key else []) + [
        st.lr_key, "log2(lr)", "mean", "std", "n", "runs", "diverged", "stuck", "pruned", "failed",
    ]
    text, keys = [], []
    for r in a.cells.to_dict("records"):
        labels = [fmt_value(r[k]) for k in st.compare] or [r["label"]]
        size = [fmt_value(r["size"])] if st.transfer_key else []
        text.append(labels + size + [
            num(r["lr"], 4), f"{math.log2(r['lr']):.2f}", num(r["mean"]), num(r["std"], 3), str(r["n"]),
            str(r["n_runs"]), str(r["n_diverged"]), _count(r.get("n_stuck", math.nan)), str(r["n_pruned"]), str(r["n_failed"]),
        ])
        nums = [r["size"]] if st.transfer_key and isinstance(r["size"], (int, float)) else [None] * len(size)
        keys.append([None] * len(labels) + nums + [
            r["lr"], math.log2(r["lr"]), r["mean"], r["std"], r["n"], r["n_runs"], r["n_diverged"], _nan_none(r.get("n_stuck", math.nan)),
            r["n_pruned"], r["n_failed"],
        ])
    return headers, text, keys


def title(prov: Provenance) -> str:
    d = dict(prov)
    return f"LR-transfer leaderboard: {d.get('spec') or d.get('sweep') or 'nas_stab run'}"


def verdict_meaning(a: Analysis) -> str:
    """What `transfers` answers, in one clause: with the regret criterion the cost of one lr, not where the optimum
    sits (an optimum can move and one lr still serve; `lr_drift` says how far it moves)."""
    if a.settings.criterion == "drift":
        return "whether each size's optimum lies within the tolerance of the others, in octaves of lr"
    return ("what the lr tuned at the reference size costs at every size, against epsilon; not whether the optimum "
            "stays put: it can move and one lr still serve, `lr_drift` says how far it moves")
