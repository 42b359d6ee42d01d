"""Framework overhead: a nas_stab trial against a hand-written PyTorch loop.

Both train the same model (built by nas_stab, same init) on the same tensors
with the same optimizer, batch order and number of steps, and both evaluate
on the validation set once at the end. Runs are interleaved (A, B, A, B, ...)
and the medians compared, so the ratio is measured side by side in one run.

    python benchmarks/bench_overhead.py [--steps 400] [--reps 5] [--width 256]

Prints wall times and the ratios nas_stab / hand-written with probes off
(stability.every 0, no Hessian: only the init and final snapshots) and with
the default probes (every 50 steps, Hessian at init and end).
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from nas_stab.models import build_model
from nas_stab.spec import loads_spec
from nas_stab.tasks import load_task
from nas_stab.training import train_run

SPEC = """\
name: bench
task: {{dataset: {{name: synthetic, size: 20000, shape: [256], classes: 10}}}}
model: {{arch: mlp_resnet, depth: 4, width: {width}, branches: 2, aggregation: stam, tau: 1/sqrt(L)}}
train: {{lr: 0.01, steps: {steps}, batch_size: 128, eval_every: {steps}}}
stability: {{every: {every}, hessian: {hessian}}}
"""


def hand_written(spec, seed: int) -> float:
    """What a user would write: build, loop over permuted batches, step, evaluate."""
    t0 = time.perf_counter()
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
    with torch.no_grad():
        model.eval()
        acc = (model(d.x_val).argmax(1) == d.y_val).float().mean().item()
    assert acc >= 0
    return time.perf_counter() - t0


def through_nas_stab(spec, seed: int) -> float:
    t0 = time.perf_counter()
    r = train_run(spec, seed)
    assert r.status == "complete", r.error
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=400)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    off = loads_spec(SPEC.format(width=a.width, steps=a.steps, every=0, hessian="false"))
    default = loads_spec(SPEC.format(width=a.width, steps=a.steps, every=50, hessian="true"))
    hand_written(off, 0), through_nas_stab(off, 0)  # warm-up: imports, allocator, data generation
    times = {"hand-written": [], "nas_stab, probes off": [], "nas_stab, default probes": []}
    for rep in range(a.reps):
        times["hand-written"].append(hand_written(off, rep))
        times["nas_stab, probes off"].append(through_nas_stab(off, rep))
        times["nas_stab, default probes"].append(through_nas_stab(default, rep))
    base = statistics.median(times["hand-written"])
    print(f"mlp_resnet width {a.width}, depth 4, C=2, batch 128, {a.steps} steps, {a.reps} interleaved reps, {a.threads} threads")
    for k, v in times.items():
        med = statistics.median(v)
        print(f"  {k:<26} median {med:6.2f} s   ratio {med / base:5.3f}   (all: {', '.join(f'{x:.2f}' for x in v)})")


if __name__ == "__main__":
    main()
