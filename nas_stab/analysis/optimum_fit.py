"""The vectorized fit of seed-mean curves behind the leaderboard's per-size optimum (docs/leaderboard.md).

`fit` takes curves M[B, row, size, lr] (B = 1 for the point estimate, or a batch of bootstrap replicates,
`optimum.py`) and computes in named steps: each size's best grid lr and whether it is censored at a grid end
(`_grid_optimum`), its refinement by a parabola through the neighbouring lrs (`_parabola`), the lr carried
from the reference size to every size (`_carried_lr`) and each size's fitted curve there (`_curve_at`),
and from those the statistics of the transfer: regrets (`_regrets`), drift and slope of the optima
(`_drift_and_slope`) and the lr sensitivity (`_sensitivity`).
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from nas_stab.analysis.grid import Grid

__all__ = ["EPS", "did_not_learn", "fit"]

EPS = 1e-9


def did_not_learn(v: np.ndarray, sign: float, thr: float | np.ndarray) -> np.ndarray:
    """Where a value did not learn: at or below the trains threshold ``thr = sign * m0 + margin`` in the
    metric's direction (``sign * v <= thr``), NaN never. The one definition of "did not learn" that the
    fit (no parabola through such a cell) and the leaderboard's ``stuck`` column share (docs/leaderboard.md)."""
    v = np.asarray(v, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.isfinite(v) & (sign * v <= thr + EPS)



class _quiet:
    """Silence numpy's "mean of empty slice" warnings (an empty slice is NaN, as wanted)."""

    def __enter__(self) -> None:
        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc: Any) -> None:  # (type, value, traceback) of an exception, or three None
        self._w.__exit__(*exc)


