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

`OptunaBridge` owns the study (only the driver touches it) and shows two
faces to Tune:

- `bridge.searcher` (a `ray.tune.search.Searcher`): ``suggest`` asks Optuna
  for the next trial, enqueuing the next grid point or sampling define-by-run
  from the YAML space (`Space.suggest`, as the local runner does);
  ``on_trial_complete`` tells the study the right final state (`plan.tell`:
  COMPLETE, PRUNED, PRUNED with status=diverged, FAIL) and writes the
  trial's rows and histories into the run directory.
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

import json
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

from nas_stab.search import plan
from nas_stab.search.ray_trial import KIND, decode_result, finite


@dataclass
class Live:
    """A Tune trial the driver started and has not closed yet."""

    ot: Any  # the Optuna trial
    jobs: list  # plan.Job per seed (grid: one)
    params: dict
    results: dict = field(default_factory=dict)  # seed index -> (RunResult, tb, resumed_from)
    decision: str | None = None  # None | "pruned" | "diverged"
    told_stop: bool = False
    failures: int = 0
    error: str = ""
    last: dict = field(default_factory=dict)  # last evaluation: step, metrics
    reported: set = field(default_factory=set)


class OptunaBridge:
    """The shared state of the searcher and scheduler faces (see the module docstring).

    Args:
        spec: the experiment.
        study: its Optuna study (the driver's; workers never see it).
        jobs: grid experiments: the pending jobs, in order; None for samplers.
        n_trials: sampled experiments: how many Optuna trials to start.
        on_finish: called with (rows, results) when a trial ends, before Optuna is told (it writes the records).
        board: the board actor handle (None: pruned trials are STOPped at once).
        log: a function taking one line for log.txt.
        offset: step offset between the seeds of a sampled trial in its intermediate values.
        trial_config: settings every trial gets in ``config["nas"]`` (threads, checkpoint_every).
    """

    def __init__(self, spec, study, *, jobs: list | None, n_trials: int, on_finish: Callable, board=None,
                 log: Callable = print, offset: int = 0, trial_config: dict | None = None):
        self.spec = spec
        self.offset = offset
        self.trial_config = dict(trial_config or {}, offset=offset)
        self.study = study
        self.jobs = list(jobs) if jobs is not None else None
        self.n_trials = n_trials
        self.started = 0
        self.on_finish = on_finish
        self.board = board
        self.log = log
        self.base = plan.base_lookup(spec)
        self.live: dict[str, Live] = {}
        self.finished: list[str] = []  # statuses of closed trials, in order
        self.interrupted = 0  # trials closed without a result (the driver stopped early)
        self.searcher = BridgeSearcher(self)
        self.scheduler = BridgeScheduler(self)

    # ---------------------------------------------------------- searcher side

    @property
    def planned(self) -> int:
        return len(self.jobs) if self.jobs is not None else self.n_trials

    def suggest(self, trial_id: str) -> dict | None:
        if self.jobs is not None:
            if not self.jobs:
                return None
            job = self.jobs.pop(0)
            self.study.enqueue_trial(job.params, user_attrs={"key": job.key, "seed": job.seed, "trial": job.trial})
            ot = self.study.ask()
            self.spec.space.suggest(ot, self.base, grid=True)  # records the enqueued values with their distributions
            params, jobs, seeds = job.params, [job], [job.seed]
        else:
            if self.started >= self.n_trials:
                return None
            ot = self.study.ask()
            try:
                params = self.spec.space.suggest(ot, self.base)
            except BaseException:
                plan.tell(self.study, ot, "failed", None, traceback.format_exc(limit=3))
                raise
            seeds = list(self.spec.seeds)
            jobs = [plan.sampled_job(self.spec, ot.number, params, s) for s in seeds]
        self.started += 1
        ot.set_user_attr("ray_trial_id", trial_id)
        self.live[trial_id] = Live(ot=ot, jobs=jobs, params=params)
        return {"nas": {"params": params, "seeds": seeds, "run_ids": [j.run_id for j in jobs], **self.trial_config}}

    def complete(self, trial_id: str, result: dict | None, error: bool) -> None:
        """Tune says the trial is over: tell Optuna its state, write its rows."""
        live = self.live.pop(trial_id, None)
        if live is None:
            return
        try:
            self._complete(live, result or {}, error)
        except BaseException:
            # never leave the Optuna trial RUNNING, whatever went wrong here
            if not _finished(live.ot, self.study):
                plan.tell(self.study, live.ot, "failed", None, "driver error:\n" + traceback.format_exc(limit=5))
            raise

    def _complete(self, live: Live, result: dict, error: bool) -> None:
        spec = self.spec
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
        rows, res_objs = [], []
        for (res, tb, resumed), job in zip(results, live.jobs):
            if tb:
                self.log(f"{job.run_id} failed:\n{tb}")
            if resumed is not None:
                self.log(f"{job.run_id} resumed from its checkpoint at step {resumed} after {live.failures} worker failure(s)")
                live.ot.set_user_attr("resumed_from_step", resumed)
            rows.append(plan.make_row(spec, job, res, live.ot.number))
            res_objs.append(res)
        if live.failures:
            live.ot.set_user_attr("ray_failures", live.failures)
        self.on_finish(rows, res_objs)  # the records reach disk before Optuna is told (plan.open_study)
        if self.jobs is not None:  # grid: one run per Optuna trial
            res = res_objs[0]
            plan.tell(self.study, live.ot, res.status, res.metrics.get(spec.search.objective), res.error)
            status = res.status
        else:
            status = plan.trial_status(res_objs)
            plan.tell(self.study, live.ot, status, plan.run_value(spec, res_objs), "; ".join(r.error for r in res_objs if r.error))
        self.finished.append(status)

    def _synthesize(self, live: Live, error: bool):  # noqa: ARG002 (error: the only other case)
        """The record of a run that ended without sending its RunResult."""
        from nas_stab.training.loop import RunResult

        last = live.last
        metrics = dict(last.get("metrics") or {})
        # the run in progress is the first without a record; its reported steps carry its seed's offset
        offset_steps = max(0, int(last.get("step", 0)) - len(live.results) * self.offset)
        if live.decision == "diverged":
            return RunResult("diverged", metrics=metrics, steps=offset_steps, diverged_step=offset_steps,
                             error=live.error or "non-finite value reported")
        if live.decision == "pruned":
            return RunResult("pruned", metrics=metrics, steps=offset_steps)
        msg = live.error or "the trial's worker failed"
        return RunResult("failed", metrics=metrics, steps=offset_steps,
                         error=f"{msg} (gave up after {live.failures} failure(s); runner.max_failures={self.spec.runner.max_failures})")

    # ---------------------------------------------------------- scheduler side

    def on_result(self, trial_id: str, result: dict) -> str:
        """CONTINUE or STOP, for one result a trial reported."""
        live = self.live.get(trial_id)
        kind = result.get(KIND)
        if live is None:
            return "CONTINUE"
        if kind == "run_done":
            self._take_run_done(live, result)
            return "CONTINUE"
        if kind != "eval":
            return "CONTINUE"
        step = int(result.get("nas_step", 0))
        value = result.get("nas_value")
        metrics = {}
        try:
            metrics = json.loads(result.get("nas_metrics") or "{}")
        except (TypeError, ValueError):
            pass
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
            live.ot.report(float(value), step)
            if live.ot.should_prune():
                live.decision = "pruned"
                if self.board is None:
                    return "STOP"
                self._tell_board(trial_id)
        return "CONTINUE"

    def _tell_board(self, trial_id: str) -> None:
        import ray

        try:
            ray.get(self.board.tell_stop.remote(trial_id), timeout=60)
            self.live[trial_id].told_stop = True
        except Exception as e:  # the STOP fallback in on_result still applies
            self.log(f"could not reach the pruning board ({e}); trial {trial_id} is stopped at its next report")

    def _take_run_done(self, live: Live, result: dict) -> None:
        i = int(result["nas_index"])
        live.results[i] = decode_result(result["nas_result"])
        if result.get("nas_node"):
            live.ot.set_user_attr("ray_node", result["nas_node"])

    def on_error(self, trial_id: str, message: str) -> None:
        live = self.live.get(trial_id)
        if live is None:
            return
        live.failures += 1
        live.error = message
        # live.reported is kept: a retry replays the steps after its checkpoint exactly; they are not sent twice
        self.log(f"trial {trial_id} ({', '.join(j.run_id for j in live.jobs)}): worker failure {live.failures}: {message}")

    # ---------------------------------------------------------- closing

    def close_unfinished(self) -> int:
        """Close every trial still live (the driver is stopping early): FAIL, status interrupted."""
        n = 0
        for tid, live in list(self.live.items()):
            if not _finished(live.ot, self.study):
                self._close_interrupted(live)
                n += 1
            del self.live[tid]
        return n

    def _close_interrupted(self, live: Live) -> None:
        from optuna.trial import TrialState

        live.ot.set_user_attr("status", plan.INTERRUPTED)
        self.study.tell(live.ot, state=TrialState.FAIL)
        self.interrupted += 1


