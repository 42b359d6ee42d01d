"""Hardware use: the FLOP/s an `mlp_resnet` trial sustains, as a fraction of
this machine's measured matmul FLOP/s.

1. Peak: `torch.mm` on large square float32 matrices (1 and 2 threads), the
   best rate over several timed repeats.
2. The model's training FLOPs per step: forward 2*in*out per linear layer per
   sample, backward 2x forward ("3x forward"), and the FLOPs PyTorch actually
   executes (`torch.utils.flop_counter.FlopCounterMode`: the first layer
   computes no input gradient, the last branch layer and the aggregation run
   as one fused matmul, ...). The fraction uses the nominal 3x-forward count.
3. Step time, two ways, interleaved with the peak measurement:
   - `kernel`: forward + cross-entropy + backward + SGD step on a fixed batch
     (what the model costs, no data handling);
   - `trial`: inside `nas_stab.training.loop.train_run` as the runner calls it
     (batches by index permutation, lr schedule, divergence check, loss
     logging), probes off: the time between two reports of the pruner
     reporter, `--window` steps apart, on a tiny validation set so the
     evaluation in between costs nothing;
   - `gemms`: only the step's matrix products (shapes recorded by the
     profiler), on fresh tensors: what the model would cost if everything
     but its matmuls were free -- the ceiling of the fraction at that width.

    python benchmarks/bench_flops.py                 # widths 128..1024, batch 256, 1 thread
    python benchmarks/bench_flops.py --threads 2     # also the 2-thread table (the 2-thread peak is always printed)
    python benchmarks/bench_flops.py --widths 64 --batch 128 --branches 16 --branch-depth 2   # STAM's block

Target (issue 8): the trial sustains at least 50% of the 1-thread matmul peak
(trials run with `train.threads: 1`). Medians over interleaved repeats, by
CPU time (the process's own cost: robust to the other jobs of a shared
machine) and by wall time (includes the time other processes held the core).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch.utils.flop_counter import FlopCounterMode

from nas_stab.config import loads_spec
from nas_stab.models import build_model
from nas_stab.models.layers import Layer
from nas_stab.tasks import load_task
from nas_stab.training import train_run
from nas_stab.training.malloc import keep_freed_memory

SPEC = """\
name: bench-flops
task: {{dataset: {{name: synthetic, size: {size}, shape: [784], classes: 10, val: 16, test: 16}}}}
model: {{arch: mlp_resnet, depth: {depth}, width: {width}, branches: {branches}, branch_depth: {b}, aggregation: stam, tau: 1/sqrt(L)}}
train: {{lr: 0.001, momentum: 0.9, steps: {steps}, batch_size: {batch}, eval_every: {window}, threads: 1}}
stability: {{every: 0, hessian: false, probe_batch: 16}}
"""


def clocks() -> tuple[float, float]:
    """(wall, CPU) seconds. CPU time (all threads of this process) is what the work cost; on a
    shared machine wall time also counts the time other processes held the core."""
    return time.perf_counter(), time.process_time()


def peak_mm(n: int, seconds: float = 0.5) -> tuple[float, float]:
    """(wall, CPU) FLOP/s of torch.mm on n x n float32 matrices, best of 5 timed bursts each."""
    a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    torch.mm(a, b, out=c)
    t0 = time.perf_counter()
    torch.mm(a, b, out=c)
    reps = max(2, int(seconds / max(time.perf_counter() - t0, 1e-6)))
    best_w = best_c = 0.0
    for _ in range(5):
        w0, c0 = clocks()
        for _ in range(reps):
            torch.mm(a, b, out=c)
        w1, c1 = clocks()
        best_w, best_c = max(best_w, 2 * n**3 * reps / (w1 - w0)), max(best_c, 2 * n**3 * reps / (c1 - c0))
    return best_w, best_c


def nominal_flops(model: torch.nn.Module, batch: int) -> float:
    """Training FLOPs per step: 3 x (2 * in * out) per linear layer (every branch) per sample."""
    fwd = 0
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            fwd += 2 * m.in_features * m.out_features
        elif isinstance(m, Layer) and not m.conv:
            fwd += 2 * m.cin * m.cout * m.C  # a MultiBranch Layer: C branches of cin -> cout
    return 3.0 * fwd * batch


def executed_flops(model, x, y) -> float:
    with FlopCounterMode(display=False) as fc:
        F.cross_entropy(model(x), y).backward()
    model.zero_grad(set_to_none=True)
    return float(fc.get_total_flops())


def gemm_calls(model, x, y) -> list[tuple[str, list]]:
    """The matrix products (op, input shapes) of one training step (forward and backward)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    ops = {torch.ops.aten.mm.default: "mm", torch.ops.aten.addmm.default: "addmm", torch.ops.aten.bmm.default: "bmm"}
    calls = []

    class Record(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func in ops:
                calls.append((ops[func], [list(a.shape) for a in args if torch.is_tensor(a)]))
            return func(*args, **(kwargs or {}))

    with Record():
        F.cross_entropy(model(x), y).backward()
    model.zero_grad(set_to_none=True)
    return calls


def gemm_only(calls):
    """One step's matrix products alone, on fresh contiguous tensors of the same shapes: the ceiling
    of any implementation of this model at this width and batch (small matrices run below peak)."""
    args = []
    for name, shapes in calls:
        if name == "addmm":
            bias, a, b = shapes[:3]
            args.append((torch.addmm, (torch.randn(bias), torch.randn(a), torch.randn(b))))
        else:
            op = torch.mm if name == "mm" else torch.bmm
            args.append((op, tuple(torch.randn(s) for s in shapes[:2])))

    def run():
        for op, a in args:
            op(*a)

    return run


def kernel_step(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step():
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def trial_window_times(spec) -> list[tuple[float, float]]:
    """(wall, CPU) seconds per training step inside train_run, one pair per reporter window (the first dropped)."""
    stamps: list[tuple[float, float]] = []
    train_run(spec, 0, reporter=lambda step, m: stamps.append(clocks()))
    w = spec.train.eval_every
    return [((b[0] - a[0]) / w, (b[1] - a[1]) / w) for a, b in zip(stamps[1:], stamps[2:])]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--widths", default="128,256,512,1024")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--branches", type=int, default=1)
    p.add_argument("--branch-depth", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="1, or 2 to add the 2-thread figures")
    p.add_argument("--reps", type=int, default=5, help="interleaved repeats")
    p.add_argument("--window", type=int, default=20, help="steps between two trial reports")
    p.add_argument("--n", type=int, default=2048, help="peak matmul size")
    a = p.parse_args(argv)
    widths = [int(w) for w in a.widths.split(",")]
    keep_freed_memory()  # as train_run does, so the kernel steps run under the same allocator settings
    print(f"torch {torch.__version__}; load average {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f}; "
          f"mlp_resnet depth {a.depth}, C={a.branches}, b={a.branch_depth}, input 784, 10 classes, batch {a.batch}")
    peaks_by_threads = {}
    for threads in (1, 2):  # the machine's peak, interleaved 1 / 2 threads
        torch.set_num_threads(threads)
        peaks_by_threads.setdefault(threads, []).extend(peak_mm(a.n) for _ in range(3))
    for threads, ps in peaks_by_threads.items():
        print(f"peak torch.mm {a.n}x{a.n} fp32, {threads} thread(s): {statistics.median(p[0] for p in ps) / 1e9:.1f} GFLOP/s "
              f"by wall time, {statistics.median(p[1] for p in ps) / 1e9:.1f} GFLOP/s per CPU-second (median of 3)")
    for threads in ([1, 2] if a.threads == 2 else [1]):
        torch.set_num_threads(threads)
        rows = {}
        peaks: list[tuple[float, float]] = []
        specs = {}
        kernels = {}
        gemms = {}
        for w in widths:
            spec = loads_spec(SPEC.format(size=a.batch * 16 + 32, depth=a.depth, width=w, branches=a.branches,
                                          b=a.branch_depth, steps=a.window * 6, batch=a.batch, window=a.window))
            task = load_task(spec, 0, torch.device("cpu"))
            model = build_model(spec, task.info)
            x, y = task.data.x_train[: a.batch], task.data.y_train[: a.batch]
            nom, exe = nominal_flops(model, a.batch), executed_flops(model, x, y)
            specs[w] = spec
            kernels[w] = kernel_step(model, x, y)
            gemms[w] = gemm_only(gemm_calls(model, x, y))
            for _ in range(3):
                kernels[w]()
                gemms[w]()
            rows[w] = {"nominal": nom, "executed": exe, "kernel": [], "trial": [], "gemm": []}
        for _ in range(a.reps):  # interleave: peak, then every width's kernel steps and trial windows
            peaks.append(peak_mm(a.n))
            for w in widths:
                ts = []
                for _ in range(a.window):
                    w0, c0 = clocks()
                    kernels[w]()
                    w1, c1 = clocks()
                    ts.append((w1 - w0, c1 - c0))
                rows[w]["kernel"].append(ts)
                gs = []
                for _ in range(a.window):
                    w0, c0 = clocks()
                    gemms[w]()
                    w1, c1 = clocks()
                    gs.append((w1 - w0, c1 - c0))
                rows[w]["gemm"].append(gs)
                rows[w]["trial"].append(trial_window_times(specs[w]))
        la = os.getloadavg()
        print(f"\n{threads} thread(s), load average {la[0]:.2f} {la[1]:.2f}")
        for clock, i in (("CPU time", 1), ("wall time", 0)):
            peak = statistics.median(p[i] for p in peaks)
            print(f"-- {clock}: peak torch.mm {a.n}x{a.n} fp32 = {peak / 1e9:.1f} GFLOP/s "
                  f"(median of {a.reps} best-of-5: {', '.join(f'{p[i] / 1e9:.1f}' for p in peaks)})")
            print(f"{'width':>6} {'MFLOP/step':>11} {'executed':>9} {'gemms ms':>9} {'kernel ms':>10} {'trial ms':>9} "
                  f"{'trial GFLOP/s':>14} {'gemms/peak':>11} {'kernel/peak':>12} {'trial/peak':>11} {'trial/kernel':>13}")
            for w, r in rows.items():
                k = statistics.median(t[i] for rep in r["kernel"] for t in rep)
                t = statistics.median(x[i] for rep in r["trial"] for x in rep)
                g = statistics.median(x[i] for rep in r["gemm"] for x in rep)
                f = r["nominal"]
                print(f"{w:>6} {f / 1e6:>11.1f} {r['executed'] / 1e6:>9.1f} {g * 1e3:>9.3f} {k * 1e3:>10.3f} {t * 1e3:>9.3f} "
                      f"{f / t / 1e9:>14.1f} {f / g / peak:>11.2f} {f / k / peak:>12.2f} {f / t / peak:>11.2f} {t / k:>13.3f}")
    print("\ntarget: trial/peak >= 0.50 (nominal FLOPs = 3 x forward; 'executed' = what FlopCounterMode counts;\n"
          "gemms = the step's matrix products alone at their shapes: nominal FLOPs / that time is the ceiling)")


if __name__ == "__main__":
    main()
