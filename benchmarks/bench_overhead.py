"""Framework overhead: a nas_stab trial against a hand-written PyTorch loop.

Both train the same model (built by nas_stab, same init) on the same tensors
(on the same device) with the same optimizer, batch order (one `randperm` per
epoch, batches gathered by index) and number of steps, and both evaluate on
the validation and test sets once at the end, which is what a user's script
would do. Both times include loading the data and building the model. Runs
are interleaved (A, B, C, A, B, C, ...) and the medians compared, so the
ratios are measured side by side in one run.

    python benchmarks/bench_overhead.py [--steps 400] [--reps 7] [--width 256] [--threads 1[,2...]]

Prints wall and CPU times and the ratios nas_stab / hand-written with probes
off (stability.every 0, no Hessian: nas_stab still takes its init and final
snapshots, two forward-backward passes on the probe batch each) and with the
default probes (every 50 steps, Hessian at init and end). The process runs
one torch thread by default, as the shipped spaces' trials do, so CPU time is
robust to the other jobs of a shared machine; wall time is the target's
measure on a quiet one. The last row (not part of the target) is the default
`train.eval_every` (10 validations per run, what the pruner needs) instead of
one evaluation at the end. `--threads 1,2` measures each thread count in turn
(set OMP_NUM_THREADS to the largest). Where the time goes:
benchmarks/profile_overhead.py.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F

from nas_stab.config import loads_spec
from nas_stab.models import build_model
from nas_stab.tasks import load_task
from nas_stab.training import train_run

SPEC = """\
name: bench
task: {{dataset: {{name: synthetic, size: 20000, shape: [256], classes: 10}}}}
model: {{arch: mlp_resnet, depth: 4, width: {width}, branches: 2, aggregation: stam, tau: 1/sqrt(L)}}
train: {{lr: 0.01, steps: {steps}, batch_size: 128, eval_every: {eval_every}}}
stability: {{every: {every}, hessian: {hessian}}}
"""


def clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def hand_written(spec, seed: int) -> tuple[float, float]:
    """What a user would write: build, loop over permuted batches, step, evaluate val and test at the end."""
    w0, c0 = clocks()
    torch.manual_seed(seed)
    task = load_task(spec, seed, torch.device("cpu"))
    model = build_model(spec, task.info)
    opt = torch.optim.SGD(model.parameters(), lr=spec.train.lr, momentum=spec.train.momentum)
    d = task.data
    gen = torch.Generator().manual_seed(seed)
    bs, n = spec.train.batch_size, len(d.x_train)
    step = 0
    while step < spec.train.steps:
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n - bs + 1, bs):
            idx = perm[i : i + bs]
            loss = F.cross_entropy(model(d.x_train[idx]), d.y_train[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step == spec.train.steps:
                break
    model.eval()
    with torch.no_grad():
        for x, y in ((d.x_val, d.y_val), (d.x_test, d.y_test)):
            out = model(x)
            acc = (out.argmax(1) == y).float().mean().item()
            loss = F.cross_entropy(out, y).item()
            assert acc >= 0 and loss >= 0
    w1, c1 = clocks()
    return w1 - w0, c1 - c0


def through_nas_stab(spec, seed: int) -> tuple[float, float]:
    w0, c0 = clocks()
    r = train_run(spec, seed)
    assert r.status == "complete", r.error
    w1, c1 = clocks()
    return w1 - w0, c1 - c0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--threads", default="1", help="torch threads, or a comma list measured in turn: 1,2")
    a = ap.parse_args()
    for threads in [int(t) for t in str(a.threads).split(",")]:
        torch.set_num_threads(threads)
        measure(a, threads)


def measure(a, threads: int) -> None:
    fmt = dict(width=a.width, steps=a.steps)
    off = loads_spec(SPEC.format(**fmt, every=0, hessian="false", eval_every=a.steps))
    default = loads_spec(SPEC.format(**fmt, every=50, hessian="true", eval_every=a.steps))
    evals = loads_spec(SPEC.format(**fmt, every=50, hessian="true", eval_every="null"))
    hand_written(off, 0), through_nas_stab(off, 0)  # warm-up: imports, allocator, data generation
    variants = {"hand-written": lambda r: hand_written(off, r),
                "nas_stab, probes off": lambda r: through_nas_stab(off, r),
                "nas_stab, default probes": lambda r: through_nas_stab(default, r),
                "  + default eval_every": lambda r: through_nas_stab(evals, r)}
    times: dict[str, list[tuple[float, float]]] = {k: [] for k in variants}
    la0 = os.getloadavg()
    for rep in range(a.reps):
        for k, f in variants.items():
            times[k].append(f(rep))
    la1 = os.getloadavg()
    print(f"mlp_resnet width {a.width}, depth 4, C=2, batch 128, {a.steps} steps, {a.reps} interleaved reps, "
          f"{threads} thread(s); load average {la0[0]:.2f} before, {la1[0]:.2f} after")
    for clock, i in (("CPU", 1), ("wall", 0)):
        base = statistics.median(t[i] for t in times["hand-written"])
        print(f"-- {clock} time")
        for k, v in times.items():
            med = statistics.median(t[i] for t in v)
            print(f"  {k:<26} median {med:6.3f} s   ratio {med / base:5.3f}   (all: {', '.join(f'{t[i]:.2f}' for t in v)})")
    print("targets: probes off <= 1.05, default probes <= 1.15")


if __name__ == "__main__":
    main()
