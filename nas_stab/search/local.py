"""The local runner, the embedded default: trials in-process, Optuna in SQLite.

Resuming is the normal case: rerunning the same spec skips every run whose
key is already in trials.csv, closes trials a killed driver left RUNNING as
FAIL (status interrupted) and trains them again.
"""
from __future__ import annotations

import os
import traceback

from nas_stab.search import plan


def run_local(spec, rd, *, trials: int | None = None, progress_stream=None) -> dict:
    """Run every pending trial of `spec` into run directory `rd`. Returns status counts."""
    from nas_stab.data import reuse_loaded

    with reuse_loaded():  # the data is loaded once for the whole search, not once per run
        return _run_local(spec, rd, trials=trials, progress_stream=progress_stream)


def _run_local(spec, rd, *, trials: int | None, progress_stream) -> dict:
    import torch

    torch.set_num_threads(spec.train.threads or max(1, os.cpu_count() or 1))
    study, rows = plan.open_study(spec, rd)
    order = [(_int(r.get("trial")), _int(r.get("seed"))) for r in rows.values()]
    in_order = order == sorted(order)  # False after a run killed between an append and its final sort
    searched = spec.space.keys
    base = plan.base_lookup(spec)
    prune = spec.search.pruner.name != "none"
    added = 0

    def save(new_rows: list[dict], results) -> None:
        nonlocal added
        replaced = False
        for row, res in zip(new_rows, results):
            replaced |= row["key"] in rows
            rows[row["key"]] = row
            rd.write_history(row["run_id"], res.history)
        rd.add_trials(new_rows, rows.values(), searched, spec.task.kind, rewrite=replaced)
        added += len(new_rows)

    if spec.search.sampler == "grid":
        resolved: dict = {}
        jobs = plan.grid_jobs(spec, resolved=resolved)
        if trials is not None:
            jobs = jobs[:trials]
        progress = plan.Progress(spec, len(jobs), stream=progress_stream)
        for r in rows.values():
            progress.add_existing(r)
        for job in jobs:
            if job.key in rows:
                continue
            study.enqueue_trial(job.params, user_attrs={"key": job.key, "seed": job.seed, "trial": job.trial})
            ot = study.ask()
            spec.space.suggest(ot, base)  # records the enqueued values with their distributions
            try:
                result, tb = plan.run_job(spec, job.params, job.seed, plan.make_reporter(ot, spec.search.objective, prune=prune),
                                          resolved=resolved.get(job.key))
            except BaseException:
                plan.tell(study, ot, plan.INTERRUPTED, None, "interrupted")
                raise
            if tb:
                rd.log(f"{job.run_id} failed:\n{tb}")
            plan.tell(study, ot, result.status, result.metrics.get(spec.search.objective), result.error)
            row = plan.make_row(spec, job, result, ot.number)
            save([row], [result])
            rd.log(progress.update(row))
    else:
        from optuna.trial import TrialState

        target = trials if trials is not None else spec.search.trials
        finished = [
            t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
            if t.user_attrs.get("status") != plan.INTERRUPTED
        ]
        progress = plan.Progress(spec, target * len(spec.seeds), stream=progress_stream)
        for r in rows.values():
            progress.add_existing(r)
        for _ in range(max(0, target - len(finished))):
            ot = study.ask()
            try:
                params = spec.space.suggest(ot, base)
                resolved = plan.try_resolve(spec, params)
                results, new_rows = [], []
                for i, seed in enumerate(spec.seeds):
                    job = plan.sampled_job(spec, ot.number, params, seed, resolved=resolved)
                    total = _steps_hint(spec)
                    reporter = plan.make_reporter(ot, spec.search.objective, offset=i * total, prune=prune)
                    result, tb = plan.run_job(spec, params, seed, reporter, resolved=resolved)
                    if tb:
                        rd.log(f"{job.run_id} failed:\n{tb}")
                    results.append(result)
                    new_rows.append(plan.make_row(spec, job, result, ot.number))
                    if result.status != "complete":
                        break  # a pruned, diverged or failed seed ends the trial
            except BaseException:
                plan.tell(study, ot, plan.INTERRUPTED, None, traceback.format_exc(limit=2))
                raise
            status = plan.trial_status(results)
            plan.tell(study, ot, status, plan.run_value(spec, results), "; ".join(r.error for r in results if r.error))
            save(new_rows, results)
            for row in new_rows:
                rd.log(progress.update(row))
    if added or not in_order:  # appended rows are in the order runs finished; leave the file in (trial, seed) order
        rd.write_trials(rows.values(), searched, spec.task.kind)
    counts = {}
    for r in rows.values():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return counts


def _int(v) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 1 << 62


def _steps_hint(spec) -> int:
    """Step offset between seeds of one trial in Optuna's intermediate values."""
    t = spec.train
    return t.steps if t.steps is not None else 10**7
