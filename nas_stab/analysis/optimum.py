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

The fit itself is in `optimum_fit.py`, the regret's bounds beyond the bootstrap
in `optimum_regret.py`.
"""
from __future__ import annotations

from typing import cast

import numpy as np
import pandas as pd

from nas_stab.analysis.carried import near_carried
from nas_stab.analysis.grid import Grid, Optimum
from nas_stab.analysis.intervals import factor, widen
from nas_stab.analysis.optimum_fit import EPS, _nanquantiles, _quiet, _take, did_not_learn, fit
from nas_stab.analysis.optimum_regret import bound_transfer_regrets, hidden_gain

__all__ = ["EPS", "did_not_learn", "estimate", "fit"]

MISFIT = 0.5  # the regret's carried ends: a refined optimum may lie this share of the wider local grid step to each side
# the printed x* interval of a refined optimum spans at least this share of the wider local step on each side: half
# a step covered a peak 10 times steeper above its optimum than below in 61-78% of simulated tables (calibration
# family "skew"), three quarters in 92-95% (docs/leaderboard.md, Intervals)
XSTAR_MISFIT = 0.75


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


def _neighbours(fin: np.ndarray, j: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The nearest tried lr below and above index j at each size (-1 / L where there is none)."""
    L = fin.shape[-1]
    ar = np.arange(L)
    below = np.where(fin & (ar < j[..., None]), ar, -1).max(-1)
    above = np.where(fin & (ar > j[..., None]), ar, L).min(-1)
    return below, above


_REPS = ("drift", "slope", "regret", "worst", "xstar", "score", "worst_at", "d")


def _bootstrap(g: Grid, n_size: np.ndarray, *, n_boot: int, seed: int) -> dict[str, np.ndarray]:
    """Replicates [n_boot, ...] of `fit`'s statistics: each (row, size) resamples its own seeds, the same
    draw for every lr of the size; a cell whose seeds a resample all missed keeps its point mean."""
    V = g.V
    K, S, L, N = g.shape
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
        Mb = np.where(np.isnan(Mb), g.P[None], Mb)
        with _quiet():
            r = fit(Mb, g, full=False)
        for name in _REPS:
            out[name].append(r[name])
        done += b
    return {k: np.concatenate(v, axis=0) for k, v in out.items()}


def _interval(arr: np.ndarray, n: np.ndarray, ci: float, floor: float | None = None,
              semi: bool = False) -> tuple[np.ndarray, np.ndarray]:
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


