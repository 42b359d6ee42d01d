"""The per-size optimum and the paired seed bootstrap of the leaderboard (docs/leaderboard.md).

Per row label the seed values form an array ``V[size, lr, seed]`` (NaN where a
run is missing). The point estimate and every bootstrap replicate go through the
same vectorized `fit` on seed-mean curves: the replicates weight the seeds by one
multinomial draw per row (a paired resample: the same seed indices for every
cell of the row), so all rows and replicates are computed at once. `estimate`
returns the point values with their intervals (percentile intervals widened for
the row's seed count: `intervals.py`), per row and per (row, size).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from nas_stab.results.intervals import widen

__all__ = ["EPS", "did_not_learn", "estimate", "fit"]

EPS = 1e-9


def did_not_learn(v: np.ndarray, sign: float, thr: float) -> np.ndarray:
    """Where a value did not learn: at or below the trains threshold ``thr = sign * m0 + margin`` in the
    metric's direction (``sign * v <= thr``), NaN never. The one definition of "did not learn" that the
    fit (no parabola through such a cell) and the leaderboard's ``stuck`` column share (docs/leaderboard.md)."""
    v = np.asarray(v, dtype=float)
    with np.errstate(invalid="ignore"):
        return np.isfinite(v) & (sign * v <= thr + EPS)


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


def fit(M: np.ndarray, X: np.ndarray, sign: float, thr: float, U: np.ndarray, ref: np.ndarray, *,
         full: bool = True, pruned: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Optima, drift, slope, regrets and sensitivity of seed-mean curves M[B, row, size, lr]
    (NaN: not tried) on the grids X[row, lr] (log2 lr, NaN padding), with U[size] = log2(size)
    and ref[row] the reference size code; pruned[row, size, lr] marks the cells no parabola may
    pass through (a pruned run, or a seed that did not learn). See docs/leaderboard.md for each formula."""
    B, K, S, L = M.shape
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
        score_t = np.nanmean(np.where(present, at_t, np.nan), -1)  # the metric at every size with s_ref's optimum
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
            "slope": slope, "regret": regret, "worst": worst, "n_d": n_d, "sens": sens,
            "score": sign * score_t}


class _quiet:
    """Silence numpy's "mean of empty slice" warnings (an empty slice is NaN, as wanted)."""

    def __enter__(self):
        import warnings

        self._w = warnings.catch_warnings()
        self._w.__enter__()
        warnings.simplefilter("ignore", RuntimeWarning)

    def __exit__(self, *exc):
        self._w.__exit__(*exc)


def estimate(per_seed, cells, *, sign, thr, lr_float, size_num, ref_code, n_boot, ci, seed, sized, notes):
    """Point estimates and paired-bootstrap intervals: (rows by _k, sizes by (_k, _s))."""
    n_sizes = int(cells["_s"].max()) + 1
    V, Lc, n_seeds, l_loc = _layout(per_seed, n_sizes)
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
    pruned = np.zeros((K, S, L), dtype=bool)
    if "pruned" in per_seed.columns:
        hit = per_seed["pruned"].to_numpy() > 0
        pruned[per_seed["_k"].to_numpy()[hit], per_seed["_s"].to_numpy()[hit], l_loc[hit]] = True
    # a cell where some seed did not learn (its value at the no-learning level: diverged, or stuck at
    # chance with a finite loss) mixes two regimes: its mean is a point on a cliff, not on a smooth
    # curve, so no parabola goes through it either (docs/leaderboard.md, step 2)
    part_failed = did_not_learn(V, sign, thr).any(-1)
    no_parabola = pruned | part_failed
    with _quiet():
        P = np.nanmean(V, -1)
        point = fit(P[None], X, sign, thr, U, ref, pruned=no_parabola)

    # paired bootstrap over seeds: one multinomial draw of seed indices per row and replicate
    reps: dict[str, list] = {k: [] for k in ("drift", "slope", "regret", "worst", "xstar", "score")}
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
                r = fit(Mb, X[sel], sign, thr, U, ref[sel], full=False, pruned=no_parabola[sel])
            for name in reps:
                reps[name].append(r[name])
            done += b
    alpha = (1 - ci) / 2

    def interval(name):
        """The percentile interval widened for the row's seed count (intervals.py); a drift or
        a regret cannot go below 0."""
        shape = point[name].shape[1:]
        lo, hi = np.full(shape, np.nan), np.full(shape, np.nan)
        if reps[name]:
            arr = np.concatenate(reps[name], axis=0)
            n = n_seeds[sel].reshape((-1,) + (1,) * (arr.ndim - 2))
            with _quiet():
                sd = np.nanstd(arr, axis=0, ddof=1)
            q_lo, q_mid, q_hi = _nanquantiles(arr, (alpha, 0.5, 1 - alpha))
            lo[sel], hi[sel] = widen(q_lo, q_hi, q_mid, np.nan_to_num(sd), n, ci,
                                     floor=0.0 if name in ("drift", "regret", "worst") else None)
        return lo, hi

    rows = pd.DataFrame(index=pd.Index(np.arange(K), name="_k"))
    for name, col in (("drift", "lr_drift"), ("slope", "lr_slope"), ("regret", "transfer_regret"), ("worst", "worst_regret"),
                      ("score", "transfer_score")):
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
