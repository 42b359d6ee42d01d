"""Render an `Analysis` as Markdown, CSV, LaTeX (booktabs) or a self-contained HTML page.

Every table carries its provenance and says where its columns are defined
(``docs/leaderboard.md``). The provenance is passed in as ordered
``(field, value)`` pairs (see `nas_stab.results.leaderboard.provenance`); the
settings of the analysis (metric, worst value, notes) are appended here.

Escaping: every user-supplied string (run names, descriptions, keys, values)
goes through `html.escape` in HTML, `escape_latex` in LaTeX and `escape_md` in
Markdown. The HTML page also carries a Content-Security-Policy that allows
only its own inline script (by hash), inline styles and ``data:`` images, so
it loads nothing from the network.
"""
from __future__ import annotations

import base64
import csv
import hashlib
import html
import io
import math
from typing import Any, Mapping, Sequence

import pandas as pd

from nas_stab.results.analysis import Analysis
from nas_stab.results.values import fmt_value
from nas_stab.results.csvsafe import escape_frame  # no spreadsheet formula from a value

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
    "to_csv",
    "to_html",
    "to_latex",
    "to_markdown",
]

FORMATS = ("md", "csv", "tex", "html")
DEFINITIONS = "docs/leaderboard.md"

Provenance = Sequence[tuple[str, str]]


# ---------------------------------------------------------------- helpers


def _num(x: Any, digits: int = 4) -> str:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    if math.isnan(f):
        return "–"
    if math.isinf(f):
        return "inf" if f > 0 else "-inf"
    return f"{f:.{digits}g}"


def _oct(x: Any) -> str:
    try:
        f = float(x)
    except (TypeError, ValueError):
        return str(x)
    return "–" if math.isnan(f) else f"{f:.2f}"


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


def settings_items(a: Analysis) -> list[tuple[str, str]]:
    """The analysis settings as provenance-style pairs."""
    st = a.settings
    better = "above" if st.direction == "maximize" else "below"
    items = [
        ("metric", f"{st.metric} ({st.direction}); no-learning value m0 = {_num(st.m0)} ({st.m0_source}): diverged, "
                   f"pruned, failed and non-finite runs count as m0 and worse values are clamped to it; a cell trains "
                   f"when its seed-mean is {better} m0 by more than {_num(st.margin)}"),
        ("learning rate", st.lr_key),
        ("size axis", st.transfer_key or "none (one size)"),
        ("rows", ", ".join(st.compare) or "one row"),
        ("reference size", fmt_value(st.reference) if st.reference is not None else "smallest"),
        ("tolerance", f"{_num(st.tolerance)} octave(s): 'yes' needs the whole lr_drift interval within it"),
        ("intervals", f"{int(round(st.ci * 100))}% paired bootstrap over seeds, {st.n_boot} replicates, seed {st.boot_seed}"),
        ("definitions", DEFINITIONS),
    ]
    items += [("note", n) for n in st.notes]
    return items


def summary(a: Analysis) -> str:
    """One line for an index of leaderboards: which rows transfer, which do not, which cannot tell, and the best row.

    Example: ``"val_acc, 3 rows: transfers: stam (drift 0.00 oct, regret 0); does not: sum (size 16: no lr
    trains); inconclusive: avg (2 seeds); best: avg 0.872"``
    """
    st = a.settings
    parts: dict[str, list[str]] = {"yes": [], "no": [], "inconclusive": []}
    for r in a.rows.to_dict("records"):
        if r["transfers"] == "yes":
            parts["yes"].append(f"{r['label']} (drift {_oct(r['lr_drift'])} oct, regret {_num(r['transfer_regret'], 2)})")
        else:
            parts.setdefault(r["transfers"], []).append(f"{r['label']} ({r['why']})")
    out = [f"{st.metric}, {len(a.rows)} row{'s' if len(a.rows) != 1 else ''}"]
    if parts["yes"]:
        out.append("transfers: " + ", ".join(parts["yes"]))
    if parts["no"]:
        out.append("does not: " + ", ".join(parts["no"]))
    if parts["inconclusive"]:
        out.append("inconclusive: " + ", ".join(parts["inconclusive"]))
    if len(a.rows):
        sign = 1 if st.direction == "maximize" else -1
        top = a.rows.loc[(sign * a.rows["best"]).idxmax()]
        out.append(f"best: {top['label']} {_num(top['best'])}")
    return "; ".join(out)


