"""The learning-rate transfer analysis (defined in docs/leaderboard.md), over seeds.

Input: a table of trial records (one row per trained run, the columns of
``trials.csv``). Output: an `Analysis` holding

- ``rows``: the leaderboard, one row per *row label* (the values of the
  ``leaderboard.compare`` keys), ranked;
- ``sizes``: one row per (row label, size): the fitted optimum ``x*(s)`` in
  log2(lr), its bootstrap interval, whether it is censored, whether the size trains;
- ``cells``: one row per (row label, size, learning rate) with the mean,
  standard deviation and number of seeds of the metric, and how many runs
  diverged, were pruned or failed;
- ``records``: the input rows actually used, with the values they count with.

Every definition (``m0``, the "trains" margin, the quadratic optimum and its
censoring, ``lr_drift``, ``lr_slope``, the regrets, ``lr_sensitivity``,
``stable_octaves``, the verdict and the ranking) is written out with its
formula in ``docs/leaderboard.md``; this module implements exactly that.

This module assembles the tables; the per-size optimum and its paired seed
bootstrap are in `optimum.py`, the verdict rules and the stable lr range in
`verdicts.py`, the handling of configuration values in `values.py`, the no-learning
value in `analysis_no_learning.py`, the labels in `analysis_labels.py`.

Example:
    >>> import pandas as pd
    >>> t = pd.DataFrame({"seed": [0, 0, 0, 0], "status": ["complete"] * 4,
    ...                   "model.branches": [1, 1, 2, 2], "train.lr": [0.1, 0.2, 0.1, 0.2],
    ...                   "val_acc": [0.9, 0.8, 0.7, 0.9]})
    >>> a = analyze(t, transfer="model.branches", metric="val_acc")
    >>> a.rows.loc[0, "transfers"], a.rows.loc[0, "why"]
    ('inconclusive', '1 seed; censored at 1 (<=0.1), 2 (>=0.2)')
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from nas_stab import metrics
from nas_stab.analysis.labels import label_codes, label_rows, label_tables
from nas_stab.analysis.no_learning import _BLEU, NoLearning, counted_values, no_learning, no_learning_level, stuck_undefined
from nas_stab.analysis.optimum import EPS, estimate
from nas_stab.analysis.plateau import bracket_columns, plateau_counts
from nas_stab.analysis.report import report_at, report_cells, report_metric
from nas_stab.analysis.values import NONE, canon, fill_base, fmt_value, value_codes
from nas_stab.analysis.verdicts import CRITERIA, DEFAULT_EPSILON, parse_epsilon, rank, stable, verdicts
from nas_stab.errors import RunError

__all__ = ["Analysis", "Settings", "TableSettings", "analyze", "fill_base", "fmt_value", "no_learning", "stuck_undefined"]

BLEU_SHARE = 0.2  # a BLEU cell trains only at this share of the table's best BLEU at its size (docs/leaderboard.md)


@dataclass(frozen=True)
class Settings:
    """How the table was computed (shown next to it)."""

    metric: str
    direction: str  # "maximize" | "minimize"
    lr_key: str
    transfer_key: str | None
    compare: tuple[str, ...]
    reference: Any
    m0: float  # the no-learning value: failed runs count with it, and worse values are clamped to it
    margin: float  # a cell trains when its seed-mean beats m0 by more than this
    m0_source: str  # how m0 was chosen (for the provenance)
    tolerance: float = 1.0  # leaderboard.tolerance_octaves
    epsilon: float | str = DEFAULT_EPSILON  # leaderboard.epsilon: the regret a "yes" allows
    criterion: str = "regret"  # leaderboard.criterion: regret | drift
    other_keys: tuple[str, ...] = ()  # searched keys averaged over inside a cell
    n_boot: int = 1000
    ci: float = 0.9
    boot_seed: int = 0
    notes: tuple[str, ...] = ()
    stuck_na: str = ""  # why the `stuck` column is empty (no task-defined no-learning level); "" when it is counted
    report: str | None = None  # leaderboard.report: the metric reported at the lrs chosen on `metric` (None: no report)
    report_m0: float = math.nan  # the report metric's no-learning value (diverged and failed runs count with it)


@dataclass
class Analysis:
    """Result of `analyze`: the ranked leaderboard, the per-size optima, the per-cell table, the records used."""

    settings: Settings
    rows: pd.DataFrame
    cells: pd.DataFrame
    records: pd.DataFrame = field(repr=False)
    sizes: pd.DataFrame = field(default_factory=pd.DataFrame)


# ---------------------------------------------------------------- analysis


@dataclass(frozen=True)
class TableSettings:
    """What `analyze` is asked (docs/leaderboard.md): the ``leaderboard`` settings (`settings.settings(spec)` makes
    them from a run's experiment), the task's class count, overrides of the no-learning level and the bootstrap.

    lr, transfer, compare, metric, reference: the ``leaderboard`` keys (the lr key, the size axis, the row keys, the
    metric judged, the reference size). tolerance: ``leaderboard.tolerance_octaves``, the drift a "yes" allows
    (``criterion="drift"``). epsilon: ``leaderboard.epsilon``, the regret a "yes" allows: a number in the metric's
    units or ``"N%"`` of the row's gap between its best value and m0 (None: `DEFAULT_EPSILON`). criterion: "regret"
    or "drift". report: the metric reported at the cells chosen on `metric` (None: its held-out counterpart when the
    trials record it, val_acc -> test_acc; "none": no report). classes: the task's class count (the no-learning value
    of accuracy and losses). m0, margin: override the no-learning value and the "trains" margin. base: the resolved
    spec (nested mapping), for keys that are not columns. n_boot, ci, boot_seed: the paired seed bootstrap."""

    lr: str = "train.lr"
    transfer: str | None = None
    compare: tuple[str, ...] = ()
    metric: str = "val_acc"
    reference: Any = None
    tolerance: float = 1.0
    epsilon: float | str | None = None
    criterion: str = "regret"
    report: str | None = None
    classes: int | None = None
    m0: float | None = None
    margin: float | None = None
    base: Mapping[str, Any] | None = None
    n_boot: int = 1000
    ci: float = 0.9
    boot_seed: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "compare", tuple(self.compare or ()))  # a list or a tuple of keys


def analyze(trials: pd.DataFrame, settings: TableSettings | None = None, /, **overrides: Any) -> Analysis:
    """Compute the leaderboard of `trials` (definitions in docs/leaderboard.md) with `settings`, any of its fields
    given as keywords instead (``analyze(t, transfer="model.width", metric="val_acc")``) or on top of it.

    `trials` has one row per trained run; it needs the metric column and the lr (unless ``settings.base`` gives
    it); ``seed`` and ``status`` default to 0 and ``complete``.

    Raises:
        TypeError: a keyword that is not a field of `TableSettings`.
        RunError: the metric column (or a named report metric) is missing, or no row has a usable learning rate.
    """
    s = replace(settings or TableSettings(), **overrides)
    lr, transfer, compare, metric = s.lr, s.transfer, s.compare, s.metric
    classes, criterion, epsilon, tolerance, report = s.classes, s.criterion, s.epsilon, s.tolerance, s.report
    notes: list[str] = []
    if criterion not in CRITERIA:
        raise RunError(f"leaderboard criterion {criterion!r} is not one of {', '.join(CRITERIA)}")
    eps_rel, eps_abs = parse_epsilon(DEFAULT_EPSILON if epsilon is None else epsilon)
    df, lr_num = _usable_trials(trials, lr, transfer, compare, metric, s.base, notes)
    direction = metrics.direction(metric)
    sign = 1.0 if direction == "maximize" else -1.0
    coded = _coded_records(df, lr_num, metric, classes, s.m0, s.margin, sign, lr, transfer, compare, notes)
    level, lr_float, size_vals, label_vals = coded.level, coded.lr_float, coded.size_vals, coded.label_vals
    per_seed, cells = _cell_tables(coded.rec, lr_float, level.stuck_na)
    margins = _mark_trains(cells, metric, sign, level, notes)
    ref_code = _reference_code(transfer, s.reference, size_vals, notes)
    size_num = np.array([float(v) if t == 0 and isinstance(v, (int, float)) else np.nan for t, v in size_vals], dtype=float)
    rows, sizes = estimate(per_seed, cells, sign=sign, thr=sign * level.m0 + margins, lr_float=lr_float, size_num=size_num,
                           ref_code=ref_code, n_boot=s.n_boot, ci=s.ci, seed=s.boot_seed, sized=bool(transfer), notes=notes)
    sizes["bracket_end"] = _bracket_ends(df, coded.label_codes, coded.size_codes, sizes)
    sizes = sizes.join(bracket_columns(sizes, cells, sign))
    rows = _row_facts(rows, cells, lr_float, sign, level, eps_rel, eps_abs)
    rows["plateaus"] = plateau_counts(sizes, rows.index)
    report = report_metric(report, metric, df)
    rep_cells, rep_level = report_cells(df, coded.rec, report, classes) if report else (None, None)
    _add_report(sizes, rows, rep_cells)
    verdicts(rows, sizes, size_vals, lr_float, tolerance=float(tolerance), sized=bool(transfer), criterion=criterion)
    rows = rank(label_rows(rows, sizes, label_vals, size_vals, compare), sign)
    sizes, cells, rec = label_tables(sizes, cells, coded.rec, df, label_vals, size_vals, compare, lr_float)
    for c, v in report_at(rep_cells, cells["_k"], cells["_s"], cells["_l"]).items():  # after the cells' own columns
        cells[c] = v.array

    used = Settings(
        metric=metric, direction=direction, lr_key=lr, transfer_key=transfer, compare=compare, reference=s.reference,
        m0=level.m0, margin=level.margin, m0_source=level.how, tolerance=float(tolerance), other_keys=tuple(coded.other),
        epsilon=DEFAULT_EPSILON if epsilon is None else epsilon, criterion=criterion,
        n_boot=int(s.n_boot), ci=float(s.ci), boot_seed=int(s.boot_seed), notes=tuple(notes), stuck_na=level.stuck_na,
        report=report, report_m0=rep_level.m0 if rep_level else math.nan,
    )
    return Analysis(settings=used, rows=rows, cells=cells, records=rec, sizes=sizes)


def _usable_trials(trials: pd.DataFrame, lr: str, transfer: str | None, compare: tuple[str, ...], metric: str,
                   base: Mapping[str, Any] | None, notes: list[str]) -> tuple[pd.DataFrame, np.ndarray]:
    """The trials with the keys the table needs filled from `base`, ``seed`` and ``status`` defaulted, and only the
    runs with a positive finite learning rate; with that learning rate as a number."""
    if metric not in trials.columns:
        have = [c for c in trials.columns if c in metrics.OBJECTIVES]
        raise RunError(f"trials have no column {metric!r} (the leaderboard metric); metric columns: {', '.join(have) or 'none'}")
    df = fill_base(trials, (lr, transfer, *compare), base)
    if lr not in df.columns or df[lr].isna().all():
        raise RunError(f"trials have no learning rate {lr!r}: not a column and no base value in the spec")
    if transfer and transfer not in df.columns:
        raise RunError(f"trials have no size axis {transfer!r}: not a column and no base value in the spec")
    if "seed" not in df.columns:
        df["seed"] = 0
    if "status" not in df.columns:
        df["status"] = "complete"

    lr_num = pd.to_numeric(df[lr], errors="coerce").to_numpy(dtype=float)
    good_lr = np.isfinite(lr_num) & (lr_num > 0)
    if not good_lr.all():
        notes.append(f"{int((~good_lr).sum())} runs without a positive finite {lr} were left out")
        df = df.loc[good_lr].reset_index(drop=True)
        lr_num = lr_num[good_lr]
    if df.empty:
        raise RunError(f"no trial has a positive finite learning rate {lr!r}")
    return df, lr_num


@dataclass(frozen=True)
class _Coded:
    """The runs as the analysis counts them: `rec` has one row per run with its integer codes (``_k`` row label,
    ``_s`` size, ``_l`` lr, ``_seed``), the value it counts with and its outcome; the values behind the codes
    (`lr_float`, `size_vals`, `label_vals`), the table's no-learning level and the searched keys averaged over."""

    rec: pd.DataFrame
    level: NoLearning
    lr_float: np.ndarray
    size_vals: list
    label_vals: list
    label_codes: np.ndarray
    size_codes: np.ndarray
    other: list[str]


