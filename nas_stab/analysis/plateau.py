"""Whether each size's optimum is bracketed by its seeds, not only by its grid (docs/leaderboard.md, Bracketed).

An optimum inside the grid (not `censored`) can still be unresolved: when a tried neighbour of the best grid lr
scores within one standard error of it, the seeds cannot tell which of the two is better, and the optimum is a
plateau. Per (row, size), from the cells' seed means, standard deviations and seed counts (the values
``leaderboard_cells.csv`` holds: a diverged or failed run counts there as the no-learning value m0):

- ``grid_se``: the standard error of the best grid cell's seed mean, ``std / sqrt(n)`` (NaN with one seed);
- ``gap_below_se``, ``gap_above_se``: how far the tried neighbour below (above) the best grid lr falls short of
  it, in units of ``grid_se`` in the metric's direction; ``inf`` where every run of the neighbour diverged or
  failed (worse by definition) or the best cell's seeds agree exactly and the neighbour is worse; NaN without a
  neighbour on that side, or where the size does not train;
- ``bracket``: ``bracketed`` (both gaps above 1), ``plateau`` (a gap of at most 1), ``censored`` (at a grid
  end), ``one seed`` (no standard error and no gap known to be at most 1), "" where the size does not train.

Only reported: no verdict, interval or ranking reads these columns.
"""
from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["BRACKETED", "CENSORED", "ONE_SEED", "PLATEAU", "bracket_columns", "plateau_counts"]

BRACKETED, PLATEAU, CENSORED, ONE_SEED = "bracketed", "plateau", "censored", "one seed"


def bracket_columns(sizes: pd.DataFrame, cells: pd.DataFrame, sign: float) -> pd.DataFrame:
    """``grid_se``, ``gap_below_se``, ``gap_above_se`` and ``bracket`` for each row of `sizes` (by its ``_k``,
    ``_s``, ``_grid_l`` (the best grid lr's code), ``censored`` and ``trains``), from `cells` (``_k``, ``_s``,
    ``_l``, ``mean``, ``std``, ``n``, ``n_ok``, ``n_pruned``); `sign` is +1 for a metric to maximize, -1 to minimize."""
    c = cells.sort_values(["_k", "_s", "_l"], kind="mergesort")  # lr codes are in lr order
    keys = [c["_k"], c["_s"]]
    score = sign * c["mean"].astype(float)
    dead = ((c["n_ok"] == 0) & (c["n_pruned"] == 0)).astype(float)  # every run diverged or failed
    se = c["std"].astype(float) / np.sqrt(c["n"].astype(float))
    table = pd.DataFrame({
        "se": se.to_numpy(),
        "gap_below": _gaps(score, score.groupby(keys).shift(1), dead.groupby(keys).shift(1), se),
        "gap_above": _gaps(score, score.groupby(keys).shift(-1), dead.groupby(keys).shift(-1), se),
    }, index=pd.MultiIndex.from_arrays([c["_k"].to_numpy(), c["_s"].to_numpy(), c["_l"].to_numpy()]))
    at = table.reindex(pd.MultiIndex.from_arrays([sizes["_k"].to_numpy(), sizes["_s"].to_numpy(), sizes["_grid_l"].to_numpy()]))
    trains = sizes["trains"].to_numpy(dtype=bool)
    below = np.where(trains, at["gap_below"].to_numpy(dtype=float), np.nan)
    above = np.where(trains, at["gap_above"].to_numpy(dtype=float), np.nan)
    return pd.DataFrame({
        "grid_se": at["se"].to_numpy(dtype=float), "gap_below_se": below, "gap_above_se": above,
        "bracket": _labels(trains, sizes["censored"].astype(str).to_numpy() != "", below, above),
    }, index=sizes.index)


def _gaps(score: pd.Series, neighbour: pd.Series, neighbour_dead: pd.Series, se: pd.Series) -> np.ndarray:
    """How far each cell's neighbour (its score in metric direction; NaN: none) falls short of the cell, in the
    cell's standard errors: inf for a neighbour whose every run diverged or failed, or a positive shortfall over
    a standard error of 0; 0 for an equal neighbour at a standard error of 0."""
    diff = (score - neighbour).to_numpy(dtype=float)
    s = se.to_numpy(dtype=float)
    with np.errstate(invalid="ignore", divide="ignore"):
        gap = np.where(s > 0, diff / np.where(s > 0, s, 1.0), np.where(diff > 0, np.inf, np.where(diff == 0, 0.0, -np.inf)))
    gap = np.where(np.isnan(s), np.nan, gap)  # one seed: no standard error
    gap = np.where(neighbour_dead.to_numpy(dtype=float) == 1.0, np.inf, gap)
    return np.where(neighbour.isna().to_numpy(), np.nan, gap)


def _labels(trains: np.ndarray, censored: np.ndarray, below: np.ndarray, above: np.ndarray) -> np.ndarray:
    """The ``bracket`` label of each size (see the module's docstring)."""
    with np.errstate(invalid="ignore"):
        far = (below > 1.0) & (above > 1.0)
        near = (below <= 1.0) | (above <= 1.0)
    label = np.where(far, BRACKETED, np.where(near, PLATEAU, ONE_SEED))
    return np.where(~trains, "", np.where(censored, CENSORED, label)).astype(object)


def plateau_counts(sizes: pd.DataFrame, index: pd.Index) -> pd.Series:
    """Per row code of `index` (``_k``): how many of its sizes have an optimum on a plateau."""
    return (sizes["bracket"] == PLATEAU).groupby(sizes["_k"]).sum().reindex(index, fill_value=0).astype(int)
