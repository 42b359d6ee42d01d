"""Ctrl-C and SIGTERM stop a search in every runner: exit 130 / 143 within seconds, one line, no traceback, nothing
lost; the Optuna study agrees with trials.csv (a run recorded complete is complete in the study), and the rerun
resumes and finishes the search without training a recorded run twice.

Through a real `nas-stab run` process: the local runner one run at a time in the default suite; the local pool
(runner.concurrency 2), the other signal and the Ray runner in the slow suite."""
from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY, run_cli

SAMPLED = TINY.replace("steps: 20", "steps: 300").replace("  train.lr: [0.01, 0.05]\n", "  train.lr: [0.01, 0.02, 0.05]\n") + \
    "search: {sampler: random, trials: 6, seed: 3}\n"
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}
SAID = {signal.SIGINT: "interrupted", signal.SIGTERM: "terminated (SIGTERM)"}


def _records(d: Path) -> list[dict[str, str]]:
    with open(d / "trials.csv") as f:
        return list(csv.DictReader(f))


def _study_agrees(d: Path) -> dict[int, str]:
    """Every Optuna trial finished (none RUNNING or WAITING) and every recorded run's trial in the state its record
    gives; the study's states by trial number."""
    import optuna

    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{d / 'study.db'}")
    states = {t.number: t.state.name for t in study.trials}
    assert not {"RUNNING", "WAITING"} & set(states.values()), states
    want = {"complete": "COMPLETE", "pruned": "PRUNED", "diverged": "PRUNED", "failed": "FAIL"}
    recorded = {int(r["optuna_trial"]): want[r["status"]] for r in _records(d)}
    reconciled = {int(t.user_attrs["reconciles"]): t.state.name for t in study.trials if "reconciles" in t.user_attrs}
    for number, state in recorded.items():
        assert reconciled.get(number, states[number]) == state, (number, states, reconciled)
    return states


def _interrupt(spec_path: Path, out: Path, sig: signal.Signals, extra: tuple[str, ...] = (), after: int = 1) -> tuple[int, str, float]:
    """Start `nas-stab run`, send `sig` once `after` runs have finished; its exit code, stderr and the seconds from
    the signal to its exit."""
    p = subprocess.Popen([sys.executable, "-m", "nas_stab.cli", "run", str(spec_path), "--out", str(out), *extra],
                         env=dict(os.environ, PYTHONUNBUFFERED="1"), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                         text=True, start_new_session=True)
    assert p.stderr is not None
    seen, head = 0, []
    for line in p.stderr:
        head.append(line)
        seen += " | [" in line  # a finished run's progress line
        if seen >= after:
            break
    t0 = time.monotonic()
    p.send_signal(sig)
    err = "".join(head) + p.stderr.read()
    rc = p.wait(timeout=120)
    return rc, err, time.monotonic() - t0


@pytest.mark.parametrize(("concurrency", "sig"), [
    pytest.param(1, signal.SIGINT, id="local-SIGINT"),
    pytest.param(2, signal.SIGTERM, id="pool-SIGTERM", marks=pytest.mark.slow),
    pytest.param(1, signal.SIGTERM, id="local-SIGTERM", marks=pytest.mark.slow),  # (also tests/test_progress.py)
    pytest.param(2, signal.SIGINT, id="pool-SIGINT", marks=pytest.mark.slow)])
def test_a_signal_stops_the_search_and_the_rerun_finishes_it(tmp_path, concurrency, sig):
    spec_path = tmp_path / "tiny.yaml"
    spec_path.write_text(SAMPLED + f"runner: {{concurrency: {concurrency}}}\n")
    out = tmp_path / "runs"
    rc, err, took = _interrupt(spec_path, out, sig)
    assert rc == EXIT[sig], err[-3000:]
    assert took < 20, f"{took:.1f} s from the signal to the exit"
    assert "Traceback" not in err and SAID[sig] in err and "rerun the same command to resume" in err, err[-3000:]
    d = out / "tiny"
    before = _records(d)
    assert 1 <= len(before) < 6
    _study_agrees(d)
    r = run_cli("run", spec_path, "--out", out)
    assert r.returncode == 0, r.stderr[-3000:]
    after = _records(d)
    assert len(after) == 6 and len({x["run_id"] for x in after}) == 6  # the search finished, no run twice
    assert {x["run_id"]: x["objective"] for x in before}.items() <= {x["run_id"]: x["objective"] for x in after}.items()
    states = _study_agrees(d)
    assert sum(s == "COMPLETE" for s in states.values()) >= sum(x["status"] == "complete" for x in after)