def _coded_records(df: pd.DataFrame, lr_num: np.ndarray, metric: str, classes: int | None, m0: float | None,
                   margin: float | None, sign: float, lr: str, transfer: str | None, compare: tuple[str, ...],
                   notes: list[str]) -> _Coded:
    """Each run's outcome, the value it counts with (`counted_values`) and its codes (`_Coded`)."""
    status = df["status"].astype(str).str.strip().str.lower().to_numpy()
    value = pd.to_numeric(df[metric], errors="coerce").to_numpy(dtype=float)
    finite = np.isfinite(value) & (np.abs(value) < 1e300)
    complete = status == "complete"
    ok = complete & finite
    pruned = status == "pruned"
    level = no_learning_level(metric, classes, m0, margin, value, ok, finite)
    counted, stuck = counted_values(value, ok, pruned, finite, sign, level)

    seed_codes, _ = value_codes(df["seed"])
    size_codes, size_vals = value_codes(df[transfer]) if transfer else (np.zeros(len(df), np.int64), [NONE])
    lr_codes, lr_vals = value_codes(pd.Series(lr_num))
    k_codes, label_vals = label_codes(df, compare)

    rec = pd.DataFrame(
        {
            "_k": k_codes, "_s": size_codes, "_l": lr_codes, "_seed": seed_codes,
            "_value": counted, "_ok": ok,
            "_div": (status == "diverged") | (complete & ~finite),
            "_stuck": stuck,
            "_pruned": pruned,
            "_failed": ~np.isin(status, ("complete", "pruned", "diverged")),
        }
    )
    lr_float = np.array([float(v) for _, v in lr_vals], dtype=float)
    other = _other_keys(df, (lr, transfer, *compare))
    if other:
        notes.append("cells average over the searched keys " + ", ".join(other))
    return _Coded(rec=rec, level=level, lr_float=lr_float, size_vals=size_vals, label_vals=label_vals, label_codes=k_codes,
                  size_codes=size_codes, other=other)


