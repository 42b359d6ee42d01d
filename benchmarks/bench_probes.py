"""What the stability probes cost, measured side by side in one run.

1. A trial's wall time with probes off vs the default probes (snapshots every
   `stability.every` steps, sharpness at init and end), interleaved off/on
   `--repeats` times; medians of CPU time (the process runs one thread, so CPU
   time is robust to the other jobs of a shared machine; wall time is printed
   too). Target: at most +10%.
2. One sharpness estimate (CPU time) (gradient graph + power iteration, cold start as at
   init, and warm start as at the end) vs one training step of the same model.
   Target: at most 30 training steps.

    nice python benchmarks/bench_probes.py [--repeats 3] [--steps 600] [--threads 1]

The trial is the SPEC 1 example's training and stability settings (batch 128,
600 steps, probes every 50 steps on a 256-example probe batch, Hessian on) on
the offline digits data, with the quickstart's multi-branch mlp_resnet.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from nas_stab.models import build_model
from nas_stab.spec import loads_spec
from nas_stab.stability import probes
from nas_stab.tasks import load_task
from nas_stab.training.loop import train_run
from nas_stab.training.optim import build_optimizer

TRIAL = """\
name: bench-probes
task: {{dataset: {{name: digits}}}}
model: {{arch: mlp_resnet, depth: {depth}, width: {width}, branches: {branches}, branch_depth: 2, aggregation: stam, tau: {tau}}}
train: {{optimizer: sgd, lr: 0.02, momentum: 0.9, batch_size: 128, steps: {steps}}}
stability: {{every: 50, probe_batch: 256, hessian: true}}
"""

CONFIGS = {
    "d4-w128-C4": dict(depth=4, width=128, branches=4, tau=1),
    "d16-w128-C1": dict(depth=16, width=128, branches=1, tau='"1/sqrt(L)"'),
}


class Timed:
    """Wraps Prober.snapshot: adds up the CPU and wall time spent in probes (or turns them off)."""

    def __init__(self):
        self.orig = probes.Prober.snapshot
        self.cpu = self.wall = 0.0
        self.n = 0

    def install(self, off: bool):
        timed = self

        def snapshot(self_, *a, **k):
            if off:
                return {}
            c0, t0 = time.process_time(), time.perf_counter()
            try:
                return timed.orig(self_, *a, **k)
            finally:
                timed.cpu += time.process_time() - c0
                timed.wall += time.perf_counter() - t0
                timed.n += 1

        probes.Prober.snapshot = snapshot

    def uninstall(self):
        probes.Prober.snapshot = self.orig


def trial_overhead(text: str, repeats: int) -> None:
    """CPU time (single-threaded, so robust to other processes on the machine) and wall time."""
    spec = loads_spec(text)
    train_run(spec, 0)  # warm up: data cache, allocator
    cpu = {"off": [], "on": []}
    wall = {"off": [], "on": []}
    inside = []
    for _ in range(repeats):
        for mode in ("off", "on"):
            t = Timed()
            t.install(off=mode == "off")
            c0 = time.process_time()
            try:
                r = train_run(spec, 0)
            finally:
                t.uninstall()
            assert r.status == "complete", (r.status, r.error)
            cpu[mode].append(time.process_time() - c0)
            wall[mode].append(r.wall_s)
            if mode == "on":
                inside.append((t.cpu, time.process_time() - c0, t.n))
    med = {m: (statistics.median(cpu[m]), statistics.median(wall[m])) for m in cpu}
    (c_off, w_off), (c_on, w_on) = med["off"], med["on"]
    paired = statistics.median(pc / (tot - pc) for pc, tot, _ in inside)
    print(f"  trial CPU time: probes off {c_off:.2f}s, default probes {c_on:.2f}s  ->  +{100 * (c_on / c_off - 1):.1f}%"
          f"   (target <= +10%)")
    print(f"    same runs, probes' own CPU time / the rest of the trial: +{100 * paired:.1f}% "
          f"({inside[0][2]} snapshots); wall time (noisy on a shared machine): off {w_off:.2f}s, on {w_on:.2f}s "
          f"-> +{100 * (w_on / w_off - 1):.1f}%")


def sharpness_cost(text: str, repeats: int) -> None:
    spec = loads_spec(text)
    torch.manual_seed(0)
    task = load_task(spec, 0, torch.device("cpu"))
    model = build_model(spec, task.info)
    opt = build_optimizer(model, spec.train)
    batches = task.train_batches(torch.Generator().manual_seed(0))

    clock = time.process_time  # CPU time: robust to other processes on a shared machine

    def train_steps(n: int) -> float:
        t0 = clock()
        for _ in range(n):
            b = next(batches)
            loss = task.loss(model, b)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return (clock() - t0) / n

    def estimate(prober) -> tuple[float, dict]:
        t0 = clock()
        snap = prober.snapshot(None, hessian=True)  # no optimizer: forward, gradient graph, power iteration
        return clock() - t0, snap

    train_steps(5)
    step_times, cold, warm, snapshot_times = [], [], [], []
    for _ in range(repeats):
        step_times.append(train_steps(30))
        c, snap_c = estimate(probes.Prober(model, task, spec))  # cold start, as at init
        pr = probes.Prober(model, task, spec)
        pr.snapshot(None, hessian=True)
        train_steps(50)  # the model moves on, as between two estimates
        w, snap_w = estimate(pr)  # warm start from the previous eigenvector
        t0 = clock()
        pr.snapshot(opt, 1, hessian=False)
        snapshot_times.append(clock() - t0)
        cold.append((c, snap_c["sharpness_iters"]))
        warm.append((w, snap_w["sharpness_iters"]))
    step = statistics.median(step_times)
    c = statistics.median(x for x, _ in cold)
    w = statistics.median(x for x, _ in warm)
    print(f"  training step {1e3 * step:.2f} ms; snapshot without Hessian {statistics.median(snapshot_times) / step:.1f} steps")
    print(f"  sharpness, cold start: {1e3 * c:.0f} ms = {c / step:.1f} training steps "
          f"({'/'.join(str(int(i)) for _, i in cold)} products)   (target <= 30)")
    print(f"  sharpness, warm start: {1e3 * w:.0f} ms = {w / step:.1f} training steps "
          f"({'/'.join(str(int(i)) for _, i in warm)} products)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--config", choices=sorted(CONFIGS), action="append")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), repeats {args.repeats}")
    for name in args.config or list(CONFIGS):
        text = TRIAL.format(steps=args.steps, **CONFIGS[name])
        print(f"{name} (mlp_resnet {CONFIGS[name]}, digits, batch 128, {args.steps} steps, every 50, probe batch 256):")
        trial_overhead(text, args.repeats)
        sharpness_cost(text, args.repeats)


if __name__ == "__main__":
    main()
