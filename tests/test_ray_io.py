"""The Ray runner's costs per trial, as the local runner's: trials.csv is appended to (not
rewritten after every trial), and a worker process that trains several trials loads the data once."""
import csv
import functools
import io
import os
import sys

import pytest
from conftest import TINY
from conftest_ray import rows, run_local_text, run_ray_text, spec_text, without_timing


@pytest.fixture(scope="module", autouse=True)
def _ship_this_module():
    # Ray workers cannot import this test module: send its functions by value
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


LRS = [0.01, 0.02, 0.03, 0.04, 0.05, 0.06]
WAITS_FOR = {0.01: 0.02, 0.03: 0.04, 0.05: 0.06}  # the trials run two at a time, in pairs: each pair's second ends first
HANG_GUARD_S = 300  # only if the trial waited for never ends: the waiting trial then fails, and the test


def recorded_lrs(trials_csv: str) -> set[float]:
    """The learning rates of the rows in `trials_csv` so far (the driver may be appending one: only whole lines)."""
    import csv

    try:
        with open(trials_csv, newline="") as f:
            lines = [ln for ln in f if ln.endswith("\n")]
    except FileNotFoundError:
        return set()
    return {float(r["train.lr"]) for r in csv.DictReader(lines) if r.get("train.lr")}


def toy_run(spec, params, seed, reporter=None, checkpoint=None, *, trials_csv: str):
    """A stand-in for plan.run_job (no training) that finishes out of order: a trial of WAITS_FOR returns only
    once the driver has written its partner's row to `trials_csv` (the partner is a larger lr: sorted after it)."""
    import time

    from nas_stab.training.loop import RunResult

    lr = params["train.lr"]
    for step in (1, 2):
        reporter(step, {"val_acc": lr * step, "train_loss": 1.0})
    partner, deadline = WAITS_FOR.get(lr), time.monotonic() + HANG_GUARD_S
    while partner is not None and partner not in recorded_lrs(trials_csv):  # a poll of a file, not a timed order
        if time.monotonic() > deadline:
            raise RuntimeError(f"lr {lr}: no row of lr {partner} in {trials_csv} after {HANG_GUARD_S} s")
        time.sleep(0.02)
    return RunResult("complete", metrics={"val_acc": 2 * lr, "train_loss": 1.0}, steps=2, history=[{"step": 2}]), ""


def _watch_writes(monkeypatch) -> tuple[list, list]:
    """(rewrites, after_add): for each RunDir.write_trials call, how many add_trials calls came
    before it; for each add_trials call, trials.csv's text after it. The driver (this process)
    is the only writer of the run directory, so patching it here sees every write."""
    from nas_stab.store.rundir import RunDir

    rewrites, after_add = [], []
    real_write, real_add = RunDir.write_trials, RunDir.add_trials

    def write_trials(self, *a, **kw):
        rewrites.append(len(after_add))
        return real_write(self, *a, **kw)

    def add_trials(self, *a, **kw):
        real_add(self, *a, **kw)
        after_add.append((self.path / "trials.csv").read_text())

    monkeypatch.setattr(RunDir, "write_trials", write_trials)
    monkeypatch.setattr(RunDir, "add_trials", add_trials)
    return rewrites, after_add


def _appended(after_add: list[str]) -> bool:
    """Each text is the one before plus one row."""
    return all(after.startswith(before) and after.count("\n") == before.count("\n") + 1
               for before, after in zip(after_add, after_add[1:]))


