"""What every leaderboard figure shares: matplotlib on the Agg backend, the panel grid, PNG
bytes, panel titles wrapped to the panel's width, and one colour and legend entry per size."""
from __future__ import annotations

import io
import math
import textwrap
from collections.abc import Sequence

import pandas as pd

from nas_stab.analysis.table import Analysis
from nas_stab.analysis.values import fmt_value

_MAX_PANELS = 24
_MAX_MAP_ROWS = 100
_COLS = 4
_DPI = 90
_TITLE_PT = 9
_TICK_PT = 7
_CHAR_EM = 0.62  # average glyph width of DejaVu Sans, in em (a little generous)


def _plt():
    import matplotlib  # deferred: loads matplotlib only when this runs

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt  # deferred: loads matplotlib only when this runs

    return plt


def _figure(n_panels: int, w: float = 4.2, h: float = 3.2, *, cols: int | None = None, extra_w: float = 0.0,
            extra_h: float = 0.6):
    """A constrained-layout grid of `n_panels` panels of about w x h inches each."""
    plt = _plt()
    cols = max(1, min(cols or _COLS, n_panels))
    rows = math.ceil(n_panels / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(w * cols + extra_w, h * rows + extra_h), squeeze=False,
                             layout="constrained")
    for ax in axes.flat[n_panels:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n_panels])


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=_DPI)
    _plt().close(fig)
    return buf.getvalue()


def _wrap(text: str, width_in: float, pt: float) -> str:
    """Wrap `text` to lines that fit `width_in` inches at `pt` points (breaking after ", " first)."""
    chars = max(8, int(width_in * 72 / (pt * _CHAR_EM)))
    return _plain("\n".join(textwrap.wrap(text, chars, break_long_words=True, break_on_hyphens=False)) or text)


def _plain(text: str) -> str:
    """User values drawn as written: a `$` would start matplotlib's mathtext (a categorical `$\\foo{x}$`
    once crashed the whole leaderboard there), so it is escaped."""
    return str(text).replace("$", r"\$")


def _short_keys(keys: Sequence[str]) -> list[str]:
    """The last dotted part of each key, unless two keys would then look the same."""
    short = [k.rsplit(".", 1)[-1] for k in keys]
    return short if len(set(short)) == len(short) else list(keys)


def _labels(a: Analysis, limit: int = _MAX_PANELS) -> list[tuple[int, str]]:
    """(label code, panel title) in leaderboard rank order, at most `limit`."""
    st = a.settings
    out = []
    short = _short_keys(st.compare)
    for r in a.rows.head(limit).to_dict("records"):
        title = ", ".join(f"{s}={fmt_value(r[k])}" for s, k in zip(short, st.compare)) if st.compare else str(r["label"])
        out.append((int(r["_k"]), title))
    return out


def _row_keys_line(a: Analysis, limit: int = _MAX_PANELS) -> str:
    """Second line of a figure title: which keys label the rows (and how many are shown)."""
    st = a.settings
    n = len(a.rows)
    line = ("rows: " + ", ".join(st.compare)) if st.compare else "one row"
    if n > limit:
        line += f" (the first {limit} of {n} rows, in leaderboard order)"
    return line


def _suptitle(fig, a: Analysis, first: str, limit: int = _MAX_PANELS, reserve: float = 0.0) -> None:
    width = fig.get_figwidth() - 0.3 - reserve  # reserve: inches the legend takes at the right
    fig.suptitle(_wrap(first, width, 10) + "\n" + _wrap(_row_keys_line(a, limit), width, 8), fontsize=10)


def _size_colors(sizes: Sequence):
    import matplotlib  # deferred: loads matplotlib only when this runs

    cmap = matplotlib.colormaps["viridis"]
    n = max(1, len(sizes) - 1)
    return {s: cmap(0.9 * i / n) for i, s in enumerate(sizes)}


def _size_name(a: Analysis, value) -> str:
    st = a.settings
    return f"{st.transfer_key.rsplit('.', 1)[-1]}={fmt_value(value)}" if st.transfer_key else "all"


def _size_legend(fig, axes, a: Analysis) -> None:
    """One legend for the figure, outside the panels (only with a transfer axis: else one line per panel)."""
    if not a.settings.transfer_key:
        return
    handles, names = [], []
    for ax in axes:
        for h, n in zip(*ax.get_legend_handles_labels()):
            if n not in names:
                handles.append(h)
                names.append(n)
    if handles:
        fig.legend(handles, names, loc="outside right upper", fontsize=8, title=a.settings.transfer_key,
                   title_fontsize=8)


def _optima(a: Analysis, k: int) -> pd.DataFrame:
    """The per-size optima of row `k` (x_star, x_lo, x_hi, m_star, censored, trains), by size code."""
    if a.sizes is None or a.sizes.empty:
        return pd.DataFrame(columns=["x_star", "x_lo", "x_hi", "m_star", "censored", "trains"])
    return a.sizes[a.sizes["_k"] == k].set_index("_s")
