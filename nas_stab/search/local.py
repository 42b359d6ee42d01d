"""The local runner, the embedded default: trials in-process, Optuna in SQLite.

Resuming is the normal case: rerunning the same spec skips every run whose
key is already in trials.csv, closes trials a killed driver left RUNNING as
FAIL (status interrupted) and trains them again.

`runner.concurrency: N` > 1 trains N runs at once in worker processes
(nas_stab/search/local_pool.py): the grid keeps N of its runs going, the other
samplers ask up to N trials at once. This process alone asks, tells and
writes the run directory, as with N = 1, which trains in this process.
"""
from __future__ import annotations

import traceback

from nas_stab.search import plan


def run_local(spec, rd, *, trials: int | None = None, progress_stream=None) -> dict:
    """Run every pending trial of `spec` into run directory `rd`. Returns status counts."""
    from nas_stab.data import reuse_loaded

    with reuse_loaded():  # the data is loaded once for the whole search, not once per run
        return _run_local(spec, rd, trials=trials, progress_stream=progress_stream)


def _run_local(spec, rd, *, trials: int | None, progress_stream) -> dict:
    import torch

    pooled = spec.runner.concurrency > 1
    if not pooled:
        from nas_stab.search.local_pool import worker_threads

        torch.set_num_threads(worker_threads(spec, 1))  # the one "worker" is this process
    study, rows = plan.open_study(spec, rd)
    in_order = plan.in_trial_order(rows.values())  # False after a run killed between an append and its final sort
    searched = spec.space.keys
    base = plan.base_lookup(spec)
    prune = spec.search.pruner.name != "none"
    added = 0

    def save(new_rows: list[dict], results) -> None:
        """A finished trial's history files and trials.csv rows, on disk before Optuna is told."""
        nonlocal added
        plan.save_records(rd, spec, rows, new_rows, results)
        added += len(new_rows)

    def finish_run(job, ot, result, tb) -> None:  # grid: one run is one Optuna trial
        if tb:
            rd.log(f"{job.run_id} failed:\n{tb}")
        row = plan.make_row(spec, job, result, ot.number)
        save([row], [result])  # write, then tell: a kill between the two loses nothing (plan.open_study)
        plan.tell(study, ot, result.status, result.metrics.get(spec.search.objective), result.error)
        rd.log(progress.update(row))

    def finish_trial(ot, results, new_rows) -> None:  # other samplers: a trial is its seeds' runs
        status = plan.trial_status(results)
        save(new_rows, results)
        plan.tell(study, ot, status, plan.run_value(spec, results), "; ".join(r.error for r in results if r.error))
        for row in new_rows:
            rd.log(progress.update(row))

    progress = plan.Progress(spec, None, stream=progress_stream)  # its total is set below
    try:
        if spec.search.sampler == "grid":
            resolved: dict = {}
            jobs = plan.grid_jobs(spec, resolved=resolved)
            if trials is not None:
                jobs = jobs[:trials]
            progress.total = len(jobs)
            for r in rows.values():
                progress.add_existing(r)
            todo = [job for job in jobs if job.key not in rows]
            if rows:
                progress.note(f"resuming {rd.path}: {len(jobs) - len(todo)} of {len(jobs)} runs already recorded; "
                              f"training the other {len(todo)}")
            if pooled:
                _grid_pool(spec, study, todo, resolved, base, prune, finish_run, rd.log, progress)
            else:
                for job in todo:
                    ot = _ask_grid(spec, study, job, base)
                    progress.started(job.run_id, job.params, job.seed, plan.steps_hint(resolved.get(job.key) or spec))
                    try:
                        watched = _Watched(ot, progress, job.run_id)
                        result, tb = plan.run_job(spec, job.params, job.seed, plan.make_reporter(watched, spec.search.objective, prune=prune),
                                                  resolved=resolved.get(job.key))
                    except BaseException:
                        plan.tell(study, ot, plan.INTERRUPTED, None, "interrupted")
                        raise
                    finish_run(job, ot, result, tb)
        else:
            target = trials if trials is not None else spec.search.trials
            remaining = plan.sampled_remaining(spec, study, rows, target, rd.log)
            progress.total = target * len(spec.seeds)
            for r in rows.values():
                progress.add_existing(r)
            if rows:
                progress.note(f"resuming {rd.path}: {len(rows)} runs already recorded; {remaining} trial(s) to go")
            if pooled:
                _sampled_pool(spec, study, rd, remaining, base, prune, finish_trial, progress)
            else:
                for _ in range(remaining):
                    ot = study.ask()
                    try:
                        params = spec.space.suggest(ot, base)
                        resolved = plan.try_resolve(spec, params)
                        results, new_rows = [], []
                        for i, seed in enumerate(spec.seeds):
                            job = plan.sampled_job(spec, ot.number, params, seed, resolved=resolved)
                            total = plan.steps_hint(spec)
                            progress.started(job.run_id, params, seed, total)
                            reporter = plan.make_reporter(_Watched(ot, progress, job.run_id, i * total), spec.search.objective,
                                                          offset=i * total, prune=prune)
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
                    finish_trial(ot, results, new_rows)
    finally:
        progress.close()
    if added or not in_order:  # appended rows are in the order runs finished; leave the file in (trial, seed) order
        rd.write_trials(rows.values(), searched, spec.task.kind)
    counts = {}
    for r in rows.values():
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    return counts


