"""decisions.jsonl: what a search decided, recorded as it decides it (store/decisions.py), read by the leaderboard
and `nas-stab status` instead of a replay; the replay (search/replay.py) only upgrades an old run directory."""
from __future__ import annotations

import json

import pandas as pd
import pytest

from nas_stab.errors import RunError
from nas_stab.store.decisions import DECISIONS, DecisionLog, fold, read_decisions, read_events, sweep_event

SPEC = """\
name: dec
seeds: 2
task: {dataset: {name: digits}}
model: {arch: mlp_resnet, depth: 2, width: 16, branches: 1, aggregation: stam, branch_depth: 1}
train: {optimizer: sgd, lr: 0.1, momentum: 0.9, batch_size: 64, steps: 20, eval_every: 20, threads: 1}
stability: {every: 20, probe_batch: 64, hessian: false}
space:
  model.branches: [1, 4]
  train.lr: [0.05, 0.1]
search: {sampler: bracket, bracket: {step_octaves: 1, resolution_octaves: 1, lr_limits: [0.005, 3.2]}}
leaderboard: {transfer: model.branches}
"""


def _sweep(i, end="running", runs=None, lrs=(0.1,)):
    return sweep_event(None, i, {"model.depth": 2}, end, lrs, 0.1 if runs else None, 1, runs)


# ------------------------------------------------------------------ the file


def test_only_changes_are_appended_and_the_latest_state_of_each_sweep_wins(tmp_path):
    log = DecisionLog(tmp_path / DECISIONS)
    log.start("bracket", 0, sweeps=2, complete=True)
    assert log.update([_sweep(0), _sweep(1)]) == 2
    assert log.update([_sweep(0), _sweep(1)]) == 0  # nothing changed: nothing written
    assert log.update([_sweep(0, "bracketed", ["k1", "k2"]), _sweep(1)]) == 1
    again = DecisionLog(tmp_path / DECISIONS)  # a resumed driver knows what the file says
    assert again.update([_sweep(0, "bracketed", ["k1", "k2"])]) == 0
    d = read_decisions(tmp_path)
    assert d is not None and d.complete and d.sweeps_per_outer == 2
    assert d.run_ends() == {"k1": "bracketed", "k2": "bracketed"} and d.open_sweeps() == 1
    events = read_events(tmp_path / DECISIONS)
    assert [e["event"] for e in events] == ["start", "sweep", "sweep", "sweep"] and all("time" in e for e in events)


def test_a_torn_last_line_is_dropped_and_written_again(tmp_path):
    log = DecisionLog(tmp_path / DECISIONS)
    log.start("bracket", 0, sweeps=1, complete=True)
    log.update([_sweep(0)])
    text = (tmp_path / DECISIONS).read_text()
    (tmp_path / DECISIONS).write_text(text[:-10])  # a kill in the middle of the last append
    assert [e["event"] for e in read_events(tmp_path / DECISIONS)] == ["start"]
    relog = DecisionLog(tmp_path / DECISIONS)  # the next driver cuts the torn line and writes the state again
    assert relog.update([_sweep(0)]) == 1
    assert (tmp_path / DECISIONS).read_text().startswith(text.splitlines(keepends=True)[0])
    assert [e["event"] for e in read_events(tmp_path / DECISIONS)] == ["start", "sweep"]
    with open(tmp_path / DECISIONS, "a") as f:
        f.write("{not json\n")
    relog.update([_sweep(0, lrs=(0.1, 0.2))])
    with pytest.raises(ValueError, match=rf"{DECISIONS}:3: not a JSON object"):
        read_events(tmp_path / DECISIONS)  # a malformed line that is not the last: never guessed around


def test_completeness_is_decided_by_the_first_start():
    assert fold([{"event": "start", "records": 0}]).complete
    assert not fold([{"event": "start", "records": 5}, {"event": "start", "records": 0}]).complete  # resumed old run
    assert fold([{"event": "start", "records": 5, "complete": True}]).complete  # a function of every record
    assert fold([{"event": "start", "records": 5, "replayed": True}]).complete
    with pytest.raises(ValueError, match="newer nas_stab"):
        fold([{"event": "start", "format": 99, "records": 0}])


