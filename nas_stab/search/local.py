"""The local runner, the embedded default: runs trained on this machine, Optuna in SQLite.

Resuming is the normal case: rerunning the same spec skips every run whose
key is already in trials.csv, closes trials a killed driver left RUNNING as
FAIL (status interrupted) and trains them again (`driver.Driver`).

`runner.concurrency: N` > 1 trains N runs at once in worker processes
(nas_stab/search/local_pool.py); N = 1 trains in this process. Either way this
process alone asks, tells and writes the run directory: both are executors
(`protocols.Executor`) of the one driver (`driver.Driver.drive`).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

from nas_stab.config.schema import Spec
from nas_stab.search import plan
from nas_stab.search.driver import Driver
from nas_stab.search.local_pool import WorkerPool, worker_threads
from nas_stab.search.protocols import Executor, JobSource, Run

if TYPE_CHECKING:  # types only: training.loop imports torch
    from nas_stab.store.protocol import RunStore
    from nas_stab.training.loop import RunResult


def run_local(spec: Spec, rd: RunStore, *, trials: int | None = None, progress_stream: TextIO | None = None,
              source: JobSource | None = None) -> dict:
    """Run every pending trial of `spec` into run directory `rd`. Returns status counts.

    `source` (a `protocols.JobSource`) replaces the grid or the sampler as where jobs come from.
    """
    from nas_stab.data import reuse_loaded  # deferred: loads torch only when this runs

    with reuse_loaded():  # the data is loaded once for the whole search, not once per run
        driver = Driver(spec, rd, trials=trials, source=source, progress_stream=progress_stream)
        try:
            if spec.runner.concurrency > 1:
                _pooled(spec, driver)
            else:
                import torch  # deferred: loads torch only when this runs

                torch.set_num_threads(worker_threads(spec, 1))  # the one "worker" is this process
                driver.drive(InProcess(spec, driver.prune))
        finally:
            counts = driver.close()
    return counts


class InProcess(Executor):
    """The `protocols.Executor` of `runner.concurrency: 1`: one run at a time, trained in this process when waited for."""

    def __init__(self, spec: Spec, prune: bool):
        self.spec, self.prune = spec, prune
        self.run: Run | None = None

    @property
    def idle(self) -> int:
        return int(self.run is None)

    @property
    def busy(self) -> list[Run]:
        return [self.run] if self.run is not None else []

    def submit(self, run: Run) -> None:
        self.run = run

    def wait(self) -> list[tuple[Run, RunResult, str]]:
        run = self.run
        assert run is not None, "the driver waits only with a run submitted (busy)"
        reporter = plan.make_reporter(run, self.spec.search.objective, offset=run.offset, prune=self.prune)
        result, tb = plan.run_job(self.spec, run.job.params, run.job.seed, reporter, resolved=run.resolved)
        self.run = None
        return [(run, result, tb)]


def _pooled(spec: Spec, driver: Driver) -> None:
    n = min(spec.runner.concurrency, driver.startable())
    if n <= 0:
        return
    with WorkerPool(spec, n, driver.rd.log) as pool:  # no idle worker started; more join if a job source gives more
        driver.drive(Pooled(pool, spec.runner.concurrency, driver.prune))


class Pooled(Executor):
    """`local_pool.WorkerPool` as a `protocols.Executor`: up to `limit` workers, one started only when a run needs it."""

    def __init__(self, pool: WorkerPool, limit: int, prune: bool):
        self.pool, self.limit, self.prune = pool, limit, prune

    @property
    def idle(self) -> int:
        return self.pool.idle + max(0, self.limit - self.pool.n)

    @property
    def busy(self) -> list[Run]:
        return self.pool.busy

    def submit(self, run: Run) -> None:
        if not self.pool.idle:
            self.pool.grow()
        self.pool.submit(run, run, run.job.params, run.job.seed, run.resolved, offset=run.offset, prune=self.prune)

    def wait(self) -> list[tuple[Run, RunResult, str]]:
        return self.pool.wait()