def _no_best(r: Mapping[str, Any]) -> dict[str, str]:
    """{size text: "diverged" or "no lr trains"} for the sizes of a row that have no optimum."""
    return {fmt_value(s): why for s, why in (r.get("no_best_lr") or ())}


def _best_lrs(r: Mapping[str, Any], sized: bool, sep: str = " ", lr_fmt=None) -> str:
    """best_lr(s) per size, with ``<=`` / ``>=`` when censored at the grid's end (``=`` when only one lr
    was tried); a size where no lr trains shows "diverged" or "no lr trains", never a learning rate."""
    no_best = _no_best(r)
    cens = {fmt_value(s): c for s, c in (r.get("censored") or ())}
    parts = []
    for s, lr in r["best_lrs"]:
        key = fmt_value(s)
        try:
            missing = math.isnan(float(lr))
        except (TypeError, ValueError):
            missing = True
        if missing:
            text = no_best.get(key, "n/a")
        else:
            text = cens.get(key, "").replace("=", "=", 1) + (lr_fmt(lr) if lr_fmt is not None else _num(lr, 3))
        parts.append(f"{key}:{text}" if sized else text)
    return sep.join(parts)


def _ci(lo: Any, hi: Any, fmt=None) -> str:
    fmt = fmt or _oct
    a, b = fmt(lo), fmt(hi)
    return "–" if a == "–" and b == "–" else f"{a}–{b}"


def _best_at(r: Mapping[str, Any], st) -> str:
    """The configuration of `best`; "diverged" / "n/a" when no run of the row counted."""
    try:
        missing = math.isnan(float(r["best_lr"]))
    except (TypeError, ValueError):
        missing = True
    if missing:
        whys = set(_no_best(r).values())
        return "diverged" if whys == {"diverged"} else "no run counted"
    sized = st.transfer_key is not None
    return (f"{st.transfer_key}={fmt_value(r['best_size'])}, " if sized else "") + f"lr={_num(r['best_lr'], 3)}"


def display_table(a: Analysis) -> tuple[list[str], list[list[str]], list[list[float | None]]]:
    """Headers, display strings and sort keys (numbers or None) of the leaderboard rows."""
    st = a.settings
    sized = st.transfer_key is not None
    headers = ["rank"] + (list(st.compare) or ["row"]) + [
        "transfers", "why", "transfer_regret", "regret CI", "worst_regret", "spread", "lr_drift", "lr_drift CI",
        "lr_slope", "lr_slope CI", "best_lr(s)", "lr_sensitivity", "stable_octaves", f"best {st.metric}", "best at",
        "seeds", "diverged",
    ]
    text: list[list[str]] = []
    keys: list[list[float | None]] = []
    for r in a.rows.to_dict("records"):
        labels = [fmt_value(r[k]) for k in st.compare] or [r["label"]]
        best = _num(r["best"])
        if r["best_n"] > 1 and not pd.isna(r["best_std"]):
            best += f" ± {_num(r['best_std'], 2)}"
        at = _best_at(r, st)
        num3 = lambda v: _num(v, 3)  # noqa: E731
        text.append(
            [str(r["rank"])] + labels + [
                r["transfers"], r["why"], _num(r["transfer_regret"], 3),
                _ci(r["transfer_regret_lo"], r["transfer_regret_hi"], num3), _num(r["worst_regret"], 3),
                _num(r["spread"], 3), _oct(r["lr_drift"]), _ci(r["lr_drift_lo"], r["lr_drift_hi"]), _oct(r["lr_slope"]),
                _ci(r["lr_slope_lo"], r["lr_slope_hi"]), _best_lrs(r, sized), _num(r["lr_sensitivity"], 3),
                _oct(r["stable_octaves"]), best, at, str(int(r["seeds"])), f"{100 * r['diverged']:.0f}%",
            ]
        )
        keys.append(
            [float(r["rank"])] + [None] * len(labels) + [
                None, None, r["transfer_regret"], r["transfer_regret_lo"], r["worst_regret"], r["spread"], r["lr_drift"],
                r["lr_drift_lo"], r["lr_slope"], r["lr_slope_lo"], None, r["lr_sensitivity"], r["stable_octaves"],
                r["best"], None, float(r["seeds"]), r["diverged"],
            ]
        )
    return headers, text, keys


