"""The two interfaces a new piece of a search is written against (`search/driver.py` uses both):

- a `JobSource` decides which runs to train, possibly as results come in (`sources.py`: `grid`;
  `bracket.py`, `adaptive.py`, `transfer.py`);
- an `Executor` trains the runs the driver hands it (`local.py`: in this process or on a worker pool).

A backend that schedules trials itself (Ray Tune) is neither: it calls the driver's trial API
(`Driver.next_trial`, `finish`, `abandon`; the driver's docstring).
"""
from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from nas_stab.search.plan import Job
    from nas_stab.training.loop import RunResult


class Run(Protocol):
    """One job of a trial as the driver hands it to an executor (the driver's `driver.Run`): the job, its
    resolved configuration, the step its history starts at, and where its reports go."""

    job: Job
    resolved: Any
    offset: int

    def report(self, value: float, step: int) -> None:
        """An intermediate objective value at `step` (Optuna's report; the progress display)."""
        ...

    def should_prune(self) -> bool:
        """Whether the trial's pruner stops it now."""
        ...


class JobSource(Protocol):
    """Where the jobs of a search come from when Optuna's sampler does not ask (`Driver(source=...)`).

    The driver calls `pending` whenever a backend has a free slot (again after a run finished if
    it said []). Jobs already recorded or running are skipped, so a resumed search trains nothing
    twice. A `search.sampler` name registered in `sources.JOB_SOURCES` (a class taking
    `(spec, limit)`, limit: `--trials`, None for all) selects a job source instead of Optuna's
    asks. Each job is enqueued into the study and asked as one Optuna trial, exactly as a grid point.

    Optional members, looked up with `getattr`:

    - ``total: int | None``: the runs it yields in all, when known (the progress display);
    - ``expected(records: Sequence[dict]) -> tuple[int, str, str] | None``: when `total` is not
      known, the runs expected in all, and notes on the estimate, for the display;
    - ``decision_facts: dict`` and ``decisions(records: Sequence[dict]) -> list[dict]``: a source
      that decides as results come in says what it decided (its state as events,
      `store/decisions.py`); the driver appends what changed to the run directory's
      ``decisions.jsonl`` after each trial, for the leaderboard and `nas-stab status`;
    - ``suggest(trial: optuna.Trial, base: Callable[[str], Any]) -> None``: record an enqueued
      job's values in its Optuna trial, when they may lie outside the space's grid (else
      `Space.suggest(trial, base, grid=True)` records them).
    """

    def pending(self, records: Sequence[dict], running: Collection[str]) -> list[Job] | None:
        """Jobs that may start now, given every recorded trials.csv row and the keys of the runs in
        flight; [] = nothing now (ask again when a run finishes); None = nothing more will come."""
        ...


class Executor(Protocol):
    """Trains the runs `Driver.drive(executor)` hands it; the driver does the rest (asks, tells, records).

    Training a run, wherever it happens, is

        reporter = plan.make_reporter(run, spec.search.objective, offset=run.offset, prune=driver.prune)
        result, tb = plan.run_job(spec, run.job.params, run.job.seed, reporter, resolved=run.resolved)

    where `run.report(value, step)` and `run.should_prune()` are called in the driver's process
    (an executor with remote workers forwards them, as `local_pool` does over a pipe; one that
    cannot simply reports nothing and never prunes). For example, a thread pool:

        class Threads(Executor):
            def __init__(self, spec, driver, n):
                self.pool, self.spec, self.driver = ThreadPoolExecutor(n), spec, driver
                self.n, self.futures = n, {}
            idle = property(lambda self: self.n - len(self.futures))
            busy = property(lambda self: list(self.futures.values()))
            def submit(self, run):
                rep = plan.make_reporter(run, self.spec.search.objective, offset=run.offset, prune=False)
                f = self.pool.submit(plan.run_job, self.spec, run.job.params, run.job.seed, rep, resolved=run.resolved)
                self.futures[f] = run
            def wait(self):
                done, _ = concurrent.futures.wait(self.futures, return_when=FIRST_COMPLETED)
                return [(self.futures.pop(f), *f.result()) for f in done]

        driver = Driver(spec, rd)
        try:
            driver.drive(Threads(spec, driver, 4))
        finally:
            counts = driver.close()
    """

    @property
    def idle(self) -> int:
        """Runs it can start now."""
        ...

    @property
    def busy(self) -> Sequence[Run]:
        """Runs in progress."""
        ...

    def submit(self, run: Run) -> None:
        """Start training `run.job`."""
        ...

    def wait(self) -> list[tuple[Run, RunResult, str]]:
        """Block until at least one run finished: (run, its result, traceback text or "") each."""
        ...
