"""The driver of a search: the one place that asks Optuna, tells it, writes the records and shows progress.

Every runner goes through one `Driver` (one per `nas-stab run`, in the `nas-stab run`
process): it opens the study and reconciles it with trials.csv (`trial_states.open_study`),
asks Optuna for the next trial, writes a finished trial's records before telling Optuna its
state (`records.Records.save`), closes the trials still in flight when it stops (status
interrupted), follows the seed policy (`plan.ends_trial`) and sorts trials.csv once at the
end. Backends only train runs and stream their reports back.

Words:

- a *job* (`plan.Job`) is one run: a configuration x a seed, with a stable key;
- a *trial* (`Trial`) is one Optuna trial in flight. A job from a job source is one trial
  (its parameters enqueued, then asked, so the study records every run with its parameters
  and the pruner sees it); a sampler's trial (`search.sampler` random, tpe, ...) is one
  configuration Optuna suggests, trained once per seed in order until a seed does not
  complete, its value the mean objective over its seeds;
- a *run* (`Run`) is one job of a trial handed to a backend, with where its reports go.

Where jobs come from. Samplers are ask-driven (Optuna suggests). Otherwise a *job source*
(`protocols.JobSource`) decides, and it may decide as results come in. A `search.sampler` name
registered in `JOB_SOURCES` selects one instead of Optuna's asks; `GridSource` (every grid point
x seed, all pending at once) is `grid`. A job is `plan.Job(trial, seed, params, key, run_id)`
with `key = config.config_key(resolved, seed)`.

A backend is one of two shapes.

1. An *executor* (`protocols.Executor`: the local runner in-process and its worker pool; a Dask
   or SLURM backend would be one too): `Driver.drive(executor)` does the rest.

2. A backend that schedules trials itself (Ray Tune, `search/ray/bridge.py`): it calls
   `driver.next_trial()` when it has a slot (a `Trial`, `WAIT`: nothing now, ask again later,
   or None: nothing more), trains `trial.jobs` in order under the seed policy, reports
   through `trial.report` / `trial.should_prune`, appends (result, traceback) to
   `trial.results` and calls `driver.finish(trial)`; `driver.abandon(trial)` if it gives up.
"""
from __future__ import annotations

import contextlib
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, cast

from nas_stab import gcsetup
from nas_stab.config.mode import search_mode
from nas_stab.errors import check_termination
from nas_stab.search import plan, trial_states
from nas_stab.search.plan import Job
from nas_stab.search.progress import Progress
from nas_stab.search.protocols import Executor, JobSource
from nas_stab.search.records import Records
from nas_stab.search.sources import JOB_SOURCES
from nas_stab.search.sources.adaptive import AdaptiveSeeds
from nas_stab.search.sources.transfer import TransferSource
from nas_stab.search.trial_states import INTERRUPTED
from nas_stab.store.decisions import DECISIONS, DecisionLog

if TYPE_CHECKING:
    import optuna

    from nas_stab.config.schema import Spec
    from nas_stab.store.protocol import RunStore
    from nas_stab.training.loop import RunResult


class _Wait:
    def __repr__(self) -> str:
        return "WAIT"


WAIT = _Wait()  # nothing to start now: ask again when a trial finishes


class Trial:
    """One Optuna trial in flight: its jobs (one per seed, trained in order), and their results so far."""

    def __init__(self, ot: optuna.Trial, jobs: list[Job], params: dict):
        self.ot, self.jobs, self.params = ot, jobs, params
        self.results: list[tuple] = []  # (RunResult, traceback text) per job trained, in order
        self.closed = False  # told Optuna its final state
        self.recorded: tuple[str, float | None, str] | None = None  # (status, value, error) once its rows are saved

    @property
    def number(self) -> int:
        return self.ot.number

    def report(self, value: float, step: int) -> None:
        self.ot.report(value, step)

    def should_prune(self) -> bool:
        return self.ot.should_prune()

    def next_index(self) -> int | None:
        """The seed policy: the next job to train, or None when the trial is over."""
        n = len(self.results)
        if n >= len(self.jobs) or (n and plan.ends_trial(self.results[-1][0])):
            return None
        return n


