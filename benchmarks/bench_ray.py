"""Ray runner against the local runner, side by side on this machine.

Prints:
1. the per-trial overhead of the Ray runner on very small trials (a few training steps of a
   tiny MLP on digits): time per trial with the local runner and with the Ray runner (one trial
   at a time), measured between the first and the last finished trial; plus the one-off costs
   of starting Ray and of starting an experiment's trial workers;
2. the throughput of 2 concurrent trials against 1 on the Ray runner (1 CPU and 1 torch
   thread per trial), with moderately small trials, once started and overall;
3. the data load per trial on the Ray runner, 2 concurrent trials: each trial loading its
   dataset (as before `ray_trial.reuse_data`) against each worker process loading it once,
   on digits and on MNIST (8,000 training images, from --mnist-root), interleaved;
4. the driver's cost of recording one finished trial at a few hundred rows in trials.csv:
   rewriting the whole file (as before) against appending the row (`RunDir.add_trials`),
   interleaved, with a real run's row and history.

    python benchmarks/bench_ray.py [--small N] [--medium N] [--steps S] [--only 1,2,3,4]
        [--data-trials N] [--data-steps S] [--data-rounds R] [--mnist-root DIR] [--records N]

Shares the machine with whatever else runs: the load average is printed with the figures.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import yaml

BASE = {
    "name": "bench",
    "seeds": 1,
    "task": {"dataset": {"name": "digits"}},
    "model": {"arch": "mlp_resnet", "depth": 2, "width": 16},
    "train": {"lr": 0.05, "steps": 5, "batch_size": 32, "threads": 1},
    "stability": {"every": 0, "probe_batch": 64, "hessian": False},
    "search": {"sampler": "grid"},
}


def spec_for(n: int, steps: int, concurrency: int, kind: str):
    from nas_stab.config import loads_spec

    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["train"]["steps"] = steps
    # n distinct configurations (distinct learning rates), all stable
    data["space"] = {"train.lr": [round(0.01 + 0.002 * i, 6) for i in range(n)]}
    data["runner"] = {"kind": kind, "concurrency": concurrency}
    return loads_spec(yaml.safe_dump(data))


class Clock:
    """A progress stream that notes when each run finished (the runners print one line per run)."""

    def __init__(self):
        self.t0 = time.perf_counter()
        self.done: list[float] = []

    def write(self, text: str) -> None:
        if text.startswith("["):
            self.done.append(time.perf_counter() - self.t0)

    def flush(self) -> None:
        pass


def timed_run(spec, runner) -> tuple[float, float]:
    """(total seconds, steady seconds per trial): steady = between the first and the last finished run,
    which leaves out the one-off start of the experiment (Ray: starting the trial worker processes)."""
    from nas_stab.store.rundir import RunDir

    out = Path(tempfile.mkdtemp(prefix="nas-bench-"))
    clock = Clock()
    try:
        with RunDir.open(out, spec) as rd:
            counts = runner(spec, rd, progress_stream=clock)
        total = time.perf_counter() - clock.t0
    finally:
        shutil.rmtree(out, ignore_errors=True)
    n = len(spec.space.dims[0].values)
    assert sum(counts.values()) == n, counts
    d = clock.done
    conc = spec.runner.concurrency if spec.runner.kind == "ray" else 1
    # the first `conc` runs finish together after the start-up; the steady rate is measured after them
    steady = (d[-1] - d[conc - 1]) / (n - conc) if n > conc else total / n
    return total, steady


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", type=int, default=12, help="very small trials for the overhead figure")
    ap.add_argument("--medium", type=int, default=12, help="trials for the throughput figure")
    ap.add_argument("--steps", type=int, default=300, help="training steps of a throughput trial")
    ap.add_argument("--only", default="1,2,3,4", help="which figures, e.g. 3,4")
    ap.add_argument("--data-trials", type=int, default=12, help="trials per run for figure 3")
    ap.add_argument("--data-steps", type=int, default=20, help="training steps of a figure-3 trial")
    ap.add_argument("--data-rounds", type=int, default=2, help="runs of each setting for figure 3, interleaved")
    ap.add_argument("--mnist-root", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"),
                    help="directory holding MNIST (figure 3; skipped if absent)")
    ap.add_argument("--records", type=int, default=400, help="rows in trials.csv for figure 4")
    args = ap.parse_args(argv)
    only = {int(x) for x in args.only.split(",") if x.strip()}

    import ray
    import torch

    from nas_stab.search.local import run_local
    from nas_stab.search.ray.loopback import init_ray
    from nas_stab.search.ray.runner import run_ray

    torch.set_num_threads(1)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start; "
          f"ray {ray.__version__}, torch {torch.__version__}")

    # warm the caches (dataset decode, imports) so neither runner pays them in its figure
    timed_run(spec_for(1, 2, 1, "local"), run_local)
    if 4 in only:
        record_costs(args.records)
    if not only & {1, 2, 3}:
        return 0

    t0 = time.perf_counter()
    init_ray(None, num_cpus=os.cpu_count() or 1)
    t_init = time.perf_counter() - t0
    try:
        if 1 in only:
            overhead(args.small, t_init, run_local, run_ray)
        if 2 in only:
            throughput(args.medium, args.steps, run_ray)
        if 3 in only:
            data_load(args)
        print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    finally:
        ray.shutdown()
    return 0


def overhead(small: int, t_init: float, run_local, run_ray) -> None:
    t_local, s_local = timed_run(spec_for(small, 5, 1, "local"), run_local)
    t_ray, s_ray = timed_run(spec_for(small, 5, 1, "ray"), run_ray)
    print()
    print(f"1. per-trial overhead, {small} very small trials (5 steps, tiny MLP), one at a time")
    print(f"   starting a local Ray (ray.init), once:          {t_init:6.2f} s")
    print(f"   local runner, per trial:                        {s_local * 1000:6.0f} ms   (all: {t_local:.1f} s)")
    print(f"   ray runner, per trial once started:             {s_ray * 1000:6.0f} ms   (all: {t_ray:.1f} s)")
    print(f"   ray runner, start of an experiment (workers):   {t_ray - s_ray * small:6.2f} s")
    print(f"   => overhead of the Ray runner per trial:        {(s_ray - s_local) * 1000:+6.0f} ms (x{s_ray / s_local:.1f})")


def throughput(med: int, steps: int, run_ray) -> None:
    t1, s1 = timed_run(spec_for(med, steps, 1, "ray"), run_ray)
    t2, s2 = timed_run(spec_for(med, steps, 2, "ray"), run_ray)
    print()
    print(f"2. throughput on the Ray runner, {med} trials of {steps} steps, 1 CPU and 1 torch thread per trial")
    print(f"   concurrency 1:  {60 / s1:6.1f} trials/min once started   ({med / t1 * 60:5.1f}/min with the start-up, {t1:.1f} s)")
    print(f"   concurrency 2:  {60 / s2:6.1f} trials/min once started   ({med / t2 * 60:5.1f}/min with the start-up, {t2:.1f} s)")
    print(f"   speed-up of 2 concurrent trials over 1:  x{s1 / s2:.2f} once started, x{t1 / t2:.2f} overall")


def _timed(run, times: str):
    """Run `run()` and note its wall time in the worker (one line in `times`/<pid>)."""
    t = time.perf_counter()
    try:
        return run()
    finally:
        with open(os.path.join(times, str(os.getpid())), "a") as f:
            f.write(f"{time.perf_counter() - t}\n")


def run_loading_per_trial(spec, params, seed, reporter=None, checkpoint=None, *, times: str):
    """plan.run_job with the worker's data cache out of the way: the trial loads its dataset (as before)."""
    from nas_stab import data
    from nas_stab.search import plan

    memo, data._MEMO = data._MEMO, None
    try:
        return _timed(lambda: plan.run_job(spec, params, seed, reporter, checkpoint), times)
    finally:
        data._MEMO = memo


