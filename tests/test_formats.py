"""Leaderboard files: every format renders with provenance; LaTeX, Markdown and HTML escaping."""
from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent / "data"))
from lb_fixtures import grid_rows, make_run, spec_dict

from nas_stab.errors import RunError, SpecError
from nas_stab.results import build_leaderboard
from nas_stab.results.formats import escape_latex, escape_md

EVIL = "<script>alert(1)</script>"
PROVENANCE_FIELDS = ("spec", "dataset", "nas_stab", "torch", "hardware", "run created", "trials", "compute")


def _rows(labels=("sum", "stam")):
    t = {}
    for lab in labels:
        for s in (1, 2):
            for lr in (0.1, 0.2, 0.4):
                base = 0.9 - abs(lr - (0.2 if lab != "sum" or s == 1 else 0.4))
                t[(lab, s, lr)] = [base, base - 0.01]
    if "sum" in labels:
        t[("sum", 2, 0.1)] = ["diverged", 0.59]
    return grid_rows(t)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    d = make_run(root, _rows())
    return d, build_leaderboard([d], formats=("md", "csv", "tex", "html"))


def test_every_format_written_with_provenance(built):
    d, paths = built
    assert {"md", "csv", "cells_csv", "sizes_csv", "provenance", "tex", "html", "plot:lr_transfer", "plot:optimum_transfer",
            "plot:divergence", "plot:fwd_norm_init", "plot:loss_curves"} <= set(paths)
    for kind, p in paths.items():
        assert p.is_file() and p.stat().st_size > 0, kind
        assert p.parent in (d, d / "plots")
    assert not list(d.glob(".*.tmp")) and not list((d / "plots").glob(".*.tmp"))  # atomic writes leave no temp file
    for kind in ("md", "provenance", "tex", "html"):  # the CSVs' provenance is in the sidecar
        text = paths[kind].read_text().replace(r"\_", "_")  # LaTeX escapes nas_stab as nas\_stab
        assert "docs/leaderboard.md" in text and "SPEC" not in text
        for f in PROVENANCE_FIELDS:
            assert f in text, (kind, f)
        assert "0123456789abcdef" in text and "d138591" in text and "2.9.0+cpu" in text
        assert "24 runs: 23 complete, 0 pruned, 1 diverged, 0 failed" in text
        assert "36.0 s" in text  # 24 runs x 1.5 s wall time
        assert "digits (train=500, val=200)" in text
    for p in (v for k, v in paths.items() if k.startswith("plot:")):
        assert p.read_bytes().startswith(b"\x89PNG")


def test_markdown_table(built):
    _, paths = built
    md = paths["md"].read_text()
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header[:3] == ["rank", "model.aggregation", "transfers"]
    for col in ("transfer_regret", "worst_regret", "lr_drift", "best_lr(s)", "stable_octaves", "best val_acc"):
        assert col in header
    body = [[c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:]]
    assert [r[1] for r in body] == ["stam", "sum"]  # both inconclusive (2 seeds); stam has regret 0, sum does not
    assert "why" in header and [r[header.index("transfers")] for r in body] == ["inconclusive", "inconclusive"]
    assert "(plots/lr_transfer.png)" in md and "(plots/optimum_transfer.png)" in md
    assert "**Summary**: val_acc, 2 rows; inconclusive: stam (2 seeds; censored at 1 (>=0.4)" not in md  # not censored
    assert "**Summary**: val_acc, 2 rows; inconclusive: stam (2 seeds" in md


def test_csv_reads_back(built):
    _, paths = built
    df = pd.read_csv(paths["csv"])  # plain: no options
    assert df["label"].tolist() == ["stam", "sum"]
    assert df.loc[0, "transfer_regret"] == pytest.approx(0.0)
    assert df.loc[0, "lr_drift"] == pytest.approx(0.0)
    assert df.loc[1, "lr_drift"] > 0.5  # sum's fitted optimum moves with the size
    assert {"why", "lr_slope", "lr_slope_lo", "lr_sensitivity", "transfer_regret_lo", "worst_regret_hi", "m0"} <= set(df.columns)
    sizes = pd.read_csv(paths["sizes_csv"])
    assert {"x_star", "x_lo", "x_hi", "censored", "trains"} <= set(sizes.columns)
    cells = pd.read_csv(paths["cells_csv"])
    assert len(cells) == 2 * 2 * 3
    assert {"label", "model.aggregation", "model.branches", "train.lr", "mean", "std", "n", "n_diverged"} <= set(cells.columns)