def _ask_grid(spec, study, job, base):
    """The Optuna trial of a grid run: its point enqueued, then asked."""
    study.enqueue_trial(job.params, user_attrs={"key": job.key, "seed": job.seed, "trial": job.trial})
    ot = study.ask()
    spec.space.suggest(ot, base, grid=True)  # records the enqueued values with their distributions
    return ot


def _grid_pool(spec, study, jobs, resolved: dict, base, prune: bool, finish_run, log, progress) -> None:
    """Grid runs in `runner.concurrency` worker processes, asked in grid order as workers free up."""
    from nas_stab.search.local_pool import WorkerPool

    if not jobs:
        return
    pending = iter(jobs)
    running: dict = {}  # Optuna trial number -> trial, until told
    with WorkerPool(spec, min(spec.runner.concurrency, len(jobs)), log) as pool:  # no idle worker started
        try:
            while True:
                for job in _take(pending, pool.idle):
                    ot = _ask_grid(spec, study, job, base)
                    running[ot.number] = ot
                    progress.started(job.run_id, job.params, job.seed, plan.steps_hint(resolved.get(job.key) or spec))
                    pool.submit((job, ot), _Watched(ot, progress, job.run_id), job.params, job.seed, resolved.get(job.key),
                                prune=prune)
                if not pool.busy:
                    return
                for (job, ot), result, tb in pool.wait():
                    del running[ot.number]
                    finish_run(job, ot, result, tb)
        except BaseException:
            _interrupted(study, running)
            raise


def _sampled_pool(spec, study, rd, count: int, base, prune: bool, finish_trial, progress) -> None:
    """`count` trials of a sampler with up to `runner.concurrency` asked at once.

    A trial's seeds run one after another (the next seed on the worker the
    previous one freed), as in-process: a pruned, diverged or failed seed
    ends the trial, and seed i reports at steps offset by i * train.steps.
    """
    from nas_stab.search.local_pool import WorkerPool

    if count <= 0:
        return
    total = plan.steps_hint(spec)
    asked = 0
    running: dict = {}  # Optuna trial number -> trial, until told

    def start_seed(t) -> None:
        i = len(t.results)
        run_id = plan.sampled_job(spec, t.ot.number, t.params, spec.seeds[i], resolved=t.resolved).run_id
        progress.started(run_id, t.params, spec.seeds[i], total)
        pool.submit(t, _Watched(t.ot, progress, run_id, i * total), t.params, spec.seeds[i], t.resolved, offset=i * total,
                    prune=prune)

    with WorkerPool(spec, min(spec.runner.concurrency, count), rd.log) as pool:  # no idle worker started
        try:
            while True:
                while pool.idle and asked < count:
                    ot = study.ask()
                    asked += 1
                    running[ot.number] = ot
                    params = spec.space.suggest(ot, base)
                    start_seed(_Trial(ot, params, plan.try_resolve(spec, params)))
                if not pool.busy:
                    return
                for t, result, tb in pool.wait():
                    job = plan.sampled_job(spec, t.ot.number, t.params, spec.seeds[len(t.results)], resolved=t.resolved)
                    if tb:
                        rd.log(f"{job.run_id} failed:\n{tb}")
                    t.results.append(result)
                    t.rows.append(plan.make_row(spec, job, result, t.ot.number))
                    if result.status == "complete" and len(t.results) < len(spec.seeds):
                        start_seed(t)
                    else:
                        del running[t.ot.number]
                        finish_trial(t.ot, t.results, t.rows)
        except BaseException:
            _interrupted(study, running)
            raise


class _Watched:
    """The driver's Optuna trial, also showing each reported step on the progress display."""

    def __init__(self, trial, progress, run_id: str, offset: int = 0):
        self.trial, self.progress, self.run_id, self.offset = trial, progress, run_id, offset

    def report(self, value: float, step: int) -> None:
        self.progress.step(self.run_id, step - self.offset)
        self.trial.report(value, step)

    def should_prune(self) -> bool:
        return self.trial.should_prune()


class _Trial:
    """A sampled trial in progress: its Optuna trial, configuration, and its seeds' results so far."""

    def __init__(self, ot, params: dict, resolved):
        self.ot, self.params, self.resolved = ot, params, resolved
        self.results: list = []
        self.rows: list[dict] = []


def _take(it, n: int) -> list:
    out = []
    for _ in range(n):
        x = next(it, None)
        if x is None:
            break
        out.append(x)
    return out


def _interrupted(study, running: dict) -> None:
    """Close the trials still running when the driver stops (Ctrl-C, an error): trained again on a rerun."""
    for ot in running.values():
        try:
            plan.tell(study, ot, plan.INTERRUPTED, None, "interrupted")
        except Exception:  # closing what can be closed; a rerun closes the rest
            pass