def _take(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return np.take_along_axis(a, idx[..., None], axis=-1)[..., 0]


def _lr_at(X: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """X[row, idx] for lr indices idx[B, row, size], without materializing the broadcast."""
    return X[np.arange(idx.shape[1])[None, :, None], idx]


def _nanquantiles(arr: np.ndarray, qs: Sequence[float]) -> list[np.ndarray]:
    """numpy's default (linear) quantiles along axis 0, ignoring NaN, for each q of `qs` from one sort;
    vectorized (np.nanquantile loops in Python over the other axes)."""
    srt = np.sort(arr, axis=0)  # NaN sort last
    n = np.isfinite(arr).sum(0)
    top = np.clip(n - 1, 0, None)
    out = []
    for q in qs:
        pos = q * top
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, top)
        a = np.take_along_axis(srt, lo[None], 0)[0]
        b = np.take_along_axis(srt, hi[None], 0)[0]
        out.append(np.where(n > 0, a + (pos - lo) * (b - a), np.nan))
    return out


def fit(M: np.ndarray, g: Grid, *, full: bool = True, pruned: np.ndarray | None = None,
        at: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Optima, drift, slope, regrets and sensitivity of seed-mean curves M[B, row, size, lr]
    (NaN: not tried) on the grid `g` (its lrs X, sizes U, reference sizes ref, trains threshold thr in metric
    direction, sign); `pruned`[row, size, lr] marks the cells no parabola may pass through (default
    `g.no_parabola`: a pruned run, or a seed that did not learn). `at[B, row]`, when given, replaces the
    reference size's optimum as the lr carried to every size. See docs/leaderboard.md for each formula."""
    X, sign, thr, U, ref = g.X, g.sign, g.thr, g.U, g.ref
    pruned = g.no_parabola if pruned is None else pruned
    K, S = M.shape[1:3]
    thr = np.broadcast_to(np.asarray(thr, dtype=float), (K, S))
    score = sign * M
    fin = np.isfinite(M[0])  # which lrs were tried at each size: the same in every replicate
    present = fin.any(-1)
    j, y1, trains, cens = _grid_optimum(score, fin, present, thr)
    par = _parabola(score, X, j, y1, cens, thr, pruned)
    yv = np.where(present, par.yv, np.nan)
    xstar = np.where(trains, par.xv, np.nan)
    t = _carried_lr(xstar, ref, at)
    at_t = _curve_at(t, score, X, fin, present, thr, par)
    d = np.where(trains, np.clip(yv - at_t, 0.0, None), np.nan)  # the regret of each size that trains
    score_t, worst_t, n_d, regret, worst = _regrets(at_t, d, present)
    drift, slope = _drift_and_slope(xstar, U)
    sens = _sensitivity(yv, score, fin) if full else None
    return {"j": j, "present": present, "trains": trains, "cens": cens, "curved": par.curved, "xstar": xstar, "ystar": yv,
            "drift": drift, "slope": slope, "regret": regret, "worst": worst, "n_d": n_d, "sens": sens, "d": d,
            "score": sign * score_t, "worst_at": sign * worst_t, "t": t[..., 0], "at": sign * at_t}


def _grid_optimum(score: np.ndarray, fin: np.ndarray, present: np.ndarray,
                  thr: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each size's best tried lr j (ties: the first, i.e. the smallest lr), its value y1, whether the size
    trains (its best beats the threshold) and where the optimum is censored: -1 at the grid's low end,
    1 at its high end, 2 with a single lr tried, 0 inside the grid."""
    L = score.shape[-1]
    sc = np.where(fin, score, -np.inf)
    j = sc.argmax(-1)  # ties: the first, i.e. the smallest lr
    y1 = _take(sc, j)
    trains = present & (y1 > thr + EPS)
    first = fin.argmax(-1)[None]
    last = L - 1 - fin[..., ::-1].argmax(-1)[None]
    cens = np.where(first == last, 2, np.where(j == first, -1, np.where(j == last, 1, 0)))
    return j, y1, trains, cens


class _Parabola(NamedTuple):
    """The parabola through each size's best grid point (x1) and its neighbours (x0 < x1 < x2, value y0 at
    x0, slope f01 from x0 to x1, curvature a), where it refines the optimum (`curved`), and the optimum
    (xv, yv): the vertex where curved, else the grid point."""

    x0: np.ndarray
    x1: np.ndarray
    x2: np.ndarray
    y0: np.ndarray
    f01: np.ndarray
    a: np.ndarray
    curved: np.ndarray
    xv: np.ndarray
    yv: np.ndarray


def _parabola(score: np.ndarray, X: np.ndarray, j: np.ndarray, y1: np.ndarray, cens: np.ndarray, thr: np.ndarray,
              pruned: np.ndarray | None) -> _Parabola:
    """Refine each size's grid optimum by the vertex of the parabola through it and its two neighbours,
    where the curve there is smooth and concave."""
    L = score.shape[-1]
    jm, jp = np.clip(j - 1, 0, L - 1), np.clip(j + 1, 0, L - 1)
    x0, x1, x2 = _lr_at(X, jm), _lr_at(X, j), _lr_at(X, jp)
    y0, y2 = _take(score, jm), _take(score, jp)
    # refine only between neighbours that train: next to a divergence cliff the curve is not
    # locally quadratic, and a parabola through the cliff would overshoot the data
    refine = (cens == 0) & np.isfinite(y0) & np.isfinite(y2) & (y0 > thr + EPS) & (y2 > thr + EPS)
    if pruned is not None and pruned.any():
        # nor through a cell with a pruned run (its value is where the run was stopped, a pessimistic
        # stand-in for where it would have ended) or a seed that did not learn (a cliff in the mean)
        P = np.broadcast_to(pruned[None], score.shape)
        refine &= ~(_take(P, jm) | _take(P, j) | _take(P, jp))
    with np.errstate(invalid="ignore", divide="ignore"):
        f01 = (y1 - y0) / (x1 - x0)
        f12 = (y2 - y1) / (x2 - x1)
        a = (f12 - f01) / (x2 - x0)
        curved = refine & (a < -1e-12)
        xv = np.where(curved, np.clip((x0 + x1) / 2 - f01 / (2 * a), x0, x2), x1)
        yv = np.where(curved, y0 + f01 * (xv - x0) + a * (xv - x0) * (xv - x1), y1)
    return _Parabola(x0, x1, x2, y0, f01, a, curved, xv, yv)


def _carried_lr(xstar: np.ndarray, ref: np.ndarray, at: np.ndarray | None) -> np.ndarray:
    """The lr t[B, row, size] carried to every size of a row: the reference size's optimum x*(s_ref), or `at`."""
    B, K, S = xstar.shape
    if at is not None:
        return np.broadcast_to(np.asarray(at, dtype=float).reshape(B, K, 1), (B, K, S))
    t = np.take_along_axis(xstar, np.broadcast_to(ref[None, :, None], (B, K, 1)), axis=2)  # [B, K, 1]
    return np.broadcast_to(t, (B, K, S))


def _curve_at(t: np.ndarray, score: np.ndarray, X: np.ndarray, fin: np.ndarray, present: np.ndarray, thr: np.ndarray,
              par: _Parabola) -> np.ndarray:
    """The fitted curve of every size at t = x*(s_ref): its own parabola inside its bracket, else
    linear interpolation between the lrs tried at that size (the end value beyond them)."""
    L = score.shape[-1]
    ar = np.arange(L)
    left = np.broadcast_to(np.maximum.accumulate(np.where(fin, ar, -1), axis=-1)[None], score.shape)
    right = np.broadcast_to(np.minimum.accumulate(np.where(fin, ar, L)[..., ::-1], axis=-1)[..., ::-1][None], score.shape)
    with np.errstate(invalid="ignore"):
        pos = (X[None, :, None, :] <= t[..., None]).sum(-1) - 1
    lv = np.where(pos >= 0, _take(left, np.clip(pos, 0, L - 1)), -1)
    rv = np.where(pos + 1 < L, _take(right, np.clip(pos + 1, 0, L - 1)), L)
    exact = (pos >= 0) & (lv == pos) & np.isclose(_lr_at(X, np.clip(pos, 0, L - 1)), t)
    rv = np.where(exact, lv, rv)
    lv_c, rv_c = np.clip(lv, 0, L - 1), np.clip(rv, 0, L - 1)
    xl, xr, yl, yr = _lr_at(X, lv_c), _lr_at(X, rv_c), _take(score, lv_c), _take(score, rv_c)
    x0, x1, x2, y0, f01, a = par.x0, par.x1, par.x2, par.y0, par.f01, par.a
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(rv_c > lv_c, (t - xl) / (xr - xl), 0.0)
        lin = np.where(lv < 0, yr, np.where(rv >= L, yl, yl + w * (yr - yl)))
        # between an lr that trains and one that does not, the curve is a cliff, not a slope: the nearer
        # point's value (the one that trains at the midpoint, where the cliff's place is least known)
        step = (np.isfinite(yl) & np.isfinite(yr) & (rv_c > lv_c) & ((yl > thr[None] + EPS) != (yr > thr[None] + EPS)))
        lin = np.where(step, np.where(w < 0.5, yl, np.where(w > 0.5, yr, np.maximum(yl, yr))), lin)
        inside = par.curved & (t >= x0) & (t <= x2)
        at_t = np.where(inside, y0 + f01 * (t - x0) + a * (t - x0) * (t - x1), lin)
    return np.where(np.isfinite(t) & present, at_t, np.nan)


def _regrets(at_t: np.ndarray, d: np.ndarray,
             present: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The metric at every size with the carried lr (mean over sizes, and at the size it serves worst), the
    number of sizes with a regret, and the mean and the worst regret (with at least two such sizes)."""
    with np.errstate(invalid="ignore"), _quiet():
        score_t = np.nanmean(np.where(present, at_t, np.nan), -1)  # the metric at every size with s_ref's optimum
        worst_t = np.nanmin(np.where(present, at_t, np.nan), -1)  # ... at the size it serves worst
        n_d = np.isfinite(d).sum(-1)
        regret = np.where(n_d >= 2, np.nanmean(d, -1), np.nan)
        worst = np.where(n_d >= 2, np.nanmax(d, -1), np.nan)
    return score_t, worst_t, n_d, regret, worst


def _drift_and_slope(xstar: np.ndarray, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The drift of the optima (their range over the sizes) and their least-squares slope against U = log2(size)."""
    with np.errstate(invalid="ignore"), _quiet():
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
    return drift, slope


def _sensitivity(yv: np.ndarray, score: np.ndarray, fin: np.ndarray) -> np.ndarray:
    """The lr sensitivity: the mean loss from each size's optimum to the lrs tried, averaged over the sizes."""
    with np.errstate(invalid="ignore"), _quiet():
        return np.nanmean(np.nanmean(np.where(fin, yv[..., None] - score, np.nan), -1), -1)
