"""Ray runner against the local runner, side by side on this machine.

Prints:
1. the per-trial overhead of the Ray runner on very small trials (a few training steps of a
   tiny MLP on digits): time per trial with the local runner and with the Ray runner (one trial
   at a time), measured between the first and the last finished trial; plus the one-off costs
   of starting Ray and of starting an experiment's trial workers;
2. the throughput of 2 concurrent trials against 1 on the Ray runner (1 CPU and 1 torch
   thread per trial), with moderately small trials, once started and overall.

    python benchmarks/bench_ray.py [--small N] [--medium N] [--steps S]

Shares the machine with whatever else runs: the load average is printed with the figures.
"""
from __future__ import annotations

import argparse
import os
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
    from nas_stab.spec import loads_spec

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
    from nas_stab.results.rundir import RunDir

    out = Path(tempfile.mkdtemp(prefix="nas-bench-"))
    clock = Clock()
    with RunDir.open(out, spec) as rd:
        counts = runner(spec, rd, progress_stream=clock)
    total = time.perf_counter() - clock.t0
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
    args = ap.parse_args(argv)

    import ray
    import torch

    from nas_stab.search.local import run_local
    from nas_stab.search.ray_loopback import init_ray
    from nas_stab.search.ray_runner import run_ray

    torch.set_num_threads(1)
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at start; "
          f"ray {ray.__version__}, torch {torch.__version__}")

    # warm the caches (dataset decode, imports) so neither runner pays them in its figure
    timed_run(spec_for(1, 2, 1, "local"), run_local)

    t0 = time.perf_counter()
    init_ray(None, num_cpus=os.cpu_count() or 1)
    t_init = time.perf_counter() - t0
    try:
        small = args.small
        t_local, s_local = timed_run(spec_for(small, 5, 1, "local"), run_local)
        t_ray, s_ray = timed_run(spec_for(small, 5, 1, "ray"), run_ray)
        print()
        print(f"1. per-trial overhead, {small} very small trials (5 steps, tiny MLP), one at a time")
        print(f"   starting a local Ray (ray.init), once:          {t_init:6.2f} s")
        print(f"   local runner, per trial:                        {s_local * 1000:6.0f} ms   (all: {t_local:.1f} s)")
        print(f"   ray runner, per trial once started:             {s_ray * 1000:6.0f} ms   (all: {t_ray:.1f} s)")
        print(f"   ray runner, start of an experiment (workers):   {t_ray - s_ray * small:6.2f} s")
        print(f"   => overhead of the Ray runner per trial:        {(s_ray - s_local) * 1000:+6.0f} ms (x{s_ray / s_local:.1f})")

        med, steps = args.medium, args.steps
        t1, s1 = timed_run(spec_for(med, steps, 1, "ray"), run_ray)
        t2, s2 = timed_run(spec_for(med, steps, 2, "ray"), run_ray)
        print()
        print(f"2. throughput on the Ray runner, {med} trials of {steps} steps, 1 CPU and 1 torch thread per trial")
        print(f"   concurrency 1:  {60 / s1:6.1f} trials/min once started   ({med / t1 * 60:5.1f}/min with the start-up, {t1:.1f} s)")
        print(f"   concurrency 2:  {60 / s2:6.1f} trials/min once started   ({med / t2 * 60:5.1f}/min with the start-up, {t2:.1f} s)")
        print(f"   speed-up of 2 concurrent trials over 1:  x{s1 / s2:.2f} once started, x{t1 / t2:.2f} overall")
        print(f"\nload average {os.getloadavg()[0]:.1f} at the end")
    finally:
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
