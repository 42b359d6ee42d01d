"""Render an `Analysis` as Markdown, CSV, LaTeX (booktabs) or a self-contained HTML page (`render`).

Every table carries its provenance and says where its columns are defined
(``docs/leaderboard.md``). The provenance is passed in as ordered
``(field, value)`` pairs (see `nas_stab.results.provenance.provenance`); the
settings of the analysis (metric, no-learning value, notes) are appended here.
The display text every format shares is built in `tables.py`; the HTML page is
`html_page.py`.

Escaping: every user-supplied string (run names, descriptions, keys, values)
goes through `html.escape` in HTML, `escape_latex` in LaTeX and `escape_md` in
Markdown, and every CSV cell through `csvsafe.escape_frame`.
"""
from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence
from typing import Any

from nas_stab.analysis.edges import edges
from nas_stab.analysis.table import Analysis
from nas_stab.analysis.values import fmt_value
from nas_stab.csvsafe import escape_frame  # no spreadsheet formula from a value
from nas_stab.results.html_page import to_html
from nas_stab.results.tables import (
    DEFINITIONS,
    Provenance,
    best_lrs,
    bracketed,
    display_table,
    report_lines,
    settings_items,
    summary,
    title,
    verdict_meaning,
)

__all__ = [
    "FORMATS",
    "display_table",
    "escape_latex",
    "escape_md",
    "render",
    "settings_items",
    "provenance_text",
    "summary",
    "to_cells_csv",
    "to_sizes_csv",
    "to_edges_csv",
    "to_csv",
    "to_html",
    "to_latex",
    "to_markdown",
]

FORMATS = ("md", "csv", "tex", "html")


# ---------------------------------------------------------------- helpers


def escape_md(s: Any) -> str:
    """Text safe inside a Markdown table cell: no pipes, newlines or raw HTML."""
    t = " ".join(str(s).split())
    for ch in ("\\", "|", "<", ">", "`", "[", "]"):
        t = t.replace(ch, "\\" + ch)
    return t


_LATEX = {
    "\\": r"\textbackslash{}",
    "&": r"\&",
    "%": r"\%",
    "$": r"\$",
    "#": r"\#",
    "_": r"\_",
    "{": r"\{",
    "}": r"\}",
    "~": r"\textasciitilde{}",
    "^": r"\textasciicircum{}",
    "<": r"\textless{}",
    ">": r"\textgreater{}",
    "|": r"\textbar{}",
}


def escape_latex(s: Any) -> str:
    """Text safe in LaTeX: the ten special characters (and < > |) escaped, whitespace folded."""
    return "".join(_LATEX.get(ch, ch) for ch in " ".join(str(s).split()))


# ---------------------------------------------------------------- Markdown


def to_markdown(a: Analysis, provenance: Provenance, *, plots: Mapping[str, str] | None = None) -> str:
    """A Markdown page: title, table, provenance list, and links to `plots` ({caption: relative path})."""
    headers, text, _ = display_table(a)
    out = [f"# {escape_md(title(provenance))}", ""]
    desc = dict(provenance).get("description")
    if desc:
        out += [escape_md(desc), ""]
    out += [f"**Summary**: {escape_md(summary(a))}", ""]
    for name, line in report_lines(a):
        out += [f"**{name}**: {escape_md(line)}", ""]
    out.append("| " + " | ".join(escape_md(h) for h in headers) + " |")
    out.append("|" + "|".join("---:" if _is_num_col(text, i) else "---" for i in range(len(headers))) + "|")
    for row in text:
        out.append("| " + " | ".join(escape_md(c) for c in row) + " |")
    out += ["", f"Columns are defined in `{DEFINITIONS}` (in the nas_stab repository): `transfers` is yes / no / "
            f"inconclusive and `why` gives the reason ({verdict_meaning(a)}); `<=` / `>=` in `best_lr(s)` mark an optimum censored at the "
            "grid's end" + ("; after a bracket search, `(limit)`, `(wall)` or `(unfinished)` says why a sweep stopped "
                            "there" if bracketed(a) else "") + "; intervals are 90% seed bootstraps (each size's seeds, paired across "
            "its lrs), widened for few seeds.", ""]
    out += ["## Provenance", ""]
    out += [f"- **{escape_md(k)}**: {escape_md(v)}" for k, v in list(provenance) + settings_items(a)]
    if plots:
        out += ["", "## Plots", ""]
        for cap, path in plots.items():
            out.append(f"![{escape_md(cap)}]({path.replace(' ', '%20')})")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- CSV