class Run:
    """One job of a trial, handed to an executor; its reports go to the trial and the progress display."""

    def __init__(self, trial: Trial, index: int, offset: int, progress: Progress):
        self.trial, self.index, self.offset, self._progress = trial, index, offset, progress
        self.job: Job = trial.jobs[index]
        self.resolved = self.job.resolved

    def report(self, value: float, step: int) -> None:
        self._progress.step(self.job.run_id, step - self.offset)
        self.trial.report(value, step)

    def should_prune(self) -> bool:
        return self.trial.should_prune()


class Driver:
    """The study, the records and the progress of one search (see the module docstring).

    With no `source`, a grid experiment uses `GridSource` and the other samplers ask Optuna.
    `trials` caps the runs (grid) or trials (samplers) of this call, as `nas-stab run --trials`.
    """

    def __init__(self, spec: Spec, rd: RunStore, *, trials: int | None = None, source: JobSource | None = None,
                 progress_stream: TextIO | None = None, live: bool | None = None):
        self.spec, self.rd = spec, rd
        self.study, rows, self.study_lock = trial_states.open_study(spec, rd)
        try:
            self._start(spec, rd, rows, trials, source, progress_stream, live)
        except BaseException:
            self._release_study()
            raise

    def _start(self, spec: Spec, rd: RunStore, rows: dict[str, dict], trials: int | None, source: JobSource | None,
               progress_stream: TextIO | None, live: bool | None) -> None:
        self.records = Records(rd, spec, rows)
        self.prune = spec.search.pruner.name != "none"
        self._over_budget_told = False  # log.txt names the first run whose measurements took over twice the budget
        self.offset = plan.steps_hint(spec)  # step offset between the seeds of a trial in Optuna's intermediate values
        self._base = plan.base_lookup(spec)
        self.running: dict[int, Trial] = {}  # by Optuna trial number, until told
        self._no_more = False  # the job source said nothing more will come
        self._waiting = False  # the source said "nothing now": not asked again until a trial finishes
        mode = search_mode(spec)
        if source is None and mode.transfer:
            source = TransferSource(spec, trials, storage=spec.search.storage or rd.storage_url, log=rd.log)
        elif source is None and mode.adaptive:
            source = AdaptiveSeeds(spec, trials, log=rd.log)
        elif source is None and mode.job_source:
            source = JOB_SOURCES.get(mode.job_source)(spec, trials)
        self.source = source
        self.decision_log = self._open_decisions(source, len(rows))
        if source is not None:
            total = getattr(source, "total", None)
            todo = len(self._fresh(source.pending(list(rows.values()), ())) or [])
            if rows and total is not None:
                note = f"{total - todo} of {total} runs already recorded; training the other {todo}"
            else:
                note = f"{len(rows)} runs already recorded"
            self.remaining = None
        else:
            target = trials if trials is not None else spec.search.trials
            assert target is not None, "a sampled search has search.trials (validated)"
            self.remaining = trial_states.sampled_remaining(spec, self.study, rows, target, rd.log)
            self.asked = 0
            total = target * len(spec.seeds)
            note = f"{len(rows)} runs already recorded; {self.remaining} trial(s) to go"
        self.progress = Progress(spec, total, stream=progress_stream, live=live)
        for r in rows.values():
            self.progress.add_existing(r)
        self._expect()
        if rows:
            self.progress.note(f"resuming {rd.path}: {note}")

    def _open_decisions(self, source: JobSource | None, n_records: int) -> DecisionLog | None:
        """A job source that decides as results come in records its decisions (`store/decisions.py`): a start
        event, then its state now (a crash between a trial's records and its decisions is healed here)."""
        facts = getattr(source, "decision_facts", None)
        if source is None or facts is None:
            return None
        log = DecisionLog(Path(self.rd.path) / DECISIONS)
        log.start(records=n_records, **facts)
        self._record_decisions(log)
        return log

    def _record_decisions(self, log: DecisionLog | None = None) -> None:
        log = log or self.decision_log
        decisions = getattr(self.source, "decisions", None)
        if log is None or decisions is None:
            return
        try:
            log.update(decisions(list(self.records.rows.values())))
        except OSError as e:  # a full disk: the records are written; the next trial's update writes these too
            self.rd.log(f"decisions.jsonl not written ({e}); the next update writes them")

    # ------------------------------------------------------------------ asking

    def startable(self) -> int:
        """How many trials could start now (0: none now; a job source may give more later)."""
        if self.source is None:
            return self._sampled() - self.asked
        if self._waiting or self._no_more:
            return 0
        return len(self._fresh(self._pending()) or [])

    @property
    def exhausted(self) -> bool:
        """No trial will be started any more."""
        return self.asked >= self._sampled() if self.source is None else self._no_more

    @property
    def planned(self) -> int | None:
        """Trials still to start, when known now (samplers); None for a job source."""
        return self._sampled() - self.asked if self.source is None else None

    def _sampled(self) -> int:
        """The trials of a sampled search (no job source) still to ask for at the start (`remaining`)."""
        assert self.remaining is not None, "a sampled search counts its trials"
        return self.remaining

    def next_trial(self) -> Trial | _Wait | None:
        """The next Optuna trial to train (a `Trial`), `WAIT` (nothing now), or None (nothing more)."""
        spec, study = self.spec, self.study
        if self.source is None:
            if self.asked >= self._sampled():
                return None
            ot = study.ask()
            self.asked += 1
            try:
                params = spec.space.suggest(ot, self._base)
            except BaseException as e:
                self._close_unstarted(ot, e)
                raise
            resolved = plan.try_resolve(spec, params)
            trial = Trial(ot, [plan.sampled_job(spec, ot.number, params, s, resolved=resolved) for s in spec.seeds], params)
        else:
            job = self._next_job()
            if job is None or isinstance(job, _Wait):
                return job
            study.enqueue_trial(job.params, user_attrs={"key": job.key, "seed": job.seed, "trial": job.trial})
            ot = study.ask()
            trial = Trial(ot, [job], job.params)
            suggest = getattr(self.source, "suggest", None)  # a source whose values may leave the space's grid
            try:
                if suggest is not None:
                    suggest(ot, self._base)
                else:
                    spec.space.suggest(ot, self._base, grid=True)  # records the enqueued values with their distributions
            except BaseException as e:  # a study that refuses the write (a full disk): the trial is not left RUNNING
                self._close_unstarted(ot, e)
                raise
        self.running[ot.number] = trial
        return trial

    def _close_unstarted(self, ot: optuna.Trial, error: BaseException) -> None:
        """Close a trial asked but never started (its values could not be recorded): failed, or
        interrupted by Ctrl-C. The reserve is given up first: the error may be a full disk."""
        self.rd.release_reserve()
        status = "failed" if isinstance(error, Exception) else INTERRUPTED
        with contextlib.suppress(Exception):  # the error being raised says what went wrong; a rerun closes the trial
            trial_states.tell(self.study, ot, status, None, traceback.format_exc(limit=3))

    def next_run(self) -> Run | _Wait | None:
        """The first run of the next trial (a `Run`), `WAIT`, or None: for executors."""
        trial = self.next_trial()
        return trial if trial is None or isinstance(trial, _Wait) else self._run(trial, 0)

    def _pending(self) -> list[Job] | None:
        assert self.source is not None, "a job source's search"
        running = {j.key for t in self.running.values() for j in t.jobs}
        got = self.source.pending(list(self.records.rows.values()), running)
        return None if got is None else [j for j in got if j.key not in running]

    def _fresh(self, got: list[Job] | None) -> list[Job] | None:
        return None if got is None else [j for j in got if j.key not in self.records.rows]

    def _next_job(self) -> Job | _Wait | None:
        if self._no_more:
            return None
        if self._waiting:
            return WAIT
        got = self._fresh(self._pending())
        if got:
            return got[0]
        if got is None or not self.running:  # [] with nothing in flight would wait forever
            self._no_more = True
            return None
        self._waiting = True
        return WAIT

    def _run(self, trial: Trial, index: int) -> Run:
        run = Run(trial, index, index * self.offset, self.progress)
        self.progress.started(run.job.run_id, run.job.params, run.job.seed, plan.steps_hint(run.resolved or self.spec))
        return run

    # ------------------------------------------------------------------ telling

    def run_done(self, run: Run, result: RunResult, tb: str = "") -> Run | None:
        """A run finished: the trial's next run (seed policy), or None once the trial is recorded and told."""
        trial = run.trial
        trial.results.append((result, tb))
        gcsetup.first_run_done()
        i = trial.next_index()
        if i is None:
            self.finish(trial)
            return None
        return self._run(trial, i)

    def finish(self, trial: Trial) -> None:
        """Write the trial's records (fsynced), then tell Optuna: a kill between the two loses nothing."""
        spec = self.spec
        rows, results = [], []
        for (res, tb), job in zip(trial.results, trial.jobs):
            if tb:
                self.rd.log(f"{job.run_id} failed:\n{tb}")
            rows.append(plan.make_row(spec, job, res, trial.number))
            results.append(res)
            self._check_budget(job, res)
        self.records.save(rows, results)
        told = (plan.trial_status(results), plan.run_value(spec, results), "; ".join(r.error for r in results if r.error))
        trial.recorded = told  # a Ctrl-C from here on closes the trial in this state, not as interrupted
        trial_states.tell(self.study, trial.ot, *told)
        self._closed(trial)
        self._record_decisions()
        self._expect()
        for row in rows:
            self.rd.log(self.progress.update(row))

    def _check_budget(self, job: Job, result: RunResult) -> None:
        """One line in log.txt, the first time a run's measurements took more than twice stability.budget."""
        budget = self.spec.stability.budget
        train, measure = getattr(result, "train_s", 0.0), getattr(result, "measure_s", 0.0)
        if self._over_budget_told or budget is None or train <= 0 or measure <= 2 * budget * train:
            return
        self._over_budget_told = True
        self.rd.log(f"{job.run_id}: measuring took {measure / train:.0%} of its training time ({measure:.2f} s beside "
                    f"{train:.2f} s), over twice stability.budget ({budget:.0%}): the snapshots at init and at the end "
                    f"(a short run), or the cadences the experiment sets, cost more than the budget; trials.csv has "
                    f"every run's measure_s and train_s (docs/run-directory.md, \"The measurements' budget\"). "
                    f"Said once per search")

    def _expect(self) -> None:
        """A job source that decides its runs as it goes (no `total`): its expected runs in all, for the display."""
        expected = getattr(self.source, "expected", None)
        if expected is None or self.progress.total:
            return
        try:
            got = expected(list(self.records.rows.values()))
        except Exception:  # a display's guess must never stop a search
            return
        if got:
            self.progress.expect(*got)

    def abandon(self, trial: Trial, error: str = "interrupted", status: str = INTERRUPTED) -> None:
        """Close a trial without records: interrupted (trained again on a rerun) or failed. A trial whose rows were
        saved before a Ctrl-C stopped its telling is told the state its rows give: trials.csv and the study agree."""
        if trial.closed:
            return
        try:
            if trial.recorded is not None:
                trial_states.tell(self.study, trial.ot, *trial.recorded)
            else:
                trial_states.tell(self.study, trial.ot, status, None, error)
        finally:
            self._closed(trial)

    def _closed(self, trial: Trial) -> None:
        trial.closed = True
        self.running.pop(trial.number, None)
        self._waiting = False

    def close_running(self) -> int:
        """Close every trial still in flight as interrupted (the driver is stopping); how many. On a full
        disk the run directory's reserve is given up first, so that the study can take the news."""
        if self.running:
            self.rd.release_reserve()
        n = 0
        for trial in list(self.running.values()):
            try:
                self.abandon(trial)
                n += 1
            except Exception:  # closing what can be closed; a rerun closes the rest
                pass
        return n

    def close(self) -> dict[str, int]:
        """The end of the search: the display closed, trials.csv in (trial, seed) order, the study freed
        for another driver; counts by status."""
        try:
            self.progress.close()
            self._record_decisions()  # what the source decided after the last trial (a transfer search's last scores)
            return self.records.close()
        finally:
            self._release_study()

    def _release_study(self) -> None:
        if self.study_lock is not None:
            self.study_lock.release()
            self.study_lock = None

    # ------------------------------------------------------------------ executors

    def drive(self, executor: Executor) -> None:
        """Train every trial on `executor` (`protocols.Executor`); trials in flight are closed
        as interrupted if anything stops it (Ctrl-C, an error)."""
        try:
            while True:
                check_termination()  # a SIGTERM whose raise was dropped (errors.request_termination): every record is written
                while executor.idle:
                    run = self.next_run()
                    if run is None or isinstance(run, _Wait):
                        break
                    executor.submit(run)
                if not executor.busy:
                    return
                for done, result, tb in executor.wait():
                    following = self.run_done(cast(Run, done), result, tb)  # the runs this driver submitted
                    if following is not None:
                        executor.submit(following)  # the next seed, on the slot the previous one freed
        except BaseException:
            self.close_running()
            raise
