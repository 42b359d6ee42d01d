"""What both runners share: the plan of runs, the Optuna bookkeeping, the records.

A *job* is one trained run (configuration x seed) with a stable key (hash of
its resolved configuration and seed), so a resumed experiment skips exactly
the runs that already finished.
"""
from __future__ import annotations

import errno
import math
import os
import signal
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any

from nas_stab import metrics
from nas_stab.errors import SpecError

INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class Job:
    trial: int  # grid: the configuration's index; other samplers: the Optuna trial number
    seed: int
    params: dict
    key: str
    run_id: str


def base_lookup(spec):
    from nas_stab.config import get_key

    return lambda k: get_key(spec, k)


def grid_jobs(spec, *, resolved: dict | None = None) -> list[Job]:
    """Every (grid point, seed) of a grid experiment, in a stable order.

    With a dict `resolved`, also fills it with {job key: resolved spec}, so the
    runner does not resolve each configuration a second time.
    """
    from nas_stab.config import config_key, resolve

    points = spec.space.grid(base_lookup(spec)) if spec.space.dims else [{}]
    jobs = []
    for i, params in enumerate(points):
        r = resolve(spec, params)
        for seed in spec.seeds:
            jobs.append(Job(i, seed, params, config_key(r, seed), f"t{i:05d}-s{seed}"))
            if resolved is not None:
                resolved[jobs[-1].key] = r
    return jobs


def try_resolve(spec, params: dict):
    """The resolved spec, or None when the configuration is invalid (`run_job` then records why)."""
    from nas_stab.config import resolve

    try:
        return resolve(spec, params)
    except SpecError:
        return None


def sampled_job(spec, trial_number: int, params: dict, seed: int, *, resolved=None) -> Job:
    from nas_stab.config import config_key

    r = resolved if resolved is not None else try_resolve(spec, params)
    key = config_key(r, seed) if r is not None else "invalid"
    return Job(trial_number, seed, params, f"{key}-n{trial_number}", f"t{trial_number:05d}-s{seed}")


def steps_hint(spec) -> int:
    """Step offset between the seeds of one trial in Optuna's intermediate values."""
    t = spec.train
    return t.steps if t.steps is not None else 10**7


def in_trial_order(rows) -> bool:
    """Whether trials.csv rows are in (trial, seed) order: appended rows are in the order runs
    finished, and each runner sorts the file once at the end (not done by a killed driver)."""
    def num(v) -> int:
        try:
            return int(v)
        except (TypeError, ValueError):
            return 1 << 62

    order = [(num(r.get("trial")), num(r.get("seed"))) for r in rows]
    return order == sorted(order)


# ------------------------------------------------------------------ Optuna states


def open_study(spec, rd):
    """The run's Optuna study, reconciled with trials.csv, and the runs it records by key.

    Records are written (fsynced) before Optuna is told a trial finished
    (`write_records`), so a driver killed between the two leaves a RUNNING trial
    whose rows are all on disk: it is told now, from its rows. Trials left running
    without all their rows are closed as FAIL (status interrupted) and trained again.
    """
    from nas_stab.search.optuna_study import create_study

    from nas_stab.errors import RunError

    url = spec.search.storage or rd.storage_url
    try:
        study = create_study(spec, url)
    except Exception as e:  # a damaged study.db, a database that refuses us: one line, not a traceback
        msg = " ".join(str(e).split())[:300]
        raise RunError(f"cannot open the Optuna storage {url}: {type(e).__name__}: {msg}; "
                       "move the run directory aside or rerun with --fresh") from None
    rows = {r["key"]: r for r in rd.read_trials()}
    told = tell_recorded(spec, study, rows)
    if told:
        rd.log(f"told Optuna {told} trial(s) whose rows were recorded before a kill")
    closed = cleanup_study(study)
    if closed:
        msg = f"closed {closed} trial(s) left running by an interrupted run; they are trained again"
        rd.log(msg)
        print(msg, file=sys.stderr, flush=True)
    return study, rows


