"""The verdict judged on published real curves with a planted answer (docs/leaderboard.md, "Calibration on real curves").

The simulated families of `calibration` are curve shapes we chose; this family is made of what our own runs
produced. Each row of a published table (``leaderboards/<table>/trials.csv``) gives, per (size, lr) cell, a pool
of real runs. A simulated table takes the row's curves, shifts each size's curve along log2 lr by a planted
amount (0 at the smallest size, ``shift`` octaves at the largest, linearly in the size's rank, rounded to the
table's grid step so every size stays on one lattice), and draws ``seeds`` runs per cell with replacement from
the cell's real runs. Its truth is the pooled mean of every real run of each cell (diverged and failed runs at
the no-learning value m0, worse values clamped to m0, as the leaderboard counts them), shifted: the true cost
of carrying an lr to a size is that size's best pooled cell minus the pooled curve at that lr (linear between
cells in log2 lr; unknown outside the size's grid). The verdict is then scored as in `calibration.evaluate`:
P(yes | the carried lr truly costs >= 2 epsilon) and P(no | it costs < epsilon), both targets <= 5% in every
setting, and the upper end's one-sided coverage of the true cost. The true cost counts the reference size too
(its own fitted lr against its true best, as `calibration.carried_regret` does); ``yes_if_costly_beyond_ref``
counts only the other sizes, the cost of carrying beyond the reference size's own tuning error.

    >>> from nas_stab.analysis.calibration_real import sources
    >>> [s.table for s in sources()][:2]  # doctest: +SKIP
    ['depth-mup', 'mup-width']
"""
from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from nas_stab.analysis.no_learning import NoLearning, counted_values, no_learning_level
from nas_stab.analysis.table import analyze
from nas_stab.metrics import direction

__all__ = ["TABLES", "RealRow", "evaluate_real", "sources"]

ROOT = Path(__file__).resolve().parents[2]
# the published tables whose rows serve as real curves: a size axis, 10-class tasks, both metric directions
TABLES = ("depth-mup", "mup-width", "stam-fig4-mnist1d", "skip-lambda-mnist1d", "tau-depth")
CLASSES = 10


@dataclass(frozen=True)
class RealRow:
    """One row of a published table: its runs (columns ``size``, ``lr``, ``status``, ``v``), metric and grid step."""

    table: str
    label: str
    metric: str
    runs: pd.DataFrame
    step: float


