"""The stability metrics where a verdict is made: at each size's best lr and at the lr where its runs start to
diverge (docs/leaderboard.md, "Stability at the optimum and at the edge").

A leaderboard says where each size's optimum lies and whether one lr serves every size; the stability
metrics say why. `edges` picks, per (row, size), two cells of the lr grid:

- ``optimum``: the size's best grid lr (``grid_lr``);
- ``edge``: the smallest tried lr above it at which at least one seed diverged (none when no run above the
  optimum diverged: the grid stopped before the edge);

and reports there the seed means (over the runs that have a finite value) of the metrics the runs recorded:
the Hessian's top eigenvalue and the edge-of-stability ratio at the end (``final_sharpness``,
``final_eos_ratio``: lr x sharpness / 2, the quantity whose crossing of 1 makes plain SGD unstable), the loss
spikes short of divergence, the largest relative update, the forward ratio, and for Transformers the
largest attention logit (``final_attn_logit_max``); plus how many runs there diverged. A column a table's runs
did not record (``hessian: false`` leaves the sharpness empty) is left out rather than shown empty.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from nas_stab.analysis.table import Analysis

__all__ = ["EDGE_METRICS", "edges"]

EDGE_METRICS = ("final_sharpness", "final_eos_ratio", "loss_spikes", "max_update_ratio", "final_update_ratio",
                "final_fwd_ratio", "final_attn_logit_max", "init_attn_logit_max")


def _where(cells: pd.DataFrame, grid_lr: float) -> tuple[int | None, int | None]:
    """(_l of the optimum's cell, _l of the edge's cell or None) among one (row, size)'s cells."""
    c = cells.sort_values("lr")
    lr = c["lr"].to_numpy(dtype=float)
    at = np.nonzero(np.isclose(lr, grid_lr, rtol=1e-6))[0]
    if not at.size:
        return None, None
    j = int(at[0])
    above = c.iloc[j + 1:]
    div = above[above["n_diverged"] > 0]
    return int(c["_l"].iloc[j]), (int(div["_l"].iloc[0]) if len(div) else None)


def edges(a: Analysis) -> pd.DataFrame:
    """One row per (row, size, where) of an `Analysis` (see the module): label, size, where, lr, runs,
    diverged, and the seed mean of each recorded stability metric."""
    rec = a.records
    cols = [m for m in EDGE_METRICS if m in rec.columns and pd.to_numeric(rec[m], errors="coerce").notna().any()]
    out = []
    for (k, s), size in a.sizes.groupby(["_k", "_s"], sort=True):
        row = size.iloc[0]
        if not bool(row["trains"]):
            continue
        cells = a.cells[(a.cells["_k"] == k) & (a.cells["_s"] == s)]
        opt, edge = _where(cells, float(row["grid_lr"]))
        for where, l_ in (("optimum", opt), ("edge", edge)):
            base = {"label": row["label"], "size": row["size"], "where": where}
            if l_ is None:
                out.append({**base, "lr": np.nan, "runs": 0, "diverged": 0})
                continue
            runs = rec[(rec["_k"] == k) & (rec["_s"] == s) & (rec["_l"] == l_)]
            vals = {m: float(pd.to_numeric(runs[m], errors="coerce").mean()) for m in cols}
            out.append({**base, "lr": float(runs["lr"].iloc[0]), "runs": len(runs), "diverged": int(runs["_div"].sum()),
                        **vals})
    return pd.DataFrame(out, columns=["label", "size", "where", "lr", "runs", "diverged", *cols])