def _cells_table(a: Analysis) -> tuple[list[str], list[list[str]], list[list[float | None]]]:
    st = a.settings
    headers = (list(st.compare) or ["row"]) + ([st.transfer_key] if st.transfer_key else []) + [
        st.lr_key, "log2(lr)", "mean", "std", "n", "runs", "diverged", "pruned", "failed",
    ]
    text, keys = [], []
    for r in a.cells.to_dict("records"):
        labels = [fmt_value(r[k]) for k in st.compare] or [r["label"]]
        size = [fmt_value(r["size"])] if st.transfer_key else []
        text.append(labels + size + [
            _num(r["lr"], 4), f"{math.log2(r['lr']):.2f}", _num(r["mean"]), _num(r["std"], 3), str(r["n"]),
            str(r["n_runs"]), str(r["n_diverged"]), str(r["n_pruned"]), str(r["n_failed"]),
        ])
        nums = [r["size"]] if st.transfer_key and isinstance(r["size"], (int, float)) else [None] * len(size)
        keys.append([None] * len(labels) + nums + [
            r["lr"], math.log2(r["lr"]), r["mean"], r["std"], r["n"], r["n_runs"], r["n_diverged"], r["n_pruned"], r["n_failed"],
        ])
    return headers, text, keys


def _title(prov: Provenance) -> str:
    d = dict(prov)
    return f"LR-transfer leaderboard: {d.get('spec', 'nas_stab run')}"


# ---------------------------------------------------------------- Markdown


def to_markdown(a: Analysis, provenance: Provenance, *, plots: Mapping[str, str] | None = None) -> str:
    """A Markdown page: title, table, provenance list, and links to `plots` ({caption: relative path})."""
    headers, text, _ = display_table(a)
    out = [f"# {escape_md(_title(provenance))}", ""]
    desc = dict(provenance).get("description")
    if desc:
        out += [escape_md(desc), ""]
    out += [f"**Summary**: {escape_md(summary(a))}", ""]
    out.append("| " + " | ".join(escape_md(h) for h in headers) + " |")
    out.append("|" + "|".join("---:" if _is_num_col(text, i) else "---" for i in range(len(headers))) + "|")
    for row in text:
        out.append("| " + " | ".join(escape_md(c) for c in row) + " |")
    out += ["", f"Columns are defined in `{DEFINITIONS}` (in the nas_stab repository): `transfers` is yes / no / "
            "inconclusive and `why` gives the reason; `<=` / `>=` in `best_lr(s)` mark an optimum censored at the "
            "grid's end; intervals are 90% paired bootstraps over seeds.", ""]
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
    "worst_regret", "worst_regret_lo", "worst_regret_hi", "regret_sizes", "spread", "best_lr(s)", "lr_drift",
    "lr_drift_lo", "lr_drift_hi", "lr_slope", "lr_slope_lo", "lr_slope_hi", "lr_sensitivity", "grid_step",
    "stable_octaves", "stable_lr_min", "stable_lr_max", "best", "best_std", "best_n", "best_size", "best_lr",
    "reference_size", "sizes", "seeds", "runs", "diverged", "m0", "margin",
]


def to_csv(a: Analysis, provenance: Provenance | None = None) -> str:
    """The leaderboard rows with raw numbers, as a plain CSV (``pandas.read_csv(path)`` loads it);
    the provenance goes to the sidecar written by `provenance_text`."""
    st = a.settings
    rows = a.rows.copy()
    sized = st.transfer_key is not None
    rows["best_lr(s)"] = [_best_lrs(r, sized, sep=";", lr_fmt=lambda lr: f"{lr:.6g}") for r in a.rows.to_dict("records")]
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


# ---------------------------------------------------------------- LaTeX