def _stop_once_recorded(monkeypatch):
    """Ctrl-C right after a trial's rows are saved, before Optuna is told (the window a real Ctrl-C can hit)."""
    from nas_stab.search import trial_states

    real, hit = trial_states.tell, []

    def tell(study, trial, status, *a, **k):
        if status == "complete" and not hit:
            hit.append(trial.number)
            raise KeyboardInterrupt
        return real(study, trial, status, *a, **k)

    monkeypatch.setattr(trial_states, "tell", tell)
    return hit


def _open(tmp_path):
    from nas_stab.config import loads_spec
    from nas_stab.store.rundir import RunDir

    spec = loads_spec(SAMPLED.replace("steps: 300", "steps: 20"))
    return spec, RunDir.open(tmp_path, spec)


def test_a_trial_recorded_before_ctrl_c_is_told_complete_not_interrupted(tmp_path, monkeypatch):
    from nas_stab.search.local import run_local

    spec, rd = _open(tmp_path)
    hit = _stop_once_recorded(monkeypatch)
    with rd, pytest.raises(KeyboardInterrupt):
        run_local(spec, rd)
    d = tmp_path / "tiny"
    assert [int(r["optuna_trial"]) for r in _records(d)] == hit  # its rows were saved ...
    assert _study_agrees(d)[hit[0]] == "COMPLETE"  # ... and the study says so (it said FAIL, status interrupted)


def test_a_study_that_disagrees_with_trials_csv_is_reconciled_on_resume(tmp_path, monkeypatch):
    """A run directory where the study says interrupted (FAIL) for a trial trials.csv records complete -- a second
    Ctrl-C during the closing, or an older nas_stab -- gets a trial in its recorded state, and the sampled search
    still trains exactly search.trials trials."""
    import optuna

    from nas_stab.search import driver
    from nas_stab.search.local import run_local

    spec, rd = _open(tmp_path)
    hit = _stop_once_recorded(monkeypatch)
    monkeypatch.setattr(driver.Trial, "recorded", property(lambda self: None, lambda self, v: None), raising=False)  # the old closing
    with rd, pytest.raises(KeyboardInterrupt):
        run_local(spec, rd)
    d = tmp_path / "tiny"
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{d / 'study.db'}")
    assert study.trials[hit[0]].state.name == "FAIL" and study.trials[hit[0]].user_attrs["status"] == "interrupted"
    monkeypatch.undo()
    spec, rd = _open(tmp_path)
    with rd:
        run_local(spec, rd)
    assert "told Optuna 1 trial(s) closed as interrupted after their rows were recorded" in (d / "log.txt").read_text()
    states = _study_agrees(d)  # the recorded trial's reconciling trial is COMPLETE
    rows = _records(d)
    assert len(rows) == 6 and len({r["run_id"] for r in rows}) == 6
    assert list(states.values()).count("COMPLETE") == sum(r["status"] == "complete" for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_stops_a_ray_search_and_the_rerun_finishes_it(tmp_path, sig):
    """The Ray runner (a local Ray started by the command): the same contract, a longer stop (Tune's own SIGINT
    handler, the trial actors torn down) allowed."""
    spec_path = tmp_path / "tiny.yaml"
    spec_path.write_text(SAMPLED.replace("batch_size: 32}", "batch_size: 32, threads: 1}")
                         + "runner: {kind: ray, concurrency: 2, resources: {cpu: 2}}\n")
    out = tmp_path / "runs"
    rc, err, took = _interrupt(spec_path, out, sig)
    assert rc == EXIT[sig], err[-3000:]
    assert took < 60, f"{took:.1f} s from the signal to the exit"
    assert "Traceback" not in err and "rerun the same command to resume" in err, err[-3000:]
    d = out / "tiny"
    assert 1 <= len(_records(d)) < 6
    _study_agrees(d)
    r = run_cli("run", spec_path, "--out", out)
    assert r.returncode == 0, r.stderr[-3000:]
    after = _records(d)
    assert len(after) == 6 and len({x["run_id"] for x in after}) == 6
    _study_agrees(d)
