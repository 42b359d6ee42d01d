"""The local runner at `runner.concurrency: 2`: runs train in worker processes
(nas_stab/search/local_pool.py) while the driver alone owns the Optuna study
and the run directory. Same results as in-process for a grid, samplers finish
their trials, the pruner still prunes, divergence is data, a killed driver's
rerun completes the table and leaves no worker behind."""
from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
from conftest import TINY, run_cli
from conftest_ray import rows, run_local_text, spec_text, study_of, without_timing

FINAL = {"COMPLETE", "PRUNED", "FAIL"}

# one diverging learning rate in the grid: 2 branch counts x (a good lr, a diverging one)
GRID = spec_text(train={"threads": 1}, space={"model.branches": [1, 2], "train.lr": [0.05, 50.0]})


def _histories(d: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((d / "history").glob("*.csv"))}


@pytest.fixture(scope="module")
def grid_runs(tmp_path_factory):
    """The grid at concurrency 1 (with the worker pool made unusable: no worker processes) and at 2."""
    from nas_stab.search import local_pool

    out = tmp_path_factory.mktemp("grid")

    class NoPool:
        def __init__(self, *a, **k):
            raise AssertionError("concurrency 1 must not start worker processes")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(local_pool, "WorkerPool", NoPool)
        one = run_local_text(GRID, out / "c1")
    two = run_local_text(spec_text(GRID, runner={"concurrency": 2}), out / "c2")
    return one, two


def test_grid_at_concurrency_2_equals_in_process(grid_runs):
    one, two = grid_runs
    r1, r2 = rows(one), rows(two)
    assert len(r2) == 4
    assert without_timing(r2) == without_timing(r1)  # status, metrics, steps: identical, in (trial, seed) order
    assert [(int(r["trial"]), int(r["seed"])) for r in r2] == sorted((int(r["trial"]), int(r["seed"])) for r in r2)
    assert _histories(two) == _histories(one) and len(_histories(two)) == 4
    assert not multiprocessing.active_children()  # the pool is closed at the end of the run


def test_diverging_lr_is_recorded_diverged_at_concurrency_2(grid_runs):
    _, two = grid_runs
    by_lr = {}
    for r in rows(two):
        by_lr.setdefault(float(r["train.lr"]), []).append(r)
    assert {r["status"] for r in by_lr[0.05]} == {"complete"}
    for r in by_lr[50.0]:
        assert r["status"] == "diverged" and int(r["diverged_step"]) >= 1 and r["error"]
    from nas_stab.config import loads_spec

    study = study_of(loads_spec(GRID), two)
    states = {t.user_attrs["status"]: t.state.name for t in study.trials}
    assert states == {"complete": "COMPLETE", "diverged": "PRUNED"}


def test_tpe_at_concurrency_2_finishes_every_trial(tmp_path):
    # two seeds per trial: the second seed of a trial runs after its first, on whichever worker is free
    text = spec_text(seeds=2, train={"threads": 1, "steps": 10, "eval_every": 5},  # reports (the budget's default: none)
                     space={"model.branches": [1, 2], "train.lr": {"loguniform": [0.001, 0.1]}},
                     search={"sampler": "tpe", "trials": 5})
    d = run_local_text(spec_text(text, runner={"concurrency": 2}), tmp_path)
    from nas_stab.config import loads_spec

    study = study_of(loads_spec(text), d)
    assert len(study.trials) == 5
    assert {t.state.name for t in study.trials} <= FINAL  # none RUNNING or WAITING
    r = rows(d)
    assert len(r) == 10 and {x["status"] for x in r} == {"complete"}
    assert sorted({int(x["optuna_trial"]) for x in r}) == [0, 1, 2, 3, 4]
    for t in study.trials:  # the trial's value is the mean over its seeds, as in-process
        objs = [float(x["objective"]) for x in r if int(x["optuna_trial"]) == t.number]
        assert t.value == pytest.approx(sum(objs) / 2, rel=1e-5)  # trials.csv keeps 6 significant digits
        # both seeds reported into the trial, seed 1 at steps offset by train.steps (10)
        steps = sorted(t.intermediate_values)
        assert steps[0] <= 10 < steps[-1] <= 20


def test_pruner_prunes_at_concurrency_2(tmp_path):
    # a threshold pruner nothing passes: every trial is pruned at its first report, decided by the driver's study
    text = spec_text(train={"threads": 1, "eval_every": 5},
                     search={"sampler": "random", "trials": 4, "pruner": {"threshold": {"lower": 2.0}}},
                     runner={"concurrency": 2})
    d = run_local_text(text, tmp_path)
    r = rows(d)
    assert len(r) == 4 and all(x["status"] == "pruned" and int(x["steps"]) < 20 for x in r)
    from nas_stab.config import loads_spec

    study = study_of(loads_spec(text), d)
    assert [t.state.name for t in study.trials] == ["PRUNED"] * 4
    assert all(len(t.intermediate_values) == 1 for t in study.trials)  # the report the pruner acted on