def to_latex(a: Analysis, provenance: Provenance) -> str:
    """A booktabs ``table`` (needs ``\\usepackage{booktabs}``); provenance in a footnote-size
    paragraph under the table and as ``%`` comments."""
    headers, text, _ = display_table(a)
    # a page holds only the verdict and its main numbers; every column stays in CSV and HTML
    drop = {"regret CI", "worst_regret", "spread", "lr_drift CI", "lr_slope CI", "lr_sensitivity", "stable_octaves",
            "best at", "diverged"}
    keep = [i for i, h in enumerate(headers) if h not in drop]
    align = "".join("l" if headers[i] in ("transfers", "best_lr(s)") or not _is_num_col(text, i) else "r" for i in keep)
    lines = [f"% {escape_latex(k)}: {escape_latex(v)}" for k, v in provenance]
    name = dict(provenance).get("spec", "run").split(" ")[0]
    lines += [
        r"\begin{table}[ht]",
        r"\centering",
        r"\small",
        rf"\caption{{{escape_latex(_title(provenance))}}}",
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


# ---------------------------------------------------------------- HTML

_SCRIPT = """
(function () {
  function key(td, numeric) {
    var v = td.getAttribute('data-value');
    if (numeric) { var f = parseFloat(v); return isNaN(f) ? null : f; }
    return td.textContent;
  }
  function sortTable(table, col, desc) {
    var ths = table.tHead.rows[0].cells, idx = -1;
    for (var i = 0; i < ths.length; i++) {
      if (ths[i].getAttribute('data-col') === col) { idx = i; }
      ths[i].removeAttribute('aria-sort');
    }
    if (idx < 0) { return false; }
    var numeric = ths[idx].getAttribute('data-type') === 'num';
    var body = table.tBodies[0], rows = Array.prototype.slice.call(body.rows);
    rows.forEach(function (r, i) { r._pos = i; });
    rows.sort(function (a, b) {
      var x = key(a.cells[idx], numeric), y = key(b.cells[idx], numeric);
      if (x === null && y === null) { return a._pos - b._pos; }
      if (x === null) { return 1; }
      if (y === null) { return -1; }
      var c = numeric ? x - y : x.localeCompare(y);
      if (desc) { c = -c; }
      return c !== 0 ? c : a._pos - b._pos;
    });
    rows.forEach(function (r) { body.appendChild(r); });
    ths[idx].setAttribute('aria-sort', desc ? 'descending' : 'ascending');
    table.setAttribute('data-sorted-by', col + (desc ? ':desc' : ':asc'));
    return true;
  }
  var tables = document.querySelectorAll('table.sortable');
  Array.prototype.forEach.call(tables, function (table) {
    Array.prototype.forEach.call(table.tHead.rows[0].cells, function (th) {
      th.addEventListener('click', function () {
        var desc = th.getAttribute('aria-sort') === 'ascending';
        sortTable(table, th.getAttribute('data-col'), desc);
      });
    });
  });
  var q = new URLSearchParams(window.location.search), main = document.getElementById('leaderboard');
  if (main && q.get('sort')) { sortTable(main, q.get('sort'), q.get('desc') === '1'); }
  if (main) {  // ?click=<column> (repeatable) clicks a header, as a reader would
    q.getAll('click').forEach(function (col) {
      Array.prototype.forEach.call(main.tHead.rows[0].cells, function (th) {
        if (th.getAttribute('data-col') === col) { th.click(); }
      });
    });
  }
  if (main) { main.setAttribute('data-ready', '1'); }
})();
"""

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1400px; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { padding: 0.3em 0.6em; border-bottom: 1px solid #ddd; text-align: left; }
#leaderboard td { white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
thead th { border-bottom: 2px solid #444; }
table.sortable th { cursor: pointer; user-select: none; }
th[aria-sort=ascending]::after { content: " \\25B2"; }
th[aria-sort=descending]::after { content: " \\25BC"; }
table.provenance th { font-weight: 600; vertical-align: top; }
figure { margin: 1em 0; }
figure img { max-width: 100%; border: 1px solid #eee; }
.yes { color: #176317; font-weight: 600; } .no { color: #9b1c1c; } .inconclusive { color: #7a5b00; }
"""


def _html_table(table_id: str, headers: list[str], text: list[list[str]], keys: list[list[float | None]]) -> str:
    e = html.escape
    numeric = [all(k[i] is not None or t[i] in ("–", "") for k, t in zip(keys, text)) and any(k[i] is not None for k in keys) for i in range(len(headers))]
    out = [f'<table id="{e(table_id)}" class="sortable">', "<thead><tr>"]
    for h, num in zip(headers, numeric):
        out.append(f'<th data-col="{e(h)}" data-type="{"num" if num else "text"}" scope="col">{e(h)}</th>')
    out.append("</tr></thead>")
    out.append("<tbody>")
    for row, key in zip(text, keys):
        tds = []
        for c, k, num in zip(row, key, numeric):
            cls = []
            if num:
                cls.append("num")
            if c in ("yes", "no", "inconclusive"):
                cls.append(c)
            value = "" if k is None or (isinstance(k, float) and math.isnan(k)) else repr(float(k))
            attr = f' data-value="{e(value)}"' if num else f' data-value="{e(c)}"'
            tds.append(f'<td{attr}{" class=" + chr(34) + " ".join(cls) + chr(34) if cls else ""}>{e(c)}</td>')
        out.append("<tr>" + "".join(tds) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def to_html(a: Analysis, provenance: Provenance, *, plots: Mapping[str, bytes] | None = None) -> str:
    """A self-contained page: sortable leaderboard (click a header, or open with
    ``?sort=<column>&desc=1``; ``?click=<column>`` clicks a header on load, once per
    repetition), provenance, the plots as base64 PNGs ({caption: png bytes})
    and the per-cell table."""
    e = html.escape
    script = _SCRIPT
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{digest}'"
    headers, text, keys = display_table(a)
    c_headers, c_text, c_keys = _cells_table(a)
    prov = dict(provenance)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{e(csp)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(_title(provenance))}</title>",
        f"<style>{_STYLE}</style>",
        "</head><body>",
        f"<h1>{e(_title(provenance))}</h1>",
    ]
    if prov.get("description"):
        out.append(f'<p class="description">{e(prov["description"])}</p>')
    out.append(f'<p class="summary"><strong>Summary</strong>: {e(summary(a))}</p>')
    out.append(_html_table("leaderboard", headers, text, keys))
    out.append(f"<p>Columns are defined in <code>{e(DEFINITIONS)}</code> (in the nas_stab repository): "
               "<code>transfers</code> is yes / no / inconclusive and <code>why</code> gives the reason; "
               "<code>&lt;=</code> / <code>&gt;=</code> in <code>best_lr(s)</code> mark an optimum censored at the grid's end; "
               "intervals are 90% paired bootstraps over seeds. Click a column header to sort.</p>")
    out.append('<h2>Provenance</h2><table class="provenance"><tbody>')
    for k, v in list(provenance) + settings_items(a):
        out.append(f'<tr><th scope="row">{e(k)}</th><td>{e(v)}</td></tr>')
    out.append("</tbody></table>")
    if plots:
        out.append("<h2>Plots</h2>")
        for cap, png in plots.items():
            b64 = base64.b64encode(png).decode("ascii")
            out.append(f'<figure><img alt="{e(cap)}" src="data:image/png;base64,{b64}"><figcaption>{e(cap)}</figcaption></figure>')
    out.append("<details><summary>Per-cell table (row label x size x learning rate)</summary>")
    out.append(_html_table("cells", c_headers, c_text, c_keys))
    out.append("</details>")
    out.append(f"<script>{script}</script>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- dispatch


def render(fmt: str, a: Analysis, provenance: Provenance, *, plots_png: Mapping[str, bytes] | None = None,
           plots_paths: Mapping[str, str] | None = None) -> str:
    """Render one of `FORMATS`."""
    if fmt == "md":
        return to_markdown(a, provenance, plots=plots_paths)
    if fmt == "csv":
        return to_csv(a, provenance)
    if fmt == "tex":
        return to_latex(a, provenance)
    if fmt == "html":
        return to_html(a, provenance, plots=plots_png)
    raise ValueError(f"unknown format {fmt!r}; choose from {', '.join(FORMATS)}")
