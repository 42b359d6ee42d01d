"""The per-size optimum and the seed bootstrap of the leaderboard (docs/leaderboard.md).

Per row label the seed values form an array ``V[size, lr, seed]`` (NaN where a
run is missing); seeds are numbered per (row, size), so a size trained with 5
seeds beside one trained with 1 keeps its own replication. The point estimate
and every bootstrap replicate go through the same vectorized `fit` on seed-mean
curves. A replicate resamples the seeds of each (row, size) once, the same
draw for every lr of that size (paired across lrs: a seed that is better at
every lr does not move the optimum); sizes are resampled independently of each
other, which is exact for sizes trained separately and never narrower when
seeds of different sizes share something (merged run directories, a common
data order).

`estimate` returns the point values with their intervals, per row and per
(row, size): the percentile intervals widened for the replication of the cells
each value rests on (`intervals.py`), an unrefined optimum's interval spanning
its grid neighbourhood, the drift from a simultaneous band over the sizes, and
one-sided bounds where an optimum is censored.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from nas_stab.analysis.intervals import factor, widen

__all__ = ["EPS", "did_not_learn", "estimate", "fit"]

EPS = 1e-9
MISFIT = 0.5  # a refined optimum's interval spans at least this share of the wider local grid step on each side


def did_not_learn(v: np.ndarray, sign: float, thr) -> np.ndarray:
    """Where a value did not learn: at or below the trains threshold ``thr = sign * m0 + margin`` in the
    metric's direction (``sign * v <= thr``), NaN never. The one definition of "did not learn" that the
    fit (no parabola through such a cell) and the leaderboard's ``stuck`` column share (docs/leaderboard.md)."""
    v = np.asarray(v, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.isfinite(v) & (sign * v <= thr + EPS)


def _layout(per_seed: pd.DataFrame, n_sizes: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """V[row, size, lr, seed] of per-seed values (NaN: no run; seeds numbered per (row, size)), the
    row-local lr codes L[row, lr] (-1 padding), the seed count per (row, size) and the row-local lr
    code of every per-seed record."""
    ks = per_seed["_k"].to_numpy()
    ss = per_seed["_s"].to_numpy()
    n_rows = int(ks.max()) + 1 if len(ks) else 0
    l_loc = per_seed.groupby("_k")["_l"].rank(method="dense").to_numpy().astype(int) - 1
    n_loc = per_seed.groupby(["_k", "_s"])["_seed"].rank(method="dense").to_numpy().astype(int) - 1
    n_l, n_n = int(l_loc.max()) + 1, int(n_loc.max()) + 1
    V = np.full((n_rows, n_sizes, n_l, n_n), np.nan)
    V[ks, ss, l_loc, n_loc] = per_seed["v"].to_numpy(dtype=float)
    L = np.full((n_rows, n_l), -1, dtype=np.int64)
    L[ks, l_loc] = per_seed["_l"].to_numpy()
    seeds = np.zeros((n_rows, n_sizes), dtype=np.int64)
    np.maximum.at(seeds, (ks, ss), n_loc + 1)
    return V, L, seeds, l_loc


def _take(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    return np.take_along_axis(a, idx[..., None], axis=-1)[..., 0]


def _neighbours(fin: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The nearest tried lr below and above index j at each size (-1 / L where there is none)."""
    L = fin.shape[-1]
    ar = np.arange(L)
    below = np.where(fin & (ar < j[..., None]), ar, -1).max(-1)
    above = np.where(fin & (ar > j[..., None]), ar, L).min(-1)
    return below, above


def fit(M: np.ndarray, X: np.ndarray, sign: float, thr: np.ndarray, U: np.ndarray, ref: np.ndarray, *,
        full: bool = True, pruned: np.ndarray | None = None, at: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Optima, drift, slope, regrets and sensitivity of seed-mean curves M[B, row, size, lr]
    (NaN: not tried) on the grids X[row, lr] (log2 lr, NaN padding), with U[size] = log2(size),
    ref[row] the reference size code and thr[row, size] the trains threshold in metric direction;
    pruned[row, size, lr] marks the cells no parabola may pass through (a pruned run, or a seed that
    did not learn). `at[B, row]`, when given, replaces the reference size's optimum as the lr carried
    to every size. See docs/leaderboard.md for each formula."""
    B, K, S, L = M.shape
    thr = np.broadcast_to(np.asarray(thr, dtype=float), (K, S))
    score = sign * M
    fin = np.isfinite(M[0])  # which lrs were tried at each size: the same in every replicate
    present = fin.any(-1)
    sc = np.where(fin, score, -np.inf)
    j = sc.argmax(-1)  # ties: the first, i.e. the smallest lr
    y1 = _take(sc, j)
    trains = present & (y1 > thr + EPS)
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
    refine = (cens == 0) & np.isfinite(y0) & np.isfinite(y2) & (y0 > thr + EPS) & (y2 > thr + EPS)
    if pruned is not None and pruned.any():
        # nor through a cell with a pruned run (its value is where the run was stopped, a pessimistic
        # stand-in for where it would have ended) or a seed that did not learn (a cliff in the mean)
        P = np.broadcast_to(pruned[None], M.shape)
        refine &= ~(_take(P, jm) | _take(P, j) | _take(P, jp))
    with np.errstate(invalid="ignore", divide="ignore"):
        f01 = (y1 - y0) / (x1 - x0)
        f12 = (y2 - y1) / (x2 - x1)
        a = (f12 - f01) / (x2 - x0)
        curved = refine & (a < -1e-12)
        xv = np.where(curved, np.clip((x0 + x1) / 2 - f01 / (2 * a), x0, x2), x1)
        yv = np.where(curved, y0 + f01 * (xv - x0) + a * (xv - x0) * (xv - x1), y1)
    yv = np.where(present, yv, np.nan)
    xstar = np.where(trains, xv, np.nan)

    # the fitted curve of every size at t = x*(s_ref): its own parabola inside its bracket, else
    # linear interpolation between the lrs tried at that size (the end value beyond them)
    if at is None:
        t = np.take_along_axis(xstar, np.broadcast_to(ref[None, :, None], (B, K, 1)), axis=2)  # [B, K, 1]
    else:
        t = np.asarray(at, dtype=float).reshape(B, K, 1)
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
        # between an lr that trains and one that does not, the curve is a cliff, not a slope: the nearer
        # point's value (the one that trains at the midpoint, where the cliff's place is least known)
        step = (np.isfinite(yl) & np.isfinite(yr) & (rv_c > lv_c) & ((yl > thr[None] + EPS) != (yr > thr[None] + EPS)))
        lin = np.where(step, np.where(w < 0.5, yl, np.where(w > 0.5, yr, np.maximum(yl, yr))), lin)
        inside = curved & (t >= x0) & (t <= x2)
        at_t = np.where(inside, y0 + f01 * (t - x0) + a * (t - x0) * (t - x1), lin)
    at_t = np.where(np.isfinite(t) & present, at_t, np.nan)
    d = np.where(trains, np.clip(yv - at_t, 0.0, None), np.nan)  # the regret of each size that trains
    with np.errstate(invalid="ignore"), _quiet():
        score_t = np.nanmean(np.where(present, at_t, np.nan), -1)  # the metric at every size with s_ref's optimum
        worst_t = np.nanmin(np.where(present, at_t, np.nan), -1)  # ... at the size it serves worst
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
    return {"j": j, "present": present, "trains": trains, "cens": cens, "curved": curved, "xstar": xstar, "ystar": yv,
            "drift": drift, "slope": slope, "regret": regret, "worst": worst, "n_d": n_d, "sens": sens, "d": d,
            "score": sign * score_t, "worst_at": sign * worst_t, "t": t[..., 0], "at": sign * at_t}


class _quiet:
    """Silence numpy's "mean of empty slice" warnings (an empty slice is NaN, as wanted)."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        self._w.__exit__(*exc)


_REPS = ("drift", "slope", "regret", "worst", "xstar", "score", "worst_at", "d")


def _bootstrap(V, P, X, n_size, *, sign, thr, U, ref, no_parabola, n_boot, seed) -> dict[str, np.ndarray]:
    """Replicates [n_boot, ...] of `fit`'s statistics: each (row, size) resamples its own seeds, the same
    draw for every lr of the size; a cell whose seeds a resample all missed keeps its point mean."""
    K, S, L, N = V.shape
    out: dict[str, list] = {k: [] for k in _REPS}
    if n_boot <= 0 or K == 0:
        return {}
    rng = np.random.default_rng(seed)
    mask = np.isfinite(V).astype(float)
    Vf = np.nan_to_num(V)
    valid = np.arange(N)[None, None, :] < n_size[:, :, None]  # [K, S, N]
    chunk = max(1, int(4_000_000 // max(1, K * S * max(L, N))))
    done = 0
    while done < n_boot:
        b = min(chunk, n_boot - done)
        idx = (rng.random((K, b, S, N)) * np.maximum(n_size, 1)[:, None, :, None]).astype(np.int64)
        base = np.arange(K * b * S).reshape(K, b, S, 1) * N
        flat = (base + idx)[np.broadcast_to(valid[:, None], idx.shape)]
        W = np.bincount(flat, minlength=K * b * S * N).reshape(K, b, S, N).astype(float)
        with np.errstate(invalid="ignore", divide="ignore"):
            Mb = np.einsum("kbsn,ksln->bksl", W, Vf) / np.einsum("kbsn,ksln->bksl", W, mask)
        Mb = np.where(np.isnan(Mb), P[None], Mb)
        with _quiet():
            r = fit(Mb, X, sign, thr, U, ref, full=False, pruned=no_parabola)
        for name in _REPS:
            out[name].append(r[name])
        done += b
    return {k: np.concatenate(v, axis=0) for k, v in out.items()}


def _interval(arr: np.ndarray, n, ci: float, floor: float | None = None, semi: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The percentile interval of replicates `arr` [R, ...] widened for the seed count n (broadcast;
    NaN where n < 2). `semi`: each end widened by the replicates' deviation on its own side of the median
    (a skewed statistic keeps its skew)."""
    alpha = (1 - ci) / 2
    q_lo, q_mid, q_hi = _nanquantiles(arr, (alpha, 0.5, 1 - alpha))
    n = np.broadcast_to(n, q_mid.shape)
    with _quiet():
        if semi:
            dev = arr - q_mid[None]
            sd_lo = np.sqrt(2 * np.nanmean(np.minimum(dev, 0.0) ** 2, axis=0))
            lo = widen(q_lo, q_hi, q_mid, np.nan_to_num(sd_lo), np.maximum(n, 2), ci, floor=floor)[0]
            hi = widen(q_lo, q_hi, q_mid, np.nan_to_num(np.nanstd(arr, axis=0, ddof=1)), np.maximum(n, 2), ci, floor=floor)[1]
        else:
            sd = np.nanstd(arr, axis=0, ddof=1)
            lo, hi = widen(q_lo, q_hi, q_mid, np.nan_to_num(sd), np.maximum(n, 2), ci, floor=floor)
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    few = n < 2
    return np.where(few, np.nan, lo), np.where(few, np.nan, hi)


def estimate(per_seed, cells, *, sign, thr, lr_float, size_num, ref_code, n_boot, ci, seed, sized, notes):
    """Point estimates and seed-bootstrap intervals: (rows by _k, sizes by (_k, _s))."""
    n_sizes = int(cells["_s"].max()) + 1
    V, Lc, n_size, l_loc = _layout(per_seed, n_sizes)
    K, S, L, N = V.shape
    thr = np.broadcast_to(np.asarray(thr, dtype=float), (K, S))
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
    pruned = np.zeros((K, S, L), dtype=bool)
    if "pruned" in per_seed.columns:
        hit = per_seed["pruned"].to_numpy() > 0
        pruned[per_seed["_k"].to_numpy()[hit], per_seed["_s"].to_numpy()[hit], l_loc[hit]] = True
    # a cell where some seed did not learn (its value at the no-learning level: diverged, or stuck at
    # chance with a finite loss) mixes two regimes: its mean is a point on a cliff, not on a smooth
    # curve, so no parabola goes through it either (docs/leaderboard.md, step 2)
    part_failed = did_not_learn(V, sign, thr[:, :, None, None]).any(-1)
    no_parabola = pruned | part_failed
    with _quiet():
        P = np.nanmean(V, -1)
        point = fit(P[None], X, sign, thr, U, ref, pruned=no_parabola)
    reps = _bootstrap(V, P, X, n_size, sign=sign, thr=thr, U=U, ref=ref, no_parabola=no_parabola,
                      n_boot=n_boot, seed=seed)

    # replication: the seeds of the cells each optimum rests on (its grid point and the nearest tried lr on
    # each side), and per row the least of them over the sizes that train
    fin = np.isfinite(P)
    n_cell = np.isfinite(V).sum(-1)
    j = point["j"][0]
    below, above = _neighbours(fin, j)
    n_at = _take(n_cell, j)
    n_rest = np.minimum(n_at, np.minimum(np.where(below >= 0, _take(n_cell, np.clip(below, 0, L - 1)), n_at),
                                         np.where(above < L, _take(n_cell, np.clip(above, 0, L - 1)), n_at)))
    trains = point["trains"][0]
    n_row = np.where(trains, n_rest, np.iinfo(np.int64).max).min(-1)
    n_row = np.where(trains.any(-1), n_row, 0)

    # each size's optimum: the widened percentile interval, then its grid neighbourhood where the optimum was
    # not refined by a parabola (half the step toward a neighbour that trains, the whole step toward one that
    # does not: the optimum can lie anywhere up to a cliff), open-ended on a censored side
    kk = np.arange(K)[:, None]
    xj = X[kk, j]
    x_below = np.where(below >= 0, X[kk, np.clip(below, 0, L - 1)], np.nan)
    x_above = np.where(above < L, X[kk, np.clip(above, 0, L - 1)], np.nan)
    SP = sign * P  # seed-mean curves in metric direction
    yj = _take(SP, j)
    tr_below = np.where(below >= 0, _take(SP, np.clip(below, 0, L - 1)) > thr + EPS, False)
    tr_above = np.where(above < L, _take(SP, np.clip(above, 0, L - 1)) > thr + EPS, False)
    reach_lo = np.where(np.isfinite(x_below), xj - np.where(tr_below, 0.5, 1.0) * (xj - x_below), -np.inf)
    reach_hi = np.where(np.isfinite(x_above), xj + np.where(tr_above, 0.5, 1.0) * (x_above - xj), np.inf)
    unrefined = trains & ~point["curved"][0]
    refined = trains & point["curved"][0]
    # a parabola's vertex is exact only for a locally symmetric peak: a refined optimum's interval spans at
    # least MISFIT of the wider local step on each side of it (asymmetric peaks, flat tops, uneven grids)
    xv = point["xstar"][0]
    wide = np.fmax(np.where(np.isfinite(x_below), xj - x_below, 0.0), np.where(np.isfinite(x_above), x_above - xj, 0.0))
    fit_lo = xv - MISFIT * wide  # the wider of the two steps on both sides: on an uneven grid the vertex errs by that one
    fit_hi = xv + MISFIT * wide

    def neighbourhood(lo, hi):
        lo = np.where(unrefined, np.minimum(lo, reach_lo), np.where(refined, np.minimum(lo, fit_lo), lo))
        hi = np.where(unrefined, np.maximum(hi, reach_hi), np.where(refined, np.maximum(hi, fit_hi), hi))
        return np.where(trains, lo, np.nan), np.where(trains, hi, np.nan)

    # what an unrefined optimum beside an lr that does not train may hide: a concave curve stays under the
    # secant through its two best trained points, extended up to the untrained neighbour (no bound without one)
    gain = np.zeros((K, S))
    for side_x, side_ok, other_idx, other_ok in ((x_above, tr_above, below, tr_below), (x_below, tr_below, above, tr_above)):
        ox = np.where((other_idx >= 0) & (other_idx < L), X[kk, np.clip(other_idx, 0, L - 1)], np.nan)
        oy = np.where((other_idx >= 0) & (other_idx < L), _take(SP, np.clip(other_idx, 0, L - 1)), np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            rise = (yj - oy) / np.abs(xj - ox) * np.abs(side_x - xj)
        hidden = unrefined & np.isfinite(side_x) & ~side_ok
        gain = np.where(hidden, np.maximum(gain, np.where(other_ok & np.isfinite(rise), np.clip(rise, 0.0, None), np.inf)), gain)

    if reps:
        xlo, xhi = neighbourhood(*_interval(reps["xstar"], n_rest, ci))
        # the simultaneous band over the sizes that train (for the drift): every size's interval scaled by the
        # ci quantile of the largest standardized deviation of a replicate's optima from their medians
        xs = reps["xstar"]
        with _quiet():
            med = np.nanmedian(xs, 0)
            sd = np.nanstd(xs, 0, ddof=1)
            dev = np.where(sd > 1e-12, np.abs(xs - med) / np.where(sd > 1e-12, sd, 1.0), 0.0)
            dev = np.where(trains[None] & np.isfinite(xs), dev, 0.0).max(-1)  # [R, K]
            q = np.nanquantile(dev, ci, axis=0)
        c = np.where(n_rest >= 2, factor(np.maximum(n_rest, 2), ci), np.nan)
        half = q[:, None] * sd * c
        blo, bhi = neighbourhood(np.minimum(med - half, xlo), np.maximum(med + half, xhi))
    else:
        xlo = xhi = blo = bhi = np.full((K, S), np.nan)
    few = trains & (n_rest < 2)
    xlo, xhi, blo, bhi = (np.where(few, np.nan, v) for v in (xlo, xhi, blo, bhi))

    rows = pd.DataFrame(index=pd.Index(np.arange(K), name="_k"))
    cens_any = (trains & (point["cens"][0] != 0)).any(-1)
    ref_cens = (point["cens"][0][np.arange(K), ref] != 0) & trains[np.arange(K), ref]

    # drift from the band: every configuration of optima inside it has a drift inside [lo, hi]
    with _quiet():
        n_tr = trains.sum(-1)
        d_lo = np.where(n_tr >= 2, np.clip(np.nanmax(np.where(trains, blo, np.nan), -1) - np.nanmin(np.where(trains, bhi, np.nan), -1),
                                           0.0, None), np.nan)
        d_hi = np.where(n_tr >= 2, np.nanmax(np.where(trains, bhi, np.nan), -1) - np.nanmin(np.where(trains, blo, np.nan), -1), np.nan)
    rows["lr_drift"] = point["drift"][0]
    rows["lr_drift_lo"], rows["lr_drift_hi"] = d_lo, d_hi

    for name, col, floor in (("slope", "lr_slope", None), ("regret", "transfer_regret", 0.0), ("worst", "worst_regret", 0.0),
                             ("score", "transfer_score", None), ("worst_at", "transfer_worst", None)):
        rows[col] = point[name][0]
        if reps:
            lo, hi = _interval(reps[name], n_row, ci, floor=floor, semi=floor is not None)
            if floor is not None:
                # a regret is a difference from a maximum, biased upward by the noise (most near 0, on flat tops).
                # Its replicates are skewed: the lower end is widened by their deviation below the median only (a
                # long upper tail, as a regret far from 0 has, does not pull it down), and it takes the lower of that,
                # the lower end of the (1 + ci) / 2 interval (a one-sided 97.5% bound at ci 0.9) and that end shifted
                # down by twice the replicates' bias (their median above the estimate: they carry the maximum's bias
                # twice)
                th = point[name][0]
                lo = np.minimum(lo, _interval(reps[name], n_row, 1 - (1 - ci) / 2, floor=floor, semi=True)[0])
                with _quiet():
                    bias = np.nanmedian(reps[name], 0) - th
                lo = np.maximum(np.minimum(lo, lo - 2 * np.clip(bias, 0.0, None)), floor)
                # the upper end is reflected only where the regret is not told from 0 (there the bias of the maximum
                # dominates; away from 0 a regret's replicates are skewed the other way, on flat tops most)
                hi = np.where(lo <= floor, np.maximum(np.minimum(hi, 2 * th - lo), th), hi)
        else:
            lo = hi = np.full(K, np.nan)
        rows[col + "_lo"], rows[col + "_hi"] = lo, hi

    # the reference size's optimum is located only to its grid neighbourhood (unrefined: half a step to each
    # side, beyond which the curve next to a cliff is not known) or to its fit allowance (refined): the regrets
    # of carrying either end of it
    if reps:
        ar = np.arange(K)
        ref_trains = trains[ar, ref]
        half_lo = np.where(unrefined, xj - 0.5 * (xj - x_below), fit_lo)
        half_hi = np.where(unrefined, xj + 0.5 * (x_above - xj), fit_hi)
        # toward a neighbour that does not train the optimum may lie up to the cliff: the lower ends also carry the
        # far end of that step (the upper ends do not: beyond the midpoint the curve next to a cliff is unknown)
        far_lo = np.where(unrefined & ~tr_below, reach_lo, half_lo)
        far_hi = np.where(unrefined & ~tr_above, reach_hi, half_hi)
        # and a parabola's vertex can overshoot an asymmetric peak's top: the lower ends also take the curves
        # without any parabola (each size's best measured point and straight lines between measured points)
        flat = np.ones_like(no_parabola)
        # and where the reference size's replicates put its optimum (their 5% and 95% quantiles, not widened): on a
        # flat top the fit's vertex wanders, and the regret of the optimum it did not happen to pick must be inside
        rep_lo, rep_hi = _nanquantiles(reps["xstar"], ((1 - ci) / 2, (1 + ci) / 2))
        for end, both, mask in ((half_lo, True, no_parabola), (half_hi, True, no_parabola), (far_lo, False, no_parabola),
                                (far_hi, False, no_parabola), (half_lo, False, flat), (half_hi, False, flat),
                                (rep_lo, True, no_parabola), (rep_hi, True, no_parabola)):
            t = np.where(ref_trains, end[ar, ref], np.nan)
            t = np.where(np.isfinite(t), t, point["t"][0])
            alt = fit(P[None], X, sign, thr, U, ref, pruned=mask, full=False, at=t[None])
            d_alt = alt["d"][0].copy()
            d_alt[ar, ref] = np.where(np.isfinite(d_alt[ar, ref]), 0.0, np.nan)  # the reference size's own regret is 0
            with _quiet():
                n_alt = np.isfinite(d_alt).sum(-1)
                alt_v = {"regret": np.where(n_alt >= 2, np.nanmean(d_alt, -1), np.nan),
                         "worst": np.where(n_alt >= 2, np.nanmax(d_alt, -1), np.nan)}
            for name, col in (("regret", "transfer_regret"), ("worst", "worst_regret")):
                v = alt_v[name]
                upd = ref_trains & np.isfinite(v) & np.isfinite(rows[col + "_lo"].to_numpy())
                rows[col + "_lo"] = np.where(upd, np.minimum(rows[col + "_lo"], v), rows[col + "_lo"])
                if both:
                    rows[col + "_hi"] = np.where(upd, np.maximum(rows[col + "_hi"], v), rows[col + "_hi"])
        # and a lower end free of the maximum's selection bias, which the seed bootstrap does not see where many
        # cells tie near the top (wide plateaus, fine grids, many seeds)
        for col, v in zip(("worst_regret", "transfer_regret"), _regret_floor(V, SP, X, point, trains, ref, sign)):
            cur = rows[col + "_lo"].to_numpy()
            rows[col + "_lo"] = np.where(np.isfinite(cur) & np.isfinite(v), np.minimum(cur, v), cur)
        # an unrefined optimum's value may lie above what was measured (`gain`): the regret of its size may be
        # that much larger
        g = np.where(trains, gain, 0.0).max(-1)
        for col in ("transfer_regret", "worst_regret"):
            rows[col + "_hi"] = rows[col + "_hi"] + np.where(np.isfinite(rows[col + "_hi"]), g, 0.0)
        # censored optima: the regret is bounded on one side only. A censored size's own optimum lies at or
        # beyond the grid's end, so its regret is at least what was measured (no upper bound); a censored
        # reference size's optimum is unknown, so the regret of carrying it is unbounded either way
        for col in ("transfer_regret", "worst_regret"):
            has = np.isfinite(rows[col + "_lo"].to_numpy())
            rows[col + "_hi"] = np.where(cens_any & has, np.inf, rows[col + "_hi"])
            rows[col + "_lo"] = np.where(ref_cens & has, 0.0, rows[col + "_lo"])
    rows["lr_sensitivity"] = point["sens"][0]
    rows["regret_sizes"] = point["n_d"][0]
    rows["sizes"] = present.sum(-1)
    rows["seeds"] = np.where(present, n_size, 0).max(-1)
    rows["min_seeds"] = n_row
    rows["_ref_s"] = ref
    rows["_unrefined"] = unrefined.any(-1)
    # the seed spread at each size's best grid lr, pooled (shown next to the regrets)
    at = np.take_along_axis(V, j[..., None, None].repeat(N, -1), axis=2)[:, :, 0, :]  # [K, S, N]
    with _quiet():
        var = np.nanvar(at, axis=-1, ddof=1)
        rows["spread"] = np.sqrt(np.nan_to_num(np.nanmean(np.where(present, var, np.nan), -1)))

    ki, ss = np.nonzero(present)
    by = cells.groupby(["_k", "_s"]).agg(n_div=("n_diverged", "sum"), n_runs=("n_runs", "sum"))
    all_div = (by["n_div"] == by["n_runs"]).reindex(pd.MultiIndex.from_arrays([ki, ss])).to_numpy()
    cens = point["cens"][0][ki, ss]
    grid_l = Lc[ki, j[ki, ss]]
    xs0 = point["xstar"][0][ki, ss]
    if reps:
        dlo, dhi = _interval(reps["d"], np.minimum(n_rest, n_rest[np.arange(K), ref][:, None]), ci, floor=0.0)
    else:
        dlo = dhi = np.full((K, S), np.nan)
    sizes = pd.DataFrame({
        "_k": ki, "_s": ss, "x_star": xs0, "x_lo": xlo[ki, ss], "x_hi": xhi[ki, ss], "best_lr": np.exp2(xs0),
        "grid_lr": lr_float[grid_l],
        "censored": np.where(cens == -1, "<=", np.where(cens == 1, ">=", np.where(cens == 2, "=", ""))),
        "refined": point["curved"][0][ki, ss], "seeds": n_size[ki, ss], "rest_seeds": n_rest[ki, ss],
        "trains": trains[ki, ss], "all_diverged": all_div,
        "m_star": sign * point["ystar"][0][ki, ss],
        "regret": point["d"][0][ki, ss], "regret_lo": dlo[ki, ss], "regret_hi": dhi[ki, ss],
        "at_transfer": point["at"][0][ki, ss],
    })
    sizes.loc[~sizes["trains"], "censored"] = ""
    return rows, sizes


def _regret_floor(V, SP, X, point, trains, ref, sign) -> tuple[np.ndarray, np.ndarray]:
    """Lower bounds of the worst and the mean regret [K] that no maximum's bias can lift: a size's true best is
    at least every tried cell's one-sided 95% lower bound (its seed mean minus k(n) standard errors, k(n) the
    small-sample factor of `intervals.widen`), and the carried lr's true value at most the point estimate
    plus the largest such margin among the cells within a grid step of it; a size's regret is at least the
    difference (0 for the reference size)."""
    from scipy.special import stdtrit

    K, S, L, N = V.shape
    n = np.isfinite(V).sum(-1)
    with _quiet():
        sd = np.nanstd(V, -1, ddof=1)
        pooled = np.sqrt(np.nanmean(np.where(n >= 2, sd**2, np.nan), -1))  # a one-seed cell borrows its size's sd
        sd = np.where(n >= 2, sd, pooled[..., None])
        k = np.sqrt(n / np.maximum(n - 1, 1)) * stdtrit(np.maximum(n - 1, 1), 0.95)
        margin = np.where(n >= 1, k * sd / np.sqrt(np.maximum(n, 1)), np.nan)
        best_lo = np.nanmax(np.where(np.isfinite(SP), SP - margin, np.nan), -1)  # [K, S]
        step = np.nanmax(np.abs(np.diff(X, axis=-1)), -1) if L > 1 else np.zeros(K)  # [K]: the widest grid step
        t = point["t"][0][:, None]  # [K, 1]: the lr carried to every size of the row
        near = np.isfinite(SP) & (np.abs(X[:, None, :] - t[..., None]) <= step[:, None, None] + 1e-9)
        m_t = np.nanmax(np.where(near, margin, np.nan), -1)
    at_hi = sign * point["at"][0] + np.where(np.isfinite(m_t), m_t, np.inf)
    lo = np.where(trains, np.clip(best_lo - at_hi, 0.0, None), np.nan)
    ar = np.arange(K)
    lo[ar, ref] = np.where(np.isfinite(lo[ar, ref]), 0.0, np.nan)
    with _quiet():
        return np.nanmax(lo, -1), np.nanmean(lo, -1)


def _nanquantiles(arr: np.ndarray, qs) -> list[np.ndarray]:
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