@pytest.mark.slow
def test_trials_csv_is_appended_per_trial_and_sorted_once_at_the_end(ray_local, tmp_path, monkeypatch):
    from nas_stab.store.rundir import RunDir, trials_csv

    rewrites, after_add = _watch_writes(monkeypatch)
    text = spec_text(space={"train.lr": LRS}, runner={"kind": "ray", "concurrency": 2})
    run_fn = functools.partial(toy_run, trials_csv=str(tmp_path / "tiny" / "trials.csv"))
    spec, d, counts = run_ray_text(text, tmp_path, run_fn=run_fn)
    assert counts == {"complete": 6}
    assert len(after_add) == 6
    finished = [float(r["train.lr"]) for r in csv.DictReader(io.StringIO(after_add[-1]))]  # in the order they were appended
    assert sorted(finished) == LRS
    assert all(finished.index(partner) < finished.index(lr) for lr, partner in WAITS_FOR.items())
    # the first trial writes the file (header and all); each later one only appends its row
    assert _appended(after_add)
    # one rewrite more, after the last trial: the file in (trial, seed) order, as the local runner leaves it
    assert rewrites == [0, 6]
    final = (d / "trials.csv").read_text()
    assert final == trials_csv(RunDir(d).read_trials(), spec.space.keys, "classification")
    assert [float(r["train.lr"]) for r in rows(d)] == LRS
    assert after_add[-1] != final, "the trials finished out of order, so the sort at the end mattered"


def _fake_tune(finish: int, *, interrupt: bool):
    """A stand-in for ray_runner._run_tune: of the trials the driver gives, the last `finish` end, in reverse order."""

    def run(spec, rd, driver, run_fn):
        from nas_stab.search.driver import WAIT
        from nas_stab.training.loop import RunResult

        trials = []
        while (t := driver.next_trial()) not in (None, WAIT):
            trials.append(t)
        for t in reversed(trials[-finish:] if finish else []):
            t.results = [(RunResult("complete", metrics={"val_acc": t.params["train.lr"]}, steps=2, history=[{"step": 2}]), "")]
            driver.finish(t)
        if interrupt:
            raise KeyboardInterrupt  # as run_ray's Tune stopping early
        for t in trials[:-finish] if finish else trials:
            driver.abandon(t)

    return run


def test_trials_csv_sorted_after_an_interrupted_run_and_after_its_rerun(tmp_path, monkeypatch):
    """No Ray: run_ray's bookkeeping around Tune. An interrupted run still leaves (trial, seed) order;
    a rerun appends the missing rows, none twice, and a file left in finish order by a kill is sorted."""
    from nas_stab.config import loads_spec
    from nas_stab.search.ray import runner as ray_runner
    from nas_stab.store.rundir import RunDir, trials_csv

    text = spec_text(space={"train.lr": [0.01, 0.02, 0.03, 0.04, 0.05]}, runner={"kind": "ray"})
    spec = loads_spec(text)
    d = tmp_path / "tiny"

    def table():
        return trials_csv(RunDir(d).read_trials(), spec.space.keys, "classification")

    rewrites, after_add = _watch_writes(monkeypatch)
    monkeypatch.setattr(ray_runner, "_run_tune", _fake_tune(3, interrupt=True))
    with pytest.raises(KeyboardInterrupt):
        run_ray_text(text, tmp_path)
    # the first row creates the file, the next two are appended, and it is sorted once on the way out
    assert len(after_add) == 3 and _appended(after_add) and rewrites == [0, 3]
    first = rows(d)
    assert [float(r["train.lr"]) for r in first] == [0.03, 0.04, 0.05]
    assert (d / "trials.csv").read_text() == table()

    p = d / "trials.csv"
    head, *lines = p.read_text().splitlines(keepends=True)
    p.write_text(head + "".join(reversed(lines)))  # as if killed between the last append and the final sort
    monkeypatch.setattr(ray_runner, "_run_tune", _fake_tune(2, interrupt=False))
    del rewrites[:], after_add[:]
    _, _, counts = run_ray_text(text, tmp_path)
    assert counts == {"complete": 5}
    assert rewrites == [0, 2] and _appended(after_add)  # a new driver rewrites the file with its first rows
    assert [float(r["train.lr"]) for r in rows(d)] == [0.01, 0.02, 0.03, 0.04, 0.05]
    assert rows(d)[2:] == first and p.read_text() == table()

    p.write_text(head + "".join(reversed(p.read_text().splitlines(keepends=True)[1:])))
    monkeypatch.setattr(ray_runner, "_run_tune", _fake_tune(0, interrupt=False))
    run_ray_text(text, tmp_path)  # nothing left to train: the file is only put back in order
    assert p.read_text() == table() and len(rows(d)) == 5


