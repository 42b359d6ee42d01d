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
`verdicts.py`, the handling of configuration values in `values.py`.

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from nas_stab import metrics
from nas_stab.analysis.optimum import EPS, did_not_learn, estimate
from nas_stab.analysis.values import NONE, canon, fill_base, fmt_value, value_codes
from nas_stab.analysis.verdicts import CRITERIA, DEFAULT_EPSILON, parse_epsilon, rank, stable, verdicts
from nas_stab.errors import RunError

__all__ = ["Analysis", "Settings", "analyze", "fill_base", "fmt_value", "no_learning", "stuck_undefined"]

_ACC = ("val_acc", "test_acc")
_BLEU = ("bleu", "test_bleu")
_LOSS = ("train_loss", "train_loss_tail", "val_loss", "test_loss")
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


@dataclass
class Analysis:
    """Result of `analyze`: the ranked leaderboard, the per-size optima, the per-cell table, the records used."""

    settings: Settings
    rows: pd.DataFrame
    cells: pd.DataFrame
    records: pd.DataFrame = field(repr=False)
    sizes: pd.DataFrame = field(default_factory=pd.DataFrame)


def no_learning(metric: str, classes: int | None = None) -> tuple[float | None, float, str]:
    """(m0, margin, how) for `metric`; m0 None means "the largest finite value among complete runs".

    Accuracy: m0 = 1/classes (chance of a balanced set; 0 when the class count is unknown),
    margin a tenth of the way from m0 to 1. BLEU: m0 = 0, margin 1 BLEU. Losses: m0 = ln(classes),
    the loss of a uniform prediction (the divergence rule's reference), else the largest finite
    value among complete runs; margin 10% of m0. Other metrics: m0 as for an unknown loss
    (minimize) or 0 (maximize), margin 0.
    """
    if metric in _ACC:
        m0 = 1.0 / classes if classes and classes > 1 else 0.0
        how = f"chance 1/{classes}" if classes and classes > 1 else "0 (class count unknown)"
        return m0, 0.1 * (1.0 - m0), how
    if metric in _BLEU:
        return 0.0, 1.0, "0 BLEU"
    if metric in _LOSS:
        if classes and classes > 1:
            return math.log(classes), 0.1 * math.log(classes), f"ln({classes}), the loss of a uniform prediction"
        return None, 0.1, "the largest finite value among complete runs (no class count)"
    if metrics.direction(metric) == "minimize":
        return None, 0.0, "the largest finite value among complete runs"
    return 0.0, 0.0, "0"


def stuck_undefined(metric: str, classes: int | None = None, given: bool = False) -> str:
    """Why a run stuck at the no-learning level cannot be told for `metric` ("" when it can).

    `stuck` (docs/leaderboard.md) needs `m0` to be what a model that learned nothing scores on the
    task, independent of the runs: chance accuracy 1/classes, the uniform prediction's loss
    ln(classes), or an `m0` given explicitly. Elsewhere `m0` is a stand-in that would make the count
    a guess: 0 for accuracy without a class count (not chance), the floor of the BLEU scale (a model
    that emits one fixed sentence for every input scores above it), the worst complete run's value
    (every table would have a stuck run by construction), or 0 for another metric.
    """
    if given:
        return ""
    if metric in _ACC:
        return "" if classes and classes > 1 else "chance accuracy is unknown (no class count)"
    if metric in _LOSS:
        return "" if classes and classes > 1 else "no class count: m0 is the worst complete run's loss, not a no-learning level"
    if metric in _BLEU:
        return ("m0 = 0 is the floor of the BLEU scale, not the score of a model that learned nothing (one that emits "
                "the same sentence for every input can score above it)")
    return f"no task-defined no-learning level for {metric}"


# ---------------------------------------------------------------- values


# ---------------------------------------------------------------- analysis


