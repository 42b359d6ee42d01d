"""The objectives of `search.transfer`: one outer trial's runs -> the leaderboard's analysis -> its values.

An outer trial is one architecture (the values of the searched keys other than the
learning rate and the size axis); its runs are every size x lr x seed of `space:`. Its
objectives are columns of the leaderboard row those runs make, computed by the same call
that builds every leaderboard (`nas_stab.analysis.table.analyze`, with the run's
`leaderboard:` settings, docs/leaderboard.md), on the values exactly as trials.csv stores
them (numbers to 6 significant digits), so `nas-stab leaderboard` shows the same numbers
in the outer trial's row:

| objective | direction | meaning |
| --- | --- | --- |
| `transfer_score` | the metric's | mean over sizes of the fitted metric at the reference size's optimum lr (m0 when the reference size does not train) |
| `best` | the metric's | the best seed-mean over sizes and lrs |
| `transfer_regret`, `worst_regret` | minimize | mean / largest metric lost by using the reference size's optimum (over the sizes that train) |
| `lr_drift` | minimize | octaves between the largest and smallest optimum (over the sizes that train) |
| `lr_sensitivity` | minimize | Wortsman et al.'s mean loss of a wrong lr |
| `stable_octaves` | maximize | the longest run of lrs at which every size trains |

An objective the analysis leaves undefined (a regret or drift with fewer than two sizes
that train, or with an optimum censored at the grid's end, where the value is only a bound)
cannot be told to Optuna: the outer trial ends FAIL with the reason, and the
sampler learns nothing from it. `transfer_score` is always defined, which is why it is the
default: a size that never trains pulls it down to the no-learning value instead of
dropping out.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Literal

import pandas as pd

from nas_stab import metrics
from nas_stab.analysis.settings import settings as analysis_settings
from nas_stab.analysis.table import Analysis, TableSettings, analyze
from nas_stab.config import hooks
from nas_stab.config.schema import Spec
from nas_stab.csvsafe import csv_cell
from nas_stab.textfmt import did_you_mean

OBJECTIVES: dict[str, metrics.Direction | Literal["metric"]] = {
    "transfer_score": "metric", "best": "metric", "transfer_regret": "minimize", "worst_regret": "minimize",
    "lr_drift": "minimize", "lr_sensitivity": "minimize", "stable_octaves": "maximize",
}
CENSORED_BOUNDS = ("transfer_regret", "worst_regret", "lr_drift")  # only bounds when an optimum is censored
STABILITY = ("init_fwd_ratio", "init_grad_ratio", "init_sharpness", "max_update_ratio", "final_fwd_ratio",
             "final_sharpness", "loss_spikes")  # per size, the mean over complete runs, in the outer trial's user attrs


@hooks.register("transfer", "objectives")
def check_objectives(spec: Spec) -> tuple[tuple, str] | None:
    """search.transfer.objectives: at least one, each a known name."""
    assert spec.search.transfer is not None, "only a transfer search has objectives"
    objectives = spec.search.transfer.objectives
    if not objectives:
        return ("search", "transfer", "objectives"), "needs at least one objective: " + ", ".join(OBJECTIVES)
    for i, o in enumerate(objectives):
        if o not in OBJECTIVES:
            return (("search", "transfer", "objectives", i),
                    f"unknown objective {o!r}" + did_you_mean(o, OBJECTIVES) + "; choose from " + ", ".join(OBJECTIVES))
    return None


def settings(spec: Spec) -> TableSettings:
    """The leaderboard settings of a run (lr, transfer, metric, reference, tolerance, classes), compare left out."""
    return replace(analysis_settings(spec), compare=())


def directions(spec: Spec) -> list[metrics.Direction]:
    metric = settings(spec).metric
    assert spec.search.transfer is not None, "only a transfer search has objectives"
    return [metrics.direction(metric) if (d := OBJECTIVES[o]) == "metric" else d for o in spec.search.transfer.objectives]


def as_stored(spec: Spec, rows: Sequence[dict]) -> pd.DataFrame:
    """The columns the analysis reads, as trials.csv holds them (a fresh row's floats to 6 significant
    digits, as `nas-stab leaderboard` reads them back): the same numbers whether the rows were just
    trained or read from the file by a resumed search."""
    cfg = settings(spec)
    cols = ["seed", "status", cfg.lr, cfg.transfer, cfg.metric, *[c for c in STABILITY if c != cfg.metric]]
    df = pd.DataFrame([{c: csv_cell(r.get(c)) for c in cols} for r in rows], columns=cols)
    for c in cols:
        if c != "status":
            num = pd.to_numeric(df[c].replace("", None), errors="coerce")
            df[c] = num if c != cfg.transfer or num.notna().all() else df[c]
    return df


def analyze_rows(spec: Spec, rows: Sequence[dict], *, n_boot: int = 1000) -> Analysis:
    """The leaderboard's analysis of one outer trial's runs (one row: compare left out)."""
    return analyze(as_stored(spec, rows), settings(spec), n_boot=n_boot)


def evaluate(spec: Spec, rows: Sequence[dict]) -> tuple[list[float] | None, dict[str, Any], str]:
    """(objective values in `search.transfer.objectives` order, or None when one is undefined;
    user attributes: the row's columns and a stability summary; the reason when None)."""
    a = analyze_rows(spec, rows)
    row = a.rows.iloc[0]
    assert spec.search.transfer is not None, "only a transfer search has objectives"
    values = [_num(row.get(o)) for o in spec.search.transfer.objectives]
    attrs: dict[str, Any] = {"transfers": str(row["transfers"]), "why": str(row["why"])}
    for c in ("transfer_score", "transfer_score_lo", "transfer_score_hi", "best", "transfer_regret", "transfer_regret_lo",
              "transfer_regret_hi", "worst_regret", "lr_drift", "lr_drift_lo", "lr_drift_hi", "lr_slope",
              "lr_sensitivity", "stable_octaves", "diverged", "stuck", "m0"):
        v = _num(row.get(c))
        if v is not None:
            attrs[c] = v
    attrs["best_lr"] = {_key(s): _num(lr) for s, lr in row["best_lrs"]}
    df = a.records
    cfg = a.settings
    ok = df["status"].astype(str) == "complete"
    stab = {}
    for c in STABILITY:
        if c in df.columns:
            per = pd.to_numeric(df.loc[ok, c], errors="coerce").groupby(df.loc[ok, cfg.transfer_key].map(_key)).mean()
            vals = {str(k): _num(v) for k, v in per.items() if _num(v) is not None}
            if vals:
                stab[c] = vals
    attrs["stability"] = stab
    attrs["runs_by_status"] = {str(k): int(v) for k, v in df["status"].astype(str).value_counts().items()}
    if row["censored"]:
        # a censored optimum lies at or beyond the grid's end: a drift or a regret computed from it is a bound,
        # not a value (0.00 from two optima censored at the same edge is not a perfect score), so it is not told
        for i, o in enumerate(spec.search.transfer.objectives):
            if o in CENSORED_BOUNDS:
                values[i] = None
    missing = [o for o, v in zip(spec.search.transfer.objectives, values) if v is None]
    if missing:
        return None, attrs, f"{', '.join(missing)} undefined for these runs ({row['why']})"
    return [v for v in values if v is not None], attrs, ""  # every one (nothing missing)


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def _key(v: Any) -> str:
    f = _num(v)
    return f"{f:g}" if f is not None else str(v)