def run_reusing(spec, params, seed, reporter=None, checkpoint=None, *, times: str):
    """plan.run_job as the Ray runner calls it (the same wrapper as `run_loading_per_trial`)."""
    from nas_stab.search import plan

    return _timed(lambda: plan.run_job(spec, params, seed, reporter, checkpoint), times)


def data_spec(dataset: dict, n: int, steps: int):
    from nas_stab.config import loads_spec

    data = yaml.safe_load(yaml.safe_dump(BASE))
    data["task"]["dataset"] = dataset
    data["train"]["steps"] = steps
    data["space"] = {"train.lr": [round(0.01 + 0.002 * i, 6) for i in range(n)]}
    data["runner"] = {"kind": "ray", "concurrency": 2}
    return loads_spec(yaml.safe_dump(data))


def data_load(args) -> None:
    import functools
    import statistics

    from nas_stab.search.ray.runner import run_ray

    n, steps = args.data_trials, args.data_steps
    sets = [("digits", {"name": "digits"})]
    if (Path(args.mnist_root) / "mnist").is_dir() or list(Path(args.mnist_root).glob("*idx*")):
        sets.append(("mnist 8k", {"name": "mnist", "root": args.mnist_root, "train": 8000, "val": 1000, "test": 1000}))
    else:
        print(f"(no MNIST under {args.mnist_root}: figure 3 on digits only)")
    print()
    print(f"3. data load per trial on the Ray runner, {n} trials of {steps} steps, 2 concurrent trials "
          f"(1 CPU, 1 torch thread each), {args.data_rounds} run(s) of each setting, interleaved (ABBA)")
    print("   medians: 'worker' = a trial's wall time in its worker (plan.run_job, with or without the load), "
          "'steady' = driver-side time between finished trials")
    settings = (("before: load per trial", run_loading_per_trial), ("now: once per worker", run_reusing))
    for label, dataset in sets:
        spec = data_spec(dataset, n, steps)
        steady = {k: [] for k, _ in settings}
        worker = {k: [] for k, _ in settings}
        for rnd in range(args.data_rounds):
            for key, fn in (settings if rnd % 2 == 0 else settings[::-1]):
                times = tempfile.mkdtemp(prefix="nas-bench-times-")
                run_fn = functools.partial(fn, times=times)
                _, s = timed_run(spec, lambda sp, rd, run_fn=run_fn, **kw: run_ray(sp, rd, run_fn=run_fn, **kw))
                steady[key].append(s)
                worker[key] += [float(x) for p in Path(times).iterdir() for x in p.read_text().split()]
                shutil.rmtree(times, ignore_errors=True)
        med = {k: (statistics.median(worker[k]), statistics.median(steady[k])) for k in worker}
        for key, _ in settings:
            w, st = med[key]
            print(f"   {label:9s} {key:23s} worker {w * 1000:6.0f} ms/trial, steady {st * 1000:6.0f} ms/trial  "
                  f"(steady per run: {', '.join(f'{x * 1000:.0f}' for x in steady[key])} ms)")
        (wa, sa), (wb, sb) = med[settings[0][0]], med[settings[1][0]]
        print(f"   {label:9s} => now/before: worker x{wb / wa:.2f} ({(wa - wb) * 1000:+.0f} ms saved per trial), "
              f"steady x{sb / sa:.2f} ({(sa - sb) * 1000:+.0f} ms)")


