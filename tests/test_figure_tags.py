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