def tell_recorded(spec, study, rows: dict) -> int:
    """Tell each RUNNING trial whose rows are all in trials.csv the state its rows give."""
    import optuna
    from optuna.trial import TrialState

    by_trial: dict[str, list] = {}
    for r in rows.values():
        by_trial.setdefault(str(r.get("optuna_trial")), []).append(r)
    seeds = [str(s) for s in spec.seeds]
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        mine = sorted(by_trial.get(str(t.number), []), key=lambda r: seeds.index(r["seed"]) if r["seed"] in seeds else 1 << 30)
        if not mine:
            continue
        if spec.search.sampler != "grid" and len(mine) < len(seeds) and mine[-1]["status"] == "complete":
            continue  # seeds missing: trained again
        statuses = [r["status"] for r in mine]
        status = next((s for s in ("failed", "diverged", "pruned") if s in statuses), "complete")
        value = None
        if status == "complete":
            try:
                vals = [float(r["objective"]) for r in mine]
                value = sum(vals) / len(vals)
            except (TypeError, ValueError):
                value = None
        tell(study, optuna.trial.Trial(study, t._trial_id), status, value, "; ".join(r.get("error") or "" for r in mine).strip("; "))
        n += 1
    return n


def sampled_remaining(spec, study, rows: dict, target: int, log) -> int:
    """How many trials a sampler still asks for; finished trials without rows are trained again.

    A trial finished in the study whose rows never reached trials.csv (an older
    nas_stab told Optuna first, then was killed or hit a full disk) is not counted
    as done: its parameters are enqueued (user attr `retrains`: its number), so the
    next trial asked trains that configuration again.
    """
    from optuna.trial import TrialState

    finished = [
        t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
        if t.user_attrs.get("status") != INTERRUPTED
    ]
    recorded = {str(r.get("optuna_trial")) for r in rows.values()}
    numbers = {t.number for t in finished}
    superseded = {int(t.user_attrs["retrains"]) for t in finished if "retrains" in t.user_attrs} & numbers
    orphans = [t for t in finished if str(t.number) not in recorded and t.number not in superseded]
    remaining = max(0, target - (len(finished) - len(superseded) - len(orphans)))
    for t in orphans[:remaining]:
        study.enqueue_trial(t.params, user_attrs={"retrains": t.number})
    if orphans:
        log(f"{len(orphans)} finished trial(s) had no rows in trials.csv "
            f"({', '.join(str(t.number) for t in orphans)}); their configurations are trained again")
    return remaining


FAULT_ENV = "NAS_STAB_FAULT"  # test hook: "kill@N" or "enospc@N" (see write_records)
_fault_calls = [0]


def write_records(write) -> None:
    """Call `write()`, which puts a finished trial's records on disk (fsynced), before Optuna is told.

    Test hook: with NAS_STAB_FAULT=kill@N this process SIGKILLs itself right after
    the N-th call has written its records (the window between records and tell);
    with enospc@N the N-th and later calls fail as on a full disk.
    """
    fault = os.environ.get(FAULT_ENV, "")
    action, _, nth = fault.partition("@")
    hit = False
    if action in ("kill", "enospc") and nth.isdigit():
        _fault_calls[0] += 1
        hit = _fault_calls[0] >= int(nth) if action == "enospc" else _fault_calls[0] == int(nth)
    if hit and action == "enospc":
        raise OSError(errno.ENOSPC, f"No space left on device ({FAULT_ENV})")
    write()
    if hit and action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


def save_records(rd, spec, rows: dict, new_rows: list[dict], results) -> None:
    """A finished trial's history files and trials.csv rows, on disk (fsynced) before Optuna is told,
    for both runners; `rows` (every recorded row by key) gains the new ones."""

    def write() -> None:
        replaced = False
        for row, res in zip(new_rows, results):
            replaced |= row["key"] in rows
            rows[row["key"]] = row
            rd.write_history(row["run_id"], res.history)
        rd.add_trials(new_rows, rows.values(), spec.space.keys, spec.task.kind, rewrite=replaced)

    write_records(write)