def _provenance(table: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in (table / "leaderboard_provenance.txt").read_text(encoding="utf-8").splitlines():
        if ": " in line and line.split(": ", 1)[0] not in out:
            k, v = line.split(": ", 1)
            out[k] = v
    return out


def sources(root: Path = ROOT, tables: tuple[str, ...] = TABLES) -> list[RealRow]:
    """The rows of the published `tables` with at least 2 sizes, each with its runs and lr grid step."""
    out = []
    for name in tables:
        d = root / "leaderboards" / name
        prov = _provenance(d)
        metric = prov["metric"].split(" ", 1)[0]
        size = prov["size axis"].strip()
        rows = [k.strip() for k in prov["rows"].split(",")]
        df = pd.read_csv(d / "trials.csv", low_memory=False)
        df = df[df["status"].isin(["complete", "diverged", "failed"])]
        for label, g in df.groupby(rows, dropna=False, sort=True):
            if g[size].nunique() < 2:
                continue
            lrs = np.log2(np.sort(g["train.lr"].unique()))
            step = float(np.median(np.diff(lrs))) if lrs.size > 1 else 1.0
            runs = pd.DataFrame({"size": g[size].to_numpy(dtype=float), "lr": g["train.lr"].to_numpy(dtype=float),
                                 "status": g["status"].to_numpy(), "v": pd.to_numeric(g[metric], errors="coerce").to_numpy()})
            lab = "/".join(str(v) for v in (label if isinstance(label, tuple) else (label,)))
            out.append(RealRow(name, lab, metric, runs, step))
    return out


def _counted(runs: pd.DataFrame, metric: str, sign: float) -> tuple[np.ndarray, NoLearning]:
    """Each run's value as the leaderboard counts it (`no_learning.counted_values`: m0 for a run that did not
    complete with a finite value, worse values clamped to m0) and the no-learning level it used."""
    v = runs["v"].to_numpy(dtype=float)
    finite = np.isfinite(v)
    ok = (runs["status"].to_numpy() == "complete") & finite
    level = no_learning_level(metric, CLASSES, None, None, v, ok, finite)
    return counted_values(v, ok, np.zeros(len(v), dtype=bool), finite, sign, level)[0], level


def _simulate(row: RealRow, shift: float, seeds: int, tables: int, rng: np.random.Generator, setting: int
              ) -> tuple[pd.DataFrame, dict[int, tuple[np.ndarray, np.ndarray]], float, np.ndarray, NoLearning]:
    """The trials of `tables` simulated tables from `row` and each size's true curve (log2 lr, pooled mean)."""
    sign = 1.0 if direction(row.metric) == "maximize" else -1.0
    sizes = np.sort(row.runs["size"].unique())
    u = np.arange(sizes.size) / max(1, sizes.size - 1)
    planted = np.round(shift * u / row.step) * row.step  # octaves each size's curve moves, on the grid's lattice
    counted, level = _counted(row.runs, row.metric, sign)
    frames, curves = [], {}
    for si, s in enumerate(sizes):
        at = (row.runs["size"] == s).to_numpy()
        sub = row.runs[at]
        for lr, idx in sub.groupby("lr").indices.items():
            pool = sub.iloc[idx]
            draw = rng.integers(0, len(pool), size=(tables, seeds))
            new_lr = lr * 2.0 ** planted[si]
            frames.append(pd.DataFrame({
                "setting": setting, "table": np.repeat(np.arange(tables), seeds), "seed": np.tile(np.arange(seeds), tables),
                "status": pool["status"].to_numpy()[draw.ravel()], "size": s, "train.lr": new_lr,
                row.metric: pool["v"].to_numpy()[draw.ravel()]}))
        true = pd.Series(counted[at]).groupby(sub["lr"].to_numpy()).mean()
        curves[si] = (np.log2(true.index.to_numpy(dtype=float)) + planted[si], true.to_numpy(dtype=float))
    return pd.concat(frames, ignore_index=True), curves, sign, sizes, level


def _true_cost(curves: dict, sign: float, x: np.ndarray, level: NoLearning) -> np.ndarray:
    """The true cost [table, size] of carrying log2 lr x[table] to each size (NaN outside a size's grid; inf at a
    size whose pooled curve never trains, no lr beating m0 by the leaderboard's margin: there no lr serves, and the
    verdict's `no` is right whatever was carried)."""
    out = np.full((x.size, len(curves)), np.nan)
    for si, (gx, gy) in curves.items():
        best = np.max(sign * gy)
        if best - sign * level.m0 <= level.margin:
            out[:, si] = np.inf
            continue
        inside = np.isfinite(x) & (x >= gx.min() - 1e-9) & (x <= gx.max() + 1e-9)
        val = np.interp(np.where(inside, x, gx.min()), gx, sign * gy)
        out[:, si] = np.where(inside, np.maximum(best - val, 0.0), np.nan)
    return out


def evaluate_real(rows: list[RealRow] | None = None, *, shifts: Sequence[float] = (0.0, 0.5, 1.0, 2.0),
                  seeds: Sequence[int] = (3, 5), tables: int = 50,
                  n_boot: int = 200, seed: int = 0) -> pd.DataFrame:
    """Per (row, planted shift, seeds): P(yes), P(no), P(yes | costly), P(no | cheap), the upper end's coverage."""
    rows = sources() if rows is None else rows
    rng = np.random.default_rng(seed)
    out = []
    for metric in sorted({r.metric for r in rows}):
        group = [r for r in rows if r.metric == metric]
        frames: list[pd.DataFrame] = []
        meta: list[tuple] = []
        for r in group:
            for sh in shifts:
                for k in seeds:
                    trials, curves, sign, sizes, level = _simulate(r, sh, k, tables, rng, len(meta))
                    frames.append(trials)
                    meta.append((r, sh, k, curves, sign, sizes, level))
        a = analyze(pd.concat(frames, ignore_index=True), transfer="size", compare=["setting", "table"], metric=metric,
                    classes=CLASSES, n_boot=n_boot, boot_seed=seed)
        for i, (r, sh, k, curves, sign, sizes, level) in enumerate(meta):
            rr = a.rows[a.rows["setting"] == i].sort_values("table")
            z = a.sizes[(a.sizes["setting"] == i) & (a.sizes["size"] == sizes[0])].set_index("table")
            x_ref = z["x_star"].reindex(rr["table"].to_numpy()).to_numpy(dtype=float)
            cost = _true_cost(curves, sign, x_ref, level)
            known = np.isfinite(cost).all(-1)
            worst = np.where(known, np.nanmax(np.where(np.isfinite(cost), cost, -np.inf), -1), np.nan)
            eps = rr["epsilon"].to_numpy(dtype=float)
            said = rr["transfers"].to_numpy()
            costly, cheap = known & (worst >= 2 * eps), known & (worst < eps)
            # the cost at the other sizes only (what carrying costs beyond the reference size's own tuning error)
            other = np.where(known, np.nanmax(np.where(np.isfinite(cost[:, 1:]), cost[:, 1:], -np.inf), -1), np.nan)
            t_costly = known & (other >= 2 * eps)
            hi = rr["worst_regret_hi"].to_numpy(dtype=float)
            has = known & np.isfinite(rr["worst_regret_lo"].to_numpy(dtype=float))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # a setting with no known cost: NaN, as wanted
                e_mean, w_mean = float(np.nanmean(eps)), float(np.nanmean(worst))
            out.append({"table": r.table, "row": r.label, "metric": metric, "shift": sh, "seeds": k, "tables": len(rr),
                        "epsilon": e_mean, "true_worst": w_mean,
                        "yes": float((said == "yes").mean()), "no": float((said == "no").mean()),
                        "costly": int(costly.sum()), "cheap": int(cheap.sum()),
                        "yes_if_costly": float((said[costly] == "yes").mean()) if costly.sum() >= 10 else np.nan,
                        "no_if_cheap": float((said[cheap] == "no").mean()) if cheap.sum() >= 10 else np.nan,
                        "yes_if_costly_beyond_ref": float((said[t_costly] == "yes").mean()) if t_costly.sum() >= 10 else np.nan,
                        "cover_upper": float((worst[has] <= hi[has] + 1e-9).mean()) if has.any() else np.nan})
    return pd.DataFrame(out)
