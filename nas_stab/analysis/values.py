"""Configuration values in the leaderboard: short stable text, a canonical order, integer codes,
and the base value of a key a run does not search."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["NONE", "canon", "value_codes", "fill_base", "fmt_value", "lookup", "number_or_text", "dotted"]

NONE = (3, None)  # the canonical form of a missing value: sorts last


def dotted(node: Any, prefix: str = "") -> dict[str, Any]:
    """A nested mapping as {dotted.key: leaf} (lists and empty mappings are leaves; `prefix` names the root)."""
    if isinstance(node, Mapping) and node:
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(dotted(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: node} if prefix else {}


def number_or_text(text: str) -> Any:
    """A cell or an argument as the int or float it spells, else the text itself (`--reference 16` is the
    size 16 as trials.csv holds it; W&B's config compares numbers)."""
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def fmt_value(v: Any) -> str:
    """Short, stable text for a configuration value (labels, sizes, learning rates)."""
    if v is None:
        return "null"
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return "null"
        if f.is_integer() and abs(f) < 1e15:
            return str(int(f))
        return f"{f:.6g}"
    return str(v)


def canon(v: Any) -> tuple[int, Any]:
    """(type tag, value): numbers, bools, strings and null compare and sort sanely."""
    if v is None:
        return NONE
    if isinstance(v, (bool, np.bool_)):
        return (1, bool(v))
    if isinstance(v, (int, np.integer)):
        return (0, int(v))
    if isinstance(v, (float, np.floating)):
        f = float(v)
        if math.isnan(f):
            return NONE
        if f.is_integer() and abs(f) < 2**53:
            return (0, int(f))
        return (0, float(f"{f:.12g}"))
    s = str(v)
    low = s.strip().lower()
    if low in ("true", "false"):
        return (1, low == "true")
    if s.strip() in ("", "nan", "NaN", "null", "None", "~"):  # not "none": a value of skip / norm / pruner
        return NONE
    try:
        return canon(int(s))
    except ValueError:
        pass
    try:
        f = float(s)
    except ValueError:
        return (2, s)
    return canon(f) if math.isfinite(f) else (2, s)


def value_codes(col: pd.Series) -> tuple[np.ndarray, list[tuple[int, Any]]]:
    """Integer codes in sorted order of the canonical values, and those values."""
    codes, uniq = pd.factorize(col, use_na_sentinel=True)
    forms = [canon(u) for u in uniq] + [NONE]
    present = set(forms[:-1]) | ({NONE} if (codes < 0).any() else set())
    keys = sorted(present, key=lambda k: (k[0], k[1] if k[1] is not None else 0))
    pos = {k: i for i, k in enumerate(keys)}
    pos.setdefault(NONE, 0)  # the sentinel's slot when no value is missing (never indexed)
    remap = np.array([pos[c] for c in forms], dtype=np.int64)
    return remap[codes], keys


def lookup(spec: Mapping[str, Any] | None, key: str, default: Any = None) -> Any:
    """The value of a dotted key in a nested mapping (a resolved spec), or `default`."""
    node: Any = spec
    for part in key.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return default
        node = node[part]
    return node


def fill_base(trials: pd.DataFrame, keys: Sequence[str | None], spec: Mapping[str, Any] | None) -> pd.DataFrame:
    """Give every key a column: a key that is not searched (no column, or an empty
    cell when a ``when:`` condition left it out) takes the spec's base value."""
    out = trials.copy()
    for key in dict.fromkeys(k for k in keys if k):
        base = lookup(spec, key)
        if isinstance(base, (list, dict)):
            base = str(base)
        if key not in out.columns:
            out[key] = base
        elif base is not None and out[key].isna().any():
            col = out[key].astype(object)
            col[col.isna()] = base
            out[key] = col
    return out
