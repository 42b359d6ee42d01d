"""The leaderboard as one self-contained HTML page: the sortable table (its script and style are the
package files ``assets/table.js`` and ``assets/table.css``), the provenance, the plots as data: URLs
and the per-cell table. A Content-Security-Policy allows only the page's own script (by hash),
inline styles and ``data:`` images, so the page loads nothing from the network."""
from __future__ import annotations

import base64
import hashlib
import html
import math
from collections.abc import Mapping, Sequence
from functools import cache
from importlib import resources

from nas_stab.analysis.table import Analysis
from nas_stab.results.tables import (
    DEFINITIONS,
    Provenance,
    bracketed,
    cells_table,
    display_table,
    report_lines,
    settings_items,
    summary,
    title,
    verdict_meaning,
)

__all__ = ["figure_html", "html_table", "to_html"]


@cache
def _asset(name: str) -> str:
    """A file of ``nas_stab/results/assets`` (package data: installed with the package)."""
    return resources.files("nas_stab.results").joinpath("assets", name).read_text(encoding="utf-8")

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

def html_table(table_id: str, headers: list[str], text: list[list[str]], keys: list[list[float | None]]) -> str:
    """A sortable table (the page's script sorts every ``table.sortable``): `keys` are the numbers to sort
    by (None: text), per cell."""
    return _html_table(table_id, headers, text, keys)


def figure_html(caption: str, png: bytes) -> str:
    """One plot as a figure with its PNG as a data: URL (the page's CSP allows only those)."""
    e = html.escape
    b64 = base64.b64encode(png).decode("ascii")
    return f'<figure><img alt="{e(caption)}" src="data:image/png;base64,{b64}"><figcaption>{e(caption)}</figcaption></figure>'


def to_html(a: Analysis, provenance: Provenance, *, plots: Mapping[str, bytes] | None = None,
            sections: Sequence[str] = ()) -> str:
    """A self-contained page: sortable leaderboard (click a header, or open with
    ``?sort=<column>&desc=1``; ``?click=<column>`` clicks a header on load, once per
    repetition), `sections` (HTML fragments, e.g. a transfer search's Pareto front),
    provenance, the plots as base64 PNGs ({caption: png bytes}) and the per-cell table."""
    e = html.escape
    script = "\n" + _asset("table.js")
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    csp = f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{digest}'"
    headers, text, keys = display_table(a)
    c_headers, c_text, c_keys = cells_table(a)
    prov = dict(provenance)
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{e(csp)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{e(title(provenance))}</title>",
        f"<style>\n{_asset('table.css')}</style>",
        "</head><body>",
        f"<h1>{e(title(provenance))}</h1>",
    ]
    if prov.get("description"):
        out.append(f'<p class="description">{e(prov["description"])}</p>')
    out.append(f'<p class="summary"><strong>Summary</strong>: {e(summary(a))}</p>')
    out += [f"<p><strong>{e(name)}</strong>: {e(line)}</p>" for name, line in report_lines(a)]
    out.append(_html_table("leaderboard", headers, text, keys))
    out.append(f"<p>Columns are defined in <code>{e(DEFINITIONS)}</code> (in the nas_stab repository): "
               f"<code>transfers</code> is yes / no / inconclusive and <code>why</code> gives the reason ({e(verdict_meaning(a))}); "
               "<code>&lt;=</code> / <code>&gt;=</code> in <code>best_lr(s)</code> mark an optimum censored at the grid's end; "
               + ("after a bracket search, <code>(limit)</code>, <code>(wall)</code> or <code>(unfinished)</code> says why a "
                  "sweep stopped there; " if bracketed(a) else "") +
               "intervals are 90% seed bootstraps (each size's seeds, paired across its lrs), widened for few seeds. Click a column header to sort.</p>")
    out.extend(sections)
    out.append('<h2>Provenance</h2><table class="provenance"><tbody>')
    for k, v in list(provenance) + settings_items(a):
        out.append(f'<tr><th scope="row">{e(k)}</th><td>{e(v)}</td></tr>')
    out.append("</tbody></table>")
    if plots:
        out.append("<h2>Plots</h2>")
        for cap, png in plots.items():
            out.append(figure_html(cap, png))
    out.append("<details><summary>Per-cell table (row label x size x learning rate)</summary>")
    out.append(_html_table("cells", c_headers, c_text, c_keys))
    out.append("</details>")
    out.append(f"<script>{script}</script>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
