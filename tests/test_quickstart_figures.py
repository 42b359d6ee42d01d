"""The README's first paragraph quotes what the quickstart prints (its verdicts and three figures): run it, and
check each quoted figure against the leaderboard it writes, to the digits quoted."""
import re

import pandas as pd
import pytest
from conftest import ROOT, run_cli


@pytest.mark.slow
def test_the_readme_s_quickstart_figures_are_what_the_quickstart_prints(tmp_path):
    r = run_cli("run", ROOT / "spaces" / "quickstart.yaml", "--out", tmp_path, timeout=1800)
    assert r.returncode == 0, r.stderr[-2000:]
    d = tmp_path / "quickstart"
    r = run_cli("leaderboard", d, "--format", "csv")
    assert r.returncode == 0, r.stderr[-2000:]
    lb = pd.read_csv(d / "leaderboard.csv").set_index("label")
    text = " ".join((ROOT / "README.md").read_text().split("## Two commands", 1)[1].split("```", 1)[0].split())
    assert "whose `stam` row says `yes`" in text and lb.loc["stam", "transfers"] == "yes"
    assert "whose `sum` row is `inconclusive`" in text and lb.loc["sum", "transfers"] == "inconclusive"
    assert "censored" in text and "censored at 16" in lb.loc["sum", "why"]
    m = re.search(r"loses at most (\d\.\d+) accuracy at 4 and 16 branches, 90% interval, within the (\d\.\d+)", text)
    assert m, text

    def quoted(s: str, value: float) -> None:
        digits = len(s.split(".")[1])
        assert f"{value:.{digits}f}" == s, (s, value)

    quoted(m.group(1), lb.loc["stam", "worst_regret_hi"])
    quoted(m.group(2), lb.loc["stam", "epsilon"])
    m = re.search(r"the lr tuned at 1 branch loses about (\d\.\d+) there", text)
    assert m, text
    quoted(m.group(1), lb.loc["sum", "worst_regret"])