def estimate(per_seed: pd.DataFrame, cells: pd.DataFrame, *, sign: float, thr: np.ndarray, lr_float: np.ndarray,
             size_num: np.ndarray, ref_code: int | None, n_boot: int, ci: float, seed: int, sized: bool,
             notes: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Point estimates and seed-bootstrap intervals: (rows by _k, sizes by (_k, _s))."""
    n_sizes = int(cells["_s"].max()) + 1
    V, Lc, n_size, l_loc = _layout(per_seed, n_sizes)
    K, S = V.shape[:2]
    thr = np.broadcast_to(np.asarray(thr, dtype=float), (K, S))
    X = np.where(Lc >= 0, np.log2(lr_float[np.clip(Lc, 0, None)]), np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        U = np.log2(size_num) if sized else np.full(S, np.nan)
    present = np.isfinite(V).any((-1, -2))
    ref = _reference_sizes(present, ref_code, notes)
    with _quiet():
        P = np.nanmean(V, -1)
    g = Grid(V=V, P=P, X=X, U=U, thr=thr, ref=ref, no_parabola=_no_parabola(per_seed, l_loc, V, sign, thr), sign=sign)
    with _quiet():
        point = fit(P[None], g)
    reps = _bootstrap(g, n_size, n_boot=n_boot, seed=seed)
    opt = _locate(g, point)
    xlo, xhi, blo, bhi = _optimum_intervals(opt, reps, ci)

    rows = pd.DataFrame(index=pd.Index(np.arange(K), name="_k"))
    rows["lr_drift"] = point["drift"][0]
    rows["lr_drift_lo"], rows["lr_drift_hi"] = _drift_interval(opt.trains, blo, bhi)
    fail_near, carried_seeds, carried_fails = near_carried(g, point["t"][0])
    gain = hidden_gain(X, opt)
    _statistic_intervals(rows, point, reps, opt.n_row, ci, reflect=cast(np.ndarray, ~fail_near.any(-1)))  # [row]
    if reps:
        bound_transfer_regrets(rows, g, point=point, reps=reps, opt=opt, ci=ci, gain=gain)
    _summarize_rows(rows, V, point, opt, present, n_size, ref)
    sizes = _size_table(cells, point, reps, opt, n_size, present, Lc, lr_float, ref, sign=sign, ci=ci, xlo=xlo, xhi=xhi,
                        open_above=np.isinf(gain) & opt.trains)
    ks, ss = sizes["_k"].to_numpy(), sizes["_s"].to_numpy()
    for col, v in (("fail_near_carried", fail_near), ("carried_seeds", carried_seeds), ("carried_fails", carried_fails)):
        sizes[col] = v[ks, ss]
    # a row whose carried lr fails at some size (a run there diverged or did not learn) ranks below every row
    # whose carried lr trains everywhere (docs/leaderboard.md, Ranking)
    rows["carried_fails"] = (carried_fails & present).any(-1)
    return rows, sizes


def _reference_sizes(present: np.ndarray, ref_code: int | None, notes: list[str]) -> np.ndarray:
    """The reference size code of every row: `ref_code`, or the row's smallest size where it lacks that
    one (or none is given)."""
    S = present.shape[1]
    firsts = np.where(present, np.arange(S)[None, :], S).min(-1)
    if ref_code is None:
        return firsts
    has = present[:, ref_code]
    if (~has).any():
        notes.append(f"{int((~has).sum())} row(s) lack the reference size; their smallest size stands in")
    return np.where(has, ref_code, firsts)


def _no_parabola(per_seed: pd.DataFrame, l_loc: np.ndarray, V: np.ndarray, sign: float, thr: np.ndarray) -> np.ndarray:
    """The cells [row, size, lr] no parabola may pass through: a pruned run, or a seed that did not learn."""
    K, S, L = V.shape[:3]
    pruned = np.zeros((K, S, L), dtype=bool)
    if "pruned" in per_seed.columns:
        hit = per_seed["pruned"].to_numpy() > 0
        pruned[per_seed["_k"].to_numpy()[hit], per_seed["_s"].to_numpy()[hit], l_loc[hit]] = True
    # a cell where some seed did not learn (its value at the no-learning level: diverged, or stuck at
    # chance with a finite loss) mixes two regimes: its mean is a point on a cliff, not on a smooth
    # curve, so no parabola goes through it either (docs/leaderboard.md, step 2)
    part_failed = did_not_learn(V, sign, thr[:, :, None, None]).any(-1)
    return pruned | part_failed


def _replication(V: np.ndarray, P: np.ndarray, j: np.ndarray,
                 trains: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The nearest tried lr below and above each size's grid optimum j, the seeds the optimum rests on
    (n_rest[row, size]) and per row the least of them over the sizes that train (n_row[row])."""
    L = V.shape[2]
    # replication: the seeds of the cells each optimum rests on (its grid point and the nearest tried lr on
    # each side), and per row the least of them over the sizes that train
    fin = np.isfinite(P)
    n_cell = np.isfinite(V).sum(-1)
    below, above = _neighbours(fin, j)
    n_at = _take(n_cell, j)
    n_rest = np.minimum(n_at, np.minimum(np.where(below >= 0, _take(n_cell, np.clip(below, 0, L - 1)), n_at),
                                         np.where(above < L, _take(n_cell, np.clip(above, 0, L - 1)), n_at)))
    n_row = np.where(trains, n_rest, np.iinfo(np.int64).max).min(-1)
    n_row = np.where(trains.any(-1), n_row, 0)
    return below, above, n_rest, n_row


def _locate(g: Grid, point: dict) -> Optimum:
    """Each size's point optimum with its grid neighbourhood and replication (`Optimum`)."""
    V, P, X, sign, thr = g.V, g.P, g.X, g.sign, g.thr
    K, L = V.shape[0], V.shape[2]
    j, trains = point["j"][0], point["trains"][0]
    below, above, n_rest, n_row = _replication(V, P, j, trains)
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
    xfit_lo, xfit_hi = xv - XSTAR_MISFIT * wide, xv + XSTAR_MISFIT * wide
    return Optimum(j=j, trains=trains, n_rest=n_rest, n_row=n_row, below=below, above=above, xj=xj, x_below=x_below,
                    x_above=x_above, yj=yj, tr_below=tr_below, tr_above=tr_above, reach_lo=reach_lo, reach_hi=reach_hi,
                    unrefined=unrefined, refined=refined, fit_lo=fit_lo, fit_hi=fit_hi,
                    xfit_lo=xfit_lo, xfit_hi=xfit_hi, SP=SP)


def _optimum_intervals(opt: Optimum, reps: dict, ci: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Each size's optimum interval (xlo, xhi) and the simultaneous band over the sizes (blo, bhi), all
    [row, size]; NaN without replicates or where the optimum rests on fewer than 2 seeds."""
    n_rest, trains = opt.n_rest, opt.trains
    if reps:
        plo, phi = _interval(reps["xstar"], n_rest, ci)
        xlo, xhi = opt.neighbourhood(plo, phi, printed=True)
        blo0, bhi0 = opt.neighbourhood(plo, phi)  # the drift's band: the fit allowance its calibration holds with
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
        blo, bhi = opt.neighbourhood(np.minimum(med - half, blo0), np.maximum(med + half, bhi0))
    else:
        xlo = xhi = blo = bhi = np.full(trains.shape, np.nan)
    few = trains & (n_rest < 2)
    xlo, xhi, blo, bhi = (np.where(few, np.nan, v) for v in (xlo, xhi, blo, bhi))
    return xlo, xhi, blo, bhi


def _drift_interval(trains: np.ndarray, blo: np.ndarray, bhi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The drift's interval per row from the band: every configuration of optima inside it has a drift inside [lo, hi]."""
    with _quiet():
        n_tr = trains.sum(-1)
        d_lo = np.where(n_tr >= 2, np.clip(np.nanmax(np.where(trains, blo, np.nan), -1) - np.nanmin(np.where(trains, bhi, np.nan), -1),
                                           0.0, None), np.nan)
        d_hi = np.where(n_tr >= 2, np.nanmax(np.where(trains, bhi, np.nan), -1) - np.nanmin(np.where(trains, blo, np.nan), -1), np.nan)
    return d_lo, d_hi


def _statistic_intervals(rows: pd.DataFrame, point: dict, reps: dict, n_row: np.ndarray, ci: float, reflect: np.ndarray) -> None:
    """Add the point value and the interval (columns ``_lo``, ``_hi``) of the slope, the regrets and the transfer scores;
    `reflect` [row]: where a regret's upper end may be reflected about its estimate (`_regret_interval`)."""
    for name, col, floor in (("slope", "lr_slope", None), ("regret", "transfer_regret", 0.0), ("worst", "worst_regret", 0.0),
                             ("score", "transfer_score", None), ("worst_at", "transfer_worst", None)):
        rows[col] = point[name][0]
        if reps:
            lo, hi = _interval(reps[name], n_row, ci, floor=floor, semi=floor is not None)
            if floor is not None:
                lo, hi = _regret_interval(reps[name], point[name][0], lo, hi, n_row, ci, floor, reflect)
        else:
            lo = hi = np.full(len(rows), np.nan)
        rows[col + "_lo"], rows[col + "_hi"] = lo, hi


def _regret_interval(arr: np.ndarray, th: np.ndarray, lo: np.ndarray, hi: np.ndarray, n_row: np.ndarray, ci: float,
                     floor: float, reflect: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A regret's interval (lo, hi) corrected for the bias of the maximum it is measured from."""
    # a regret is a difference from a maximum, biased upward by the noise (most near 0, on flat tops).
    # Its replicates are skewed: the lower end is widened by their deviation below the median only (a
    # long upper tail, as a regret far from 0 has, does not pull it down), and it takes the lower of that,
    # the lower end of the (1 + ci) / 2 interval (a one-sided 97.5% bound at ci 0.9) and that end shifted
    # down by twice the replicates' bias (their median above the estimate: they carry the maximum's bias
    # twice)
    lo = np.minimum(lo, _interval(arr, n_row, 1 - (1 - ci) / 2, floor=floor, semi=True)[0])
    with _quiet():
        bias = np.nanmedian(arr, 0) - th
    lo = np.maximum(np.minimum(lo, lo - 2 * np.clip(bias, 0.0, None)), floor)
    # the upper end is reflected only where the regret is not told from 0 (there the bias of the maximum
    # dominates; away from 0 a regret's replicates are skewed the other way, on flat tops most). Not beside a partly
    # failing cell (`reflect` False; docs/leaderboard.md, "Never on an open end": its stored one-sided coverage)
    hi = np.where((lo <= floor) & reflect, np.maximum(np.minimum(hi, 2 * th - lo), th), hi)
    return lo, hi


def _summarize_rows(rows: pd.DataFrame, V: np.ndarray, point: dict, opt: Optimum, present: np.ndarray,
                    n_size: np.ndarray, ref: np.ndarray) -> None:
    """Add the sensitivity, the counts of sizes and seeds, the reference size and the pooled seed spread to `rows`."""
    N = V.shape[3]
    rows["lr_sensitivity"] = point["sens"][0]
    rows["regret_sizes"] = point["n_d"][0]
    rows["sizes"] = present.sum(-1)
    rows["seeds"] = np.where(present, n_size, 0).max(-1)
    rows["min_seeds"] = opt.n_row
    rows["_ref_s"] = ref
    rows["_unrefined"] = opt.unrefined.any(-1)
    # the seed spread at each size's best grid lr, pooled (shown next to the regrets)
    at = np.take_along_axis(V, opt.j[..., None, None].repeat(N, -1), axis=2)[:, :, 0, :]  # [K, S, N]
    with _quiet():
        var = np.nanvar(at, axis=-1, ddof=1)
        rows["spread"] = np.sqrt(np.nan_to_num(np.nanmean(np.where(present, var, np.nan), -1)))


def _size_table(cells: pd.DataFrame, point: dict, reps: dict, opt: Optimum, n_size: np.ndarray, present: np.ndarray,
                Lc: np.ndarray, lr_float: np.ndarray, ref: np.ndarray, *, sign: float, ci: float, xlo: np.ndarray,
                xhi: np.ndarray, open_above: np.ndarray) -> pd.DataFrame:
    """One row per (row, size) that has runs: its optimum with its interval, censoring, seeds and regret."""
    K = present.shape[0]
    n_rest, trains, j = opt.n_rest, opt.trains, opt.j
    ki, ss = np.nonzero(present)
    by = cells.groupby(["_k", "_s"]).agg(n_div=("n_diverged", "sum"), n_runs=("n_runs", "sum"))
    all_div = (by["n_div"] == by["n_runs"]).reindex(pd.MultiIndex.from_arrays([ki, ss])).to_numpy()
    cens = point["cens"][0][ki, ss]
    grid_l = Lc[ki, j[ki, ss]]
    xs0 = point["xstar"][0][ki, ss]
    if reps:
        dlo, dhi = _interval(reps["d"], np.minimum(n_rest, n_rest[np.arange(K), ref][:, None]), ci, floor=0.0)
    else:
        dlo = dhi = np.full(present.shape, np.nan)
    sizes = pd.DataFrame({
        "_k": ki, "_s": ss, "x_star": xs0, "x_lo": xlo[ki, ss], "x_hi": xhi[ki, ss], "best_lr": np.exp2(xs0),
        "grid_lr": lr_float[grid_l], "_grid_l": grid_l,
        "censored": np.where(cens == -1, "<=", np.where(cens == 1, ">=", np.where(cens == 2, "=", ""))),
        "refined": point["curved"][0][ki, ss], "seeds": n_size[ki, ss], "rest_seeds": n_rest[ki, ss],
        "trains": trains[ki, ss], "all_diverged": all_div,
        "m_star": sign * point["ystar"][0][ki, ss],
        "regret": point["d"][0][ki, ss], "regret_lo": dlo[ki, ss], "regret_hi": dhi[ki, ss],
        "at_transfer": point["at"][0][ki, ss],
        # an unrefined optimum whose value above what was measured has no bound: it trains at its grid lr, and the
        # lr tried next to it on either side does not train (or there is none): the regret's upper end is open
        "open_above": open_above[ki, ss],
    })
    sizes.loc[~sizes["trains"], "censored"] = ""
    return sizes
