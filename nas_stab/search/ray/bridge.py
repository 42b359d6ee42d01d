"""One component that is both Ray Tune's searcher and its scheduler, over one Optuna study.

Why not Ray's `OptunaSearch` plus a Ray scheduler (facts checked on Ray
2.60 / Optuna 5.0, reproduced by tests/test_ray_traps.py):

1. `OptunaSearch` creates its study with Optuna's `NopPruner`: it reports
   intermediate values but never asks a pruner.
2. A trial stopped by a Ray scheduler (ASHA, median rule) reaches Optuna as
   COMPLETE with its truncated value, so the sampler learns from it as if it
   had finished.
3. A NaN final value leaves the Optuna trial RUNNING forever (the `tell`
   raises and Ray only logs a warning); and a diverging trial (NaN at a rung)
   slips past ASHA.

`OptunaBridge` serves the search's driver (only the driver touches the study) and shows two
faces to Tune:

- `bridge.searcher` (a `ray.tune.search.Searcher`): ``suggest`` asks the
  driver (`driver.Driver.next_trial`, as the local runner does) for the next
  trial: the next job of the grid or job source enqueued, or sampled
  define-by-run from the YAML space; ``on_trial_complete`` hands the trial's
  results to the driver, which writes its rows and histories into the run
  directory, then tells the study the right final state (COMPLETE, PRUNED,
  PRUNED with status=diverged, FAIL).
- `bridge.scheduler` (a `ray.tune.schedulers.FIFOScheduler`):
  ``on_trial_result`` takes each evaluation, runs the divergence rule (a
  non-finite value or training loss: diverged, STOP), reports the value to
  the Optuna trial and asks the Optuna pruner. A pruned trial is told so
  through the board actor and allowed to finish its run cleanly (final
  stability snapshot, as under the local runner); if it reports another
  evaluation anyway, the scheduler returns STOP.

`TrialScheduler` and `Searcher` are Ray developer APIs: Ray is pinned to
2.60.x in pyproject.toml and tests/test_ray_traps.py keeps both the stock
behaviours and ours under test.
"""
from __future__ import annotations

import contextlib
import json
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import ray
from ray.tune.search import Searcher

from nas_stab.config.schema import Spec
from nas_stab.search.driver import WAIT, Driver
from nas_stab.search.ray.faces import BridgeScheduler, BridgeSearcher
from nas_stab.search.ray.trial import KIND, decode_result, finite

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from nas_stab.search.ray.trial import Board
    from nas_stab.training.loop import RunResult

# worker failures of a trial before it reported anything that do not spend runner.max_failures: one SIGKILL of a trial
# worker can hand its dead cached actor to the next trial three times within a second (the attempt, Tune's retry and
# the resubmission all fail at once), and with 2 the chaos benchmark (benchmarks/chaos.py, 100 workers killed in
# 1,000 trials) recorded such a run `failed`; they cost no training, so 10 of them are free
START_RETRIES = 10


@dataclass
class Live:
    """A Tune trial the driver started and has not closed yet."""

    trial: Any  # the driver's Trial (its Optuna trial, its jobs: one per seed, grid: one)
    results: dict = field(default_factory=dict)  # seed index -> (RunResult, tb, resumed_from)
    decision: str | None = None  # None | "pruned" | "diverged"
    failures: int = 0
    start_failures: int = 0  # failures of an attempt that reported nothing: see OptunaBridge.on_error
    attempt_reported: bool = False  # this attempt of the trial has sent a result
    resubmit: bool = False  # Tune gave it up although the budget allows another attempt: offered again
    error: str = ""
    last: dict = field(default_factory=dict)  # last evaluation: step, metrics
    reported: set = field(default_factory=set)

    @property
    def jobs(self) -> list:
        return self.trial.jobs


