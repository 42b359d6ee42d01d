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

Computation: per row the seed values form an array ``V[size, lr, seed]``
(NaN where a run is missing). The point estimate and every bootstrap replicate
go through the same vectorized function `_fit` on seed-mean curves: the
replicates weight the seeds by one multinomial draw per row (a paired
resample: the same seed indices for every cell of the row), so all rows and
replicates are computed at once.

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
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

from nas_stab import metrics
from nas_stab.errors import RunError

__all__ = ["Analysis", "Settings", "analyze", "fill_base", "fmt_value", "lookup", "no_learning"]

_EPS = 1e-9
_NONE = (3, None)
VERDICT_ORDER = {"yes": 0, "inconclusive": 1, "no": 2}
_ACC = ("val_acc", "test_acc")
_BLEU = ("bleu", "test_bleu")
_LOSS = ("train_loss", "val_loss", "test_loss")


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
    other_keys: tuple[str, ...] = ()  # searched keys averaged over inside a cell
    n_boot: int = 1000
    ci: float = 0.9
    boot_seed: int = 0
    notes: tuple[str, ...] = ()

    @property
    def worst(self) -> float:  # the value bad runs count with (kept for older callers)
        return self.m0


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
    tolerance: float = 1.0,
    classes: int | None = None,
    m0: float | None = None,
    margin: float | None = None,
    base: Mapping[str, Any] | None = None,
    n_boot: int = 1000,
    ci: float = 0.9,
    boot_seed: int = 0,
    loss_factor: float | None = None,  # accepted for older callers; the no-learning value replaced it
) -> Analysis:
    """Compute the leaderboard of `trials` (definitions in docs/leaderboard.md).

    Args:
        trials: one row per trained run; needs the metric column and ``lr``
            (unless `base` gives it); ``seed`` and ``status`` default to 0 and
            ``complete``.
        lr, transfer, compare, metric, reference: the ``leaderboard`` settings.
        tolerance: ``leaderboard.tolerance_octaves``, the drift a "yes" allows.
        classes: the task's class count (sets the no-learning value of accuracy and losses).
        m0, margin: override the no-learning value and the "trains" margin.
        base: the resolved spec (nested mapping), for keys that are not columns.
        n_boot, ci, boot_seed: the paired seed bootstrap of the intervals.

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

    m0_default, margin_default, m0_how = no_learning(metric, classes)
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
    # every value worse than m0 counts as m0 (Wortsman et al. 2023 clamp losses at the initial loss)
    counted = np.where(ok, value, m0)
    counted = np.maximum(counted, m0) if sign > 0 else np.minimum(counted, m0)

    seed_codes, _ = _codes(df["seed"])
    size_codes, size_vals = _codes(df[transfer]) if transfer else (np.zeros(len(df), np.int64), [_NONE])
    lr_codes, lr_vals = _codes(pd.Series(lr_num))
    label_codes, label_vals = _label_codes(df, compare)

    rec = pd.DataFrame(
        {
            "_k": label_codes, "_s": size_codes, "_l": lr_codes, "_seed": seed_codes,
            "_value": counted, "_ok": ok,
            "_div": (status == "diverged") | (complete & ~finite),
            "_pruned": status == "pruned",
            "_failed": ~np.isin(status, ("complete", "pruned", "diverged")),
        }
    )
    lr_float = np.array([float(v) for _, v in lr_vals], dtype=float)
    other = _other_keys(df, (lr, transfer, *compare))
    if other:
        notes.append("cells average over the searched keys " + ", ".join(other))

    per_seed = rec.groupby(["_k", "_s", "_l", "_seed"], sort=True).agg(
        v=("_value", "mean"), runs=("_value", "size"), ok=("_ok", "sum"), div=("_div", "sum"),
        pruned=("_pruned", "sum"), failed=("_failed", "sum"),
    ).reset_index()
    cells = per_seed.groupby(["_k", "_s", "_l"], sort=True).agg(
        mean=("v", "mean"), std=("v", "std"), n=("v", "size"), n_runs=("runs", "sum"), n_ok=("ok", "sum"),
        n_diverged=("div", "sum"), n_pruned=("pruned", "sum"), n_failed=("failed", "sum"),
    ).reset_index()
    cells["lr"] = lr_float[cells["_l"].to_numpy()]
    cells["trains"] = sign * (cells["mean"] - m0) > margin + _EPS

    size_num = np.array([float(v) if t == 0 and isinstance(v, (int, float)) else np.nan for t, v in size_vals], dtype=float)
    ref_code = None
    if transfer and reference is not None:
        want = _canon(reference)
        ref_code = next((i for i, v in enumerate(size_vals) if v == want), None)
        if ref_code is None:
            notes.append(f"reference size {fmt_value(reference)} was not tried; the smallest size stands in")
    res = _estimate(per_seed, cells, sign=sign, thr=sign * m0 + margin, m0=m0, lr_float=lr_float, size_num=size_num,
                    ref_code=ref_code, n_boot=n_boot, ci=ci, seed=boot_seed, sized=bool(transfer), notes=notes)
    rows, sizes = res

    stable = _stable(cells, lr_float)
    rows = rows.join(stable)
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
    rows["m0"] = m0
    rows["margin"] = margin
    _verdicts(rows, sizes, size_vals, lr_float, tolerance=float(tolerance), sized=bool(transfer))

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
    blr, cen, tr, ad = (sz[c].tolist() for c in ("best_lr", "censored", "trains", "all_diverged"))
    rows["best_lrs"] = [tuple(zip(sv[i:j], blr[i:j])) for i, j in zip(at, to)]
    rows["censored"] = [tuple((v, c) for v, c in zip(sv[i:j], cen[i:j]) if c) for i, j in zip(at, to)]
    rows["no_best_lr"] = [tuple((v, "diverged" if d else "no lr trains") for v, t, d in zip(sv[i:j], tr[i:j], ad[i:j]) if not t)
                          for i, j in zip(at, to)]
    rows["_verdict"] = rows["transfers"].map(VERDICT_ORDER)
    rows["_best_sort"] = -sign * rows["best"]
    rows = rows.sort_values(["_verdict", "transfer_regret", "_best_sort", "_k"], na_position="last", kind="mergesort")
    rows.insert(0, "rank", np.arange(1, len(rows) + 1))
    rows = rows.drop(columns=["_best_s", "_ref_s", "_verdict", "_best_sort"]).reset_index(drop=True)

    sizes = sizes.copy()
    sizes.insert(0, "label", [label_vals[k][0] for k in sizes["_k"]])
    sizes["size"] = _obj([size_vals[s][1] for s in sizes["_s"]], sizes.index)
    cells.insert(0, "label", [label_vals[k][0] for k in cells["_k"]])
    for i, key in enumerate(compare):
        cells.insert(1 + i, key, _obj([label_vals[k][1][i] for k in cells["_k"]], cells.index))
        sizes.insert(1 + i, key, _obj([label_vals[k][1][i] for k in sizes["_k"]], sizes.index))
    cells["size"] = _obj([size_vals[s][1] for s in cells["_s"]], cells.index)
    cells["frac_diverged"] = cells["n_diverged"] / cells["n_runs"]

    rec["label"] = [label_vals[k][0] for k in rec["_k"]]
    rec["size"] = _obj([size_vals[s][1] for s in rec["_s"]], rec.index)
    rec["lr"] = lr_float[rec["_l"].to_numpy()]
    rec = pd.concat([df.reset_index(drop=True), rec], axis=1)

    settings = Settings(
        metric=metric, direction=direction, lr_key=lr, transfer_key=transfer, compare=compare, reference=reference,
        m0=m0, margin=margin, m0_source=m0_how, tolerance=float(tolerance), other_keys=tuple(other),
        n_boot=int(n_boot), ci=float(ci), boot_seed=int(boot_seed), notes=tuple(notes),
    )
    return Analysis(settings=settings, rows=rows, cells=cells, records=rec, sizes=sizes)


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


def _layout(per_seed: pd.DataFrame, n_sizes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """V[row, size, lr, seed] of per-seed values (NaN: no run), the row-local lr codes
    L[row, lr] (-1 padding), and the seed count per row."""
    ks = per_seed["_k"].to_numpy()
    n_rows = int(ks.max()) + 1 if len(ks) else 0
    l_loc = per_seed.groupby("_k")["_l"].rank(method="dense").to_numpy().astype(int) - 1
    n_loc = per_seed.groupby("_k")["_seed"].rank(method="dense").to_numpy().astype(int) - 1
    n_l, n_n = int(l_loc.max()) + 1, int(n_loc.max()) + 1
    V = np.full((n_rows, n_sizes, n_l, n_n), np.nan)
    V[ks, per_seed["_s"].to_numpy(), l_loc, n_loc] = per_seed["v"].to_numpy(dtype=float)
    L = np.full((n_rows, n_l), -1, dtype=np.int64)
    L[ks, l_loc] = per_seed["_l"].to_numpy()
    seeds = np.zeros(n_rows, dtype=np.int64)
    np.maximum.at(seeds, ks, n_loc + 1)
    return V, L, seeds, l_loc


def _take(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return np.take_along_axis(a, idx[..., None], axis=-1)[..., 0]


def _fit(M: np.ndarray, X: np.ndarray, sign: float, thr: float, U: np.ndarray, ref: np.ndarray, *,
         full: bool = True) -> dict[str, np.ndarray]:
    """Optima, drift, slope, regrets and sensitivity of seed-mean curves M[B, row, size, lr]
    (NaN: not tried) on the grids X[row, lr] (log2 lr, NaN padding), with U[size] = log2(size)
    and ref[row] the reference size code. See docs/leaderboard.md for each formula."""
    B, K, S, L = M.shape
    score = sign * M
    fin = np.isfinite(M[0])  # which lrs were tried at each size: the same in every replicate
    present = fin.any(-1)
    sc = np.where(fin, score, -np.inf)
    j = sc.argmax(-1)  # ties: the first, i.e. the smallest lr
    y1 = _take(sc, j)
    trains = present & (y1 > thr + _EPS)
    first = fin.argmax(-1)[None]
    last = L - 1 - fin[..., ::-1].argmax(-1)[None]
    cens = np.where(first == last, 2, np.where(j == first, -1, np.where(j == last, 1, 0)))
    kk = np.arange(K)[None, :, None]

    def xat(idx):  # X[row, idx] without materializing the broadcast
        return X[kk, idx]

    jm, jp = np.clip(j - 1, 0, L - 1), np.clip(j + 1, 0, L - 1)
    x0, x1, x2 = xat(jm), xat(j), xat(jp)
    y0, y2 = _take(score, jm), _take(score, jp)
    # refine only between neighbours that train: next to a divergence cliff the curve is not
    # locally quadratic, and a parabola through the cliff would overshoot the data
    fit = (cens == 0) & np.isfinite(y0) & np.isfinite(y2) & (y0 > thr + _EPS) & (y2 > thr + _EPS)
    with np.errstate(invalid="ignore", divide="ignore"):
        f01 = (y1 - y0) / (x1 - x0)
        f12 = (y2 - y1) / (x2 - x1)
        a = (f12 - f01) / (x2 - x0)
        curved = fit & (a < -1e-12)
        xv = np.where(curved, np.clip((x0 + x1) / 2 - f01 / (2 * a), x0, x2), x1)
        yv = np.where(curved, y0 + f01 * (xv - x0) + a * (xv - x0) * (xv - x1), y1)
    yv = np.where(present, yv, np.nan)
    xstar = np.where(trains, xv, np.nan)

    # the fitted curve of every size at t = x*(s_ref): its own parabola inside its bracket, else
    # linear interpolation between the lrs tried at that size (the end value beyond them)
    t = np.take_along_axis(xstar, np.broadcast_to(ref[None, :, None], (B, K, 1)), axis=2)  # [B, K, 1]
    t = np.broadcast_to(t, (B, K, S))
    ar = np.arange(L)
    left = np.broadcast_to(np.maximum.accumulate(np.where(fin, ar, -1), axis=-1)[None], M.shape)
    right = np.broadcast_to(np.minimum.accumulate(np.where(fin, ar, L)[..., ::-1], axis=-1)[..., ::-1][None], M.shape)
    with np.errstate(invalid="ignore"):
        pos = (X[None, :, None, :] <= t[..., None]).sum(-1) - 1
    lv = np.where(pos >= 0, _take(left, np.clip(pos, 0, L - 1)), -1)
    rv = np.where(pos + 1 < L, _take(right, np.clip(pos + 1, 0, L - 1)), L)
    exact = (pos >= 0) & (lv == pos) & np.isclose(xat(np.clip(pos, 0, L - 1)), t)
    rv = np.where(exact, lv, rv)
    lv_c, rv_c = np.clip(lv, 0, L - 1), np.clip(rv, 0, L - 1)
    xl, xr, yl, yr = xat(lv_c), xat(rv_c), _take(score, lv_c), _take(score, rv_c)
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(rv_c > lv_c, (t - xl) / (xr - xl), 0.0)
        lin = np.where(lv < 0, yr, np.where(rv >= L, yl, yl + w * (yr - yl)))
        inside = curved & (t >= x0) & (t <= x2)
        at_t = np.where(inside, y0 + f01 * (t - x0) + a * (t - x0) * (t - x1), lin)
    at_t = np.where(np.isfinite(t) & present, at_t, np.nan)
    d = np.clip(yv - at_t, 0.0, None)
    with np.errstate(invalid="ignore"), _quiet():
        n_d = np.isfinite(d).sum(-1)
        regret = np.where(n_d >= 2, np.nanmean(d, -1), np.nan)
        worst = np.where(n_d >= 2, np.nanmax(d, -1), np.nan)
        n_x = np.isfinite(xstar).sum(-1)
        drift = np.where(n_x >= 2, np.nanmax(xstar, -1) - np.nanmin(xstar, -1), np.nan)
        ok = np.isfinite(xstar) & np.isfinite(U)[None, None, :]
        n_ok = ok.sum(-1)
        uu = np.where(ok, U[None, None, :], 0.0)
        xx = np.where(ok, xstar, 0.0)
        ubar = uu.sum(-1) / n_ok
        xbar = xx.sum(-1) / n_ok
        du = np.where(ok, uu - ubar[..., None], 0.0)
        sxx = (du**2).sum(-1)
        slope = np.where((n_ok >= 2) & (sxx > 1e-12), (du * (xx - xbar[..., None])).sum(-1) / sxx, np.nan)
        sens = np.nanmean(np.nanmean(np.where(fin, yv[..., None] - score, np.nan), -1), -1) if full else None
    return {"j": j, "present": present, "trains": trains, "cens": cens, "xstar": xstar, "ystar": yv, "drift": drift,
            "slope": slope, "regret": regret, "worst": worst, "n_d": n_d, "sens": sens}


class _quiet:
    """Silence numpy's "mean of empty slice" warnings (an empty slice is NaN, as wanted)."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        self._w.__exit__(*exc)