def test_a_worker_that_dies_mid_run_fails_that_run_only():
    from nas_stab.config import loads_spec
    from nas_stab.search import plan
    from nas_stab.search.local_pool import WorkerPool

    spec = loads_spec(spec_text(train={"threads": 1, "eval_every": 5}, space={"train.steps": [2000, 20]},
                                runner={"max_failures": 0}))  # no retry (see test_a_dead_workers_run_is_retried)
    resolved: dict = {}
    long_job, short_job = plan.grid_jobs(spec, resolved=resolved)

    class Trial:  # kills its worker at the first report: a crash in native code, the OOM killer
        reports: list = []

        def report(self, value, step):
            self.reports.append(step)
            os.kill(pid, signal.SIGKILL)

        def should_prune(self):
            return False

    with WorkerPool(spec, 1) as pool:
        pid = pool._workers[0].process.pid
        pool.submit("long", Trial(), long_job.params, 0, resolved[long_job.key])
        [(tag, result, tb)] = pool.wait()
        assert (tag, result.status) == ("long", "failed") and "worker process died" in result.error
        assert "gave up after 1 failure(s), runner.max_failures=0" in result.error
        assert Trial.reports  # it was training
        quiet = type("Quiet", (), {"report": lambda self, v, s: None, "should_prune": lambda self: False})()
        pool.submit("short", quiet, short_job.params, 0, resolved[short_job.key])  # on a fresh worker
        [(tag, result, tb)] = pool.wait()
        assert (tag, result.status, result.steps) == ("short", "complete", 20)
        assert pool._workers[0].process.pid != pid


def test_a_dead_workers_run_is_retried_up_to_max_failures(tmp_path, monkeypatch):
    """A worker SIGKILLed mid-run (NAS_STAB_FAULT=worker-kill: the first worker to report kills
    itself, once) under concurrency 2: the run is trained again on a fresh worker, as the Ray
    runner retries, and the table is complete (with runner.max_failures 0 the run fails: the test above)."""
    marker = tmp_path / "killed-once"
    monkeypatch.setenv("NAS_STAB_FAULT", f"worker-kill:{marker}")
    text = spec_text(train={"threads": 1, "steps": 20, "eval_every": 5}, stability={"every": 0, "hessian": False},
                     space={"model.branches": [1, 2, 3]}, runner={"concurrency": 2})
    d = run_local_text(text, tmp_path / "retry")
    counts = {s: [r["status"] for r in rows(d)].count(s) for s in {r["status"] for r in rows(d)}}
    assert marker.exists(), "no worker was killed"
    assert counts == {"complete": 3}, counts
    assert [r["status"] for r in rows(d)] == ["complete"] * 3
    assert "worker process died (exit code -9) during a run; training it again" in (d / "log.txt").read_text()
    study = study_of(type("S", (), {"name": "tiny"}), d)
    assert sorted(t.state.name for t in study.trials) == ["COMPLETE"] * 3


def test_workers_started_are_at_most_the_runs_left(tmp_path, monkeypatch):
    from nas_stab.search import local_pool

    started = []

    class Stop(Exception):
        pass

    def init(self, spec, n, log=None):
        started.append(n)
        raise Stop  # how many were asked for is all this test needs

    monkeypatch.setattr(local_pool.WorkerPool, "__init__", init)
    text = spec_text(train={"threads": 1, "steps": 5}, stability={"every": 0, "hessian": False},
                     space={"model.branches": [1, 2]}, runner={"concurrency": 16})
    for i, t in enumerate([text, spec_text(text, search={"sampler": "random", "trials": 3})]):
        with pytest.raises(Stop):
            run_local_text(t, tmp_path / str(i))
    assert started == [2, 3]


def _descendants(pid: int) -> list[int]:
    parent = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                parent[int(p.name)] = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
    out, frontier = [], [pid]
    while frontier:
        kids = [c for c, pp in parent.items() if pp in frontier]
        out += kids
        frontier = kids
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie nobody reaps yet is dead


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_driver_sigkill_then_rerun_completes_the_table(tmp_path):
    text = spec_text(TINY.replace("steps: 20", "steps: 60").replace("[1, 2]", "[1, 2, 3]"), train={"threads": 1})
    ref = run_local_text(text, tmp_path / "ref")
    spec = tmp_path / "tiny.yaml"
    spec.write_text(spec_text(text, runner={"concurrency": 2}))
    out = tmp_path / "killed"
    p = subprocess.Popen([sys.executable, "-m", "nas_stab.cli", "run", str(spec), "--out", str(out)],
                         env=dict(os.environ, PYTHONUNBUFFERED="1"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    csv_path = out / "tiny" / "trials.csv"
    deadline = time.time() + 120
    while time.time() < deadline and p.poll() is None:  # kill once a run is recorded and others are training
        if csv_path.exists() and len(csv_path.read_text().splitlines()) >= 2:
            break
        time.sleep(0.05)
    workers = _descendants(p.pid)
    assert p.poll() is None, "the run finished before it could be killed"
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert len(workers) >= 3  # the fork server, its 2 workers (and multiprocessing's resource tracker)
    deadline = time.time() + 10
    while any(_alive(w) for w in workers) and time.time() < deadline:
        time.sleep(0.1)
    assert not [w for w in workers if _alive(w)], "processes outlived the killed driver"
    done_before = len(rows(out / "tiny"))
    assert 1 <= done_before < 6

    final = run_cli("run", spec, "--out", out)
    assert final.returncode == 0, final.stderr[-2000:]
    assert "closed" in (out / "tiny" / "log.txt").read_text()  # the killed run's RUNNING trials
    d = out / "tiny"
    got = rows(d)
    assert without_timing(got) == without_timing(rows(ref))  # all 6 runs once, in order, same results
    assert _histories(d) == _histories(ref)
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{d / 'study.db'}")
    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") == 6 and set(states) <= FINAL
    assert all(t.user_attrs.get("status") == "interrupted" for t in study.trials if t.state.name != "COMPLETE")
