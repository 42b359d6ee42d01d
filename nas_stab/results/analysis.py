"""The learning-rate transfer analysis of SPEC 5, over seeds.

Input: a table of trial records (one row per trained run, the columns of
SPEC 4). Output: an `Analysis` holding

- ``rows``: the leaderboard, one row per *row label* (the values of the
  ``leaderboard.compare`` keys), ranked;
- ``cells``: one row per (row label, size, learning rate) with the mean,
  standard deviation and number of seeds of the metric, and how many runs
  diverged, were pruned or failed;
- ``records``: the input rows actually used, with the values they count with.

Definitions (the columns of ``rows``; ``m`` is the metric, ``sign`` is +1 for a
metric to maximize and -1 for one to minimize, "better" means larger
``sign * m``):

``m(s, lr)``
    For each row label, size ``s`` (value of ``leaderboard.transfer``) and
    learning rate: first the mean over the runs of each seed (several runs of
    one seed exist only when a searched key outside ``lr``/``transfer``/
    ``compare`` varies; those keys are listed in ``Settings.other_keys``), then
    the mean over seeds. A run counts with its metric value only when its
    status is ``complete`` and the value is finite; a diverged, pruned or failed
    run (or a complete run with a NaN/inf value) counts with the *worst value*
    ``metrics.worst_value(metric, threshold)``: 0 for accuracy and BLEU; for
    metrics to minimize, the divergence threshold. SPEC 5 defines that
    threshold as ``loss_factor x initial loss``, but the initial loss is not
    recorded per run, so we use ``threshold = loss_factor x (the largest finite
    value of the metric among complete runs)`` (among all runs when none is
    complete; ``loss_factor`` itself when no finite value exists at all). It is
    never better than any complete run (for non-negative metrics), which is
    what the rule needs.
``std``, ``n``
    The standard deviation over seeds (ddof=1; NaN with one seed) and the
    number of seeds of a cell.
``best_lr(s)``
    The learning rate with the best ``m(s, lr)`` among those tried at ``s``;
    ties go to the smallest learning rate. Learning rates are matched after
    rounding to 12 significant digits. A size where no run counted at any
    learning rate (every run diverged, pruned or failed) has no best learning
    rate: every ``m(s, lr)`` is the worst value, a tie that says nothing. Its
    entry in ``best_lrs`` is NaN and ``no_best_lr`` lists it with the reason,
    ``"diverged"`` (every run at the size diverged) or ``"n/a"``.
``lr_drift``
    ``log2(max_s best_lr(s)) - log2(min_s best_lr(s))`` in octaves.
    ``lr_drift_lo`` / ``lr_drift_hi`` bound a ``ci`` (default 90 %) percentile
    interval from a bootstrap over seeds: in each of ``n_boot`` replicates,
    every cell's mean is recomputed from its per-seed values resampled with
    replacement (independently per cell, RNG seeded by ``boot_seed``), and
    ``lr_drift`` recomputed (sizes without a counted run in the replicate have
    no best lr there either). With one seed the interval collapses to the value.
    Sizes without a best learning rate are left out; NaN when no size has one.
``transfer_regret``
    The mean over sizes of ``d(s) = sign * (m(s, best_lr(s)) - m(s,
    best_lr(s_ref)))`` (so ``d >= 0`` in both directions), with ``s_ref`` the
    ``reference`` size or, by default, the smallest size. A size where
    ``best_lr(s_ref)`` was not tried has no ``d(s)`` and is left out
    (``regret_sizes`` counts the sizes used, ``s_ref`` included); NaN when no
    size other than ``s_ref`` has one (e.g. continuous learning rates from a
    random sampler, never tried twice). When a row lacks the reference size,
    its smallest size stands in (noted). A size without a best learning rate
    has ``m = worst`` at every learning rate, so ``d(s) = 0`` and it counts like
    any other size (SPEC 5 taken literally); but when it is the reference size,
    ``best_lr(s_ref)`` does not exist and both regrets are NaN (noted).
``worst_regret``
    ``max_s d(s)``.
``spread``
    The seed-to-seed spread the regret is judged against: the pooled standard
    deviation over seeds, ``sqrt(mean(std^2))``, of the cells the regrets
    compare, i.e. ``(s, best_lr(s))`` and ``(s, best_lr(s_ref))`` for every
    size. Cells with one seed have no standard deviation and are left out; 0
    when none is left (so one seed demands ``worst_regret == 0``).
``stable_octaves``
    The learning rates of a row form its grid (the sorted distinct values tried
    at any of its sizes). A grid learning rate is *stable* when every size of
    the row has at least one run at it and no run at it diverged (status
    ``diverged``, or ``complete`` with a non-finite metric); a missing run
    counts as no evidence, hence not stable. ``stable_octaves`` is
    ``log2(max / min)`` over the longest run of consecutive stable grid
    learning rates (ties: the first); 0 when at most one learning rate is
    stable. ``stable_lr_min`` / ``stable_lr_max`` give that range (NaN when no
    learning rate is stable).
``grid_step``
    The median of ``log2`` gaps between consecutive grid learning rates of the
    row (0 with one learning rate).
``best``
    The best ``m`` over all sizes and learning rates of the row, with
    ``best_std``, ``best_n``, ``best_size`` and ``best_lr`` (its configuration;
    None and NaN when no run of the row counted: the worst value has no
    configuration).
``transfers``
    ``"yes"`` when ``lr_drift <= grid_step`` and ``worst_regret <= spread``
    (both with a 1e-9 tolerance), ``"no"`` otherwise, ``"n/a"`` when no regret
    could be computed or when no run of the row counts with its own value (all
    diverged, pruned or failed: nothing to judge). A row with some size where no
    run counted at any learning rate, while other sizes trained, is ``"no"``: no
    learning rate of the grid works at that size, whatever the regrets (0 at a
    size that is the worst value everywhere) say.

Rows are ranked by ``transfer_regret`` (NaN last), then by ``best``.

Example:
    >>> import pandas as pd
    >>> t = pd.DataFrame({"seed": [0, 0, 0, 0], "status": ["complete"] * 4,
    ...                   "model.branches": [1, 1, 2, 2], "train.lr": [0.1, 0.2, 0.1, 0.2],
    ...                   "val_acc": [0.9, 0.8, 0.7, 0.9]})
    >>> a = analyze(t, transfer="model.branches", metric="val_acc")
    >>> float(a.rows.loc[0, "lr_drift"]), round(float(a.rows.loc[0, "transfer_regret"]), 6)
    (1.0, 0.1)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from nas_stab import metrics
from nas_stab.errors import RunError

__all__ = ["Analysis", "Settings", "analyze", "fill_base", "fmt_value", "lookup"]

_EPS = 1e-9
_NONE = (3, None)


@dataclass(frozen=True)
class Settings:
    """How the table was computed (shown next to it)."""

    metric: str
    direction: str  # "maximize" | "minimize"
    lr_key: str
    transfer_key: str | None
    compare: tuple[str, ...]
    reference: Any
    loss_factor: float
    threshold: float | None  # divergence threshold used for losses (None for maximize metrics)
    worst: float  # the value bad runs count with
    other_keys: tuple[str, ...] = ()  # searched keys averaged over inside a cell
    n_boot: int = 1000
    ci: float = 0.9
    boot_seed: int = 0
    notes: tuple[str, ...] = ()


@dataclass
class Analysis:
    """Result of `analyze`: the ranked leaderboard, the per-cell table and the records used."""

    settings: Settings
    rows: pd.DataFrame
    cells: pd.DataFrame
    records: pd.DataFrame = field(repr=False)


# ---------------------------------------------------------------- values


def fmt_value(v: Any) -> str:
    """Short, stable text for a configuration value (labels, sizes, learning rates)."""
    if v is None:
        return "null"
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return "null"
        if f.is_integer() and abs(f) < 1e15:
            return str(int(f))
        return f"{f:.6g}"
    return str(v)


def _canon(v: Any) -> tuple[int, Any]:
    """(type tag, value): numbers, bools, strings and null compare and sort sanely."""
    if v is None:
        return _NONE
    if isinstance(v, (bool, np.bool_)):
        return (1, bool(v))
    if isinstance(v, (int, np.integer)):
        return (0, int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return _NONE
        if f.is_integer() and abs(f) < 2**53:
            return (0, int(f))
        return (0, float(f"{f:.12g}"))
    s = str(v)
    low = s.strip().lower()
    if low in ("true", "false"):
        return (1, low == "true")
    if s.strip() in ("", "nan", "NaN", "null", "None", "~"):  # not "none": a value of skip / norm / pruner
        return _NONE
    try:
        return _canon(int(s))
    except ValueError:
        pass
    try:
        f = float(s)
    except ValueError:
        return (2, s)
    return _canon(f) if math.isfinite(f) else (2, s)


def _codes(col: pd.Series) -> tuple[np.ndarray, list[tuple[int, Any]]]:
    """Integer codes in sorted order of the canonical values, and those values."""
    codes, uniq = pd.factorize(col, use_na_sentinel=True)
    canon = [_canon(u) for u in uniq] + [_NONE]
    present = set(canon[:-1]) | ({_NONE} if (codes < 0).any() else set())
    keys = sorted(present, key=lambda k: (k[0], k[1] if k[1] is not None else 0))
    pos = {k: i for i, k in enumerate(keys)}
    pos.setdefault(_NONE, 0)  # the sentinel's slot when no value is missing (never indexed)
    remap = np.array([pos[c] for c in canon], dtype=np.int64)
    return remap[codes], keys


def lookup(spec: Mapping[str, Any] | None, key: str, default: Any = None) -> Any:
    """The value of a dotted key in a nested mapping (a resolved spec), or `default`."""
    node: Any = spec
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def fill_base(trials: pd.DataFrame, keys: Sequence[str], spec: Mapping[str, Any] | None) -> pd.DataFrame:
    """Give every key a column: a key that is not searched (no column, or an empty
    cell when a ``when:`` condition left it out) takes the spec's base value."""
    out = trials.copy()
    for key in dict.fromkeys(k for k in keys if k):
        base = lookup(spec, key)
        if isinstance(base, (list, dict)):
            base = str(base)
        if key not in out.columns:
            out[key] = base
        elif base is not None and out[key].isna().any():
            col = out[key].astype(object)
            col[col.isna()] = base
            out[key] = col
    return out


