"""Load the HTML leaderboard in headless Chromium and read the table back from the live DOM.

``--dump-dom`` prints the DOM after the page's scripts ran, so this checks that
the inline sort script runs under the page's Content-Security-Policy (it is
allowed by hash), that ``?sort=<column>&desc=1`` sorts the table on load, that
clicking a header sorts it (``?click=<column>`` clicks on load), and that
injected markup stays text. CI installs Chromium with
``apt-get install -y chromium`` (Debian's package, /usr/bin/chromium).
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import quote

import pytest

sys.path.insert(0, str(Path(__file__).parent / "data"))
from lb_fixtures import grid_rows, make_run, spec_dict

from nas_stab.results import build_leaderboard, load_analysis
from nas_stab.results.formats import display_table

CHROMIUM = shutil.which("chromium") or ("/usr/bin/chromium" if os.path.exists("/usr/bin/chromium") else None)
pytestmark = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian: apt-get install -y chromium; CI installs it in .ci/run)"
)
EVIL = "<script>alert(1)</script>"


class _Dom(HTMLParser):
    """Collects tables by id: attributes, header cells and body rows (text, data-value)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, dict] = {}
        self.imgs: list[dict] = []
        self.scripts = 0
        self.description: str | None = None
        self._table = None
        self._cell = None
        self._in_desc = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "script":
            self.scripts += 1
        elif tag == "img":
            self.imgs.append(a)
        elif tag == "p" and a.get("class") == "description":
            self._in_desc, self.description = True, ""
        elif tag == "table" and a.get("id"):
            self._table = self.tables[a["id"]] = {"attrs": a, "head": [], "rows": [], "th_attrs": []}
        elif self._table is not None and tag == "tr":
            self._row = []
        elif self._table is not None and tag in ("td", "th"):
            self._cell = {"tag": tag, "text": "", "attrs": a}

    def handle_data(self, data):
        if self._cell is not None:
            self._cell["text"] += data
        if self._in_desc:
            self.description += data

    def handle_endtag(self, tag):
        if tag == "p":
            self._in_desc = False
        elif tag in ("td", "th") and self._cell is not None:
            self._row.append(self._cell)
            self._cell = None
        elif tag == "tr" and self._table is not None:
            if self._row and self._row[0]["tag"] == "th":
                self._table["head"] = [c["text"] for c in self._row]
                self._table["th_attrs"] = [c["attrs"] for c in self._row]
            elif self._row:
                self._table["rows"].append(self._row)
        elif tag == "table":
            self._table = None


def _dump(page: Path, query: str, tmp: Path) -> _Dom:
    profile = tmp / f"profile-{abs(hash(query))}"
    profile.mkdir()
    url = page.resolve().as_uri() + query
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run", f"--user-data-dir={profile}",
           "--dump-dom", url]
    env = {**os.environ, "HOME": str(tmp)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0 and "<table" in proc.stdout, proc.stderr[-2000:]
    dom = _Dom()
    dom.feed(proc.stdout)
    return dom


def _rows(labels):
    t = {}
    for i, lab in enumerate(labels):
        for s in (1, 2):
            for lr in (0.1, 0.2, 0.4):
                peak = 0.2 if i % 2 == 0 or s == 1 else 0.4
                base = 0.9 - 0.05 * i - abs(lr - peak)
                t[(lab, s, lr)] = [base, base - 0.01]
    return grid_rows(t)


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    d = make_run(root, _rows(["stam", "sum", "avg", "zeta"]), spec=spec_dict("browser"))
    paths = build_leaderboard([d], formats=("html",))
    a, _, _ = load_analysis([d])
    return paths["html"], a


def test_table_reads_back(page, tmp_path):
    html_path, a = page
    dom = _dump(html_path, "", tmp_path)
    t = dom.tables["leaderboard"]
    assert t["attrs"].get("data-ready") == "1"  # the script ran under the page's CSP
    assert "data-sorted-by" not in t["attrs"]
    headers, text, _ = display_table(a)
    assert t["head"] == headers
    assert [[c["text"] for c in r] for r in t["rows"]] == text  # same table as the analysis, in rank order
    assert [r[0]["text"] for r in t["rows"]] == ["1", "2", "3", "4"]
    assert len(dom.tables["cells"]["rows"]) == len(a.cells)
    assert dom.scripts == 1


def test_sort_on_load(page, tmp_path):
    html_path, a = page
    col = f"best {a.settings.metric}"
    dom = _dump(html_path, f"?sort={quote(col)}&desc=1", tmp_path)
    t = dom.tables["leaderboard"]
    assert t["attrs"].get("data-sorted-by") == f"{col}:desc"
    i = t["head"].index(col)
    assert t["th_attrs"][i].get("aria-sort") == "descending"
    values = [float(r[i]["attrs"]["data-value"]) for r in t["rows"]]
    assert values == sorted(values, reverse=True)
    assert [r[1]["text"] for r in t["rows"]] == list(a.rows.sort_values("best", ascending=False, kind="mergesort")["label"])


def test_click_sorts(page, tmp_path):
    # the header's click handler: first click ascending, second click descending (text column)
    html_path, a = page
    dom = _dump(html_path, "?click=model.aggregation&click=model.aggregation", tmp_path)
    t = dom.tables["leaderboard"]
    assert t["attrs"].get("data-sorted-by") == "model.aggregation:desc"
    assert [r[1]["text"] for r in t["rows"]] == ["zeta", "sum", "stam", "avg"]
    col = f"best {a.settings.metric}"
    dom = _dump(html_path, f"?click={quote(col)}", tmp_path)
    t = dom.tables["leaderboard"]
    assert t["attrs"].get("data-sorted-by") == f"{col}:asc"
    assert [r[1]["text"] for r in t["rows"]] == list(a.rows.sort_values("best", kind="mergesort")["label"])


def test_injected_markup_stays_text(tmp_path):
    d = make_run(tmp_path, _rows(["sum", EVIL]), spec=spec_dict(name="evil", description=f"about {EVIL}"))  # a name cannot hold markup
    html_path = build_leaderboard([d], formats=("html",), plots=False)["html"]
    dom = _dump(html_path, "", tmp_path)
    assert dom.scripts == 1  # no element was injected
    assert dom.description == f"about {EVIL}"  # shown literally, as text
    labels = [r[1]["text"] for r in dom.tables["leaderboard"]["rows"]]
    assert EVIL in labels


def test_pareto_section_of_a_transfer_search(tmp_path):
    """A transfer search's page: the Pareto table reads back from the live DOM as written, and its plot
    (a data: URL, the only images the CSP allows) decodes in the browser."""
    from lb_fixtures import transfer_run

    from nas_stab.results.pareto import CAPTION

    d = transfer_run(tmp_path)
    html_path = build_leaderboard([d], formats=("html",))["html"]
    static = _Dom()
    static.feed(html_path.read_text())
    dom = _dump(html_path, "", tmp_path)
    assert dom.tables["leaderboard"]["attrs"].get("data-ready") == "1"  # the script ran under the CSP
    live, written = dom.tables["pareto"], static.tables["pareto"]
    assert live["head"] == written["head"] and live["head"][:2] == ["front", "outer trial"]
    assert [[c["text"] for c in r] for r in live["rows"]] == [[c["text"] for c in r] for r in written["rows"]]
    assert len(live["rows"]) == 4
    imgs = {i.get("alt"): i for i in dom.imgs}
    assert imgs[CAPTION].get("data-loaded") == "1"  # decoded: a PNG of nonzero width
    assert all(i.get("data-loaded") == "1" for i in dom.imgs)