def cleanup_study(study) -> int:
    """No trial is ever left running: trials a killed driver left RUNNING or
    WAITING are closed as FAIL (user attr status=interrupted). Returns how many."""
    from optuna.trial import TrialState

    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        study._storage.set_trial_user_attr(t._trial_id, "status", INTERRUPTED)
        study.tell(t.number, state=TrialState.FAIL)
        n += 1
    while study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        t = study.ask()
        t.set_user_attr("status", INTERRUPTED)
        study.tell(t, state=TrialState.FAIL)
        n += 1
    return n


def tell(study, trial, status: str, value: float | None, error: str = "") -> None:
    """Close an Optuna trial with the state matching the run's status.

    complete -> COMPLETE (FAIL if the objective is not finite); pruned ->
    PRUNED; diverged -> PRUNED with user attr status=diverged (the sampler
    learns it was stopped early, not that it finished); failed -> FAIL.
    """
    from optuna.trial import TrialState

    trial.set_user_attr("status", status)
    if error:
        trial.set_user_attr("error", error[:2000])
    if status == "complete":
        if value is not None and math.isfinite(value):
            study.tell(trial, value)
            return
        trial.set_user_attr("error", "objective is not finite")
        study.tell(trial, state=TrialState.FAIL)
    elif status in ("pruned", "diverged"):
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, state=TrialState.FAIL)


def make_reporter(trial, objective: str, offset: int = 0, *, prune: bool = True):
    """Report the objective to Optuna at each evaluation; raise Pruned when told.

    `prune=False` (pruner `none`) skips `should_prune()`: Optuna's NopPruner
    never prunes, but asking still costs a storage read per evaluation.
    """
    from nas_stab.training.loop import Pruned

    def report(step: int, values: dict) -> None:
        v = values.get(objective)
        if v is None or not math.isfinite(v):
            return
        trial.report(float(v), offset + step)
        if prune and trial.should_prune():
            raise Pruned()

    return report


def run_job(spec, params: dict, seed: int, reporter=None, checkpoint=None, *, resolved=None):
    """Resolve (unless `resolved` is given) and train one job; an exception becomes a `failed` result."""
    from nas_stab.config import resolve
    from nas_stab.training.loop import RunResult, train_run

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


def make_row(spec, job: Job, result, optuna_number: int | None) -> dict[str, Any]:
    """One trials.csv row (docs/metrics.md)."""
    from nas_stab.config import get_key

    row: dict[str, Any] = {
        "trial": job.trial,
        "seed": job.seed,
        "status": result.status,
        "objective": result.metrics.get(spec.search.objective),
        "steps": result.steps,
        "wall_s": round(result.wall_s, 3),
        "diverged_step": result.diverged_step,
        "error": result.error,
        "run_id": job.run_id,
        "key": job.key,
        "optuna_trial": optuna_number,
    }
    for d in spec.space:
        row[d.key] = job.params.get(d.key, get_key(spec, d.key))
    row.update(result.metrics)
    return row


def run_value(spec, results: list) -> float | None:
    """A trial's value: the mean objective over its seeds; None unless every seed completed."""
    vals = [r.metrics.get(spec.search.objective) for r in results]
    if any(r.status != "complete" for r in results) or any(v is None or not math.isfinite(v) for v in vals):
        return None
    return sum(vals) / len(vals)


def trial_status(results: list) -> str:
    statuses = [r.status for r in results]
    for s in ("failed", "diverged", "pruned"):
        if s in statuses:
            return s
    return "complete"


# ------------------------------------------------------------------ progress

from nas_stab.search.progress import Progress  # noqa: E402,F401  (the runners' progress display)