# ---------------------------------------------------------------- analysis


def analyze(
    trials: pd.DataFrame,
    *,
    lr: str = "train.lr",
    transfer: str | None = None,
    compare: Sequence[str] = (),
    metric: str = "val_acc",
    reference: Any = None,
    loss_factor: float = 10.0,
    base: Mapping[str, Any] | None = None,
    n_boot: int = 1000,
    ci: float = 0.9,
    boot_seed: int = 0,
) -> Analysis:
    """Compute the SPEC 5 leaderboard of `trials` (see the module docstring).

    Args:
        trials: one row per trained run; needs the metric column and ``lr``
            (unless `base` gives it); ``seed`` and ``status`` default to 0 and
            ``complete``.
        lr, transfer, compare, metric, reference: the ``leaderboard`` settings.
        loss_factor: ``stability.divergence.loss_factor``.
        base: the resolved spec (nested mapping), for keys that are not columns.
        n_boot, ci, boot_seed: the bootstrap of ``lr_drift``.

    Raises:
        RunError: the metric column is missing, or no row has a usable learning rate.
    """
    compare = tuple(compare or ())
    notes: list[str] = []
    if metric not in trials.columns:
        have = [c for c in trials.columns if c in metrics.OBJECTIVES]
        raise RunError(f"trials have no column {metric!r} (the leaderboard metric); metric columns: {', '.join(have) or 'none'}")
    df = fill_base(trials, (lr, transfer, *compare), base)
    if lr not in df.columns or df[lr].isna().all():
        raise RunError(f"trials have no learning rate {lr!r}: not a column and no base value in the spec")
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
    finite = np.isfinite(value) & (np.abs(value) < 1e300)  # beyond 1e300 a mean over seeds can overflow: treat as non-finite
    complete = status == "complete"
    ok = complete & finite
    threshold: float | None = None
    if direction == "minimize":
        pool = value[ok] if ok.any() else value[finite]
        top = float(pool.max()) if pool.size else 1.0
        threshold = top * float(loss_factor) if top > 0 else top
        threshold = min(threshold, 1e300)  # means over seeds must not overflow near the float maximum
    worst = metrics.worst_value(metric, threshold)

    seed_codes, _ = _codes(df["seed"])
    size_codes, size_vals = _codes(df[transfer]) if transfer else (np.zeros(len(df), np.int64), [_NONE])
    lr_codes, lr_vals = _codes(pd.Series(lr_num))
    label_codes, label_vals = _label_codes(df, compare)

    rec = pd.DataFrame(
        {
            "_k": label_codes,
            "_s": size_codes,
            "_l": lr_codes,
            "_seed": seed_codes,
            "_value": np.where(ok, value, worst),
            "_ok": ok,
            "_div": (status == "diverged") | (complete & ~finite),
            "_pruned": status == "pruned",
            "_failed": ~np.isin(status, ("complete", "pruned", "diverged")),
        }
    )
    lr_float = np.array([float(v) for _, v in lr_vals], dtype=float)
    other = _other_keys(df, (lr, transfer, *compare))
    if other:
        notes.append("cells average over the searched keys " + ", ".join(other))

    # per (cell, seed) -> per cell
    per_seed = rec.groupby(["_k", "_s", "_l", "_seed"], sort=True).agg(
        v=("_value", "mean"), runs=("_value", "size"), ok=("_ok", "sum"), div=("_div", "sum"),
        pruned=("_pruned", "sum"), failed=("_failed", "sum")
    ).reset_index()
    cells = per_seed.groupby(["_k", "_s", "_l"], sort=True).agg(
        mean=("v", "mean"), std=("v", "std"), n=("v", "size"), n_runs=("runs", "sum"), n_ok=("ok", "sum"),
        n_diverged=("div", "sum"), n_pruned=("pruned", "sum"), n_failed=("failed", "sum"),
    ).reset_index()
    cells["lr"] = lr_float[cells["_l"].to_numpy()]
    cells["score"] = sign * cells["mean"]

    rows = _row_stats(cells, sign, reference, size_vals, lr_float, notes, sized=bool(transfer))
    drift_lo, drift_hi = _bootstrap_drift(per_seed, cells, sign, lr_float, n_boot, ci, boot_seed)
    rows["lr_drift_lo"] = drift_lo.reindex(rows.index).to_numpy()
    rows["lr_drift_hi"] = drift_hi.reindex(rows.index).to_numpy()
    if not transfer:  # one size: there is nothing for a learning rate to transfer across
        rows.loc[:, ["lr_drift", "lr_drift_lo", "lr_drift_hi", "transfer_regret", "worst_regret"]] = np.nan
        rows["transfers"] = "n/a"
        notes.append("no leaderboard.transfer axis: lr_drift, regrets and transfers do not apply")

    # labels, sizes and ranking
    rows = rows.reset_index()
    rows["label"] = [label_vals[k][0] for k in rows["_k"]]
    for i, key in enumerate(compare):
        rows[key] = _obj([label_vals[k][1][i] for k in rows["_k"]], rows.index)
    rows["best_size"] = _obj([size_vals[s][1] if s >= 0 else None for s in rows["_best_s"]], rows.index)
    rows["best_lrs"] = rows["_best_lrs"].map(
        lambda pairs: tuple((size_vals[s][1], lr_float[l] if l >= 0 else math.nan) for s, l in pairs))
    rows["no_best_lr"] = rows["_dead"].map(lambda pairs: tuple((size_vals[s][1], why) for s, why in pairs))
    rows["_best_sort"] = -sign * rows["best"]
    rows = rows.sort_values(["transfer_regret", "_best_sort", "_k"], na_position="last", kind="mergesort")
    rows.insert(0, "rank", np.arange(1, len(rows) + 1))
    rows = rows.drop(columns=["_best_s", "_best_lrs", "_dead", "_best_sort"]).reset_index(drop=True)

    cells.insert(0, "label", [label_vals[k][0] for k in cells["_k"]])
    for i, key in enumerate(compare):
        cells.insert(1 + i, key, _obj([label_vals[k][1][i] for k in cells["_k"]], cells.index))
    cells["size"] = _obj([size_vals[s][1] for s in cells["_s"]], cells.index)
    cells["frac_diverged"] = cells["n_diverged"] / cells["n_runs"]
    cells = cells.drop(columns=["score"])

    rec["label"] = [label_vals[k][0] for k in rec["_k"]]
    rec["size"] = _obj([size_vals[s][1] for s in rec["_s"]], rec.index)
    rec["lr"] = lr_float[rec["_l"].to_numpy()]
    rec = pd.concat([df.reset_index(drop=True), rec], axis=1)

    settings = Settings(
        metric=metric, direction=direction, lr_key=lr, transfer_key=transfer, compare=compare,
        reference=reference, loss_factor=float(loss_factor), threshold=threshold, worst=float(worst),
        other_keys=tuple(other), n_boot=int(n_boot), ci=float(ci), boot_seed=int(boot_seed), notes=tuple(notes),
    )
    return Analysis(settings=settings, rows=rows, cells=cells, records=rec)


