"""The HTML leaderboard of a transfer search (`nas-stab leaderboard RUN --format html`): its Pareto
section (text, the sortable table `pareto`, the plot embedded once as a data: URL), on a run directory
written from code (tests/data/lb_fixtures.py; no training). The browser check is in test_html_browser.py."""
from __future__ import annotations

import base64
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "data"))
from lb_fixtures import ARCHS, OBJECTIVES, make_run, transfer_run


class Page(HTMLParser):
    """Headings, tables by id (head, rows of cell texts), figures (img src/alt, caption), in document order."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.order: list[tuple[str, str]] = []  # ("h2", text) / ("table", id) / ("img", alt)
        self.tables: dict[str, dict] = {}
        self.imgs: list[dict] = []
        self.meta: list[dict] = []
        self._h2 = self._table = self._cell = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "h2":
            self._h2 = ""
        elif tag == "table" and a.get("id"):
            self._table = self.tables[a["id"]] = {"head": [], "rows": [], "attrs": a}
            self.order.append(("table", a["id"]))
        elif tag == "tr" and self._table is not None:
            self._row = []
        elif tag in ("td", "th") and self._table is not None:
            self._cell = ""
        elif tag == "img":
            self.imgs.append(a)
            self.order.append(("img", a.get("alt", "")))
        elif tag == "meta":
            self.meta.append(a)

    def handle_data(self, data):
        if self._h2 is not None:
            self._h2 += data
        if self._cell is not None:
            self._cell += data

    def handle_endtag(self, tag):
        if tag == "h2" and self._h2 is not None:
            self.order.append(("h2", self._h2))
            self._h2 = None
        elif tag in ("td", "th") and self._cell is not None:
            self._row.append((tag, self._cell))
            self._cell = None
        elif tag == "tr" and self._table is not None and self._row:
            if self._row[0][0] == "th":
                self._table["head"] = [c for _, c in self._row]
            else:
                self._table["rows"].append([c for _, c in self._row])
        elif tag == "table":
            self._table = None


def front_of(points: dict) -> set:
    """The non-dominated keys of {key: (objective values, larger better)}, by definition."""
    return {k for k, v in points.items()
            if not any(all(b >= a for a, b in zip(v, w)) and any(b > a for a, b in zip(v, w)) for w in points.values())}


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from nas_stab.results.leaderboard import build_leaderboard, load_analysis

    d = transfer_run(tmp_path_factory.mktemp("runs"))
    written = build_leaderboard([d], formats=("html", "md", "csv"))
    a, _, _ = load_analysis([d])
    page = Page()
    page.feed(written["html"].read_text())
    return d, written, a, page


def test_the_html_page_has_the_pareto_table(built):
    import pandas as pd

    d, written, a, page = built
    t = page.tables["pareto"]
    assert t["head"] == ["front", "outer trial", "aggregation_exponent", *OBJECTIVES, "transfers"]
    got = {int(r[1]): r for r in t["rows"]}
    assert sorted(got) == [0, 1, 2, 3]  # every architecture, by its outer trial
    # the front, computed here from the leaderboard rows (both objectives maximized)
    rows = a.rows.set_index(a.rows["model.aggregation_exponent"].astype(float).round(6))
    points = {n: tuple(float(rows.loc[p, o]) for o in OBJECTIVES) for n, (p, _, _) in enumerate(ARCHS)}
    front = front_of(points)
    assert 1 < len(front) < len(ARCHS)  # the fixture has a real trade-off
    assert {n for n, r in got.items() if r[0] == "yes"} == front
    for n, r in got.items():
        assert float(r[3]) == pytest.approx(points[n][0], abs=6e-5) and float(r[4]) == pytest.approx(points[n][1], abs=6e-5)
    csv = pd.read_csv(d / "pareto.csv")  # the same front as pareto.csv
    assert set(csv.loc[csv["front"], "outer_trial"]) == front
    # the page's table is sortable like the leaderboard's (the page's one script handles every table.sortable)
    assert "sortable" in t["attrs"]["class"].split()


def test_the_html_page_embeds_the_pareto_plot_once_in_its_section(built):
    from nas_stab.results.pareto import CAPTION

    d, written, a, page = built
    png = (d / "plots" / "pareto.png").read_bytes()
    assert written["plot:pareto"] == d / "plots" / "pareto.png" and png[:4] == b"\x89PNG"
    ours = [i for i in page.imgs if i.get("alt") == CAPTION]
    assert len(ours) == 1  # embedded once (in its section, not again under Plots)
    src = ours[0]["src"]
    assert src.startswith("data:image/png;base64,")
    assert base64.b64decode(src.split(",", 1)[1]) == png  # the plot written to plots/pareto.png
    h2 = [x for kind, x in page.order if kind == "h2"]
    assert h2.index("Pareto front of the transfer search") < h2.index("Provenance")
    at = page.order.index(("h2", "Pareto front of the transfer search"))
    assert page.order[at + 1:at + 3] == [("table", "pareto"), ("img", CAPTION)]  # its table, then its plot
    assert ("img", CAPTION) not in page.order[page.order.index(("h2", "Plots")):]
    # every image is a data: URL (the page loads nothing), and the CSP still allows only those
    assert all(i["src"].startswith("data:image/png;base64,") for i in page.imgs)
    csp = next(m["content"] for m in page.meta if m.get("http-equiv") == "Content-Security-Policy")
    assert "img-src data:" in csp and "default-src 'none'" in csp
    # the Markdown page links the same file
    assert "](plots/pareto.png)" in written["md"].read_text()


def test_the_cli_writes_the_html_page(built, tmp_path, capsys):
    """`nas-stab leaderboard RUN --format html` as a user runs it."""
    import shutil

    from nas_stab.cli import main

    d = shutil.copytree(built[0], tmp_path / "copy")
    for f in list(d.glob("leaderboard*")) + list(d.glob("pareto.csv")) + list(d.glob("plots/*")):
        f.unlink()
    assert main(["leaderboard", str(d), "--format", "html"]) == 0
    page = Page()
    page.feed((d / "leaderboard.html").read_text())
    assert "pareto" in page.tables and (d / "plots" / "pareto.png").is_file()
    assert [r[1] for r in page.tables["pareto"]["rows"]] == [r[1] for r in built[3].tables["pareto"]["rows"]]


def test_a_non_transfer_page_has_no_pareto_section(tmp_path):
    from lb_fixtures import grid_rows

    from nas_stab.results.leaderboard import build_leaderboard

    t = {(lab, s, lr): [0.9 - abs(lr - 0.2), 0.89 - abs(lr - 0.2)] for lab in ("sum", "stam") for s in (1, 2)
         for lr in (0.1, 0.2, 0.4)}
    d = make_run(tmp_path, grid_rows(t))
    page = Page()
    page.feed(build_leaderboard([d], formats=("html",), plots=False)["html"].read_text())
    assert "pareto" not in page.tables
    assert "Pareto front of the transfer search" not in [x for kind, x in page.order if kind == "h2"]
