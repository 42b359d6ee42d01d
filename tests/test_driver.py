"""The one driver of every runner (nas_stab/search/driver.py).

- every runner gives the trials.csv it gave before the driver existed: tests/data/driver/*.csv were
  written by the local runner of the code before it (tests/data/driver/make.py), on a grid with a
  diverging learning rate and on a random search whose seeds stop at the first that does not complete;
- a job source decides the jobs as results come in (`JobSource.pending`), through the local runner
  (in-process and worker pool) and the Ray runner, and an interrupted search resumes without
  training anything twice;
- Optuna only through its public API.
"""
from __future__ import annotations

import csv
import functools
import math
import os
import re
import signal
import sys
from pathlib import Path

import pytest
from conftest_ray import rows, run_local_text, run_ray_text, spec_text, without_timing

DATA = Path(__file__).parent / "data" / "driver"
FAST = {"threads": 1, "steps": 10, "eval_every": 5}
STAB = {"every": 5, "probe_batch": 32, "hessian": False}
GRID = spec_text(seeds=2, train=FAST, stability=STAB, space={"model.branches": [1, 2], "train.lr": [0.05, 50.0]})
SAMPLED = spec_text(seeds=2, train=FAST, stability=STAB,
                    space={"model.branches": {"values": [1, 2]}, "train.lr": {"loguniform": [0.01, 100.0]}},
                    search={"sampler": "random", "trials": 4, "seed": 3})
SPECS = {"grid": GRID, "sampled": SAMPLED}


@pytest.fixture
def shipped():
    """Ray workers cannot import this test module: its functions go by value."""
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def expected(name: str) -> list[dict]:
    with open(DATA / f"{name}.csv") as f:
        return list(csv.DictReader(f))


def without_wall(rs):
    from nas_stab.store.rundir import TIMING_COLUMNS

    return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in rs]


def _num(v: str):
    try:
        return float(v)
    except ValueError:
        return None


def assert_same_records(got: list[dict], want: list[dict]) -> None:
    """The same rows, columns, keys, statuses and texts; numbers equal to 5 significant digits, or within 1e-6 of
    each other (the fixtures were written on a CPU whose vector kernels round differently in the 7th digit; a
    difference of two losses near 2.3, as final_loss_drop, carries their rounding: 0.0348803 on an Intel CPU,
    0.0348799 on the AMD one that wrote the fixture)."""
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == list(w)
        for k in w:
            a, b = _num(g[k]), _num(w[k])
            if a is None or b is None or math.isnan(a) or math.isnan(b):
                assert g[k] == w[k], (k, g[k], w[k])
            else:
                assert math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-6), (w.get("trial"), w.get("seed"), k, g[k], w[k])


@pytest.mark.parametrize("name", ["grid", "sampled"])
@pytest.mark.parametrize("concurrency", [1, 2])
def test_local_runner_gives_the_trials_csv_it_gave_before(tmp_path, name, concurrency):
    d = run_local_text(spec_text(SPECS[name], runner={"concurrency": concurrency}), tmp_path)
    got, want = rows(d), expected(name)
    assert {r["status"] for r in want} >= {"complete", "diverged"}  # the fixture covers both
    assert_same_records(without_wall(got), without_wall(want))


@pytest.mark.slow
@pytest.mark.parametrize("name", ["grid", "sampled"])
def test_ray_runner_gives_the_trials_csv_the_local_runner_gave_before(ray_local, shipped, tmp_path, name):
    _, d, _ = run_ray_text(spec_text(SPECS[name], runner={"kind": "ray", "concurrency": 2}), tmp_path)
    assert_same_records(without_timing(rows(d)), without_timing(expected(name)))


# ------------------------------------------------------------------ an adaptive job source

ADAPTIVE = spec_text(train={"threads": 1, "steps": 10, "eval_every": 5}, stability={"every": 0, "hessian": False},
                     space={"train.lr": [0.01, 0.02, 0.03], "train.steps": [10, 1000]})


class Adaptive:
    """lr 0.01 first; lr 0.02 and 0.03 (a longer run) only once 0.01's record exists (as a bracket
    that waits for a result before choosing the next learning rates). With `stop_after` records it
    stops the search once, when asked, as Ctrl-C does: it raises KeyboardInterrupt at that point (the
    local runner), or with `signal_=True` sends this process SIGINT (the Ray runner stops through Tune's
    own SIGINT handler; a KeyboardInterrupt raised inside Tune's searcher leaves workers behind)."""

    def __init__(self, spec, stop_after: int | None = None, *, signal_: bool = False):
        from nas_stab.search.plan import grid_jobs

        pick = {(0.01, 10), (0.02, 10), (0.03, 1000)}  # any Job objects would do: these come from the grid
        self.first, *self.later = [j for j in grid_jobs(spec) if (j.params["train.lr"], j.params["train.steps"]) in pick]
        self.stop_after, self.signal_ = stop_after, signal_
        self.seen: list[tuple[set, set, list]] = []  # (recorded keys, running keys, keys returned) per call

    def pending(self, records, running):
        done = {r["key"] for r in records}
        if self.stop_after is not None and len(done) >= self.stop_after:
            self.stop_after = None
            if not self.signal_:
                raise KeyboardInterrupt  # what Ctrl-C raises in this process, at a known point (deterministic)
            os.kill(os.getpid(), signal.SIGINT)
        if self.first.key not in done:
            out = [] if self.first.key in running else [self.first]
        elif all(j.key in done for j in self.later):
            out = None
        else:
            out = [j for j in self.later if j.key not in done and j.key not in running]
        self.seen.append((done, set(running), None if out is None else [j.key for j in out]))
        return out

    def check(self) -> None:
        """0.02 and 0.03 were never given before 0.01's record existed; nothing given twice at once."""
        for done, running, out in self.seen:
            for key in out or []:
                assert key not in done and key not in running
                if key != self.first.key:
                    assert self.first.key in done