def _estimate(per_seed, cells, *, sign, thr, m0, lr_float, size_num, ref_code, n_boot, ci, seed, sized, notes):
    """Point estimates and paired-bootstrap intervals: (rows by _k, sizes by (_k, _s))."""
    n_sizes = int(cells["_s"].max()) + 1
    V, Lc, n_seeds, _ = _layout(per_seed, n_sizes)
    K, S, L, N = V.shape
    X = np.where(Lc >= 0, np.log2(lr_float[np.clip(Lc, 0, None)]), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        U = np.log2(size_num) if sized else np.full(S, np.nan)
    present = np.isfinite(V).any((-1, -2))
    firsts = np.where(present, np.arange(S)[None, :], S).min(-1)
    if ref_code is not None:
        has = present[:, ref_code]
        if (~has).any():
            notes.append(f"{int((~has).sum())} row(s) lack the reference size; their smallest size stands in")
        ref = np.where(has, ref_code, firsts)
    else:
        ref = firsts
    with _quiet():
        P = np.nanmean(V, -1)
        point = _fit(P[None], X, sign, thr, U, ref)

    # paired bootstrap over seeds: one multinomial draw of seed indices per row and replicate
    reps: dict[str, list] = {k: [] for k in ("drift", "slope", "regret", "worst", "xstar")}
    sel = np.flatnonzero(n_seeds >= 2)  # with one seed a resample is the sample itself: no interval
    if n_boot > 0 and sel.size:
        rng = np.random.default_rng(seed)
        Ks, ns = sel.size, n_seeds[sel]
        Vs = V[sel]
        mask = np.isfinite(Vs).reshape(Ks, S * L, N).transpose(0, 2, 1).astype(float)  # [K, N, S*L]
        Vf = np.nan_to_num(Vs).reshape(Ks, S * L, N).transpose(0, 2, 1)
        valid = np.arange(N)[None, None, :] < ns[:, None, None]
        n_cell = np.isfinite(Vs).sum(-1)
        partial = bool(((n_cell > 0) & (n_cell < ns[:, None, None])).any())
        chunk = max(1, int(4_000_000 // max(1, Ks * S * L + Ks * N * N)))
        done = 0
        while done < n_boot:
            b = min(chunk, n_boot - done)
            idx = (rng.random((Ks, b, N)) * ns[:, None, None]).astype(np.int64)
            flat = (np.arange(Ks * b).reshape(Ks, b, 1) * N + idx)[np.broadcast_to(valid, idx.shape)]
            W = np.bincount(flat, minlength=Ks * b * N).reshape(Ks, b, N).astype(float)  # seed weights of each replicate
            with np.errstate(invalid="ignore", divide="ignore"):
                Mb = (W @ Vf) / (W @ mask)  # [K, b, S*L]
            Mb = Mb.reshape(Ks, b, S, L).transpose(1, 0, 2, 3)
            if partial:  # a cell whose seeds the resample all missed (fewer seeds than its row) keeps its mean
                Mb = np.where(np.isnan(Mb), P[sel][None], Mb)
            with _quiet():
                r = _fit(Mb, X[sel], sign, thr, U, ref[sel], full=False)
            for name in reps:
                reps[name].append(r[name])
            done += b
    alpha = (1 - ci) / 2

    def interval(name):
        shape = point[name].shape[1:]
        lo, hi = np.full(shape, np.nan), np.full(shape, np.nan)
        if reps[name]:
            arr = np.concatenate(reps[name], axis=0)
            lo[sel], hi[sel] = _nanquantile(arr, alpha), _nanquantile(arr, 1 - alpha)
        return lo, hi

    rows = pd.DataFrame(index=pd.Index(np.arange(K), name="_k"))
    for name, col in (("drift", "lr_drift"), ("slope", "lr_slope"), ("regret", "transfer_regret"), ("worst", "worst_regret")):
        rows[col] = point[name][0]
        rows[col + "_lo"], rows[col + "_hi"] = interval(name)
    rows["lr_sensitivity"] = point["sens"][0]
    rows["regret_sizes"] = point["n_d"][0]
    rows["sizes"] = present.sum(-1)
    rows["seeds"] = n_seeds
    rows["_ref_s"] = ref
    # the seed spread at each size's best grid lr, pooled (shown next to the regrets)
    j = point["j"][0]
    at = np.take_along_axis(V, j[..., None, None].repeat(N, -1), axis=2)[:, :, 0, :]  # [K, S, N]
    with _quiet():
        var = np.nanvar(at, axis=-1, ddof=1)
        rows["spread"] = np.sqrt(np.nan_to_num(np.nanmean(np.where(present, var, np.nan), -1)))

    xlo, xhi = interval("xstar")
    kk, ss = np.nonzero(present)
    by = cells.groupby(["_k", "_s"]).agg(n_div=("n_diverged", "sum"), n_runs=("n_runs", "sum"))
    all_div = (by["n_div"] == by["n_runs"]).reindex(pd.MultiIndex.from_arrays([kk, ss])).to_numpy()
    cens = point["cens"][0][kk, ss]
    grid_l = Lc[kk, j[kk, ss]]
    xs = point["xstar"][0][kk, ss]
    sizes = pd.DataFrame({
        "_k": kk, "_s": ss, "x_star": xs, "x_lo": xlo[kk, ss], "x_hi": xhi[kk, ss], "best_lr": np.exp2(xs),
        "grid_lr": lr_float[grid_l],
        "censored": np.where(cens == -1, "<=", np.where(cens == 1, ">=", np.where(cens == 2, "=", ""))),
        "trains": point["trains"][0][kk, ss], "all_diverged": all_div,
        "m_star": sign * point["ystar"][0][kk, ss],
    })
    sizes.loc[~sizes["trains"], "censored"] = ""
    return rows, sizes


def _nanquantile(arr: np.ndarray, q: float) -> np.ndarray:
    """numpy's default (linear) quantile along axis 0, ignoring NaN; vectorized (np.nanquantile
    loops in Python over the other axes)."""
    srt = np.sort(arr, axis=0)  # NaN sort last
    n = np.isfinite(arr).sum(0)
    pos = q * np.clip(n - 1, 0, None)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, np.clip(n - 1, 0, None))
    a = np.take_along_axis(srt, lo[None], 0)[0]
    b = np.take_along_axis(srt, hi[None], 0)[0]
    return np.where(n > 0, a + (pos - lo) * (b - a), np.nan)


def _verdicts(rows: pd.DataFrame, sizes: pd.DataFrame, size_vals: list, lr_float: np.ndarray, *, tolerance: float,
              sized: bool) -> None:
    """Fill ``transfers`` (yes / no / inconclusive) and ``why`` (docs/leaderboard.md)."""
    tol = tolerance
    verdicts, whys = [], []
    sz = sizes.sort_values(["_k", "_s"], kind="mergesort")
    bounds = np.searchsorted(sz["_k"].to_numpy(), rows.index.to_numpy(), side="left")
    ends = np.searchsorted(sz["_k"].to_numpy(), rows.index.to_numpy(), side="right")
    cols = {c: sz[c].to_numpy() for c in ("_s", "trains", "all_diverged", "censored", "grid_lr")}
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
        if sized and np.isfinite(lo) and r["seeds"] >= 3 and lo > tol + _EPS:
            no.append(f"{ci} > {tol:g} oct")
        if no:
            verdicts.append("no")
            whys.append("; ".join(no))
            continue
        if not sized:
            inc.append("no size axis")
        elif r["sizes"] < 2:
            inc.append("1 size")
        if r["seeds"] < 3:
            inc.append(f"{int(r['seeds'])} seed{'s' if r['seeds'] != 1 else ''}")
        cens = [(n, c, lr) for n, c, lr in zip(name, g["censored"], g["grid_lr"]) if c]
        if cens and sized:
            inc.append("censored at " + ", ".join(f"{n} ({c}{lr:.3g})" if c != "=" else f"{n} (one lr)" for n, c, lr in cens))
        elif cens:
            c, lr = cens[0][1], cens[0][2]
            inc.append("one lr" if c == "=" else f"censored ({c}{lr:.3g})")
        if sized and r["grid_max_step"] > 1 + _EPS:
            inc.append(f"lr grid step {r['grid_max_step']:.2f} > 1 oct")
        if sized and r["sizes"] >= 2:
            if not np.isfinite(hi):
                if r["seeds"] >= 3:
                    inc.append("no lr_drift interval")
            elif hi > tol + _EPS:
                inc.append(f"{ci} above {tol:g} oct" if lo > tol + _EPS else f"{ci} straddles {tol:g} oct")
        if inc:
            verdicts.append("inconclusive")
            whys.append("; ".join(inc))
        else:
            verdicts.append("yes")
            whys.append(f"{ci} <= {tol:g} oct")
    rows["transfers"] = verdicts
    rows["why"] = whys


def _stable(cells: pd.DataFrame, lr_float: np.ndarray) -> pd.DataFrame:
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
