"""The metric reported at the learning rate chosen on the ranking metric (``leaderboard.report``,
docs/leaderboard.md, Reported on a held-out split).

The leaderboard chooses each size's lr on its ranking metric (a validation metric); choosing and reporting
on the same split overstates the result by the maximum's selection bias. The report metric (by default the
held-out counterpart of the ranking metric: val_acc -> test_acc, val_loss -> test_loss, bleu -> test_bleu)
is read at the cells the ranking metric chose, never optimized itself. Its runs count the way the ranking
metric's do: a diverged or failed run (or one whose ranking metric is not finite) counts with the report
metric's own no-learning value m0, a pruned run with its value when it has one (else m0), and a value worse
than m0 is clamped to it; a complete run that did not record the report metric is left out of the report
(it is not a failure), so ``report_n`` can be smaller than the cell's seed count.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from nas_stab import metrics
from nas_stab.analysis.no_learning import NoLearning, no_learning_level
from nas_stab.errors import RunError

if TYPE_CHECKING:
    import numpy.typing as npt

__all__ = ["NONE", "REPORT_COLUMNS", "report_at", "report_cells", "report_metric"]

NONE = "none"  # leaderboard.report: no report


def report_metric(setting: str | None, metric: str, trials: pd.DataFrame) -> str | None:
    """The report metric of a table: `setting` None means the held-out counterpart of `metric` when some
    complete run of `trials` recorded it (None otherwise), ``"none"`` no report, any other name that metric.

    Raises:
        RunError: a named report metric that no run recorded.
    """
    if setting == NONE:
        return None
    name = metrics.held_out(metric) if setting is None else setting
    if name is None or name not in trials.columns:
        if setting is not None:
            raise RunError(f"trials have no column {setting!r} (the leaderboard's report metric)")
        return None
    status = trials["status"].astype(str).str.strip().str.lower() if "status" in trials.columns else pd.Series("complete", trials.index)
    recorded = np.isfinite(pd.to_numeric(trials[name], errors="coerce").to_numpy(dtype=float)) & (status == "complete").to_numpy()
    if not recorded.any():
        if setting is not None:
            raise RunError(f"no complete run recorded {setting!r} (the leaderboard's report metric)")
        return None
    return name


def report_cells(trials: pd.DataFrame, rec: pd.DataFrame, report: str, classes: int | None) -> tuple[pd.DataFrame, NoLearning]:
    """Per cell (indexed by ``_k``, ``_s``, ``_l``) the ``report_mean``, ``report_std`` and ``report_n`` of
    the report metric over the cell's seeds (a seed's runs averaged first; a seed without a value left out),
    and the report metric's no-learning level. `rec` holds the analysis' runs, row for row those of
    `trials`, with their codes and outcomes (``_ok``: complete with a finite ranking metric, ``_pruned``)."""
    value = pd.to_numeric(trials[report], errors="coerce").to_numpy(dtype=float)
    finite = np.isfinite(value) & (np.abs(value) < 1e300)
    ok, pruned = rec["_ok"].to_numpy(dtype=bool), rec["_pruned"].to_numpy(dtype=bool)
    level = no_learning_level(report, classes, None, None, value, ok & finite, finite)
    counted = np.where(ok, np.where(finite, value, np.nan), np.where(pruned & finite, value, level.m0))
    with np.errstate(invalid="ignore"):
        counted = np.fmax(counted, level.m0) if metrics.direction(report) == "maximize" else np.fmin(counted, level.m0)
    counted = np.where(ok & ~finite, np.nan, counted)  # fmax / fmin fill a missing value with m0: keep it missing
    per_seed = rec[["_k", "_s", "_l", "_seed"]].assign(v=counted).groupby(["_k", "_s", "_l", "_seed"], sort=True)["v"].mean()
    by = per_seed.groupby(level=["_k", "_s", "_l"], sort=True)
    cells = pd.DataFrame({"report_mean": by.mean(), "report_std": by.std(), "report_n": by.count()})
    return cells, level


REPORT_COLUMNS = ("report_mean", "report_std", "report_n")


def report_at(cells: pd.DataFrame | None, k: npt.ArrayLike, s: npt.ArrayLike, lr: npt.ArrayLike) -> pd.DataFrame:
    """`report_cells`' values at the cells (k, s, lr) (arrays of codes; a negative code: no cell), NaN where
    there is none (or no report: `cells` None)."""
    k, s, lr = (np.asarray(v, dtype=np.int64) for v in (k, s, lr))
    if cells is None:
        got = pd.DataFrame({c: np.full(len(k), np.nan) for c in REPORT_COLUMNS})
    else:
        got = cells.reindex(pd.MultiIndex.from_arrays([k, s, lr])).reset_index(drop=True)
    out = pd.DataFrame({c: got[c].to_numpy(dtype=float) for c in REPORT_COLUMNS})
    out["report_n"] = out["report_n"].astype("Int64")  # a count: empty, not NaN, where there is none
    return out