def test_latex_booktabs(built):
    _, paths = built
    tex = paths["tex"].read_text()
    for cmd in (r"\toprule", r"\midrule", r"\bottomrule", r"\begin{tabular}", r"\end{table}"):
        assert cmd in tex
    assert r"transfer\_regret" in tex and r"$\pm$" in tex
    # no unescaped specials outside commands: every _ and % in the body is escaped
    body = "\n".join(ln for ln in tex.splitlines() if not ln.startswith("%"))
    assert not re.search(r"(?<!\\)[_%#&]", body.replace(" & ", " ").replace(r"\\", ""))


def test_escape_latex():
    assert escape_latex(r"a_b & 50% $x$ #1 {y} ~z ^w \cmd") == (
        r"a\_b \& 50\% \$x\$ \#1 \{y\} \textasciitilde{}z \textasciicircum{}w \textbackslash{}cmd"
    )
    assert escape_latex("two\nlines") == "two lines"


def test_escape_md():
    assert escape_md("a|b <i>x</i>\nnext") == r"a\|b \<i\>x\</i\> next"


def _evil_run(root: Path) -> Path:
    # markup in the description and a row label (a run's name cannot hold any: spec.yaml is read typed,
    # and a name is [a-z0-9_-]; test_name_the_schema_refuses_is_an_error)
    spec = spec_dict(name="evil", description=f"desc {EVIL} & more")
    rows = _rows(labels=("sum", EVIL))
    return make_run(root, rows, spec=spec)


def test_html_escapes_user_strings(tmp_path):
    d = _evil_run(tmp_path)
    paths = build_leaderboard([d], formats=("html", "md", "tex", "csv"))
    page = paths["html"].read_text()
    assert EVIL not in page
    assert page.count("<script") == 1  # only the page's own sort script
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt;"
    assert page.count(escaped) >= 4  # description, row label, provenance ...
    assert f"desc {escaped} &amp; more" in page
    # the CSP allows only the page's own script, by hash, and no network
    csp = html.unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1))
    assert "default-src 'none'" in csp and "script-src 'sha256-" in csp and "unsafe-inline" not in csp.split("script-src")[1]
    assert "http://" not in page and "https://" not in page
    md = paths["md"].read_text()
    assert EVIL not in md and r"\<script\>alert(1)\</script\>" in md
    tex = paths["tex"].read_text()
    assert EVIL not in tex and r"\textless{}script\textgreater{}" in tex


def test_name_the_schema_refuses_is_an_error(tmp_path):
    """spec.yaml is read as the typed spec: a stored name with markup is refused, naming the file, line and key."""
    d = make_run(tmp_path, _rows(), spec=spec_dict(name=EVIL))
    with pytest.raises(RunError, match=r"spec\.yaml:1: name: .* must match"):
        build_leaderboard([d], formats=("html",), plots=False)


def test_one_size_one_row_one_seed(tmp_path):
    spec = spec_dict(transfer=None, compare=(), seeds=[0], space={"train.lr": [0.1, 0.3]})  # (its records search the lr only)
    d = make_run(tmp_path, grid_rows({(None, None, 0.1): [0.5], (None, None, 0.3): [0.7]}), spec=spec)
    paths = build_leaderboard([d], formats="md,html,tex,csv", out_dir=tmp_path / "out")
    md = paths["md"].read_text()
    assert "| 1 | all | inconclusive | no size axis; 1 seed" in md  # no transfer axis: nothing to transfer across
    head, row = _md_rows(md)
    assert row[head.index("lr_drift CI")] == "–"  # no interval: one dash, not "–––"
    assert (tmp_path / "out" / "plots" / "lr_transfer.png").is_file()


