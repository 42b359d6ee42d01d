"""The cells of the carried lr (docs/leaderboard.md, "Never on an open end" and "Ranking").

The verdict's question is what the lr the reference size's fit found (the *carried* lr) costs at every size.
Its value at a size rests on the tried lrs that bracket it; this module says, per [row, size], how many seeds
those cells hold, whether a run of theirs failed (the ranking puts a row whose carried lr fails at some size
below every row whose carried lr trains everywhere), and whether a cell near the carried lr partly failed
(some seeds learned, others did not: a regime that fails at random, which a few clean seeds at the carried lr
may not show; a `yes` there needs `verdicts.CARRIED_SEEDS`).
"""
from __future__ import annotations

import numpy as np

from nas_stab.analysis.grid import Grid
from nas_stab.analysis.optimum_fit import _take, did_not_learn

__all__ = ["NEAR_OCTAVES", "near_carried"]

# a cell this close to the carried lr (at any size of the row) whose seeds partly failed asks for CARRIED_SEEDS: within
# one octave the family "bimodal" still said yes in 5.5% of tables where the carried lr costs 6 epsilon (3 seeds),
# within two 1%; two octaves is also the largest planted shift of the real-curve calibration
NEAR_OCTAVES = 2.0


def near_carried(g: Grid, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """At each [row, size] of the grid `g`: whether a cell near the carried lr t[row] partly failed (some seeds learned, others did
    not) at some size of the row (the tried lrs that bracket t, the next tried lr beyond each of them and every lr
    within NEAR_OCTAVES of t), the fewest seeds of the cells that bracket t
    (its own cell where t is a tried lr; 0 where the size's grid does not reach t), and whether a run of those
    cells did not learn (diverged or stuck: the carried lr fails there)."""
    V, X, sign, thr = g.V, g.X, g.sign, g.thr
    K, S, L, _ = V.shape
    n_cell = np.isfinite(V).sum(-1)  # [K, S, L]
    fin = n_cell > 0
    n_failed = did_not_learn(V, sign, thr[:, :, None, None]).sum(-1)
    failed = n_failed > 0
    x = np.broadcast_to(X[:, None, :], (K, S, L))
    tt = t[:, None, None]
    ar = np.arange(L)
    lo = np.where(fin & (x <= tt + 1e-9), ar, -1).max(-1)  # [K, S]: the tried lr at or below t
    hi = np.where(fin & (x >= tt - 1e-9), ar, L).min(-1)  # the tried lr at or above t
    before = np.where(fin & (ar < lo[..., None]), ar, -1).max(-1)
    after = np.where(fin & (ar > hi[..., None]), ar, L).min(-1)
    near = np.zeros((K, S, L), dtype=bool)
    for idx in (before, lo, hi, after):
        ok = (idx >= 0) & (idx < L)
        kk, ss = np.nonzero(ok)
        near[kk, ss, idx[kk, ss]] = True
    near |= fin & (np.abs(x - tt) <= NEAR_OCTAVES + 1e-9)
    # a cell where some seeds learned and others did not is a regime that fails at random (a cliff, where every
    # seed fails, is not): a property of the lr more than of one size, so such a cell within NEAR_OCTAVES of the
    # carried lr at any size puts every size's carried cells under suspicion
    mixed = failed & (n_failed < n_cell)
    fail_near = np.broadcast_to((near & mixed).any((-1, -2))[:, None], (K, S)) & np.isfinite(t)[:, None]
    reach = (lo >= 0) & (hi < L)
    seeds = np.minimum(_take(n_cell, np.clip(lo, 0, L - 1)), _take(n_cell, np.clip(hi, 0, L - 1)))
    fails = reach & (_take(failed, np.clip(lo, 0, L - 1)) | _take(failed, np.clip(hi, 0, L - 1))) & np.isfinite(t)[:, None]
    return fail_near, np.where(reach, seeds, 0), fails