def test_the_adaptive_stage_counts_what_is_left():
    d = fold([{"event": "start", "records": 0}, {"event": "stage", "stage": 0, "runs": ["a", "b", "c"]}])
    assert d.stage_todo(["a"]) == 2 and d.stage_todo(["a", "b", "c"]) == 0
    d = fold([{"event": "start", "records": 0}, {"event": "stage", "stage": None, "runs": []}])
    assert d.stage_todo([]) == 0  # over
    assert fold([{"event": "start", "records": 0}]).stage_todo([]) is None  # no stage yet


# ------------------------------------------------------------------ a real search


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    from nas_stab.config import loads_spec
    from nas_stab.search.local import run_local
    from nas_stab.store.rundir import RunDir

    out = tmp_path_factory.mktemp("dec")
    spec = loads_spec(SPEC)
    with RunDir.open(out, spec) as rd:
        run_local(spec, rd)
    return out / "dec"


def test_a_bracket_search_records_each_sweep_and_every_run_lands_in_one(searched):
    events = read_events(searched / DECISIONS)
    assert events[0] == {**events[0], "event": "start", "source": "bracket", "records": 0, "sweeps": 2}
    d = read_decisions(searched)
    assert d is not None and d.complete and d.open_sweeps() == 0
    keys = pd.read_csv(searched / "trials.csv", dtype={"key": str})["key"].tolist()
    ended = [k for ev in d.sweeps.values() for k in ev["runs"]]
    assert sorted(ended) == sorted(keys)  # every run in exactly one ended sweep
    rounds = [e for e in events if e["event"] == "sweep" and e["sweep"] == 0]
    assert [e["rounds"] for e in rounds] == sorted(e["rounds"] for e in rounds) and rounds[-1]["end"] != "running"


def test_the_replay_of_an_old_run_directory_decides_what_the_search_recorded(searched, tmp_path):
    import shutil

    from nas_stab.cli.commands import upgrade_decisions
    from nas_stab.results.leaderboard import load_analysis

    old = tmp_path / "old"
    shutil.copytree(searched, old)
    (old / DECISIONS).unlink()
    with pytest.raises(RunError, match="nas-stab upgrade"):
        load_analysis([old], n_boot=0)
    assert upgrade_decisions(old, quiet=True) and not upgrade_decisions(old, quiet=True)  # once
    assert read_events(old / DECISIONS)[0]["replayed"]
    rec, rep = read_decisions(searched), read_decisions(old)
    assert rec is not None and rep is not None
    assert rep.run_ends() == rec.run_ends()
    strip = lambda d: {k: {f: v for f, v in ev.items() if f != "time"} for k, ev in d.sweeps.items()}  # noqa: E731
    assert strip(rep) == strip(rec)
    a = load_analysis([searched], n_boot=0)[0].sizes["bracket_end"].tolist()
    assert a == load_analysis([old], n_boot=0)[0].sizes["bracket_end"].tolist() and "" not in a


def test_a_kill_between_the_records_and_the_decisions_is_healed_by_the_next_driver(searched, tmp_path):
    import shutil

    from nas_stab.config import loads_spec
    from nas_stab.search.local import run_local
    from nas_stab.store.rundir import RunDir

    shutil.copytree(searched, tmp_path / "dec")
    path = tmp_path / "dec" / DECISIONS
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:3]))  # the last decisions were never written
    assert read_decisions(tmp_path / "dec").open_sweeps() == 2
    spec = loads_spec(SPEC)
    with RunDir.open(tmp_path, spec) as rd:
        run_local(spec, rd)  # nothing left to train
    d = read_decisions(tmp_path / "dec")
    assert d is not None and d.complete and d.open_sweeps() == 0
    assert d.run_ends() == read_decisions(searched).run_ends()
    starts = [json.loads(ln)["event"] for ln in path.read_text().splitlines()].count("start")
    assert starts == 2