def test_several_runs_need_out_and_list_provenance(tmp_path):
    d1 = make_run(tmp_path, _rows(("sum",)), spec=spec_dict("a"))
    d2 = make_run(tmp_path, _rows(("stam",)), spec=spec_dict("b"))
    with pytest.raises(RunError, match="--out"):
        build_leaderboard([d1, d2], formats=("md",))
    paths = build_leaderboard([d1, d2], formats=("md",), out_dir=tmp_path / "both", plots=False)
    md = paths["md"].read_text()
    assert md.count("**run**") == 2 and "| stam |" in md and "| sum |" in md
    assert set(paths) == {"md", "sizes_csv"}  # the csv every format cites


def test_bad_input(tmp_path):
    d = make_run(tmp_path, _rows())
    with pytest.raises(SpecError, match="unknown leaderboard format 'pdf'"):
        build_leaderboard([d], formats="md,pdf")
    (d / "trials.csv").write_text("")
    with pytest.raises(RunError, match=re.escape(str(d / "trials.csv"))):
        build_leaderboard([d], formats="md")


def test_no_history_still_builds(tmp_path):
    d = make_run(tmp_path, _rows(), history=False)
    paths = build_leaderboard([d], formats=("html",))
    assert "plot:fwd_norm_init" not in paths and "plot:lr_transfer" in paths
    assert "data:image/png;base64," in paths["html"].read_text()


# ---------------------------------------------------------------- issue 7


def _dead_size_run(root: Path) -> Path:
    """Row "sum": size 4 diverged at every lr; size 2 failed or was pruned at every lr.
    Row "dead": every run diverged."""
    t = {}
    for lr in (0.1, 0.2, 0.4):
        t[("sum", 1, lr)] = [0.9 - abs(lr - 0.2), 0.89 - abs(lr - 0.2)]
        t[("sum", 2, lr)] = ["failed", "pruned"]
        t[("sum", 4, lr)] = ["diverged", "diverged"]
        for s in (1, 2):
            t[("dead", s, lr)] = ["diverged", "diverged"]
    return make_run(root, grid_rows(t), spec=spec_dict("deadsize"))


def _html_cells(page: str, table_id: str) -> tuple[list[str], list[list[str]]]:
    from html.parser import HTMLParser

    class P(HTMLParser):
        def __init__(self):
            super().__init__(convert_charrefs=True)
            self.inside, self.cell, self.head, self.rows = False, None, [], []

        def handle_starttag(self, tag, attrs):
            if tag == "table":
                self.inside = dict(attrs).get("id") == table_id
            elif self.inside and tag == "tr":
                self.row = []
            elif self.inside and tag in ("td", "th"):
                self.cell = ""

        def handle_data(self, data):
            if self.cell is not None:
                self.cell += data

        def handle_endtag(self, tag):
            if tag == "table":
                self.inside = False
            elif self.inside and tag in ("td", "th") and self.cell is not None:
                self.row.append(self.cell)
                self.cell = None
            elif self.inside and tag == "tr":
                (self.rows if self.head else self.head).extend([self.row] if self.head else self.row)

    p = P()
    p.feed(page)
    return p.head, p.rows


def test_size_without_best_lr_reads_diverged_or_na_in_every_format(tmp_path):
    d = _dead_size_run(tmp_path)
    paths = build_leaderboard([d], formats=("md", "csv", "tex", "html"), plots=False)
    want = "1:0.178 2:no lr trains 4:diverged"  # never a learning rate for a size where nothing trained
    md = paths["md"].read_text()
    rows = {r[1]: r for r in ([c.strip() for c in ln.strip("|").split("|")] for ln in md.splitlines() if ln.startswith("| "))}
    head = rows["model.aggregation"]  # the header line
    assert rows["sum"][head.index("best_lr(s)")] == want
    assert rows["dead"][head.index("best_lr(s)")] == "1:diverged 2:diverged"
    assert rows["dead"][head.index("best at")] == "diverged"  # no configuration of an all-diverged row is best
    assert rows["sum"][head.index("transfers")] == "no"
    csv = pd.read_csv(paths["csv"]).set_index("label")
    assert csv.loc["sum", "best_lr(s)"] == "1:0.17818;2:no lr trains;4:diverged"
    assert csv.loc["dead", "best_lr(s)"] == "1:diverged;2:diverged"
    assert pd.isna(csv.loc["dead", "best_lr"]) and pd.isna(csv.loc["dead", "best_size"])
    tex = paths["tex"].read_text()
    assert want in tex and "1:diverged 2:diverged" in tex
    head, body = _html_cells(paths["html"].read_text(), "leaderboard")
    by_label = {r[head.index("model.aggregation")]: r for r in body}
    assert by_label["sum"][head.index("best_lr(s)")] == want
    assert by_label["dead"][head.index("best at")] == "diverged"


