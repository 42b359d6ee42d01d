"""CSV formula injection (issue 16): text cells beginning with = + - @ tab CR are written
with a leading quote in every CSV nas_stab writes; numbers never change."""
from __future__ import annotations

import csv
import io

import pandas as pd
from conftest_ray import spec_text

from nas_stab.csvsafe import TRIGGERS, escape_cell, unescape_cell

EVIL = ["=HYPERLINK(\"http://x\",\"y\")", "@SUM(1+1)*cmd|' /C calc'!A0", "+1+cmd", "-2+3+cmd", "\t=1", "\r=1"]


def _no_formula_cells(text: str) -> None:
    for row in csv.reader(io.StringIO("\n".join(ln for ln in text.splitlines() if not ln.startswith("#")))):
        for cell in row:
            if cell[:1] in TRIGGERS:
                float(cell)  # only a number may start so


def test_escape_rule():
    for v in EVIL:
        assert escape_cell(v) == "'" + v and unescape_cell(escape_cell(v)) == v
    for v in (-1.5, "-1.5", "-inf", "nan", "1e-3", "relu", "", None, 3, "'=x"):
        assert unescape_cell(escape_cell(v)) == v
    assert escape_cell("-0.25") == "-0.25" and escape_cell(-0.25) == -0.25


def test_trials_csv_keeps_negative_numbers_numeric():
    from nas_stab.store.rundir import trials_csv

    rows = [{"trial": i, "seed": 0, "status": "complete", "objective": v, "key": f"k{i}", "final_top_hessian": h, "model.x": t}
            for i, (v, h, t) in enumerate([(-1.5, -2e-7, "=1+1"), (0.5, float("-inf"), "-relu"), (-3.0, -4.0, "@x")])]
    text = trials_csv(rows, ["model.x"], "classification")
    _no_formula_cells(text)
    df = pd.read_csv(io.StringIO(text))
    assert df["objective"].tolist() == [-1.5, 0.5, -3.0] and df["final_top_hessian"].dtype.kind == "f"
    assert df["final_top_hessian"].tolist()[::2] == [-2e-7, -4.0]
    assert df["model.x"].tolist() == ["'=1+1", "'-relu", "'@x"]


def test_every_csv_a_run_writes_is_neutralized(tmp_path, capsys):
    from nas_stab.cli import main

    text = spec_text(train={"steps": 4, "threads": 1}, stability={"every": 0, "probe_batch": 32, "hessian": False},
                     space={"task.dataset.root": EVIL[:3], "model.branches": [1, 2], "train.lr": [0.01, 0.02, 0.04]},
                     leaderboard={"transfer": "model.branches", "compare": ["task.dataset.root"]})
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    out = tmp_path / "out"
    assert main(["run", str(spec), "--out", str(out)]) == 0, capsys.readouterr().err
    d = out / "tiny"
    trials = (d / "trials.csv").read_text()
    _no_formula_cells(trials)
    df = pd.read_csv(d / "trials.csv")
    assert sorted(set(df["task.dataset.root"])) == sorted("'" + v for v in EVIL[:3])
    assert main(["leaderboard", str(d), "--format", "csv", "--out", str(tmp_path / "lb")]) == 0, capsys.readouterr().err
    written = sorted((tmp_path / "lb").glob("*.csv"))
    assert {p.name for p in written} >= {"leaderboard.csv"}
    for p in written:
        _no_formula_cells(p.read_text())
    assert main(["probe", str(spec), "--out", str(tmp_path / "probe")]) == 0, capsys.readouterr().err
    probes = list((tmp_path / "probe").rglob("*.csv"))
    assert probes
    for p in probes:
        _no_formula_cells(p.read_text())