class OptunaBridge:
    """The shared state of the searcher and scheduler faces (see the module docstring).

    Args:
        spec: the experiment.
        driver: the search's `driver.Driver` (it asks, tells and writes the records; workers never see it).
        board: the board actor handle (None: pruned trials are STOPped at once).
        log: a function taking one line for log.txt.
        trial_config: settings every trial gets in ``config["nas"]`` (threads, checkpoint_every).
    """

    def __init__(self, spec: Spec, driver: Driver, *, board: ActorHandle[Board] | None = None, log: Callable = print,
                 trial_config: dict | None = None):
        self.spec = spec
        self.driver = driver
        self.offset = driver.offset  # step offset between the seeds of a sampled trial in its intermediate values
        self.trial_config = dict(trial_config or {}, offset=self.offset)
        self.board = board
        self.log = log
        self.live: dict[str, Live] = {}
        self.requeued: list[Live] = []  # trials to offer Tune again, as new Tune trials (see on_error)
        self.interrupted = 0  # trials closed without a result (the driver stopped early)
        self.searcher = BridgeSearcher(self)
        self.scheduler = BridgeScheduler(self)

    # ---------------------------------------------------------- searcher side

    def suggest(self, trial_id: str) -> dict | str | None:
        """The next trial's config for Tune; Searcher.FINISHED when no more will come, None: not now.

        A trial Tune gave up while the failure budget allows another attempt (`on_error`) comes first,
        under the new Tune trial id. FINISHED only once no trial is live: until then one may still
        have to be offered again."""
        if self.requeued:
            live = self.requeued.pop(0)
        else:
            trial = self.driver.next_trial()
            if trial is None:
                return None if self.live else Searcher.FINISHED
            if trial is WAIT:
                return None  # Tune asks again
            live = Live(trial=trial)
        live.trial.ot.set_user_attr("ray_trial_id", trial_id)
        self.live[trial_id] = live
        trial = live.trial
        return {"nas": {"params": trial.params, "seeds": [j.seed for j in trial.jobs],
                        "run_ids": [j.run_id for j in trial.jobs], **self.trial_config}}

    def complete(self, trial_id: str, result: dict | None, error: bool) -> None:
        """Tune says the trial is over: the driver writes its rows and tells Optuna its state."""
        live = self.live.pop(trial_id, None)
        if live is None:
            return
        if error and live.resubmit and live.decision is None:
            live.resubmit = False
            self.requeued.append(live)
            self.log(f"trial {trial_id} ({', '.join(j.run_id for j in live.jobs)}): Tune gave it up after a worker "
                     "failure before it started (it does not retry those); offered again as a new Tune trial")
            return
        try:
            self._complete(live, result or {}, error)
        except BaseException:
            # never leave the Optuna trial RUNNING, whatever went wrong here
            if not live.trial.closed:
                self.driver.abandon(live.trial, "driver error:\n" + traceback.format_exc(limit=5), status="failed")
            raise

    def _complete(self, live: Live, result: dict, error: bool) -> None:
        if KIND in result and result.get(KIND) == "run_done":
            self._take_run_done(live, result)  # a last result Tune did not route to the scheduler
        results = []
        for i in range(len(live.jobs)):
            if i not in live.results:
                break
            results.append(live.results[i])
        if len(results) < len(live.jobs) and (not results or results[-1][0].status == "complete"):
            # the run in progress ended without its own record
            if not error and live.decision is None:
                # not failed, not stopped by us: Tune is dropping it (the experiment is stopping)
                self._close_interrupted(live)
                return
            results.append((self._synthesize(live, error), "", None))
        ot = live.trial.ot
        for (_, _, resumed), job in zip(results, live.jobs):
            if resumed is not None:
                self.log(f"{job.run_id} resumed from its checkpoint at step {resumed} after {live.failures} worker failure(s)")
                ot.set_user_attr("resumed_from_step", resumed)
        if live.failures:
            ot.set_user_attr("ray_failures", live.failures)
        live.trial.results = [(res, tb) for res, tb, _ in results]
        self.driver.finish(live.trial)  # the records reach disk before Optuna is told

    def _synthesize(self, live: Live, error: bool) -> RunResult:  # error: the only other case
        """The record of a run that ended without sending its RunResult."""
        from nas_stab.training.loop import RunResult  # deferred: loads torch only when this runs

        last = live.last
        metrics = dict(last.get("metrics") or {})
        # the run in progress is the first without a record; its reported steps carry its seed's offset
        offset_steps = max(0, int(last.get("step", 0)) - len(live.results) * self.offset)
        if live.decision == "diverged":
            return RunResult("diverged", metrics=metrics, steps=offset_steps, diverged_step=offset_steps,
                             error=live.error or "non-finite value reported")
        if live.decision == "pruned":
            return RunResult("pruned", metrics=metrics, steps=offset_steps)
        # failed, or given up ("gave up": more worker failures than runner.max_failures)
        msg = live.error or "the trial's worker failed"
        return RunResult("failed", metrics=metrics, steps=offset_steps,
                         error=f"{msg} (gave up after {live.failures} failure(s); runner.max_failures={self.spec.runner.max_failures}"
                               + (f", {live.start_failures} before the trial reported anything" if live.start_failures else "")
                               + ")")

    # ---------------------------------------------------------- scheduler side

    def on_result(self, trial_id: str, result: dict) -> str:
        """CONTINUE or STOP, for one result a trial reported."""
        live = self.live.get(trial_id)
        kind = result.get(KIND)
        if live is None:
            return "CONTINUE"
        live.attempt_reported = True
        if live.decision == "gave up":
            return "STOP"
        if kind == "run_done":
            self._take_run_done(live, result)
            return "CONTINUE"
        if kind != "eval":
            return "CONTINUE"
        step = int(result.get("nas_step", 0))
        value = result.get("nas_value")
        metrics = {}
        with contextlib.suppress(TypeError, ValueError):
            metrics = json.loads(result.get("nas_metrics") or "{}")
        live.last = {"step": step, "metrics": metrics}
        if live.decision is not None:
            return "STOP"  # told to stop and still evaluating: stop it the hard way
        loss = result.get("nas_train_loss")
        for name, v in ((self.spec.search.objective, value), ("train_loss", loss)):
            if v is not None and not finite(v):
                # the divergence rule on top of the pruner: ASHA and the median rule let NaN through
                live.decision = "diverged"
                live.error = f"non-finite {name} ({v}) reported at step {step}"
                return "STOP"
        if value is None:
            return "CONTINUE"
        if step not in live.reported:  # a trial resumed from a checkpoint repeats some steps
            live.reported.add(step)
            live.trial.report(float(value), step)
            if live.trial.should_prune():
                live.decision = "pruned"
                if self.board is None:
                    return "STOP"
                self._tell_board(trial_id)
        return "CONTINUE"

    def _tell_board(self, trial_id: str) -> None:
        assert self.board is not None, "on_result stops the trial itself when there is no board"
        try:
            ray.get(self.board.tell_stop.remote(trial_id), timeout=60)
        except Exception as e:  # the STOP fallback in on_result still applies
            self.log(f"could not reach the pruning board ({e}); trial {trial_id} is stopped at its next report")

    def _take_run_done(self, live: Live, result: dict) -> None:
        i = int(result["nas_index"])
        live.results[i] = decode_result(result["nas_result"])
        if result.get("nas_node"):
            live.trial.ot.set_user_attr("ray_node", result["nas_node"])

    def on_error(self, trial_id: str, message: str, *, final: bool = False) -> None:
        """A trial's worker failed; `final`: Tune will not retry it.

        Tune retries a failed trial up to runner.max_failures + START_RETRIES times, but never one that
        fails while it waits to start: with reused actors, a trial (or its retry) handed the cached actor
        of a worker process that had died (SIGKILL of a `ray::ImplicitFunc`) failed at once and for good,
        and the run was recorded failed. Here a failure of an attempt that had reported nothing (a *start
        failure*) does not spend runner.max_failures, up to START_RETRIES of them, and a trial Tune gives
        up within that budget is offered again as a new Tune trial (`resubmit`, `suggest`). Past either
        budget the trial is given up: recorded failed (`gave_up`, `BridgeScheduler.choose_trial_to_run`)."""
        live = self.live.get(trial_id)
        if live is None:
            return
        live.failures += 1
        live.error = message
        started = live.attempt_reported
        live.attempt_reported = False
        if not started:
            live.start_failures += 1
        real = live.failures - min(live.start_failures, START_RETRIES)
        over = real > self.spec.runner.max_failures or live.start_failures > START_RETRIES
        if over and live.decision is None:
            live.decision = "gave up"  # Tune may still retry it (its budget includes START_RETRIES): it is stopped
        elif not over and final:
            live.resubmit = True
        # live.reported is kept: a retry replays the steps after its checkpoint exactly; they are not sent twice
        self.log(f"trial {trial_id} ({', '.join(j.run_id for j in live.jobs)}): worker failure {live.failures}"
                 f"{'' if started else ' (before the trial reported anything)'}: {message}")

    def gave_up(self, trial_id: str) -> bool:
        live = self.live.get(trial_id)
        return live is not None and live.decision == "gave up"

    # ---------------------------------------------------------- closing

    def close_unfinished(self) -> int:
        """Close every trial still live (the driver is stopping early): FAIL, status interrupted."""
        n = 0
        for tid, live in list(self.live.items()):
            if not live.trial.closed:
                self._close_interrupted(live)
                n += 1
            del self.live[tid]
        for live in self.requeued:
            if not live.trial.closed:
                self._close_interrupted(live)
                n += 1
        self.requeued.clear()
        return n

    def _close_interrupted(self, live: Live) -> None:
        self.driver.abandon(live.trial)
        self.interrupted += 1


# -------------------------------------------------------------- the two faces
# Tune pickles its configuration (tuner.pkl) for `Tuner.restore`, which nas_stab
# never uses: the faces pickle without their bridge (the study and the open run
# directory cannot be pickled, and must stay in the driver anyway).
