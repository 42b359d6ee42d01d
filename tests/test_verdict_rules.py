"""The verdict rules are a table (`verdicts.RULES`) that docs/leaderboard.md renders, read in order: a `no` rule
beats every `inconclusive` one, and a row is `yes` only where none fires."""
import re

import pandas as pd
from conftest import ROOT

from nas_stab.analysis.table import analyze
from nas_stab.analysis.verdicts import MIN_SEEDS, RULES, rules_markdown


def test_the_docs_show_the_rules_the_code_reads():
    text = (ROOT / "docs" / "leaderboard.md").read_text()
    m = re.search(r"<!-- generated from nas_stab.analysis.verdicts.rules_markdown\(\)[^\n]*-->\n(.*?)<!-- end of the "
                  r"generated rules -->", text, re.S)
    assert m, "docs/leaderboard.md lost its generated rules table"
    assert m.group(1) == rules_markdown()
    assert [r.verdict for r in RULES] == sorted((r.verdict for r in RULES), key=("no", "inconclusive").index)


def _table(curves: dict[int, dict[float, list[float]]]) -> pd.DataFrame:
    """trials of one row: size -> lr -> one value per seed."""
    rows = [{"model.width": w, "train.lr": lr, "seed": s, "status": "complete", "val_acc": v}
            for w, by_lr in curves.items() for lr, vs in by_lr.items() for s, v in enumerate(vs)]
    return pd.DataFrame(rows)


def _peak(top: float, at: int, seeds: int = 5) -> dict[float, list[float]]:
    """A peaked curve over lrs 2^-5 .. 2^0 with its optimum at index `at`, seeds a little apart."""
    lrs = [2.0 ** -k for k in range(5, -1, -1)]
    return {lr: [top - 0.04 * abs(i - at) ** 2 + 0.002 * s for s in range(seeds)] for i, lr in enumerate(lrs)}


def _verdict(curves) -> tuple[str, str]:
    a = analyze(_table(curves), transfer="model.width", metric="val_acc", classes=10, n_boot=200)
    return a.rows.loc[0, "transfers"], a.rows.loc[0, "why"]


def test_each_rule_writes_its_reason_and_a_no_rule_wins_over_every_inconclusive_one():
    same = _verdict({64: _peak(0.9, 2), 256: _peak(0.9, 2)})
    assert same[0] == "yes" and same[1].startswith("worst_regret ") and "<= epsilon" in same[1]
    far = _verdict({64: _peak(0.9, 1), 256: _peak(0.9, 4)})  # the optimum moves 3 octaves: costly
    assert far[0] == "no" and "> epsilon" in far[1]
    # a size where nothing trains is "no" although the other rules (censored, one size's data) would say inconclusive
    dead = _verdict({64: _peak(0.9, 0), 256: {2.0 ** -k: [0.1] * 5 for k in range(5, -1, -1)}})
    assert dead == ("no", "size 256: no lr trains")
    few = _verdict({64: _peak(0.9, 2, seeds=MIN_SEEDS - 1), 256: _peak(0.9, 2, seeds=MIN_SEEDS - 1)})
    assert few[0] == "inconclusive" and few[1].startswith(f"{MIN_SEEDS - 1} seeds")
    edge = _verdict({64: _peak(0.9, 0), 256: _peak(0.9, 0)})
    assert edge[0] == "inconclusive" and "censored at 64 (<=0.0312), 256 (<=0.0312)" in edge[1]
    one = _verdict({64: _peak(0.9, 2)})
    assert one[0] == "inconclusive" and "1 size" in one[1]
