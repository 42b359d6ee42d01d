"""The Pareto front of a transfer search (`search.transfer`): table and plot, written with the leaderboard.

Each leaderboard row of a transfer search is one architecture (its `compare` keys default to the
searched keys other than the learning rate and the size axis) and carries every objective the
search can use (`search/sources/transfer_objectives.py`), computed by the same analysis. A row is on
the front when no other row is at least as good in every objective of
`search.transfer.objectives` and better in one (directions: the metric's for `transfer_score`
and `best`, smaller for regrets, drift and sensitivity, larger for `stable_octaves`). Rows
whose objective is undefined (a regret with fewer than two sizes that train) are left out, as
the search told Optuna they failed. With one objective the front is its best row(s).

The front is a pure function of trials.csv (never of the study), so `nas-stab leaderboard`
rebuilds it from the records alone; the outer trial of each row is the `outer_trial` column
of its runs.
"""
from __future__ import annotations

import html
import math

import numpy as np
import pandas as pd

from nas_stab.analysis.table import Analysis
from nas_stab.analysis.values import fmt_value
from nas_stab.config.mode import search_mode
from nas_stab.config.schema import Spec
from nas_stab.results._plotbase import _figure, _plain, _png, _short_keys, _wrap
from nas_stab.results.html_page import figure_html, html_table
from nas_stab.search.sources.transfer_objectives import directions

CAPTION = "Pareto front of the transfer search: each point one architecture (outer trial), the front joined"


def is_transfer(spec: Spec) -> bool:
    return search_mode(spec).transfer


def pareto_table(a: Analysis, spec: Spec) -> pd.DataFrame:
    """One line per architecture (leaderboard row) with an objective value: its outer trial, its
    values, the objectives, the verdict, and `front` (True on the Pareto front); front first."""
    assert spec.search.transfer is not None, "a Pareto front is a transfer search's"
    objs = list(spec.search.transfer.objectives)
    dirs = directions(spec)
    rows = a.rows.copy()
    outer = _outer_trials(a)
    rows["outer_trial"] = rows["_k"].map(outer)
    keep = ["outer_trial", *a.settings.compare, *objs, "transfers", "why"]
    df = rows[[c for c in dict.fromkeys(keep) if c in rows.columns]].copy()
    for o in objs:
        df[o] = pd.to_numeric(df[o], errors="coerce")
    df = df[np.isfinite(df[objs].to_numpy(dtype=float)).all(axis=1)].reset_index(drop=True)
    signs = np.array([1.0 if d == "maximize" else -1.0 for d in dirs])
    F = df[objs].to_numpy(dtype=float) * signs  # larger is better in every column
    front = np.ones(len(df), dtype=bool)
    for i in range(len(df)):
        better_eq = (F[i] <= F).all(axis=1)
        strictly = (F[i] < F).any(axis=1)
        if (better_eq & strictly).any():
            front[i] = False
    df["front"] = front
    order = df.assign(_f=~df["front"], _o=-F[:, 0] if len(df) else [])
    df = df.loc[order.sort_values(["_f", "_o"], kind="mergesort").index].reset_index(drop=True)
    return df


def _outer_trials(a: Analysis) -> dict:
    rec = a.records
    if "outer_trial" not in rec.columns:
        return {}
    num = pd.to_numeric(rec["outer_trial"], errors="coerce")
    return {int(k): (int(v) if math.isfinite(v) else None) for k, v in num.groupby(rec["_k"]).min().items()}


def pareto_markdown(a: Analysis, spec: Spec, *, plot_path: str | None = None) -> str:
    """A Markdown section: the front, then the other architectures (at most 20 lines each)."""
    df = pareto_table(a, spec)
    assert spec.search.transfer is not None, "a Pareto front is a transfer search's"
    objs = list(spec.search.transfer.objectives)
    keys = list(a.settings.compare)
    short = _short_keys(keys)
    head = ["front", "outer trial", *short, *objs, "transfers"]
    lines = ["## Pareto front of the transfer search", "",
             f"Objectives: {', '.join(objs)} (search.transfer; each computed on the architecture's runs by the analysis "
             "above, definitions in `docs/leaderboard.md`). `front`: no other architecture is at least as good in every "
             "objective and better in one.", ""]
    if df.empty:
        return "\n".join(lines + ["No architecture has every objective defined yet.", ""])
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    shown = pd.concat([df[df["front"]].head(20), df[~df["front"]].head(20)])
    for r in shown.to_dict("records"):
        cells = ["**yes**" if r["front"] else "", fmt_value(r.get("outer_trial")),
                 *[_num(r.get(k)) for k in keys], *[_num(r[o]) for o in objs], str(r.get("transfers", ""))]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    if len(df) > len(shown):
        lines.append(f"\n({len(df) - len(shown)} more architectures in leaderboard.csv)")
    if plot_path:
        lines += ["", f"![{CAPTION}]({plot_path})"]
    return "\n".join(lines) + "\n"


