"""The transfer regrets' intervals beyond the seed bootstrap (docs/leaderboard.md, Intervals).

The bootstrap (`optimum.py`) resamples seeds with each optimum where the fit puts it. What it does not see
widens the regret's interval here, one named step each: where inside its grid neighbourhood or fit allowance
the reference size's optimum may lie (`_widen_to_carried_ends`), the selection bias of a maximum over many
near-tied cells (`_widen_to_selection_floor`), the value an unrefined optimum beside a cliff may hide
(`_widen_by_hidden_gain`, `hidden_gain`), and censored optima, which bound the regret on one side only (`_censored_bounds`).
"""
from __future__ import annotations

import numpy as np
import pandas as pd

from nas_stab.analysis.grid import Grid, Optimum
from nas_stab.analysis.optimum_fit import _nanquantiles, _quiet, _take, fit

__all__ = ["bound_transfer_regrets", "hidden_gain"]

_REGRETS = (("regret", "transfer_regret"), ("worst", "worst_regret"))


def bound_transfer_regrets(rows: pd.DataFrame, g: Grid, *, point: dict[str, np.ndarray], reps: dict[str, np.ndarray],
                           opt: Optimum, ci: float, gain: np.ndarray) -> None:
    """Widen the columns ``transfer_regret_lo/_hi`` and ``worst_regret_lo/_hi`` of `rows` (the bootstrap's
    intervals) for what the bootstrap does not see; `point` and `reps` are `fit`'s statistics of the grid `g`
    (its point estimate, its bootstrap replicates), `opt` each size's located optimum and `gain` its `hidden_gain`."""
    _widen_to_carried_ends(rows, g, point, reps, opt, ci)
    # and a lower end free of the maximum's selection bias, which the seed bootstrap does not see where many
    # cells tie near the top (wide plateaus, fine grids, many seeds)
    _widen_to_selection_floor(rows, g, point, opt)
    # an unrefined optimum's value may lie above what was measured (`gain`): the regret of its size may be
    # that much larger
    _widen_by_hidden_gain(rows, gain, opt)
    _censored_bounds(rows, point, opt.trains, g.ref)


def _carried_ends(opt: Optimum, no_parabola: np.ndarray, reps: dict[str, np.ndarray],
                  ci: float) -> list[tuple[np.ndarray, bool, np.ndarray]]:
    """The other lrs [row, size] the reference size's optimum may be carried from, each with whether it
    widens both ends of the regret's interval (else the lower end only) and the cells no parabola may pass
    through in its fit."""
    # the reference size's optimum is located only to its grid neighbourhood (unrefined: half a step to each
    # side, beyond which the curve next to a cliff is not known) or to its fit allowance (refined): the regrets
    # of carrying either end of it
    unrefined, xj = opt.unrefined, opt.xj
    half_lo = np.where(unrefined, xj - 0.5 * (xj - opt.x_below), opt.fit_lo)
    half_hi = np.where(unrefined, xj + 0.5 * (opt.x_above - xj), opt.fit_hi)
    # toward a neighbour that does not train the optimum may lie up to the cliff: the lower ends also carry the
    # far end of that step (the upper ends do not: beyond the midpoint the curve next to a cliff is unknown)
    far_lo = np.where(unrefined & ~opt.tr_below, opt.reach_lo, half_lo)
    far_hi = np.where(unrefined & ~opt.tr_above, opt.reach_hi, half_hi)
    # and a parabola's vertex can overshoot an asymmetric peak's top: the lower ends also take the curves
    # without any parabola (each size's best measured point and straight lines between measured points)
    flat = np.ones_like(no_parabola)
    # and where the reference size's replicates put its optimum (their 5% and 95% quantiles, not widened): on a
    # flat top the fit's vertex wanders, and the regret of the optimum it did not happen to pick must be inside
    rep_lo, rep_hi = _nanquantiles(reps["xstar"], ((1 - ci) / 2, (1 + ci) / 2))
    return [(half_lo, True, no_parabola), (half_hi, True, no_parabola), (far_lo, False, no_parabola),
            (far_hi, False, no_parabola), (half_lo, False, flat), (half_hi, False, flat),
            (rep_lo, True, no_parabola), (rep_hi, True, no_parabola)]


def _widen_to_carried_ends(rows: pd.DataFrame, g: Grid, point: dict[str, np.ndarray], reps: dict[str, np.ndarray],
                           opt: Optimum, ci: float) -> None:
    """Stretch each regret's interval over the regrets of carrying every lr of `_carried_ends` (the lower end
    only, for the ends that widen one side)."""
    ref = g.ref
    ar = np.arange(len(ref))
    ref_trains = opt.trains[ar, ref]
    for end, both, mask in _carried_ends(opt, g.no_parabola, reps, ci):
        t = np.where(ref_trains, end[ar, ref], np.nan)
        t = np.where(np.isfinite(t), t, point["t"][0])
        alt_v = _regrets_carrying(t, g, mask)
        for name, col in _REGRETS:
            v = alt_v[name]
            upd = ref_trains & np.isfinite(v) & np.isfinite(rows[col + "_lo"].to_numpy())
            rows[col + "_lo"] = np.where(upd, np.minimum(rows[col + "_lo"], v), rows[col + "_lo"])
            if both:
                rows[col + "_hi"] = np.where(upd, np.maximum(rows[col + "_hi"], v), rows[col + "_hi"])


