"""Where a nas_stab trial's time goes, beside a hand-written PyTorch loop (the same model and data).

    OMP_NUM_THREADS=2 python benchmarks/profile_overhead.py [--threads 2] [--steps 1500] [--width 512] [--depth 8]
        [--dataset mnist --root DATA_DIR] [--reps 3]

In one process, alternating: the hand-written loop of bench_overhead.py and `train_run` of the same
spec (nas_stab's defaults: the snapshots and validations during training that fit in
stability.budget, at 1500 steps none; the snapshots at init and end with the Hessian; the
validation at the end), timed without a profiler; then one `train_run` under cProfile, whose time is
split into the parts a trial adds to the hand loop (stability snapshots, Hessian, validations, the
per-step bookkeeping) and the parts both do (forward, backward, optimizer step, batches).
The profiler's own cost inflates the Python-heavy parts; use its split, and the unprofiled wall
times for the totals.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_overhead import hand_written

from nas_stab.config import loads_spec
from nas_stab.training import train_run

SPEC = """\
name: profile
task: {{dataset: {{name: {dataset}, root: {root}}}}}
model: {{arch: mlp_resnet, depth: {depth}, width: {width}, tau: 1/L}}
train: {{lr: 0.003, steps: {steps}, batch_size: 128, threads: {threads}}}
"""

# (label, predicate on (file, function name)) -> cumulative time of the outermost matching frames
PARTS = [
    ("stability snapshots (probes, Hessian)", lambda f, n: f.endswith("training/loop.py") and n == "_snapshot"),
    ("  of which Hessian (sharpness)", lambda f, n: f.endswith("probes.py") and n == "_hessian_metrics"),
    ("  of which update ratio (step undone)", lambda f, n: f.endswith("probes.py") and n == "_update_metrics"),
    ("  of which update-batch gradients", lambda f, n: f.endswith("probes.py") and n == "_update_batch_grads"),
    ("validation + test evaluation", lambda f, n: f.endswith("classification.py") and n == "evaluate"),
    ("batches (index_select, augment)", lambda f, n: f.endswith("classification.py") and n == "train_batches"),
    ("loss (forward)", lambda f, n: f.endswith("classification.py") and n == "loss"),
    ("backward", lambda f, n: n == "backward" and "torch" in f and "_tensor.py" in f),
    ("optimizer step", lambda f, n: n == "step" and "optim" in f and "sgd" in f),
    ("zero_grad", lambda f, n: n == "zero_grad"),
    ("set_lr / lr_factor", lambda f, n: n in ("set_lr", "lr_factor")),
    ("divergence rule check", lambda f, n: f.endswith("divergence.py") and n in ("check", "check_finite")),
    ("spike counter", lambda f, n: n == "add" and "divergence" in f),
    ("loss.item()", lambda f, n: n == "item" or "method 'item'" in n),
    ("load task (data)", lambda f, n: n == "load_task"),
    ("build model", lambda f, n: n == "build_model"),
    ("Prober init", lambda f, n: n == "__init__" and f.endswith("probes.py")),
    ("keep_freed_memory (malloc)", lambda f, n: n == "keep_freed_memory"),
]


def split(prof: cProfile.Profile) -> list[tuple[str, float, int]]:
    st = pstats.Stats(prof).stats  # {(file, line, name): (cc, nc, tt, ct, callers)}
    out = []
    for label, pred in PARTS:
        keys = {k for k in st if pred(k[0], k[2])}
        # outermost frames only: a match called by another match is already inside its cumulative time
        ct = sum(v[3] for k, v in st.items() if k in keys and not (set(v[4]) & keys - {k}))
        calls = sum(st[k][1] for k in keys)
        out.append((label, ct, calls))
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--root", default="/work/shared/data")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--top", type=int, default=0, help="also print the N top functions by cumulative time")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    spec = loads_spec(SPEC.format(dataset=a.dataset, root=a.root, depth=a.depth, width=a.width, steps=a.steps,
                                  threads=a.threads))
    hand_written(spec, 0), train_run(spec, 0)  # warm-up: imports, allocator, data cache
    la0 = os.getloadavg()
    t_hand, t_nas = [], []
    for rep in range(a.reps):
        t_hand.append(hand_written(spec, rep)[0])
        w0 = time.perf_counter()
        r = train_run(spec, rep)
        t_nas.append(time.perf_counter() - w0)
        assert r.status == "complete", r.error
    prof = cProfile.Profile()
    w0 = time.perf_counter()
    prof.enable()
    train_run(spec, 0)
    prof.disable()
    t_prof = time.perf_counter() - w0
    la1 = os.getloadavg()
    h, n = statistics.median(t_hand), statistics.median(t_nas)
    print(f"{a.dataset} mlp_resnet width {a.width} depth {a.depth}, {a.steps} steps, {a.threads} thread(s), "
          f"{a.reps} alternating reps; load average {la0[0]:.2f} before, {la1[0]:.2f} after")
    print(f"hand-written loop: median {h:.2f} s ({', '.join(f'{t:.2f}' for t in t_hand)})")
    print(f"train_run:         median {n:.2f} s ({', '.join(f'{t:.2f}' for t in t_nas)})  ratio {n / h:.3f}")
    print(f"train_run under cProfile: {t_prof:.2f} s; split (cumulative s, calls, per call):")
    for label, ct, calls in split(prof):
        per = f"{1e3 * ct / calls:8.3f} ms" if calls else ""
        print(f"  {label:<40} {ct:8.3f} s  {calls:7d}  {per}")
    if a.top:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(a.top)


if __name__ == "__main__":
    main()