def provenance_text(a: Analysis, provenance: Provenance) -> str:
    """The provenance and settings of a CSV table, one ``field: value`` line each (the sidecar
    ``leaderboard_provenance.txt``: the CSV files themselves stay plain)."""
    return "".join(f"{k}: {' '.join(str(v).split())}\n" for k, v in list(provenance) + settings_items(a))


CSV_COLUMNS = [
    "rank", "label", "transfers", "why", "transfer_regret", "transfer_regret_lo", "transfer_regret_hi",
    "worst_regret", "worst_regret_lo", "worst_regret_hi", "transfer_score", "transfer_score_lo", "transfer_score_hi",
    "regret_sizes", "spread", "best_lr(s)", "lr_drift",
    "lr_drift_lo", "lr_drift_hi", "lr_slope", "lr_slope_lo", "lr_slope_hi", "lr_sensitivity", "grid_step",
    "stable_octaves", "stable_lr_min", "stable_lr_max", "best", "best_std", "best_n", "best_size", "best_lr",
    "reference_size", "sizes", "seeds", "runs", "diverged", "stuck", "pruned", "m0", "margin",
    "epsilon", "transfer_worst", "transfer_worst_lo", "transfer_worst_hi", "min_seeds", "largest_diverged", "largest_window",
    "plateaus", "best_report", "best_report_std", "best_report_n",  # appended (issue 38): readers that index columns keep working
    "seeds_stop",  # adaptive seeds only
]


def to_csv(a: Analysis, provenance: Provenance | None = None) -> str:
    """The leaderboard rows with raw numbers, as a plain CSV (``pandas.read_csv(path)`` loads it);
    the provenance goes to the sidecar written by `provenance_text`."""
    st = a.settings
    rows = a.rows.copy()
    sized = st.transfer_key is not None
    rows["best_lr(s)"] = [best_lrs(r, sized, sep=";", lr_fmt=lambda lr: f"{lr:.6g}") for r in a.rows.to_dict("records")]
    cols = CSV_COLUMNS[:2] + list(st.compare) + CSV_COLUMNS[2:]
    df = rows[[c for c in dict.fromkeys(cols) if c in rows.columns]].copy()
    for c in ("best_size", "reference_size", *st.compare):
        if c in df.columns:
            df[c] = df[c].map(fmt_value)
    if "best_size" in df.columns:  # no run of the row counted: no best configuration (not the value null)
        df.loc[a.rows["best_lr"].isna().to_numpy(), "best_size"] = ""
    buf = io.StringIO()
    escape_frame(df).to_csv(buf, index=False, quoting=csv.QUOTE_MINIMAL, lineterminator="\n")
    return buf.getvalue()


def to_cells_csv(a: Analysis, provenance: Provenance | None = None) -> str:
    """The per-cell table (row label x size x lr: mean, std, n, diverged ...), plain CSV."""
    st = a.settings
    df = a.cells.drop(columns=[c for c in a.cells.columns if c.startswith("_")]).copy()
    df = df.rename(columns={"size": st.transfer_key or "size", "lr": st.lr_key})
    for c in (st.transfer_key or "size", *st.compare):
        df[c] = df[c].map(fmt_value)
    front = ["label", *st.compare, st.transfer_key or "size", st.lr_key]
    df = df[list(dict.fromkeys(front + list(df.columns)))]
    buf = io.StringIO()
    escape_frame(df).to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