def pareto_html(a: Analysis, spec: Spec, *, png: bytes | None = None) -> str:
    """The same section for the HTML page: the text, the table (every architecture, sortable like the
    leaderboard; id ``pareto``) and the plot as a data: URL."""
    e = html.escape
    df = pareto_table(a, spec)
    assert spec.search.transfer is not None, "a Pareto front is a transfer search's"
    objs = list(spec.search.transfer.objectives)
    keys = list(a.settings.compare)
    out = ['<h2 id="pareto-front">Pareto front of the transfer search</h2>',
           f"<p>Objectives: {e(', '.join(objs))} (search.transfer; each computed on the architecture's runs by the "
           "analysis above, definitions in <code>docs/leaderboard.md</code>). <code>front</code>: no other architecture "
           "is at least as good in every objective and better in one.</p>"]
    if df.empty:
        out.append("<p>No architecture has every objective defined yet.</p>")
    else:
        head = ["front", "outer trial", *_short_keys(keys), *objs, "transfers"]
        text, nums = [], []
        for r in df.to_dict("records"):
            vals = [r.get(k) for k in keys] + [r[o] for o in objs]
            text.append(["yes" if r["front"] else "", fmt_value(r.get("outer_trial")), *[_num(v) for v in vals],
                         str(r.get("transfers", ""))])
            nums.append([None, _float(r.get("outer_trial")), *[_float(v) for v in vals], None])
        out.append(html_table("pareto", head, text, nums))
    if png is not None:
        out.append(figure_html(CAPTION, png))
    return "\n".join(out)


def _float(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        return None
    f = float(v)
    return f if math.isfinite(f) else None


def pareto_csv(a: Analysis, spec: Spec) -> str:
    return pareto_table(a, spec).to_csv(index=False)


def _num(v) -> str:
    if isinstance(v, (int, float, np.floating)) and not isinstance(v, bool):
        f = float(v)
        return f"{f:.4g}" if math.isfinite(f) else "–"
    return fmt_value(v)


def pareto_plot(a: Analysis, spec: Spec) -> bytes | None:
    """The first two objectives against each other (front joined, points labelled by outer trial); with one
    objective, the objective against the outer trial number (search progress). None without points."""
    df = pareto_table(a, spec)
    if df.empty:
        return None
    assert spec.search.transfer is not None, "a Pareto front is a transfer search's"
    objs = list(spec.search.transfer.objectives)
    fig, (ax,) = _figure(1, 5.6, 4.2, extra_h=0.7)
    rest, front = df[~df["front"]], df[df["front"]]
    if len(objs) >= 2:
        x, y = objs[0], objs[1]
        ax.scatter(rest[x], rest[y], s=22, color="0.6", label="dominated")
        f = front.sort_values(x)
        ax.plot(f[x], f[y], "-o", color="tab:red", ms=6, lw=1.2, label="Pareto front")
        ax.set_xlabel(x)
        ax.set_ylabel(y)
    else:
        x, y = "outer_trial", objs[0]
        ax.scatter(rest[x], rest[y], s=22, color="0.6", label="other architectures")
        ax.scatter(front[x], front[y], s=40, color="tab:red", label="best")
        ax.set_xlabel("outer trial")
        ax.set_ylabel(y)
    for r in front.to_dict("records"):  # the outer trial's number; its values are in the table
        note = ax.annotate(_plain(f"#{fmt_value(r.get('outer_trial'))}"), (r[x], r[y]), fontsize=7,
                           xytext=(3, 3), textcoords="offset points")
        note.set_in_layout(False)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.suptitle(_wrap(f"{spec.name}: {len(df)} architectures, {int(df['front'].sum())} on the front", 5.3, 10), fontsize=10)
    return _png(fig)
