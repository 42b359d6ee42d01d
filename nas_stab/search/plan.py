"""The plan of runs: a job (configuration x seed), training it, and its trials.csv row.

A *job* is one trained run with a stable key (hash of its resolved configuration
and seed), so a resumed experiment skips exactly the runs that already finished.
Worker processes import this module (and not the driver): it holds everything
an executor needs to train a job and report back.
"""
from __future__ import annotations

import math
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from nas_stab.errors import SpecError

if TYPE_CHECKING:
    from nas_stab.config.schema import Spec
    from nas_stab.training.loop import Checkpointer, Reporter, RunResult

    class Prunable(Protocol):
        """What `make_reporter` reports to: an Optuna trial, or a stand-in for one (the driver's `Run`, a worker's
        `local_pool._RemoteTrial`)."""

        def report(self, value: float, step: int) -> None: ...

        def should_prune(self) -> bool: ...


@dataclass(frozen=True)
class Job:
    """One run: `params` (searched keys) trained with `seed`.

    `trial` is the trial column of trials.csv (grid: the configuration's index; other
    samplers: the Optuna trial number), `key` identifies the run across resumes (two jobs
    with one key are one run), `run_id` names its history file. `resolved` (optional) is
    the resolved configuration, when the job's maker already has it.
    """

    trial: int
    seed: int
    params: dict
    key: str
    run_id: str
    resolved: Any = field(default=None, compare=False, repr=False)
    outer: int | None = field(default=None, compare=False)  # search.transfer: the outer trial's number


def base_lookup(spec: Spec) -> Callable[[str], Any]:
    from nas_stab.config import get_key  # deferred: loads PyYAML only when this runs

    return lambda k: get_key(spec, k)


def grid_jobs(spec: Spec, *, resolved: dict | None = None) -> list[Job]:
    """Every (grid point, seed) of a grid experiment, in a stable order.

    With a dict `resolved`, also fills it with {job key: resolved spec}, so the
    runner does not resolve each configuration a second time.
    """
    from nas_stab.config import config_keys, resolve  # deferred: loads PyYAML only when this runs

    points = spec.space.grid(base_lookup(spec)) if spec.space.dims else [{}]
    if len(points) > 2000:  # about 1 ms a point: seconds to a minute before the search says anything else
        print(f"planning {len(points):,} grid points x {len(spec.seeds)} seed(s)...", file=sys.stderr, flush=True)
    jobs = []
    for i, params in enumerate(points):
        r = resolve(spec, params)
        for seed, key in zip(spec.seeds, config_keys(r, spec.seeds)):
            jobs.append(Job(i, seed, params, key, f"t{i:05d}-s{seed}", r))
            if resolved is not None:
                resolved[jobs[-1].key] = r
    return jobs


def try_resolve(spec: Spec, params: dict) -> Spec | None:
    """The resolved spec, or None when the configuration is invalid (`run_job` then records why)."""
    from nas_stab.config import resolve  # deferred: loads PyYAML only when this runs

    try:
        return resolve(spec, params)
    except SpecError:
        return None


def sampled_job(spec: Spec, trial_number: int, params: dict, seed: int, *, resolved: Spec | None = None) -> Job:
    from nas_stab.config import config_key  # deferred: loads PyYAML only when this runs

    r = resolved if resolved is not None else try_resolve(spec, params)
    key = config_key(r, seed) if r is not None else "invalid"
    return Job(trial_number, seed, params, f"{key}-n{trial_number}", f"t{trial_number:05d}-s{seed}", r)


def steps_hint(spec: Spec) -> int:
    """Step offset between the seeds of one trial in Optuna's intermediate values."""
    t = spec.train
    return t.steps if t.steps is not None else 10**7


def make_reporter(trial: Prunable, objective: str, offset: int = 0, *, prune: bool = True) -> Reporter:
    """Report the objective to Optuna at each evaluation; raise Pruned when told.

    `prune=False` (pruner `none`) skips `should_prune()`: Optuna's NopPruner
    never prunes, but asking still costs a storage read per evaluation.
    """
    from nas_stab.training.loop import Pruned  # deferred: loads torch, PyYAML, NumPy only when this runs

    def report(step: int, values: dict) -> None:
        v = values.get(objective)
        if v is None or not math.isfinite(v):
            return
        trial.report(float(v), offset + step)
        if prune and trial.should_prune():
            raise Pruned()

    return report


def run_job(spec: Spec, params: dict, seed: int, reporter: Reporter | None = None,
            checkpoint: Checkpointer | None = None, *, resolved: Spec | None = None) -> tuple[RunResult, str]:
    """Resolve (unless `resolved` is given) and train one job; an exception becomes a `failed` result."""
    from nas_stab.config import resolve  # deferred: loads PyYAML only when this runs
    from nas_stab.training.loop import RunResult, train_run  # deferred: loads torch, PyYAML, NumPy only when this runs

    t0 = time.perf_counter()
    try:
        if resolved is None:
            resolved = resolve(spec, params)
        return train_run(resolved, seed, reporter, checkpoint), ""
    except KeyboardInterrupt:
        raise
    except SpecError as e:
        return RunResult("failed", error=f"invalid configuration: {e}", wall_s=time.perf_counter() - t0), ""
    except Exception as e:  # a trial's bug must not kill the experiment
        tb = traceback.format_exc()
        return RunResult("failed", error=f"{type(e).__name__}: {e}", wall_s=time.perf_counter() - t0), tb


def make_row(spec: Spec, job: Job, result: RunResult, optuna_number: int | None) -> dict[str, Any]:
    """One trials.csv row (docs/metrics.md)."""
    from nas_stab.config import get_key  # deferred: loads PyYAML only when this runs

    row: dict[str, Any] = {
        "trial": job.trial,
        "seed": job.seed,
        "status": result.status,
        "objective": result.metrics.get(spec.search.objective),
        "steps": result.steps,
        "wall_s": round(result.wall_s, 3),
        "train_s": round(result.train_s, 3),
        "measure_s": round(result.measure_s, 3),
        "diverged_step": result.diverged_step,
        "error": result.error,
        "run_id": job.run_id,
        "key": job.key,
        "optuna_trial": optuna_number,
    }
    if job.outer is not None:
        row["outer_trial"] = job.outer
    for d in spec.space:
        row[d.key] = job.params.get(d.key, get_key(spec, d.key))
    row.update(result.metrics)
    return row


def run_value(spec: Spec, results: list) -> float | None:
    """A trial's value: the mean objective over its seeds; None unless every seed completed."""
    vals = [r.metrics.get(spec.search.objective) for r in results]
    if any(r.status != "complete" for r in results) or any(v is None or not math.isfinite(v) for v in vals):
        return None
    return sum(vals) / len(vals)


def ends_trial(result: RunResult) -> bool:
    """The seed policy: a trial's seeds train in order, and a seed that does not complete
    (pruned, diverged, failed) ends the trial; the driver and the Ray worker both follow it."""
    return result.status != "complete"


def trial_status(results: list) -> str:
    statuses = [r.status for r in results]
    for s in ("failed", "diverged", "pruned"):
        if s in statuses:
            return s
    return "complete"