def test_several_runs_provenance_lists_every_run(tmp_path):
    a = spec_dict("a", seeds=[0, 1])
    b = spec_dict("b")
    b["seeds"] = 2  # a count: seeds 0 and 1
    c = spec_dict("c", seeds=[7])
    b["meta"] = {**b["meta"], "spec_hash": "bbbbbbbbbbbbbbbb", "git_commit": "beefcafe"}
    c["meta"] = {**c["meta"], "spec_hash": "cccccccccccccccc", "git_commit": "c0ffee00", "created": "2025-02-03T00:00:00+00:00"}
    c["task"]["dataset"]["train"] = 300
    d1 = make_run(tmp_path, _rows(("sum",)), spec=a)
    d2 = make_run(tmp_path, _rows(("stam",)), spec=b)
    rows_c = [{**r, "seed": 7} for r in _rows(("avg",)) if r["seed"] == 0]
    d3 = make_run(tmp_path, rows_c, spec=c)
    paths = build_leaderboard([d1, d2, d3], formats=("md", "csv"), out_dir=tmp_path / "all", plots=False)
    md = paths["md"].read_text()
    prov = dict(ln[2:].split(": ", 1) for ln in md.splitlines() if ln.startswith("- **"))
    assert prov["**spec**"] == "a (hash 0123456789abcdef); b (hash bbbbbbbbbbbbbbbb); c (hash cccccccccccccccc)"
    assert prov["**seeds**"] == "0, 1, 7 (a: 0, 1; b: 0, 1; c: 7)"
    assert prov["**nas_stab**"] == "a: 0.1.0 (commit d138591); b: 0.1.0 (commit beefcafe); c: 0.1.0 (commit c0ffee00)"
    assert prov["**dataset**"] == "a: digits (train=500, val=200); b: digits (train=500, val=200); c: digits (train=300, val=200)"
    assert prov["**torch**"] == "2.9.0+cpu"  # shared by every run: once
    assert prov["**run created**"].startswith("a: 2025-01-02") and "c: 2025-02-03" in prov["**run created**"]
    runs = [ln for ln in md.splitlines() if ln.startswith("- **run**")]
    assert len(runs) == 3
    assert "; seeds 0, 1; 12 runs" in runs[0] and "commit beefcafe" in runs[1] and "; seeds 7; 6 runs" in runs[2]  # avg only (no shared sum cell)
    assert "seed(s) 0, 1 appear in more than one run" in md  # a and b share seeds: said so
    assert "seeds: 0, 1, 7 (a: 0, 1; b: 0, 1; c: 7)" in paths["provenance"].read_text()


def _md_rows(md: str) -> tuple[list[str], list[str]]:
    """Header and first body row of the leaderboard table in `md`."""
    lines = [ln for ln in md.splitlines() if ln.startswith("| rank")]
    start = md.splitlines().index(lines[0])
    table = md.splitlines()[start:start + 3]
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in table]
    return cells[0], cells[2]


def test_tex_looking_labels_are_drawn_as_text_not_mathtext(tmp_path):
    """A categorical value like `$\\foo{x}$` used to crash matplotlib's mathtext and with it the whole leaderboard."""
    for label in ("$\\foo{x}$", "$x^{", "50$ and 60$"):
        d = make_run(tmp_path / str(abs(hash(label))), _rows(labels=("sum", label)), spec=spec_dict())
        paths = build_leaderboard([d], formats=("md", "html"))
        assert paths["html"].exists() and any(k.startswith("plot:") for k in paths)