def _obj(values: list, index: pd.Index) -> pd.Series:
    """Keep configuration values as they are (ints stay ints, None stays None)."""
    return pd.Series(values, index=index, dtype=object)


def _label_codes(df: pd.DataFrame, compare: tuple[str, ...]) -> tuple[np.ndarray, list[tuple[str, tuple]]]:
    """Row-label codes (sorted) and, per code, (display text, tuple of values)."""
    if not compare:
        return np.zeros(len(df), np.int64), [("all", ())]
    parts = [_codes(df[k]) for k in compare]
    frame = pd.DataFrame({f"c{i}": c for i, (c, _) in enumerate(parts)})
    codes = frame.groupby(list(frame.columns), sort=True).ngroup().to_numpy()
    firsts = frame.assign(_g=codes).drop_duplicates("_g").sort_values("_g")
    labels = []
    for key in firsts[list(frame.columns)].itertuples(index=False, name=None):
        vals = tuple(parts[i][1][c][1] for i, c in enumerate(key))
        labels.append((", ".join(fmt_value(v) for v in vals), vals))
    return codes, labels


def _other_keys(df: pd.DataFrame, used: tuple) -> list[str]:
    """Searched keys (dotted columns) that vary but are not lr / transfer / compare."""
    out = []
    for c in df.columns:
        if isinstance(c, str) and "." in c and c not in used and df[c].nunique(dropna=False) > 1:
            out.append(c)
    return out