def _cell_tables(rec: pd.DataFrame, lr_float: np.ndarray, stuck_na: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per (row label, size, lr, seed): the seed's mean value and run counts; and one per cell (row label,
    size, lr): the mean, standard deviation and number of the seed values, the run counts and the lr."""
    per_seed = rec.groupby(["_k", "_s", "_l", "_seed"], sort=True).agg(
        v=("_value", "mean"), runs=("_value", "size"), ok=("_ok", "sum"), div=("_div", "sum"), stuck=("_stuck", "sum"),
        pruned=("_pruned", "sum"), failed=("_failed", "sum"),
    ).reset_index()
    cells = per_seed.groupby(["_k", "_s", "_l"], sort=True).agg(
        mean=("v", "mean"), std=("v", "std"), n=("v", "size"), n_runs=("runs", "sum"), n_ok=("ok", "sum"),
        n_diverged=("div", "sum"), n_stuck=("stuck", "sum"), n_pruned=("pruned", "sum"), n_failed=("failed", "sum"),
    ).reset_index()
    if stuck_na:  # no task-defined no-learning level: not a count of zero, no count
        cells["n_stuck"] = np.nan
    cells["lr"] = lr_float[cells["_l"].to_numpy()]
    return per_seed, cells


def _mark_trains(cells: pd.DataFrame, metric: str, sign: float, level: NoLearning, notes: list[str]) -> np.ndarray:
    """The trains margin of every (row label, size) [k, s], and the column ``trains`` of the cells: the seed mean
    beats m0 by more than it."""
    m0, margin = level.m0, level.margin
    n_k, n_s = int(cells["_k"].max()) + 1, int(cells["_s"].max()) + 1
    margins = np.full((n_k, n_s), margin)
    if metric in _BLEU:
        # a collapsed translation model (one generic sentence for every input) scores a few BLEU, above the
        # 1-BLEU floor: a cell trains only when it also reaches a share of the table's best at its size
        best_s = (sign * cells["mean"]).groupby(cells["_s"]).max().reindex(range(n_s)).to_numpy(dtype=float)
        margins = np.maximum(margins, BLEU_SHARE * np.nan_to_num(sign * best_s - sign * m0)[None, :])
        notes.append(f"a BLEU cell trains when it reaches {BLEU_SHARE:g} of the table's best BLEU at its size (and {margin:g} BLEU)")
    cell_margin = margins[cells["_k"].to_numpy(), cells["_s"].to_numpy()]
    cells["trains"] = sign * (cells["mean"] - m0) > cell_margin + EPS
    return margins


def _reference_code(transfer: str | None, reference: Any, size_vals: list, notes: list[str]) -> int | None:
    """The size code of the reference size (None: none given, or it was not tried)."""
    if not (transfer and reference is not None):
        return None
    want = canon(reference)
    ref_code = next((i for i, v in enumerate(size_vals) if v == want), None)
    if ref_code is None:
        notes.append(f"reference size {fmt_value(reference)} was not tried; the smallest size stands in")
    return ref_code


def _row_facts(rows: pd.DataFrame, cells: pd.DataFrame, lr_float: np.ndarray, sign: float, level: NoLearning,
               eps_rel: float | None, eps_abs: float | None) -> pd.DataFrame:
    """`estimate`'s rows with the stable lr range, the best cell, the shares of diverged, stuck and pruned runs,
    m0, the margin, epsilon and the largest size's facts (`_largest_size`): what the verdicts and the ranking use."""
    m0, margin, stuck_na = level.m0, level.margin, level.stuck_na
    rows = rows.join(stable(cells, lr_float))
    top = cells.assign(score=sign * cells["mean"]).sort_values(
        ["_k", "score", "_l"], ascending=[True, False, True], kind="mergesort").groupby("_k").head(1).set_index("_k")
    cg = cells.groupby("_k", sort=True)
    rows["best"] = top["mean"]
    rows["best_std"] = top["std"]
    rows["best_n"] = top["n"]
    trained = cg["n_ok"].sum() > 0
    rows["_best_s"] = top["_s"].where(trained, -1)
    rows["_best_l"] = top["_l"].where(trained, -1)
    rows["best_lr"] = np.where(trained, lr_float[top["_l"].to_numpy()], np.nan)
    rows["runs"] = cg["n_runs"].sum()
    rows["diverged"] = cg["n_diverged"].sum() / rows["runs"]
    rows["stuck"] = cg["n_stuck"].sum() / rows["runs"] if not stuck_na else np.nan
    rows["pruned"] = cg["n_pruned"].sum() / rows["runs"]
    rows["m0"] = m0
    no_ref = rows["transfer_score"].isna()  # the reference size does not train: no lr to transfer
    for c in ("transfer_score", "transfer_score_lo", "transfer_score_hi"):
        rows[c] = rows[c].mask(no_ref, m0)
    rows["margin"] = margin
    gap = (sign * (rows["best"] - m0)).clip(lower=0.0)
    rows["epsilon"] = eps_abs if eps_rel is None else eps_rel * gap
    return rows.join(_largest_size(cells, lr_float))


