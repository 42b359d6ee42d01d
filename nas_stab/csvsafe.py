"""CSV formula injection: the one rule every CSV nas_stab writes goes through.

A spreadsheet runs a cell that begins with = + - @ (or a tab or carriage
return, which it strips first) as a formula. Following OWASP's advice, such a
*text* cell is written with a leading single quote, which spreadsheets show as
text; numbers are never touched (a negative eigenvalue stays a number
`pandas.read_csv` parses as one). A text cell that already begins with a quote
followed by one of those characters gets one more quote, so `unescape_cell`
gives back exactly the value written.

    >>> escape_cell("=HYPERLINK(\\"http://x\\")"), escape_cell(-1.5), escape_cell("-1.5"), escape_cell("-relu")
    ('\\'=HYPERLINK("http://x")', -1.5, '-1.5', "'-relu")
"""
from __future__ import annotations

import math
from typing import Any

TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def escape_cell(v: Any) -> Any:
    """The value to write in a CSV cell: text that a spreadsheet would run, quoted; anything else as is."""
    if not isinstance(v, str) or not v:
        return v
    if v[0] in TRIGGERS and not _is_number(v):
        return "'" + v
    if v[0] == "'" and v[1:2] in TRIGGERS:
        return "'" + v
    return v


def unescape_cell(v: Any) -> Any:
    """The value `escape_cell` was given."""
    if isinstance(v, str) and v[:1] == "'" and v[1:2] in TRIGGERS + ("'",):
        return v[1:]
    return v


def _text(dtype) -> bool:
    """A column that may hold text: object, or pandas' string dtype (the default for text from pandas 3)."""
    import numpy as np  # deferred: loads NumPy only when this runs
    import pandas as pd  # deferred: loads pandas only when this runs

    return dtype == np.dtype(object) or pd.api.types.is_string_dtype(dtype)


def escape_frame(df):
    """A copy of a pandas DataFrame with every text cell escaped (numeric columns untouched)."""
    out = df.copy()
    for c in out.columns:
        if _text(out[c].dtype):
            out[c] = out[c].map(escape_cell)
    out.columns = [escape_cell(str(c)) for c in out.columns]
    return out


def unescape_frame(df):
    """`escape_frame` undone on a table read back with pandas."""
    for c in df.columns:
        if _text(df[c].dtype):
            df[c] = df[c].map(unescape_cell)
    return df


def csv_cell(v: Any) -> Any:
    """The cell trials.csv writes for `v`: floats to 6 significant digits, nan/inf spelled out, text escaped."""
    if v is None:
        return ""
    if isinstance(v, str):
        return escape_cell(v)  # no spreadsheet formula from a value
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return f"{v:.6g}"
    return v


def cell_text(v: Any) -> str:
    """The text trials.csv holds for the value `v` once read back (`store.reader.read_rows`): a row the driver
    has in memory and the same row read from the file give the same text (the trackers' fingerprints)."""
    return str(unescape_cell(csv_cell(v)))