def _row_stats(cells: pd.DataFrame, sign: float, reference: Any, size_vals: list, lr_float: np.ndarray, notes: list[str],
               *, sized: bool = True) -> pd.DataFrame:
    """Everything per row label except the bootstrap (cells sorted by _k, _s, _l)."""
    # best lr per (label, size): best score, ties to the smallest lr
    order = cells.sort_values(["_k", "_s", "score", "_l"], ascending=[True, True, False, True], kind="mergesort")
    per_size = order.groupby(["_k", "_s"], sort=True).head(1)[["_k", "_s", "_l", "mean", "std", "score"]]
    per_size = per_size.rename(columns={"_l": "best_l", "mean": "m_best", "std": "std_best", "score": "score_best"})

    # reference size per label
    ref_code = None
    if reference is not None:
        want = _canon(reference)
        matches = [i for i, v in enumerate(size_vals) if v == want]
        ref_code = matches[0] if matches else None
        if ref_code is None:
            notes.append(f"reference size {fmt_value(reference)} was not tried; the smallest size stands in")
    first = per_size.groupby("_k")["_s"].min()
    if ref_code is not None:
        has_ref = per_size.loc[per_size["_s"] == ref_code, "_k"].unique()
        missing = first.index.difference(has_ref)
        if len(missing):
            notes.append(f"{len(missing)} row(s) lack the reference size; their smallest size stands in")
        ref_s = pd.Series(np.where(first.index.isin(has_ref), ref_code, first.to_numpy()), index=first.index)
    else:
        ref_s = first
    ref_best = per_size.set_index(["_k", "_s"])["best_l"]
    ref_l = pd.Series([ref_best[(k, s)] for k, s in ref_s.items()], index=ref_s.index, name="ref_l")

    ps = per_size.join(ref_l, on="_k")
    at_ref = cells[["_k", "_s", "_l", "score", "std"]].rename(columns={"_l": "ref_l", "score": "score_ref", "std": "std_ref"})
    ps = ps.merge(at_ref, on=["_k", "_s", "ref_l"], how="left")
    ps["d"] = ps["score_best"] - ps["score_ref"]  # >= 0: best_lr(s) is the best lr at s
    ps["d"] = ps["d"].clip(lower=0.0)
    ps["log2_best"] = np.log2(lr_float[ps["best_l"].to_numpy()])
    # a size where no run at any lr counted (all diverged, pruned or failed) has no
    # best lr: its arg-max is a tie of worst values. It stays out of lr_drift and shows
    # no best lr; its d(s) = worst - worst = 0 (SPEC 5) when best_lr(s_ref) was tried there.
    by_size = cells.groupby(["_k", "_s"]).agg(n_ok=("n_ok", "sum"), n_runs=("n_runs", "sum"), n_div=("n_diverged", "sum"))
    at = pd.MultiIndex.from_frame(ps[["_k", "_s"]])
    dead = by_size["n_ok"].reindex(at).to_numpy() == 0
    ps["dead"] = dead
    ps["all_div"] = dead & (by_size["n_div"] == by_size["n_runs"]).reindex(at).to_numpy()
    if dead.any():
        what = "size(s)" if sized else "row(s)"
        tail = ", left out of lr_drift, and such a row does not transfer" if sized else ""
        notes.append(f"{int(dead.sum())} {what} had no run that counted at any lr: no best lr (shown as diverged or n/a){tail}")
    ps.loc[dead, "log2_best"] = np.nan
    # a reference size without a best lr gives no best_lr(s_ref): no d(s) at any size
    ref_dead = ps.loc[dead & (ps["_s"].to_numpy() == ref_s.reindex(ps["_k"]).to_numpy()), "_k"].unique()
    if len(ref_dead) and sized:  # (without a size axis the regrets do not apply anyway)
        notes.append(f"{len(ref_dead)} row(s) had no run that counted at the reference size: no reference lr, "
                     "so transfer_regret and worst_regret are n/a")
    if len(ref_dead):
        ps.loc[ps["_k"].isin(ref_dead), "d"] = np.nan
    # variances of the compared cells (NaN for one seed; left out of the pooled mean)
    var_best = ps["std_best"] ** 2
    var_ref = (ps["std_ref"] ** 2).where(ps["d"].notna())
    var_sum = var_best.fillna(0) + var_ref.fillna(0)
    var_n = var_best.notna().astype(int) + var_ref.notna().astype(int)
    ps["var_sum"], ps["var_n"] = var_sum, var_n

    # with several sizes, d(s_ref) = 0 alone says nothing: no regret without another size to compare
    ps["other_d"] = ps["d"].notna() & (ps["_s"].to_numpy() != ref_s.reindex(ps["_k"]).to_numpy())
    g = ps.groupby("_k", sort=True)
    rows = pd.DataFrame(
        {
            "lr_drift": g["log2_best"].max() - g["log2_best"].min(),
            "transfer_regret": g["d"].mean(),
            "worst_regret": g["d"].max(),
            "regret_sizes": g["d"].count(),
            "sizes": g["_s"].size(),
        }
    )
    blind = (rows["sizes"] > 1) & (g["other_d"].sum() == 0)
    rows.loc[blind, ["transfer_regret", "worst_regret"]] = np.nan
    pooled_n = g["var_n"].sum()
    rows["spread"] = np.sqrt((g["var_sum"].sum() / pooled_n.where(pooled_n > 0)).fillna(0.0))
    rows["reference_size"] = _obj([size_vals[s][1] for s in ref_s.reindex(rows.index)], rows.index)
    rows["_best_lrs"] = [tuple(zip(grp["_s"].tolist(), np.where(grp["dead"], -1, grp["best_l"]).tolist())) for _, grp in g]
    rows["_dead"] = [tuple((s, "diverged" if a else "n/a") for s, d, a in zip(grp["_s"], grp["dead"], grp["all_div"]) if d)
                     for _, grp in g]
    has_dead = g["dead"].any()

    # stable octaves
    stable = _stable(cells, lr_float)
    rows = rows.join(stable)

    # best over all cells of the label
    top = cells.sort_values(["_k", "score", "_l"], ascending=[True, False, True], kind="mergesort").groupby("_k").head(1).set_index("_k")
    rows["best"] = top["mean"]
    rows["best_std"] = top["std"]
    rows["best_n"] = top["n"]
    cg = cells.groupby("_k", sort=True)
    trained = cg["n_ok"].sum() > 0
    # a row where nothing counted has no best configuration either (its best m is the worst value)
    rows["_best_s"] = top["_s"].where(trained, -1)
    rows["best_lr"] = np.where(trained, lr_float[top["_l"].to_numpy()], np.nan)
    rows["seeds"] = cg["n"].max()
    rows["runs"] = cg["n_runs"].sum()
    rows["diverged"] = cg["n_diverged"].sum() / rows["runs"]

    ok_drift = rows["lr_drift"] <= rows["grid_step"] + _EPS
    ok_regret = rows["worst_regret"] <= rows["spread"] + _EPS
    assessable = rows["worst_regret"].notna() & trained
    verdict = np.where(~assessable, "n/a", np.where(ok_drift & ok_regret, "yes", "no"))
    # a size that trained at no learning rate: no lr transfers to it, whatever the regrets say
    rows["transfers"] = np.where(trained & has_dead, "no", verdict)
    return rows