def _finished(ot, study) -> bool:
    from optuna.trial import TrialState

    t = study._storage.get_trial(ot._trial_id)
    return t.state != TrialState.RUNNING


def _error_message(trial) -> str:
    """The last failure recorded in a Tune trial's error file, shortened."""
    try:
        p = Path(trial.error_file) if trial.error_file else None
        text = p.read_text(encoding="utf-8", errors="replace") if p and p.exists() else ""
    except Exception:
        text = ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    tail = [ln for ln in lines if not ln.startswith("Failure #")][-3:]
    msg = " | ".join(ln.strip() for ln in tail)
    return (msg or "worker failed")[:500]


# -------------------------------------------------------------- the two faces
# Tune pickles its configuration (tuner.pkl) for `Tuner.restore`, which nas_stab
# never uses: the faces pickle without their bridge (the study and the open run
# directory cannot be pickled, and must stay in the driver anyway).


class _Face:
    def __init__(self, bridge: OptunaBridge):
        self._bridge = bridge

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_bridge"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._bridge = None


class BridgeSearcher(_Face, Searcher):
    """Tune's searcher face of `OptunaBridge`."""

    def __init__(self, bridge: OptunaBridge):
        _Face.__init__(self, bridge)
        Searcher.__init__(self, metric=None, mode=None)

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True

    def suggest(self, trial_id: str):
        cfg = self._bridge.suggest(trial_id)
        return Searcher.FINISHED if cfg is None else cfg

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        pass  # the scheduler face sees every result first

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self._bridge.complete(trial_id, result, error)

    def save(self, checkpoint_path: str) -> None:
        pass  # the Optuna study and trials.csv are the durable state

    def restore(self, checkpoint_path: str) -> None:
        pass

    def get_state(self) -> dict:
        return {}

    def set_state(self, state: dict) -> None:
        pass


class BridgeScheduler(_Face, FIFOScheduler):
    """Tune's scheduler face of `OptunaBridge`: divergence rule, then the Optuna pruner."""

    def __init__(self, bridge: OptunaBridge):
        _Face.__init__(self, bridge)
        FIFOScheduler.__init__(self)

    def set_search_properties(self, metric, mode, **spec) -> bool:
        return True

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        decision = self._bridge.on_result(trial.trial_id, result)
        return TrialScheduler.STOP if decision == "STOP" else TrialScheduler.CONTINUE

    def on_trial_error(self, tune_controller, trial) -> None:
        self._bridge.on_error(trial.trial_id, _error_message(trial))

    def debug_string(self) -> str:
        return "nas_stab: divergence rule + Optuna pruner"

    def save(self, checkpoint_path: str) -> None:
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass
