"""The typed objects the leaderboard's estimation passes around (docs/leaderboard.md, steps 1-4): `Grid`, one
table's seed values laid out as arrays with what every fit of them needs, and `Optimum`, each size's located
optimum on that grid. Shapes use K rows, S sizes, L lrs (row-local codes) and N seeds (per row and size)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Grid", "Optimum"]


@dataclass(frozen=True)
class Grid:
    """One table's seed values and their fit's settings.

    V[K, S, L, N]: each seed's counted value (NaN: no run); P[K, S, L]: the seed means (NaN: lr not tried);
    X[K, L]: log2 of each row's lrs (NaN padding); U[S]: log2 of each size (NaN without a size axis);
    thr[K, S]: the "trains" threshold in metric direction; ref[K]: each row's reference size code;
    no_parabola[K, S, L]: the cells no parabola may pass through (a pruned run, a seed that did not learn);
    sign: +1 where the metric is maximized, -1 where it is minimized."""

    V: np.ndarray
    P: np.ndarray
    X: np.ndarray
    U: np.ndarray
    thr: np.ndarray
    ref: np.ndarray
    no_parabola: np.ndarray
    sign: float

    @property
    def shape(self) -> tuple[int, int, int, int]:
        """(K, S, L, N)."""
        K, S, L, N = self.V.shape
        return K, S, L, N


@dataclass(frozen=True)
class Optimum:
    """Each size's optimum [row, size] on its grid: the grid optimum j (log2 lr xj, value yj in metric direction)
    and the nearest tried lrs below and above it (index, log2 lr, whether it trains), the seeds it rests on
    (n_rest; per row n_row), how far it may reach toward each neighbour (reach_lo, reach_hi), whether a
    parabola refined it and, if so, its fit allowance (fit_lo, fit_hi; xfit_lo, xfit_hi for the printed x*
    interval); SP are the seed-mean curves in metric direction."""

    j: np.ndarray
    trains: np.ndarray
    n_rest: np.ndarray
    n_row: np.ndarray
    below: np.ndarray
    above: np.ndarray
    xj: np.ndarray
    x_below: np.ndarray
    x_above: np.ndarray
    yj: np.ndarray
    tr_below: np.ndarray
    tr_above: np.ndarray
    reach_lo: np.ndarray
    reach_hi: np.ndarray
    unrefined: np.ndarray
    refined: np.ndarray
    fit_lo: np.ndarray
    fit_hi: np.ndarray
    xfit_lo: np.ndarray
    xfit_hi: np.ndarray
    SP: np.ndarray

    def neighbourhood(self, lo: np.ndarray, hi: np.ndarray, printed: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """An interval of the optima stretched over each one's grid neighbourhood (unrefined) or its fit allowance
        (refined: `fit_lo`/`fit_hi`, or `xfit_lo`/`xfit_hi` for the `printed` x* interval); NaN at a size that does
        not train."""
        f_lo, f_hi = (self.xfit_lo, self.xfit_hi) if printed else (self.fit_lo, self.fit_hi)
        lo = np.where(self.unrefined, np.minimum(lo, self.reach_lo), np.where(self.refined, np.minimum(lo, f_lo), lo))
        hi = np.where(self.unrefined, np.maximum(hi, self.reach_hi), np.where(self.refined, np.maximum(hi, f_hi), hi))
        return np.where(self.trains, lo, np.nan), np.where(self.trains, hi, np.nan)