def _stable(cells: pd.DataFrame, lr_float: np.ndarray) -> pd.DataFrame:
    """stable_octaves, its range and the grid step, per label."""
    n_sizes = cells.groupby("_k")["_s"].nunique()
    cl = cells.assign(ok=(cells["n_diverged"] == 0).astype(int)).groupby(["_k", "_l"], sort=True)["ok"].sum().reset_index()
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
    return out


def _bootstrap_drift(
    per_seed: pd.DataFrame, cells: pd.DataFrame, sign: float, lr_float: np.ndarray, n_boot: int, ci: float, seed: int
) -> tuple[pd.Series, pd.Series]:
    """Percentile interval of lr_drift per label, resampling seeds per cell."""
    labels = np.unique(cells["_k"].to_numpy())
    if n_boot <= 0 or cells.empty:
        nan = pd.Series(np.nan, index=labels)
        return nan, nan
    rng = np.random.default_rng(seed)
    # cells are sorted by (_k, _s, _l); per_seed is sorted by (_k, _s, _l, _seed)
    cell_idx = per_seed.groupby(["_k", "_s", "_l"], sort=True).ngroup().to_numpy()
    n_per = np.bincount(cell_idx, minlength=len(cells))
    vals = sign * per_seed["v"].to_numpy(dtype=float)
    oks = per_seed["ok"].to_numpy(dtype=float)  # runs of the seed that counted with their own value
    offsets = np.r_[0, np.cumsum(n_per)[:-1]]
    ks = cells["_k"].to_numpy()
    kss = cells["_k"].to_numpy() * (cells["_s"].max() + 1) + cells["_s"].to_numpy()
    g_starts = np.flatnonzero(np.r_[True, kss[1:] != kss[:-1]])
    g_of_cell = np.cumsum(np.r_[True, kss[1:] != kss[:-1]]) - 1
    g_k = ks[g_starts]
    k_starts = np.flatnonzero(np.r_[True, g_k[1:] != g_k[:-1]])
    lr_cell = lr_float[cells["_l"].to_numpy()]
    chunk = max(1, min(n_boot, int(2_000_000 // max(1, len(cells) * max(1, n_per.max())))))
    drifts = []
    done = 0
    while done < n_boot:
        b = min(chunk, n_boot - done)
        means = np.empty((len(cells), b))
        counted = np.empty((len(cells), b))
        for n in np.unique(n_per):
            sel = np.flatnonzero(n_per == n)
            at = offsets[sel][:, None] + np.arange(n)[None, :]  # (cells_n, n)
            draw = rng.integers(0, n, size=(len(sel), b, n))
            means[sel] = np.take_along_axis(vals[at][:, None, :].repeat(b, axis=1), draw, axis=2).mean(axis=2)
            counted[sel] = np.take_along_axis(oks[at][:, None, :].repeat(b, axis=1), draw, axis=2).sum(axis=2)
        gmax = np.maximum.reduceat(means, g_starts, axis=0)
        cand = np.where(means >= gmax[g_of_cell] - 1e-12, lr_cell[:, None], np.inf)
        best = np.log2(np.minimum.reduceat(cand, g_starts, axis=0))
        # as in the point estimate: a size with no counted run in this replicate has no best lr
        best[np.add.reduceat(counted, g_starts, axis=0) == 0] = np.nan
        with np.errstate(invalid="ignore"):
            drifts.append(np.fmax.reduceat(best, k_starts, axis=0) - np.fmin.reduceat(best, k_starts, axis=0))
        done += b
    d = np.concatenate(drifts, axis=1)
    alpha = (1 - ci) / 2
    lo, hi = np.full(len(d), np.nan), np.full(len(d), np.nan)
    some = np.isfinite(d).any(axis=1)
    if some.any():
        lo[some], hi[some] = np.nanquantile(d[some], [alpha, 1 - alpha], axis=1)
    return pd.Series(lo, index=g_k[k_starts]), pd.Series(hi, index=g_k[k_starts])