def record_costs(n: int) -> None:
    """Figure 4: what the driver does per finished trial, before (rewrite every row) and now (append)."""
    from nas_stab.search import plan
    from nas_stab.store.rundir import RunDir

    spec = spec_for(n, 20, 1, "local")
    jobs = plan.grid_jobs(spec)
    res, _ = plan.run_job(spec, jobs[0].params, jobs[0].seed)  # a real row: every metric column, a real history
    out = Path(tempfile.mkdtemp(prefix="nas-bench-rec-"))
    dirs = {k: RunDir(out / k) for k in ("rewrite", "append")}
    for rd in dirs.values():
        (rd.path / "history").mkdir(parents=True)
    rows = {k: {} for k in dirs}
    cost = {k: [] for k in dirs}  # the whole record: history + trials.csv
    table = {k: [] for k in dirs}  # trials.csv alone
    for i, job in enumerate(jobs):
        row = plan.make_row(spec, job, res, i)
        for k in (("rewrite", "append") if i % 2 else ("append", "rewrite")):  # interleaved, alternating first
            rd, rs = dirs[k], rows[k]
            t = time.perf_counter()
            rs[row["key"]] = row
            rd.write_history(row["run_id"], res.history)
            t1 = time.perf_counter()
            if k == "rewrite":
                rd.write_trials(list(rs.values()), spec.space.keys, spec.task.kind)  # the Ray runner's on_finish before
            else:
                rd.add_trials([row], rs.values(), spec.space.keys, spec.task.kind)  # now (as the local runner)
            t2 = time.perf_counter()
            cost[k].append(t2 - t)
            table[k].append(t2 - t1)
    t = time.perf_counter()
    dirs["append"].write_trials(rows["append"].values(), spec.space.keys, spec.task.kind)  # the sort at the end
    t_sort = time.perf_counter() - t
    same = (dirs["append"].path / "trials.csv").read_text() == (dirs["rewrite"].path / "trials.csv").read_text()
    shutil.rmtree(out, ignore_errors=True)

    def ms(xs):
        xs = sorted(xs)
        return f"{xs[len(xs) // 2] * 1000:6.2f} ms (median), total {sum(xs):.2f} s"

    print()
    print(f"4. the driver's cost of recording a finished trial (history + trials.csv), {n} trials, interleaved")
    for what, c in (("history + trials.csv", cost), ("trials.csv alone", table)):
        print(f"   {what}:")
        for lo, hi in ((0, 50), (n // 2 - 25, n // 2 + 25), (n - 50, n)):
            a, b = c["rewrite"][lo:hi], c["append"][lo:hi]
            print(f"     rows {lo:4d}-{hi:4d}: rewrite every row (before) {ms(a)};  append (now) {ms(b)};  "
                  f"now/before x{sorted(b)[len(b) // 2] / sorted(a)[len(a) // 2]:.2f}")
    print(f"   whole run: before {sum(cost['rewrite']):.2f} s, now {sum(cost['append']):.2f} s + {t_sort * 1000:.0f} ms for the "
          f"final sort; same final trials.csv: {same}")


if __name__ == "__main__":
    sys.exit(main())