def _regrets_carrying(t: np.ndarray, g: Grid, mask: np.ndarray) -> dict[str, np.ndarray]:
    """The mean and the worst regret [row] of carrying the lr t[row] to every size of the grid's seed-mean curves,
    no parabola through the cells of `mask`."""
    ref = g.ref
    ar = np.arange(len(ref))
    alt = fit(g.P[None], g, pruned=mask, full=False, at=t[None])
    d_alt = alt["d"][0].copy()
    d_alt[ar, ref] = np.where(np.isfinite(d_alt[ar, ref]), 0.0, np.nan)  # the reference size's own regret is 0
    with _quiet():
        n_alt = np.isfinite(d_alt).sum(-1)
        return {"regret": np.where(n_alt >= 2, np.nanmean(d_alt, -1), np.nan),
                "worst": np.where(n_alt >= 2, np.nanmax(d_alt, -1), np.nan)}


def _widen_to_selection_floor(rows: pd.DataFrame, g: Grid, point: dict[str, np.ndarray], opt: Optimum) -> None:
    """Lower each regret's lower end to `_regret_floor`."""
    for col, v in zip(("worst_regret", "transfer_regret"), _regret_floor(g.V, opt.SP, g.X, point, opt.trains, g.ref, g.sign)):
        cur = rows[col + "_lo"].to_numpy()
        rows[col + "_lo"] = np.where(np.isfinite(cur) & np.isfinite(v), np.minimum(cur, v), cur)


def _regret_floor(V: np.ndarray, SP: np.ndarray, X: np.ndarray, point: dict[str, np.ndarray], trains: np.ndarray,
                  ref: np.ndarray, sign: float) -> tuple[np.ndarray, np.ndarray]:
    """Lower bounds of the worst and the mean regret [K] that no maximum's bias can lift: a size's true best is
    at least every tried cell's one-sided 95% lower bound (its seed mean minus k(n) standard errors, k(n) the
    small-sample factor of `intervals.widen`), and the carried lr's true value at most the point estimate
    plus the largest such margin among the cells within a grid step of it; a size's regret is at least the
    difference (0 for the reference size)."""
    from scipy.special import stdtrit  # deferred: loads SciPy only when this runs

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


def hidden_gain(X: np.ndarray, opt: Optimum) -> np.ndarray:
    """What an unrefined optimum [row, size] beside an lr that does not train may hide above its measured value
    (``inf``: no bound, the optimum's other neighbour does not train either, or there is none)."""
    K, L = X.shape
    kk = np.arange(K)[:, None]
    # what an unrefined optimum beside an lr that does not train may hide: a concave curve stays under the
    # secant through its two best trained points, extended up to the untrained neighbour (no bound without one)
    gain = np.zeros(opt.j.shape)
    for side_x, side_ok, other_idx, other_ok in ((opt.x_above, opt.tr_above, opt.below, opt.tr_below),
                                                 (opt.x_below, opt.tr_below, opt.above, opt.tr_above)):
        ox = np.where((other_idx >= 0) & (other_idx < L), X[kk, np.clip(other_idx, 0, L - 1)], np.nan)
        oy = np.where((other_idx >= 0) & (other_idx < L), _take(opt.SP, np.clip(other_idx, 0, L - 1)), np.nan)
        with np.errstate(invalid="ignore", divide="ignore"):
            rise = (opt.yj - oy) / np.abs(opt.xj - ox) * np.abs(side_x - opt.xj)
        hidden = opt.unrefined & np.isfinite(side_x) & ~side_ok
        gain = np.where(hidden, np.maximum(gain, np.where(other_ok & np.isfinite(rise), np.clip(rise, 0.0, None), np.inf)), gain)
    return gain


def _widen_by_hidden_gain(rows: pd.DataFrame, gain: np.ndarray, opt: Optimum) -> None:
    """Raise each regret's upper end by the largest `hidden_gain` of the row's sizes that train."""
    g = np.where(opt.trains, gain, 0.0).max(-1)
    for col in ("transfer_regret", "worst_regret"):
        rows[col + "_hi"] = rows[col + "_hi"] + np.where(np.isfinite(rows[col + "_hi"]), g, 0.0)


def _censored_bounds(rows: pd.DataFrame, point: dict[str, np.ndarray], trains: np.ndarray, ref: np.ndarray) -> None:
    """Open each regret's interval on the side a censored optimum leaves unbounded."""
    # censored optima: the regret is bounded on one side only. A censored size's own optimum lies at or
    # beyond the grid's end, so its regret is at least what was measured (no upper bound); a censored
    # reference size's optimum is unknown, so the regret of carrying it is unbounded either way
    cens = point["cens"][0]
    K = cens.shape[0]
    cens_any = (trains & (cens != 0)).any(-1)
    ref_cens = (cens[np.arange(K), ref] != 0) & trains[np.arange(K), ref]
    for col in ("transfer_regret", "worst_regret"):
        has = np.isfinite(rows[col + "_lo"].to_numpy())
        rows[col + "_hi"] = np.where(cens_any & has, np.inf, rows[col + "_hi"])
        rows[col + "_lo"] = np.where(ref_cens & has, 0.0, rows[col + "_lo"])
