"""What the stability probes cost, measured side by side in one run.

1. A trial's CPU time with probes off vs the default probes (snapshots every
   `stability.every` steps, sharpness at init and end), `--repeats` pairs of
   runs in alternating order (off-on, on-off, ...); the median of the pairs'
   ratios (the process runs one thread, so CPU time is robust to the other
   jobs of a shared machine; wall time is printed too), and the probes' own
   CPU time over the rest of the same runs. Target: at most +10%.
2. One sharpness estimate (a snapshot with the Hessian and no optimizer:
   forward, gradients, the Hessian batch's gradient graph, the power
   iteration) vs one training step of the same model, CPU time, medians:
   cold start as at init, warm start as at the end, and the worst case (all
   `hessian_iters` products, no early stop). Target: at most 30 training
   steps. For reference, the same on the whole probe batch
   (`hessian_batch: 0`), which was the default before `hessian_batch`.
3. With `--accuracy`: what a sub-batch Hessian costs in accuracy, the top
   eigenvalue on the first 32/64/128 examples vs the whole 256-example probe
   batch and the whole training set, at init and after 100 and `--steps`
   training steps (converged power iterations: 400 products at most,
   tolerance 1e-7).

    nice python benchmarks/bench_probes.py [--repeats 3] [--steps 600] [--threads 1] [--accuracy]

The trial is the example experiment's training and stability settings (batch
128, 600 steps, probes every 50 steps on a 256-example probe batch, Hessian on,
every other stability setting at its default) on the offline digits data,
with the quickstart's multi-branch mlp_resnet. The divergence threshold is
lifted (loss_factor 1e6): on unnormalized digits this model starts near 7x
ln(10) and a bump above 10 x ln(10) would end the run early, which would time
a shorter trial, not the probes.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from nas_stab.config import loads_spec
from nas_stab.models import build_model
from nas_stab.stability import probes
from nas_stab.tasks import load_task
from nas_stab.training.loop import train_run
from nas_stab.training.optim import build_optimizer

TRIAL = """\
name: bench-probes
task: {{dataset: {{name: digits}}}}
model: {{arch: mlp_resnet, depth: {depth}, width: {width}, branches: {branches}, branch_depth: 2, aggregation: stam, tau: {tau}}}
train: {{optimizer: sgd, lr: 0.02, momentum: 0.9, batch_size: 128, steps: {steps}}}
stability: {{every: 50, probe_batch: 256, hessian: true, divergence: {{loss_factor: 1.0e+6}}}}
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
    """CPU time (single-threaded, so robust to other processes on the machine) and wall time.

    Pairs of runs, probes off and on, in alternating order (off-on, on-off, ...) so that a
    drifting machine load favours neither; the figure is the median of the pairs' ratios."""
    spec = loads_spec(text)
    train_run(spec, 0)  # warm up: data cache, allocator
    pairs, inside = [], []
    for i in range(repeats):
        got = {}
        for mode in (("off", "on") if i % 2 == 0 else ("on", "off")):
            t = Timed()
            t.install(off=mode == "off")
            c0 = time.process_time()
            try:
                r = train_run(spec, 0)
            finally:
                t.uninstall()
            assert r.status == "complete", (r.status, r.error)
            got[mode] = (time.process_time() - c0, r.wall_s)
            if mode == "on":
                inside.append((t.cpu, got[mode][0], t.n))
        pairs.append(got)
    cpu_ratio = statistics.median(p["on"][0] / p["off"][0] for p in pairs)
    wall_ratio = statistics.median(p["on"][1] / p["off"][1] for p in pairs)
    c_off, c_on = (statistics.median(p[m][0] for p in pairs) for m in ("off", "on"))
    paired = statistics.median(pc / (tot - pc) for pc, tot, _ in inside)
    print(f"  trial CPU time: probes off {c_off:.2f}s, default probes {c_on:.2f}s (medians); median of the {repeats} pairs' "
          f"ratios  ->  +{100 * (cpu_ratio - 1):.1f}%   (target <= +10%)")
    print(f"    same runs, probes' own CPU time / the rest of the trial: +{100 * paired:.1f}% "
          f"({inside[0][2]} snapshots); wall time (noisy on a shared machine): +{100 * (wall_ratio - 1):.1f}%")


def _setup(text: str):
    """The spec of `text`, its task on CPU, a fresh model and optimizer (seed 0), and its batch stream."""
    spec = loads_spec(text)
    torch.manual_seed(0)
    task = load_task(spec, 0, torch.device("cpu"))
    model = build_model(spec, task.info)
    return spec, task, model, build_optimizer(model, spec.train), task.train_batches(torch.Generator().manual_seed(0))