def analyze(
    trials: pd.DataFrame,
    *,
    lr: str = "train.lr",
    transfer: str | None = None,
    compare: Sequence[str] = (),
    metric: str = "val_acc",
    reference: Any = None,
    tolerance: float = 1.0,
    epsilon: float | str | None = None,
    criterion: str = "regret",
    classes: int | None = None,
    m0: float | None = None,
    margin: float | None = None,
    base: Mapping[str, Any] | None = None,
    n_boot: int = 1000,
    ci: float = 0.9,
    boot_seed: int = 0,
) -> Analysis:
    """Compute the leaderboard of `trials` (definitions in docs/leaderboard.md).

    Args:
        trials: one row per trained run; needs the metric column and ``lr``
            (unless `base` gives it); ``seed`` and ``status`` default to 0 and
            ``complete``.
        lr, transfer, compare, metric, reference: the ``leaderboard`` settings.
        tolerance: ``leaderboard.tolerance_octaves``, the drift a "yes" allows (``criterion="drift"``).
        epsilon: ``leaderboard.epsilon``, the regret a "yes" allows: a number in the metric's units, or a
            string ``"N%"`` of the row's gap between its best value and m0 (default `DEFAULT_EPSILON`).
        criterion: ``leaderboard.criterion``: "regret" (default) or "drift".
        classes: the task's class count (sets the no-learning value of accuracy and losses).
        m0, margin: override the no-learning value and the "trains" margin.
        base: the resolved spec (nested mapping), for keys that are not columns.
        n_boot, ci, boot_seed: the paired seed bootstrap of the intervals.

    Raises:
        RunError: the metric column is missing, or no row has a usable learning rate.
    """
    compare = tuple(compare or ())
    notes: list[str] = []
    if criterion not in CRITERIA:
        raise RunError(f"leaderboard criterion {criterion!r} is not one of {', '.join(CRITERIA)}")
    eps_rel, eps_abs = parse_epsilon(DEFAULT_EPSILON if epsilon is None else epsilon)
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

    direction = metrics.direction(metric)
    sign = 1.0 if direction == "maximize" else -1.0
    status = df["status"].astype(str).str.strip().str.lower().to_numpy()
    value = pd.to_numeric(df[metric], errors="coerce").to_numpy(dtype=float)
    finite = np.isfinite(value) & (np.abs(value) < 1e300)
    complete = status == "complete"
    ok = complete & finite
    pruned = status == "pruned"

    m0_default, margin_default, m0_how = no_learning(metric, classes)
    stuck_na = stuck_undefined(metric, classes, given=m0 is not None)
    if m0 is None:
        m0 = m0_default
        if m0 is None:
            pool = value[ok] if ok.any() else value[finite]
            m0 = float(pool.max()) if pool.size else 1.0
    else:
        m0_how = "given"
    m0 = float(m0)
    if margin is None:
        margin = 0.1 * abs(m0) if metric in _LOSS or (margin_default == 0.1 and m0_default is None) else margin_default
    margin = float(margin)
    # a pruned run counts with the value it had when it was stopped (its last evaluation), else m0;
    # diverged, failed and non-finite runs count with m0; every value worse than m0 counts as m0
    # (Wortsman et al. 2023 clamp losses at the initial loss)
    counted = np.where(ok | (pruned & finite), value, m0)
    counted = np.maximum(counted, m0) if sign > 0 else np.minimum(counted, m0)
    thr = sign * m0 + margin  # the trains threshold in metric direction: at or below it, a value did not learn
    # stuck: a complete run with a finite value that did not learn (chance accuracy, a uniform prediction's loss);
    # diverged, pruned and failed runs are never stuck
    stuck = ok & did_not_learn(counted, sign, thr) if not stuck_na else np.zeros(len(df), dtype=bool)

    seed_codes, _ = value_codes(df["seed"])
    size_codes, size_vals = value_codes(df[transfer]) if transfer else (np.zeros(len(df), np.int64), [NONE])
    lr_codes, lr_vals = value_codes(pd.Series(lr_num))
    label_codes, label_vals = _label_codes(df, compare)

    rec = pd.DataFrame(
        {
            "_k": label_codes, "_s": size_codes, "_l": lr_codes, "_seed": seed_codes,
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

    size_num = np.array([float(v) if t == 0 and isinstance(v, (int, float)) else np.nan for t, v in size_vals], dtype=float)
    ref_code = None
    if transfer and reference is not None:
        want = canon(reference)
        ref_code = next((i for i, v in enumerate(size_vals) if v == want), None)
        if ref_code is None:
            notes.append(f"reference size {fmt_value(reference)} was not tried; the smallest size stands in")
    res = estimate(per_seed, cells, sign=sign, thr=sign * m0 + margins, lr_float=lr_float, size_num=size_num,
                    ref_code=ref_code, n_boot=n_boot, ci=ci, seed=boot_seed, sized=bool(transfer), notes=notes)
    rows, sizes = res
    sizes["bracket_end"] = _bracket_ends(df, label_codes, size_codes, sizes)

    rows = rows.join(stable(cells, lr_float))
    top = cells.assign(score=sign * cells["mean"]).sort_values(
        ["_k", "score", "_l"], ascending=[True, False, True], kind="mergesort").groupby("_k").head(1).set_index("_k")
    cg = cells.groupby("_k", sort=True)
    rows["best"] = top["mean"]
    rows["best_std"] = top["std"]
    rows["best_n"] = top["n"]
    trained = cg["n_ok"].sum() > 0
    rows["_best_s"] = top["_s"].where(trained, -1)
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
    rows = rows.join(_largest_size(cells, lr_float))
    verdicts(rows, sizes, size_vals, lr_float, tolerance=float(tolerance), sized=bool(transfer), criterion=criterion)

    # labels, sizes and ranking
    rows = rows.reset_index()
    rows["label"] = [label_vals[k][0] for k in rows["_k"]]
    for i, key in enumerate(compare):
        rows[key] = _obj([label_vals[k][1][i] for k in rows["_k"]], rows.index)
    rows["best_size"] = _obj([size_vals[s][1] if s >= 0 else None for s in rows["_best_s"]], rows.index)
    rows["reference_size"] = _obj([size_vals[s][1] if s >= 0 else None for s in rows["_ref_s"]], rows.index)
    sz = sizes.sort_values(["_k", "_s"], kind="mergesort")
    at = np.searchsorted(sz["_k"].to_numpy(), rows["_k"].to_numpy(), side="left")
    to = np.searchsorted(sz["_k"].to_numpy(), rows["_k"].to_numpy(), side="right")
    sv = [size_vals[s][1] for s in sz["_s"]]
    blr, cen, tr, ad, ends = (sz[c].tolist() for c in ("best_lr", "censored", "trains", "all_diverged", "bracket_end"))
    rows["best_lrs"] = [tuple(zip(sv[i:j], blr[i:j])) for i, j in zip(at, to)]
    rows["censored"] = [tuple((v, c) for v, c in zip(sv[i:j], cen[i:j]) if c) for i, j in zip(at, to)]
    rows["bracket_ends"] = [tuple((v, e) for v, e in zip(sv[i:j], ends[i:j]) if e) for i, j in zip(at, to)]
    rows["no_best_lr"] = [tuple((v, "diverged" if d else "no lr trains") for v, t, d in zip(sv[i:j], tr[i:j], ad[i:j]) if not t)
                          for i, j in zip(at, to)]
    rows = rank(rows, sign)

    sizes = sizes.copy()
    sizes.insert(0, "label", [label_vals[k][0] for k in sizes["_k"]])
    sizes["size"] = _obj([size_vals[s][1] for s in sizes["_s"]], sizes.index)
    cells.insert(0, "label", [label_vals[k][0] for k in cells["_k"]])
    for i, key in enumerate(compare):
        cells.insert(1 + i, key, _obj([label_vals[k][1][i] for k in cells["_k"]], cells.index))
        sizes.insert(1 + i, key, _obj([label_vals[k][1][i] for k in sizes["_k"]], sizes.index))
    cells["size"] = _obj([size_vals[s][1] for s in cells["_s"]], cells.index)
    cells["frac_diverged"] = cells["n_diverged"] / cells["n_runs"]
    cells["frac_stuck"] = cells["n_stuck"] / cells["n_runs"]

    rec["label"] = [label_vals[k][0] for k in rec["_k"]]
    rec["size"] = _obj([size_vals[s][1] for s in rec["_s"]], rec.index)
    rec["lr"] = lr_float[rec["_l"].to_numpy()]
    rec = pd.concat([df.reset_index(drop=True), rec], axis=1)

    settings = Settings(
        metric=metric, direction=direction, lr_key=lr, transfer_key=transfer, compare=compare, reference=reference,
        m0=m0, margin=margin, m0_source=m0_how, tolerance=float(tolerance), other_keys=tuple(other),
        epsilon=DEFAULT_EPSILON if epsilon is None else epsilon, criterion=criterion,
        n_boot=int(n_boot), ci=float(ci), boot_seed=int(boot_seed), notes=tuple(notes), stuck_na=stuck_na,
    )
    return Analysis(settings=settings, rows=rows, cells=cells, records=rec, sizes=sizes)


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


def _obj(values: list, index: pd.Index) -> pd.Series:
    """Keep configuration values as they are (ints stay ints, None stays None)."""
    return pd.Series(values, index=index, dtype=object)


def _label_codes(df: pd.DataFrame, compare: tuple[str, ...]) -> tuple[np.ndarray, list[tuple[str, tuple]]]:
    """Row-label codes (sorted) and, per code, (display text, tuple of values)."""
    if not compare:
        return np.zeros(len(df), np.int64), [("all", ())]
    parts = [value_codes(df[k]) for k in compare]
    frame = pd.DataFrame({f"c{i}": c for i, (c, _) in enumerate(parts)})
    codes = frame.groupby(list(frame.columns), sort=True).ngroup().to_numpy()
    firsts = frame.assign(_g=codes).drop_duplicates("_g").sort_values("_g")
    keyed = [_continuous(parts[i][1]) for i in range(len(compare))]
    labels = []
    for key in firsts[list(frame.columns)].itertuples(index=False, name=None):
        vals = tuple(parts[i][1][c][1] for i, c in enumerate(key))
        text = [f"{k.rsplit('.', 1)[-1]}={fmt_value(v)}" if named else fmt_value(v) for k, v, named in zip(compare, vals, keyed)]
        labels.append((", ".join(text), vals))
    return codes, labels


def _continuous(forms: list) -> bool:
    """A compare key whose values include a non-integer number (a sampled continuous value, as a transfer
    search's outer trials have): its label carries the key's name, since a bare 0.550798 says nothing."""
    return any(isinstance(v, float) and math.isfinite(v) and not float(v).is_integer() for _, v in forms)


def _other_keys(df: pd.DataFrame, used: tuple) -> list[str]:
    """Searched keys (dotted columns) that vary but are not lr / transfer / compare."""
    out = []
    for c in df.columns:
        if isinstance(c, str) and "." in c and c not in used and df[c].nunique(dropna=False) > 1:
            out.append(c)
    return out