def counting_run(spec, params, seed, reporter=None, checkpoint=None, *, marks: str):
    """plan.run_job, noting in `marks` each run and each dataset load, by worker process."""
    from nas_stab import data
    from nas_stab.search import plan

    pid = os.getpid()
    if not getattr(data, "_counting_loads", False):
        real_get = data.DATASETS.get

        def get(name):
            loader = real_get(name)

            def counted(cfg, device):
                with open(os.path.join(marks, f"load-{pid}"), "a") as f:
                    f.write(f"{name}\n")
                return loader(cfg, device)

            return counted

        data.DATASETS.get = get  # this worker process only
        data._counting_loads = True
    with open(os.path.join(marks, f"run-{pid}"), "a") as f:
        f.write(f"{params}\n")
    return plan.run_job(spec, params, seed, reporter, checkpoint)


def _marks(d, kind: str) -> dict[str, int]:
    return {p.name.split("-", 1)[1]: len(p.read_text().splitlines()) for p in d.glob(f"{kind}-*")}


@pytest.mark.slow
def test_a_worker_process_loads_the_data_once_for_its_trials(ray_local, tmp_path):
    marks = tmp_path / "marks"
    marks.mkdir()
    # concurrency 1: Tune hands the one trial actor (a worker process) from each trial to the next
    text = spec_text(TINY, train={"threads": 1}, runner={"kind": "ray", "concurrency": 1})
    spec, d, counts = run_ray_text(text, tmp_path / "ray", run_fn=functools.partial(counting_run, marks=str(marks)))
    assert counts == {"complete": 4}
    runs, loads = _marks(marks, "run"), _marks(marks, "load")
    assert sum(runs.values()) == 4
    assert max(runs.values()) >= 2, f"no worker process trained two trials (runs by pid: {runs})"
    assert loads == {pid: 1 for pid in runs}, f"each worker process loads digits once (runs {runs}, loads {loads})"
    # the shared data changes nothing: the same table as the local runner's (which also loads it once)
    local = run_local_text(text, tmp_path / "local")
    assert without_timing(rows(d)) == without_timing(rows(local))
    for f in sorted((local / "history").iterdir()):
        assert (d / "history" / f.name).read_text() == f.read_text(), f.name


def test_reuse_data_keeps_one_block_per_experiment(monkeypatch):
    """ray_trial.reuse_data without Ray: same experiment, same data object; another experiment reads again."""
    from nas_stab import data
    from nas_stab.config import loads_spec
    from nas_stab.search.ray import trial as ray_trial

    spec = loads_spec("name: x\ntask: {dataset: {name: digits}}\nmodel: {arch: mlp}")
    calls = []
    real = data.DATASETS.get("digits")
    monkeypatch.setattr(data.DATASETS, "get", lambda name: (lambda cfg, device: calls.append(1) or real(cfg, device)))
    assert ray_trial._DATA_SCOPE is None and data._MEMO is None
    try:
        ray_trial.reuse_data("exp-a")
        a = data.load_dataset(spec, "cpu")
        ray_trial.reuse_data("exp-a")  # the next trial of the same experiment
        assert data.load_dataset(spec, "cpu") is a and len(calls) == 1
        ray_trial.reuse_data("exp-b")  # a trial of another experiment in the same process
        b = data.load_dataset(spec, "cpu")
        assert b is not a and len(calls) == 2
    finally:
        if ray_trial._DATA_SCOPE is not None:
            ray_trial._DATA_SCOPE[1].__exit__(None, None, None)
            ray_trial._DATA_SCOPE = None
    assert data._MEMO is None
