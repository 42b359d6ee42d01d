"""Files that are not regular files where a run directory (or a sweep to judge) has one: a symbolic link to
/dev/zero or /dev/urandom, a FIFO nobody writes to. Every command that reads them answers at once with one line
naming the file and what it is (exit 2): none reads until memory runs out, none hangs (issue 50, item 1)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from conftest import run_cli

sys.path.insert(0, str(Path(__file__).parent / "data"))
from lb_fixtures import grid_rows, make_run, spec_dict  # noqa: E402

KINDS = ("zero", "urandom", "fifo")


def _hostile(path: Path, kind: str) -> None:
    path.unlink(missing_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to(f"/dev/{kind}")


@pytest.fixture
def run_dir(tmp_path) -> Path:
    t = {(lab, s, lr): [0.9 - abs(lr - 0.2) - 0.01 * k for k in range(3)]
         for lab in ("sum", "stam") for s in (1, 2, 4) for lr in (0.1, 0.2, 0.4)}
    return make_run(tmp_path, grid_rows(t), spec=spec_dict("hostile", seeds=[0, 1, 2]))


def _one_line_refusal(r, path: Path) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout[-500:], r.stderr[-2000:])
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert str(path) in lines[0] and "not a regular file" in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("command", ["status", "tensorboard", "leaderboard", "claims"])
def test_a_trials_file_that_is_not_a_file_is_refused_at_once(run_dir, kind, command):
    if command == "claims":
        (run_dir / "claims.yaml").write_text(
            "claims:\n  - {id: c, paper: P, says: s, kind: difference, a: {model.aggregation: stam}, b: {model.aggregation: sum}, "
            "effect: 0.01}\n")
    trials = run_dir / "trials.csv"
    _hostile(trials, kind)
    r = run_cli(command, run_dir, timeout=60)
    line = _one_line_refusal(r, trials)
    assert ("a symbolic link to /dev/" in line) == (kind != "fifo")


@pytest.mark.parametrize("kind", KINDS)
def test_a_decisions_file_that_is_not_a_file_is_refused(run_dir, kind):
    decisions = run_dir / "decisions.jsonl"
    _hostile(decisions, kind)
    from nas_stab.errors import RunError
    from nas_stab.store.decisions import read_decisions

    with pytest.raises(RunError, match="not a regular file"):
        read_decisions(run_dir)


@pytest.mark.parametrize("kind", KINDS)
def test_judge_refuses_a_sweep_that_is_not_a_file(tmp_path, kind):
    sweep = tmp_path / "sweep.csv"
    _hostile(sweep, kind)
    r = run_cli("judge", sweep, "--lr", "lr", "--metric", "val_acc", "--size", "width", timeout=60)
    _one_line_refusal(r, sweep)


def test_an_oversized_file_is_refused_with_its_cap(tmp_path, monkeypatch):
    from nas_stab import safefiles
    from nas_stab.errors import RunError

    f = tmp_path / "trials.csv"
    f.write_text("x" * 2000)
    monkeypatch.setitem(safefiles.CAPS, "trials.csv", 1000)
    with pytest.raises(RunError, match="2,000 bytes, over the 1,000-byte cap of a trials.csv file"):
        safefiles.check_regular(f, "trials.csv")
    safefiles.check_regular(tmp_path / "missing.csv", "trials.csv")  # its reader says it is missing


CLAIM = ("claims:\n  - {{id: {id}, paper: P, says: s, kind: difference, a: {{model.aggregation: stam}}, "
         "b: {{model.aggregation: sum}}, effect: {effect}}}\n")


@pytest.mark.parametrize("effect, where", [(".inf", "got inf"), (".nan", "got nan"), ("123456789012345678901234567890", "at most 1e+09"),
                                           ("-0.01", "a number > 0")])
def test_claims_refuses_an_effect_no_metric_has(run_dir, effect, where):
    (run_dir / "claims.yaml").write_text(CLAIM.format(id="c", effect=effect))
    r = run_cli("claims", run_dir, timeout=60)
    assert r.returncode == 2 and where in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("damage, where", [("empty", "empty file; no trial has been recorded"), ("garbage", "not a readable CSV table")])
def test_claims_refuses_a_trials_file_that_is_not_a_table_in_one_line(run_dir, damage, where):
    (run_dir / "claims.yaml").write_text(CLAIM.format(id="c", effect=0.01))
    (run_dir / "trials.csv").write_bytes(b"" if damage == "empty" else bytes(range(256)) * 8)
    (run_dir / "unused.csv").write_bytes(bytes(range(256)) * 8)  # a file no claim reads is not read
    r = run_cli("claims", run_dir, timeout=60)
    assert r.returncode == 2 and where in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_claims_output_that_cannot_be_a_file_is_an_error_and_a_claims_text_cannot_drive_the_terminal(run_dir, tmp_path):
    (run_dir / "claims.yaml").write_text(CLAIM.format(id='"c\\e[31mRED\\e[0m"', effect=0.01))
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    for out in (fifo, tmp_path):  # a FIFO (as /dev/full would be: never renamed over), a directory
        r = run_cli("claims", run_dir, "--out", out, timeout=60)
        assert r.returncode == 2 and "nas_stab writes only regular files" in r.stderr, r.stderr
    assert fifo.exists() and not fifo.is_file()  # left as it was
    r = run_cli("claims", run_dir, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "c\\x1b[31mRED\\x1b[0m: " in r.stdout, r.stdout


def _edit_trials(run_dir: Path, edit) -> None:
    import csv

    rows = list(csv.DictReader((run_dir / "trials.csv").open()))
    edit(rows)
    with (run_dir / "trials.csv").open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


@pytest.mark.parametrize("command", ["leaderboard", "claims", "status"])
def test_records_that_cannot_be_right_are_refused_all_at_once(run_dir, command):
    """An lr of 0, an lr of inf, a size of 0 and a run id that climbs out of history/: one line each, every one in
    one run, exit 2 (issue 50, item 5)."""
    (run_dir / "claims.yaml").write_text(CLAIM.format(id="c", effect=0.01))

    def edit(rows):
        rows[0]["train.lr"] = "0"
        rows[3]["train.lr"] = "inf"
        rows[5]["model.branches"] = "0"
        rows[7]["run_id"] = "../../etc"

    _edit_trials(run_dir, edit)
    r = run_cli(command, run_dir, timeout=120)
    if command == "status":  # status counts what ran and reads no verdict from the values: it still answers
        assert r.returncode == 0, r.stderr
        return
    lines = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    text = "\n".join(lines)
    for want in ("line 2: train.lr: 0.0 is not a finite number > 0 (also line 5: 1 more)",
                 "line 7: model.branches: 0 is not a finite number > 0", "line 9: run_id: '../../etc' is not t<trial>-s<seed>"):
        assert want in text, text
    assert len(lines) == 3, text


def test_a_spec_that_searches_a_key_its_records_lack_is_refused(run_dir):
    import yaml

    data = yaml.safe_load((run_dir / "spec.yaml").read_text())
    data["space"]["model.depth"] = [2, 3]
    (run_dir / "spec.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    r = run_cli("leaderboard", run_dir, timeout=120)
    assert r.returncode == 2 and "no column 'model.depth'" in r.stderr, r.stderr


@pytest.mark.parametrize("content", ["", "trial,seed,status,run_id,key\n"])
def test_tensorboard_of_a_run_with_no_record_is_an_error(run_dir, content):
    (run_dir / "trials.csv").write_text(content)
    r = run_cli("tensorboard", run_dir, timeout=60)
    assert r.returncode == 2 and "no run recorded yet" in r.stderr, (r.stdout, r.stderr)


def test_generating_a_large_mnist1d_is_announced_with_its_cost_and_bounded():
    from nas_stab.config import loads_spec
    from nas_stab.errors import SpecError

    text = "name: m\ntask: {dataset: {name: mnist1d, size: %d}}\nmodel: {arch: mlp, width: 8}\n"
    spec = loads_spec(text % 500_000)
    assert any("generating 500,000 MNIST-1D examples takes about 2 min" in n for n in spec.notes), spec.notes
    assert not any("MNIST-1D" in n for n in loads_spec(text % 4000).notes)
    with pytest.raises(SpecError, match="must be <= 1000000"):
        loads_spec(text % 10_000_000)


def test_a_row_label_with_a_control_character_is_refused(run_dir):
    """A text searched key (a leaderboard row's label) holding a newline or an escape sequence would break every table
    keyed on it: one line naming the line and the column, exit 2 (issue 50, item 5)."""
    def edit(rows):
        rows[2]["model.aggregation"] = "st\nam"
        rows[4]["model.aggregation"] = "\x1b[31msum"

    _edit_trials(run_dir, edit)
    r = run_cli("leaderboard", run_dir, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "line 4: model.aggregation: 'st\\nam' holds a control character" in r.stderr, r.stderr
    assert "(also line 6: 1 more)" in r.stderr and "\x1b" not in r.stderr
