"""The display side of `analysis.analyze`: row labels from the ``leaderboard.compare`` values, and the labels,
configuration values and sizes written into the ranked rows and the per-size, per-cell and per-run tables
(the analysis itself works on integer codes ``_k`` (row label), ``_s`` (size) and ``_l`` (lr))."""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from nas_stab.analysis.values import fmt_value, value_codes

__all__ = ["label_codes", "label_rows", "label_tables"]


def _obj(values: list, index: pd.Index) -> pd.Series:
    """Keep configuration values as they are (ints stay ints, None stays None)."""
    return pd.Series(values, index=index, dtype=object)


def label_codes(df: pd.DataFrame, compare: tuple[str, ...]) -> tuple[np.ndarray, list[tuple[str, tuple]]]:
    """Row-label codes (sorted) and, per code, (display text, tuple of values)."""
    if not compare:
        return np.zeros(len(df), np.int64), [("all", ())]
    parts = [value_codes(df[k]) for k in compare]
    frame = pd.DataFrame({f"c{i}": c for i, (c, _) in enumerate(parts)})
    codes = frame.groupby(list(frame.columns), sort=True).ngroup().to_numpy()
    firsts = frame.assign(_g=codes).drop_duplicates("_g").sort_values("_g")
    keyed = [_continuous(parts[i][1]) for i in range(len(compare))]
    labels = []
    for key in firsts[list(frame.columns)].itertuples(index=False, name=None):
        vals = tuple(parts[i][1][c][1] for i, c in enumerate(key))
        text = [f"{k.rsplit('.', 1)[-1]}={fmt_value(v)}" if named else fmt_value(v) for k, v, named in zip(compare, vals, keyed)]
        labels.append((", ".join(text), vals))
    return codes, labels


def _continuous(forms: list) -> bool:
    """A compare key whose values include a non-integer number (a sampled continuous value, as a transfer
    search's outer trials have): its label carries the key's name, since a bare 0.550798 says nothing."""
    return any(isinstance(v, float) and math.isfinite(v) and not float(v).is_integer() for _, v in forms)


def label_rows(rows: pd.DataFrame, sizes: pd.DataFrame, label_vals: list, size_vals: list, compare: tuple[str, ...]) -> pd.DataFrame:
    """The rows (indexed by ``_k``) with their label, compare values, best and reference size, and per size
    (in size order) its best lr, where it is censored, how its bracket sweep ended and why it has no best lr."""
    rows = rows.reset_index()
    rows["label"] = [label_vals[k][0] for k in rows["_k"]]
    for i, key in enumerate(compare):
        rows[key] = _obj([label_vals[k][1][i] for k in rows["_k"]], rows.index)
    rows["best_size"] = _obj([size_vals[s][1] if s >= 0 else None for s in rows["_best_s"]], rows.index)
    rows["reference_size"] = _obj([size_vals[s][1] if s >= 0 else None for s in rows["_ref_s"]], rows.index)
    sz = sizes.sort_values(["_k", "_s"], kind="mergesort")
    at = np.searchsorted(sz["_k"].to_numpy(), rows["_k"].to_numpy(), side="left")
    to = np.searchsorted(sz["_k"].to_numpy(), rows["_k"].to_numpy(), side="right")
    sv = [size_vals[s][1] for s in sz["_s"]]
    blr, cen, tr, ad, ends = (sz[c].tolist() for c in ("best_lr", "censored", "trains", "all_diverged", "bracket_end"))
    rows["best_lrs"] = [tuple(zip(sv[i:j], blr[i:j])) for i, j in zip(at, to)]
    rows["censored"] = [tuple((v, c) for v, c in zip(sv[i:j], cen[i:j]) if c) for i, j in zip(at, to)]
    rows["bracket_ends"] = [tuple((v, e) for v, e in zip(sv[i:j], ends[i:j]) if e) for i, j in zip(at, to)]
    rows["no_best_lr"] = [tuple((v, "diverged" if d else "no lr trains") for v, t, d in zip(sv[i:j], tr[i:j], ad[i:j]) if not t)
                          for i, j in zip(at, to)]
    return rows


def label_tables(sizes: pd.DataFrame, cells: pd.DataFrame, rec: pd.DataFrame, df: pd.DataFrame, label_vals: list,
                 size_vals: list, compare: tuple[str, ...], lr_float: np.ndarray) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The per-size table (a copy), the cells (in place, with their shares of diverged and stuck runs) and the
    records (the trials `df` joined with their codes) with label, compare values and size (records: and lr)."""
    sizes = sizes.copy()
    sizes.insert(0, "label", [label_vals[k][0] for k in sizes["_k"]])
    sizes["size"] = _obj([size_vals[s][1] for s in sizes["_s"]], sizes.index)
    cells.insert(0, "label", [label_vals[k][0] for k in cells["_k"]])
    for i, key in enumerate(compare):
        cells.insert(1 + i, key, _obj([label_vals[k][1][i] for k in cells["_k"]], cells.index))
        sizes.insert(1 + i, key, _obj([label_vals[k][1][i] for k in sizes["_k"]], sizes.index))
    cells["size"] = _obj([size_vals[s][1] for s in cells["_s"]], cells.index)
    cells["frac_diverged"] = cells["n_diverged"] / cells["n_runs"]
    cells["frac_stuck"] = cells["n_stuck"] / cells["n_runs"]

    rec["label"] = [label_vals[k][0] for k in rec["_k"]]
    rec["size"] = _obj([size_vals[s][1] for s in rec["_s"]], rec.index)
    rec["lr"] = lr_float[rec["_l"].to_numpy()]
    # a trials column of the same name (a sweep whose lr or size column is called "lr" or "size") gives way to the
    # records' own, which hold the same values as the analysis reads them
    rec = pd.concat([df.reset_index(drop=True).drop(columns=[c for c in rec.columns if c in df.columns]), rec], axis=1)
    return sizes, cells, rec