def _lrs(d) -> list[float]:
    return [float(r["train.lr"]) for r in rows(d)]


def _run_local(text, out, source, **kw):
    from nas_stab.config import loads_spec
    from nas_stab.search.local import run_local
    from nas_stab.store.rundir import RunDir

    spec = loads_spec(text)
    with RunDir.open(out, spec) as rd:
        return run_local(spec, rd, source=source, **kw)


def _study(d):
    from conftest_ray import study_of

    return study_of(type("S", (), {"name": "tiny"}), d)


@pytest.mark.parametrize("concurrency", [1, 2])
def test_an_adaptive_job_source_through_the_local_runner_resumes_without_training_twice(tmp_path, concurrency):
    from nas_stab.config import loads_spec

    text = spec_text(ADAPTIVE, runner={"concurrency": concurrency})
    spec = loads_spec(text)
    first = Adaptive(spec, stop_after=2)  # Ctrl-C once two runs are recorded (concurrency 2: the third is running)
    with pytest.raises(KeyboardInterrupt):
        _run_local(text, tmp_path, first)
    first.check()
    d = tmp_path / "tiny"
    before = rows(d)
    assert len(before) == 2 and _lrs(d)[0] == 0.01
    if concurrency == 2:  # 0.02 and 0.03 were given together and ran at once; one was interrupted
        assert any(len(out or []) == 2 for _, _, out in first.seen)
        assert [t.user_attrs.get("status") for t in _study(d).trials].count("interrupted") == 1

    again = Adaptive(spec)
    assert _run_local(text, tmp_path, again) == {"complete": 3}
    again.check()
    after = rows(d)
    assert _lrs(d) == [0.01, 0.02, 0.03]
    assert [r for r in after if r["key"] in {b["key"] for b in before}] == before  # kept, not trained again
    assert again.seen[0][0] == {r["key"] for r in before}
    states = [t.state.name for t in _study(d).trials]
    assert states.count("COMPLETE") == 3 and "RUNNING" not in states
    assert _run_local(text, tmp_path, Adaptive(spec)) == {"complete": 3} and len(rows(d)) == 3  # nothing left


def test_a_source_that_waits_with_nothing_running_ends_the_search(tmp_path):
    class Never:
        calls = 0

        def pending(self, records, running):
            Never.calls += 1
            return []

    assert _run_local(ADAPTIVE, tmp_path, Never()) == {} and Never.calls == 2  # the resume note's look, then the ask that ends it


def toy_run(spec, params, seed, reporter=None, checkpoint=None, *, release: str):
    """A stand-in for plan.run_job: no training. The longer run (train.steps 1000) ends only once the
    file `release` exists: it is still running when the first search is stopped, however slow the machine."""
    import time

    from nas_stab.training.loop import RunResult

    deadline = time.monotonic() + 300  # a hang guard only: the run then fails, and the test
    while params["train.steps"] > 10 and not os.path.exists(release):
        if time.monotonic() > deadline:
            raise RuntimeError(f"{release} never appeared")
        time.sleep(0.02)
    lr = float(params["train.lr"])
    if reporter is not None:
        reporter(5, {"val_acc": lr})
    return RunResult("complete", metrics={"val_acc": lr}, steps=10, history=[{"step": 10, "val_acc": lr}]), ""


@pytest.mark.slow
def test_an_adaptive_job_source_through_the_ray_runner_resumes_without_training_twice(ray_local, shipped, tmp_path):
    from nas_stab.config import loads_spec

    text = spec_text(ADAPTIVE, runner={"kind": "ray", "concurrency": 2})
    spec = loads_spec(text)
    release = tmp_path / "release"
    run_fn = functools.partial(toy_run, release=str(release))
    first = Adaptive(spec, stop_after=2, signal_=True)  # SIGINT once 0.01 and 0.02 are recorded: 0.03 is still running
    with pytest.raises(KeyboardInterrupt):
        run_ray_text(text, tmp_path, run_fn=run_fn, source=first)
    first.check()
    d = tmp_path / "tiny"
    before = rows(d)
    assert len(before) == 2 and _lrs(d)[0] == 0.01
    again = Adaptive(spec)
    release.touch()
    _, _, counts = run_ray_text(text, tmp_path, run_fn=run_fn, source=again)
    assert counts == {"complete": 3}
    again.check()
    assert _lrs(d) == [0.01, 0.02, 0.03]
    assert [r for r in rows(d) if r["key"] in {b["key"] for b in before}] == before
    assert "RUNNING" not in [t.state.name for t in _study(d).trials]


def test_optuna_only_through_public_api():
    root = Path(__file__).resolve().parents[1] / "nas_stab"
    private = re.compile(r"\._storage\b|\._trial_id\b|\._study_id\b")
    hits = [f"{p.relative_to(root)}:{i}" for p in root.rglob("*.py")
            for i, line in enumerate(p.read_text().splitlines(), 1) if private.search(line)]
    assert not hits
