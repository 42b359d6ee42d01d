"""Inline figure tags (leaderboards/figures.py): a number in a README's prose rewritten from its CSV, so that it
cannot go stale; a tag that does not pick exactly one row is an error naming the file and line."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "leaderboards"))
import figures  # noqa: E402

CSV = "label,size,best_lr,worst_regret\nsp,64,0.004,0.5\nsp,128,0.002,0.5\n\"mup, True\",64,0.004,0.0189\n\"mup, True\",128,0.0041,0.0189\n"


@pytest.fixture
def home(tmp_path):
    (tmp_path / "board.csv").write_text(CSV)
    return tmp_path


def test_a_stale_figure_is_rewritten_from_the_csv(home):
    text = 'regret <!--fig board.csv worst_regret label="mup, True" size=64-->0.023<!--/fig--> here'
    assert figures.rewrite_figures(text, home, "R.md") == 'regret <!--fig board.csv worst_regret label="mup, True" size=64-->0.0189<!--/fig--> here'


def test_format_multiplier_and_aggregates(home):
    assert figures.figure("board.csv best_lr label=sp agg=mean fmt=.4f", home) == "0.0030"
    assert figures.figure("board.csv best_lr agg=count fmt=.0f", home) == "4"
    assert figures.figure("board.csv worst_regret label=sp size=128 mul=100 fmt=.0f", home) == "50"
    assert figures.figure("board.csv best_lr label=sp size=64.0 fmt=+.1e", home) == "+4.0e-03"  # numeric equality


def test_a_tag_that_picks_no_row_or_several_is_an_error_with_file_and_line(home):
    text = "line one\n<!--fig board.csv best_lr label=sp-->x<!--/fig-->\n<!--fig board.csv best_lr label=nope agg=max-->y<!--/fig-->\n"
    with pytest.raises(figures.FigureError) as e:
        figures.rewrite_figures(text, home, "R.md")
    msg = str(e.value)
    assert "R.md:2:" in msg and "selects 2 rows" in msg  # every bad tag reported, not only the first
    assert "R.md:3:" in msg and "selects no row" in msg
    with pytest.raises(figures.FigureError, match="no column 'nope'"):
        figures.figure("board.csv nope", home)
    with pytest.raises(figures.FigureError, match="no file"):
        figures.figure("missing.csv best_lr", home)
    with pytest.raises(figures.FigureError, match="selects no row"):  # a second filter on no rows left: still rows
        figures.figure("board.csv best_lr label=nope size=64 worst_regret=0.5", home)


def test_a_yaml_source_gives_the_constant_at_its_dotted_key(home):
    (home / "spec.yaml").write_text("train:\n  momentum: 0.9\n  lrs: [0.01, 0.02]\n  name: sgd\n")
    assert figures.figure("spec.yaml train.momentum", home) == "0.9"
    assert figures.figure("spec.yaml train.lrs.1 fmt=.3f", home) == "0.020"
    with pytest.raises(figures.FigureError, match="no key 'train.beta' \\(stops at 'beta'\\)"):
        figures.figure("spec.yaml train.beta", home)
    with pytest.raises(figures.FigureError, match="not a number"):
        figures.figure("spec.yaml train.name", home)
    with pytest.raises(figures.FigureError, match="no row filters"):
        figures.figure("spec.yaml train.momentum label=sp", home)


def test_quoted_paper_figures_are_counted_apart_and_need_a_source():
    text = "paper <!--quote Path-BN, Table 1-->6.93<!--/quote--> ours 0.94\n<!--quote -->1.5<!--/quote-->\n<!--quote X-->n/a<!--/quote-->\n"
    assert figures.untagged(text) == [(1, "0.94")]
    n, errors = figures.quoted(text, "R.md")
    assert n == 2
    assert errors == ["R.md:2: a quote names no source (<!--quote PAPER, TABLE-->)", "R.md:3: a quote holds no number: 'n/a'"]


def test_a_tag_shown_in_code_is_an_example_and_left_alone(home):
    text = ("    moved <!--fig board.csv nope-->1<!--/fig-->\nand `<!--fig board.csv nope-->2<!--/fig-->` but "
            "<!--fig board.csv best_lr label=sp size=64-->9<!--/fig-->")
    out = figures.rewrite_figures(text, home, "R.md")
    assert out.endswith("<!--fig board.csv best_lr label=sp size=64-->0.004<!--/fig-->") and "nope-->1<" in out and "nope-->2<" in out


def test_the_cells_block_is_the_seed_mean_per_row_size_and_lr_with_failures_counted(tmp_path):
    (tmp_path / "leaderboard_cells.csv").write_text(
        "label,model.norm,model.depth,train.lr,mean,std,n,n_runs,n_ok,n_diverged,n_stuck,report_mean\n"
        "bn,bn,10,0.01,0.9,0,5,5,5,0,0,0.89\nbn,bn,10,0.02,0.95,0,5,5,5,0,0,0.94\n"
        "bn,bn,30,0.02,0.44,0,5,5,2,3,0,0.43\npath,path,10,0.01,0.91,0,5,5,4,0,1,0.9\n")
    assert figures.MAKERS["cells"](tmp_path).splitlines() == [
        "| row | model.depth | 0.01 | 0.02 |", "|---|---|---|---|", "| bn | 10 | 0.9 | 0.95 |",
        "| bn | 30 |  | 0.44 (3 of 5 diverged) |", "| path | 10 | 0.91 (1 of 5 stuck) |  |"]
    assert "| bn | 10 | 0.89 | 0.94 |" in figures.MAKERS["report-cells"](tmp_path)
    page = "# t\n<!-- cells:begin -->\nold\n<!-- cells:end -->\n"
    assert "| bn | 10 | 0.9 | 0.95 |" in figures.rewrite(page, tmp_path)


def test_derived_figures_are_the_tables_own_code_rerun(tmp_path, monkeypatch):
    import derive

    table = tmp_path / "t"
    table.mkdir()
    (table / "derived.py").write_text(
        "import pandas as pd\n\ndef derive(table):\n"
        "    d = pd.read_csv(table / 'trials.csv')\n"
        "    return pd.DataFrame({'name': ['gap'], 'value': [d.acc.max() - d.acc.min()], 'lo': [float('nan')], 'hi': [float('nan')]})\n")
    (table / "trials.csv").write_text("acc\n0.5\n0.75\n")
    monkeypatch.setattr(derive, "ROOT", tmp_path)
    assert derive.main([str(table), "--check"]) == 1
    assert derive.main([str(table)]) == 0
    assert (table / "derived.csv").read_text() == "name,value,lo,hi\ngap,0.25,,\n"
    assert derive.main([str(table), "--check"]) == 0
    (table / "trials.csv").write_text("acc\n0.5\n0.9\n")  # a rerun moved the figure
    assert derive.main([str(table), "--check"]) == 1


def test_yaml_keys_with_dots_comparisons_and_the_other_aggregates(home):
    (home / "spec.yaml").write_text("space:\n  train.lr: {log_grid: [0.002, 0.064, 11]}\n  model.branches: [1, 4, 16]\n")
    assert figures.figure("spec.yaml space.train.lr.log_grid.1", home) == "0.064"
    assert figures.figure("spec.yaml space.model.branches agg=count fmt=.0f", home) == "3"
    assert figures.figure("board.csv best_lr worst_regret>0.1 agg=count fmt=.0f", home) == "2"
    assert figures.figure("board.csv best_lr size<=64 agg=max", home) == "0.004"
    assert figures.figure("board.csv label size!=64 agg=nunique fmt=.0f", home) == "2"
    assert figures.figure("board.csv best_lr label=sp agg=std fmt=.4f", home) == "0.0014"
    with pytest.raises(figures.FigureError, match="a comparison needs a number"):
        figures.figure("board.csv best_lr size<big agg=count", home)


def test_a_papers_section_number_is_a_reference_not_a_figure():
    assert figures.untagged("as in Section 5.1 and Appendix A.4, Eq. 3.2; we got 0.93\n") == [(1, "0.93")]


def test_a_figure_that_ends_a_sentence_is_counted():
    assert figures.untagged("it costs 0.026. Then 5.4, and C^0.33.\nversion 2.60.1 and rules 2026.12.\n") == [
        (1, "0.026"), (1, "5.4"), (1, "0.33")]


def test_the_cells_block_of_a_table_without_a_size_axis(tmp_path):
    (tmp_path / "leaderboard_cells.csv").write_text(
        "label,model.block,size,train.lr,mean,std,n,n_runs,n_ok,n_diverged,n_stuck,report_mean\n"
        "plain,plain,null,0.001,29.0,0,3,3,3,0,0,28\nplain,plain,null,0.002,30.1,0,3,3,3,0,0,29\n")
    assert figures.MAKERS["cells"](tmp_path).splitlines()[2] == "| plain | - | 29 | 30.1 |"