def sharpness_cost(text: str, repeats: int) -> None:
    spec, task, model, opt, batches = _setup(text)

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
        snap = prober.snapshot(None, hessian=True)  # no optimizer: forward, gradients, gradient graph, power iteration
        return clock() - t0, snap

    train_steps(5)
    rows: dict[str, list[tuple[float, float]]] = {k: [] for k in ("cold", "warm", "worst", "whole-cold", "whole-warm")}
    step_times, snapshot_times = [], []
    for _ in range(repeats):
        step_times.append(train_steps(30))
        # interleaved: the default (hessian_batch from the spec) and the whole probe batch, on the same model
        for key, kw in (("", {}), ("whole-", {"hessian_batch": 0})):
            c, snap_c = estimate(probes.Prober(model, task, spec, **kw))  # cold start, as at init
            rows[key + "cold"].append((c, snap_c["sharpness_iters"]))
        pr = probes.Prober(model, task, spec)
        pr_whole = probes.Prober(model, task, spec, hessian_batch=0)
        pr.snapshot(None, hessian=True)
        pr_whole.snapshot(None, hessian=True)
        t0 = clock()
        pr.snapshot(opt, 1, hessian=False)
        snapshot_times.append(clock() - t0)
        w, snap = estimate(probes.Prober(model, task, spec, hessian_tol=-1.0))  # a negative tolerance never stops early
        rows["worst"].append((w, snap["sharpness_iters"]))
        train_steps(50)  # the model moves on, as between two estimates
        for key, p in (("", pr), ("whole-", pr_whole)):
            w, snap = estimate(p)  # warm start from the previous eigenvector
            rows[key + "warm"].append((w, snap["sharpness_iters"]))
    step = statistics.median(step_times)
    hb = probes.Prober(model, task, spec).hessian_batch
    print(f"  training step {1e3 * step:.2f} ms; snapshot without Hessian {statistics.median(snapshot_times) / step:.1f} steps")
    for key, label in (("cold", "cold start"), ("warm", "warm start"), ("worst", f"worst case, all {spec.stability.hessian_iters} products"),
                       ("whole-cold", "whole probe batch (hessian_batch: 0), cold"), ("whole-warm", "whole probe batch, warm")):
        if key == "whole-cold":
            print("  for reference, without the sub-batch:")
        t = statistics.median(x for x, _ in rows[key])
        target = "   (target <= 30)" if key in ("cold", "warm", "worst") else ""
        what = f"sharpness on {hb} examples" if not key.startswith("whole") else "sharpness"
        print(f"  {what}, {label}: {1e3 * t:.0f} ms = {t / step:.1f} training steps "
              f"({'/'.join(str(int(i)) for _, i in rows[key])} products){target}")


def accuracy(text: str, steps: int) -> None:
    """Top eigenvalue of the Hessian on sub-batches vs the whole probe batch and the whole training set."""
    spec, task, model, opt, batches = _setup(text)
    d = task.data
    train = (d.prepare(d.x_train), d.y_train)

    class OnBatch:  # the task, with another batch as its probe batch
        def __init__(self, batch):
            self.probe_batch, self.loss, self.forward = batch, task.loss, task.forward

    def top(batch, hb: int) -> float:
        pr = probes.Prober(model, OnBatch(batch), hessian=True, hessian_iters=400, hessian_tol=1e-7, hessian_batch=hb)
        return pr.snapshot(None, hessian=True)["sharpness"]

    done = 0
    for at in (0, 100, steps):
        while done < at:
            b = next(batches)
            loss = task.loss(model, b)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            done += 1
        whole = top(task.probe_batch, 0)
        cells = [f"train set ({len(train[0])}) {top(train, 0):.4g}", f"probe batch ({len(task.probe_batch[0])}) {whole:.4g}"]
        cells += [f"{k}: {(v := top(task.probe_batch, k)):.4g} ({100 * (v / whole - 1):+.0f}%)" for k in (128, 64, 32)]
        print(f"  sharpness at step {at}: " + ", ".join(cells))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--config", choices=sorted(CONFIGS), action="append")
    ap.add_argument("--accuracy", action="store_true", help="also the sub-batch Hessian's accuracy (a few minutes)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), repeats {args.repeats}")
    for name in args.config or list(CONFIGS):
        text = TRIAL.format(steps=args.steps, **CONFIGS[name])
        st = loads_spec(text).stability
        print(f"{name} (mlp_resnet {CONFIGS[name]}, digits, batch 128, {args.steps} steps, every {st.every}, "
              f"probe batch {st.probe_batch}, Hessian on {st.hessian_batch} of them, at most {st.hessian_iters} products):")
        trial_overhead(text, args.repeats)
        sharpness_cost(text, args.repeats)
        if args.accuracy:
            accuracy(text, args.steps)


if __name__ == "__main__":
    main()