def to_sizes_csv(a: Analysis) -> str:
    """Per row label and size: the fitted optimum x*(s) = log2(best_lr), its interval, censoring, trains."""
    st = a.settings
    df = a.sizes.drop(columns=[c for c in a.sizes.columns if c.startswith("_")]).copy()
    df = df.rename(columns={"size": st.transfer_key or "size"})
    for c in (st.transfer_key or "size", *st.compare):
        if c in df.columns:
            df[c] = df[c].map(fmt_value)
    front = ["label", *st.compare, st.transfer_key or "size"]
    df = df[list(dict.fromkeys(front + list(df.columns)))]
    buf = io.StringIO()
    escape_frame(df).to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


def to_edges_csv(a: Analysis) -> str:
    """Per row label and size: the recorded stability metrics at its best lr and at the lr where its runs
    start to diverge (`analysis.edges`)."""
    st = a.settings
    df = edges(a).rename(columns={"size": st.transfer_key or "size", "lr": st.lr_key})
    if st.transfer_key:
        df[st.transfer_key] = df[st.transfer_key].map(fmt_value)
    else:
        df = df.drop(columns=["size"])
    buf = io.StringIO()
    escape_frame(df).to_csv(buf, index=False, lineterminator="\n", float_format="%.6g")
    return buf.getvalue()


# ---------------------------------------------------------------- LaTeX


def to_latex(a: Analysis, provenance: Provenance) -> str:
    """A booktabs ``table`` (needs ``\\usepackage{booktabs}``); provenance in a footnote-size
    paragraph under the table and as ``%`` comments."""
    headers, text, _ = display_table(a)
    # a page holds only the verdict and its main numbers; every column stays in CSV and HTML
    drop = {"regret CI", "worst_regret", "epsilon", "at transfer (worst size)", "spread", "lr_drift CI", "lr_slope CI", "lr_sensitivity", "stable_octaves",
            "best at", "diverged", "stuck", "pruned"}
    keep = [i for i, h in enumerate(headers) if h not in drop]
    align = "".join("l" if headers[i] in ("transfers", "best_lr(s)") or not _is_num_col(text, i) else "r" for i in keep)
    lines = [f"% {escape_latex(k)}: {escape_latex(v)}" for k, v in provenance]
    name = dict(provenance).get("spec", "run").split(" ")[0]
    lines += [
        r"\begin{table}[ht]",
        r"\centering",
        r"\small",
        rf"\caption{{{escape_latex(title(provenance))}}}",
        rf"\label{{tab:{''.join(c if c.isalnum() or c in '-_' else '-' for c in name)}}}",
        rf"\begin{{tabular}}{{{align}}}",
        r"\toprule",
        " & ".join(escape_latex(headers[i]) for i in keep) + r" \\",
        r"\midrule",
    ]
    for row in text:
        cells = [escape_latex(row[i]).replace("±", r"$\pm$") for i in keep]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", r"\par\smallskip", r"\footnotesize"]
    lines.append(f"Columns defined in {escape_latex(DEFINITIONS)}; " + "; ".join(
        f"{escape_latex(k)}: {escape_latex(v)}" for k, v in list(provenance) + settings_items(a)) + ".")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def _is_num_col(text: list[list[str]], i: int) -> bool:
    for row in text:
        try:
            float(row[i].replace("%", "").split(" ")[0])
        except ValueError:
            if row[i] != "–":
                return False
    return True


# ---------------------------------------------------------------- dispatch


def render(fmt: str, a: Analysis, provenance: Provenance, *, plots_png: Mapping[str, bytes] | None = None,
           plots_paths: Mapping[str, str] | None = None, html_sections: Sequence[str] = ()) -> str:
    """Render one of `FORMATS` (`html_sections`: HTML fragments placed before the page's provenance)."""
    if fmt == "md":
        return to_markdown(a, provenance, plots=plots_paths)
    if fmt == "csv":
        return to_csv(a, provenance)
    if fmt == "tex":
        return to_latex(a, provenance)
    if fmt == "html":
        return to_html(a, provenance, plots=plots_png, sections=html_sections)
    raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