def _add_report(sizes: pd.DataFrame, rows: pd.DataFrame, rep_cells: pd.DataFrame | None) -> None:
    """The report metric (`report.report_cells`; NaN without one) at each size's best grid lr (``report_at_best``,
    ``report_std``, ``report_n``) and at each row's best cell (``best_report``, ``best_report_std``, ``best_report_n``)."""
    at = report_at(rep_cells, sizes["_k"], sizes["_s"], sizes["_grid_l"])
    for name, c in (("report_at_best", "report_mean"), ("report_std", "report_std"), ("report_n", "report_n")):
        sizes[name] = at[c].array
    at = report_at(rep_cells, rows.index, rows["_best_s"], rows["_best_l"])
    for name, c in (("best_report", "report_mean"), ("best_report_std", "report_std"), ("best_report_n", "report_n")):
        rows[name] = at[c].array


BRACKET_END = "bracket_end"  # a trials column: the end of the run's bracket sweep (set by load_analysis)


def _bracket_ends(df: pd.DataFrame, label_codes: np.ndarray, size_codes: np.ndarray, sizes: pd.DataFrame) -> list[str]:
    """Per (row label, size) of `sizes`: how its bracket sweep ended (``search.sampler: bracket``, ``search.transfer.inner: bracket``; the
    column `BRACKET_END` of the trials, "" without it), several sweeps' ends joined by " / "."""
    if BRACKET_END not in df.columns:
        return [""] * len(sizes)
    col = df[BRACKET_END].map(lambda v: "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
    by: dict[tuple[int, int], set] = {}
    for k, s, e in zip(label_codes.tolist(), size_codes.tolist(), col.tolist()):
        if e:
            by.setdefault((k, s), set()).add(e)
    return [" / ".join(sorted(by.get((k, s), ()))) for k, s in zip(sizes["_k"].tolist(), sizes["_s"].tolist())]


def _largest_size(cells: pd.DataFrame, lr_float: np.ndarray) -> pd.DataFrame:
    """Per row, at its largest size: the share of runs diverged and the width in octaves of the lr window in
    which it trains (from its smallest to its largest lr that trains; 0 with one), for the ranking."""
    last = cells.groupby("_k")["_s"].transform("max") == cells["_s"]
    c = cells.loc[last]
    x = np.log2(lr_float[c["_l"].to_numpy()])
    trained = c["trains"].to_numpy()
    g = pd.DataFrame({"_k": c["_k"].to_numpy(), "div": c["n_diverged"].to_numpy(), "runs": c["n_runs"].to_numpy(),
                      "x": np.where(trained, x, np.nan)})
    by = g.groupby("_k")
    return pd.DataFrame({"largest_diverged": by["div"].sum() / by["runs"].sum(),
                         "largest_window": (by["x"].max() - by["x"].min()).fillna(0.0)})


def _other_keys(df: pd.DataFrame, used: tuple) -> list[str]:
    """Searched keys (dotted columns) that vary but are not lr / transfer / compare."""
    out = []
    for c in df.columns:
        if isinstance(c, str) and "." in c and c not in used and df[c].nunique(dropna=False) > 1:
            out.append(c)
    return out


