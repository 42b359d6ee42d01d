"""Multi-branch blocks: one grouped/batched op vs a Python loop over branches.

Prints the training-step time (forward + backward + SGD step) of nas_stab's
`MultiBranch` (one shared-input matmul/conv, then block-diagonal bmm/grouped
conv, one weighted contraction over branches) against a per-branch loop of
ordinary modules holding the same weights, after checking both compute the
same function. Both are measured side by side in one run, alternating, and
the median CPU time of each is reported, so the ratios are robust to the load
of a shared machine.

    python benchmarks/bench_branches.py            # MLP and CNN blocks, 1 thread
    python benchmarks/bench_branches.py --threads 2 --steps 50

Two settings:
1. C copies of a branch (STAM): C = 1, 4, 16 branches of the same width;
   cost grows with C for both, the ratio loop / batched is the point.
2. Same total width (issue 8's target): branch width = total / C, so the
   FLOPs are the same for every C; the step at C = 16 should cost at most 2x
   the step at C = 1, and at least 3x less than the loop at C = 16. The three
   (C = 1, C = 16, loop at C = 16) are timed interleaved in one run.

Where a target is missed, the lines after it measure why:
- `FLOP bound`: the block's training FLOPs (as executed: backward 2x forward,
  but the first layer computes no input gradient) at this machine's measured 1-thread
  matmul rate; loop(C=16) / that time is about the most ANY implementation
  of the C = 16 block could gain over the loop (compute-bound settings cannot
  reach 3x; for CNNs only indicative: oneDNN's convolutions can run above
  MKL's matmul rate);
- with BN: BatchNorm over the C * cin channels of the branch outputs plus the
  weighted sum (forward + backward) alone, against the whole C = 1 step: the
  C = 16 block's last activation is C times larger than the C = 1 block's at
  the same total width, and this memory-bound part scales with it;
- CNN with BN: the groups=16 convolution (4 -> 16 channels per group) against
  a dense convolution with the same FLOPs (oneDNN's per-FLOP cost of small
  groups).
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from nas_stab.models.branches import MultiBranch
from nas_stab.training.malloc import keep_freed_memory


class LoopBranches(nn.Module):
    """The same function as a `MultiBranch`, one module per branch, summed in a loop."""

    def __init__(self, mb: MultiBranch):
        super().__init__()
        self.alpha = float(mb.alpha[0])
        self.branches = nn.ModuleList()
        for k in range(mb.C):
            layers = nn.ModuleList()
            for layer, norm in zip(mb.layers, mb.norms):
                sl = slice(k * layer.cout, (k + 1) * layer.cout)
                if layer.conv:
                    m = nn.Conv2d(layer.cin, layer.cout, layer.k, stride=layer.stride, padding=layer.k // 2, bias=False)
                else:
                    m = nn.Linear(layer.cin, layer.cout, bias=False)
                m.weight = nn.Parameter(layer.weight.detach()[sl].clone())
                if isinstance(norm, nn.modules.batchnorm._BatchNorm):
                    bn = type(norm)(layer.cout)
                    bn.weight = nn.Parameter(norm.weight.detach()[sl].clone())
                    bn.bias = nn.Parameter(norm.bias.detach()[sl].clone())
                    m = nn.Sequential(m, bn)
                layers.append(m)
            self.branches.append(layers)

    def forward(self, x):
        out = 0
        for layers in self.branches:
            h = x
            for i, m in enumerate(layers):
                h = m(h)
                if i < len(layers) - 1:
                    h = F.relu(h)
            out = out + self.alpha * h
        return out


def step_fn(module: nn.Module, x: torch.Tensor):
    opt = torch.optim.SGD(module.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        module(x).square().mean().backward()
        opt.step()

    return step


def timed(fns: dict, steps: int, warmup: int = 3) -> dict:
    """Median CPU seconds per call of each fn, calls interleaved (A, B, A, B, ...).

    CPU time of this process, not wall time: with one torch thread it is the
    op's own cost, and on a shared machine it does not count the time other
    processes held the core (wall time does, at random)."""
    for f in fns.values():
        for _ in range(warmup):
            f()
    times = {k: [] for k in fns}
    for _ in range(steps):
        for k, f in fns.items():
            t0 = time.process_time()
            f()
            times[k].append(time.process_time() - t0)
    return {k: statistics.median(v) for k, v in times.items()}


def build(kind: str, cin: int, hidden: int, C: int, norm: str, seed: int = 0) -> MultiBranch:
    torch.manual_seed(seed)
    k = 0 if kind == "mlp" else 3  # kernel size: 0 = linear layers
    layers = [(k, hidden, 1), (k, cin, 1)]
    return MultiBranch(cin, layers, C=C, alpha=C ** -0.5, norm=norm)


def pair(kind: str, x: torch.Tensor, cin: int, hidden: int, C: int, norm: str = "none"):
    """(batched, loop, max relative difference of their outputs) for C branches of width `hidden`."""
    mb = build(kind, cin, hidden, C, norm)
    loop = LoopBranches(mb)
    with torch.no_grad():
        a, b = mb(x), loop(x)
    err = ((a - b).abs().max() / a.abs().max()).item()
    assert err < 1e-4, f"batched and loop differ: {err}"
    return mb, loop, err


def compare(kind: str, x: torch.Tensor, cin: int, hidden: int, C: int, steps: int, norm: str = "none") -> dict:
    mb, loop, err = pair(kind, x, cin, hidden, C, norm)
    t = timed({"batched": step_fn(mb, x), "loop": step_fn(loop, x)}, steps)
    return {**t, "err": err}


def same_total_width(kind: str, x: torch.Tensor, cin: int, total: int, steps: int, norm: str = "none") -> dict:
    """C = 1 and C = 16 batched and the C = 16 loop, all interleaved in one timed run."""
    one, _, _ = pair(kind, x, cin, total, 1, norm)
    many, loop, err = pair(kind, x, cin, total // 16, 16, norm)
    t = timed({"one": step_fn(one, x), "many": step_fn(many, x), "loop16": step_fn(loop, x)}, steps)
    return {**t, "err": err}


def peak_matmul(n: int = 1024) -> float:
    """FLOP/s of torch.mm on n x n float32 matrices by CPU time, best of 5 bursts."""
    a, b, c = torch.randn(n, n), torch.randn(n, n), torch.empty(n, n)
    torch.mm(a, b, out=c)
    best = 0.0
    for _ in range(5):
        t0 = time.process_time()
        for _ in range(4):
            torch.mm(a, b, out=c)
        best = max(best, 4 * 2 * n**3 / max(time.process_time() - t0, 1e-9))
    return best


def block_flops(kind: str, x: torch.Tensor, cin: int, hidden: int, C: int) -> float:
    """Training FLOPs of the two-layer block as executed: forward 2 * in * out per position (times k*k for a
    conv), backward 2x forward, except the first layer, whose input needs no gradient (1x)."""
    per_pos = 9 * x.shape[2] * x.shape[3] if kind == "cnn" else 1
    fwd = 2 * x.shape[0] * per_pos * cin * C * hidden  # each of the two layers
    return 2 * fwd + 3 * fwd


def fwd_bwd(f, *shape):
    t = torch.randn(*shape, requires_grad=True)

    def run():
        out = f(t)
        out.backward(torch.ones_like(out))

    return run


def explain(kind: str, x: torch.Tensor, cin: int, total: int, norm: str, one: float, steps: int) -> None:
    """Print the measurements behind a missed target (see the module docstring)."""
    n, C = x.shape[0], 16
    if norm == "bn":
        bn = nn.BatchNorm2d(C * cin) if kind == "cnn" else nn.BatchNorm1d(C * cin)
        a = torch.full((C,), C ** -0.5)
        rest = tuple(x.shape[2:])
        t = timed({"bn_agg": fwd_bwd(lambda h: torch.matmul(a, bn(h).view(n, C, -1)), n, C * cin, *rest)}, steps)
        print(f"   BN over C*cin = {C * cin} channels + weighted sum, forward + backward alone: {t['bn_agg'] * 1e3:.2f} ms "
              f"= {t['bn_agg'] / one:.2f} x step(C=1)")
    if kind == "cnn" and norm == "bn":
        hid = total // C
        wg = torch.randn(C * cin, hid, 3, 3, requires_grad=True)
        wd = torch.randn(cin, total, 3, 3, requires_grad=True)
        t = timed({"grouped": fwd_bwd(lambda h: F.conv2d(h, wg, padding=1, groups=C), n, total, *x.shape[2:]),
                   "dense": fwd_bwd(lambda h: F.conv2d(h, wd, padding=1), n, total, *x.shape[2:])}, steps)
        print(f"   conv {total}->{C * cin} groups={C} ({hid}->{cin} per group), forward + backward: {t['grouped'] * 1e3:.2f} ms; "
              f"dense conv {total}->{cin} (same FLOPs): {t['dense'] * 1e3:.2f} ms ({t['grouped'] / t['dense']:.1f}x per FLOP)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=100, help="timed steps per configuration")
    p.add_argument("--skip-cnn", action="store_true")
    p.add_argument("--raw-malloc", action="store_true", help="leave glibc's malloc as it is (train_run tunes it)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    tuned = False if args.raw_malloc else keep_freed_memory()  # as train_run does
    print(f"torch {torch.__version__}, {args.threads} thread(s), median CPU time of {args.steps} interleaved training steps; "
          f"load average {os.getloadavg()[0]:.2f}; malloc tuned as in train_run: {tuned}\n")

    peak = peak_matmul()
    print(f"1-thread torch.mm peak (1024x1024 fp32, CPU time): {peak / 1e9:.1f} GFLOP/s\n")
    settings = [("mlp", torch.randn(128, 64), 64, 64, 256, "none"),
                ("mlp", torch.randn(128, 256), 256, 256, 1024, "none"),
                ("mlp", torch.randn(128, 64), 64, 64, 256, "bn")]
    if not args.skip_cnn:
        settings += [("cnn", torch.randn(16, 16, 16, 16), 16, 16, 64, "none"),
                     ("cnn", torch.randn(16, 16, 16, 16), 16, 16, 64, "bn")]
    for kind, x, cin, width, total, norm in settings:
        shape = "x".join(map(str, x.shape))
        op = "linear" if kind == "mlp" else "conv3x3"
        after = " -> BN" if norm == "bn" else ""
        how = "grouped layers + per-branch BN + weighted sum" if norm == "bn" else "last layer fused with the aggregation"
        print(f"== {kind} branch ({op}{after} -> relu -> {op}{after}), input {shape}; batched = {how}")
        print(f"-- C copies of a branch of width {width} (STAM's multi-branch block)")
        print(f"{'C':>4} {'batched ms':>11} {'loop ms':>9} {'loop/batched':>13}  max rel. diff")
        for C in (1, 4, 16):
            r = compare(kind, x, cin, width, C, args.steps, norm)
            print(f"{C:>4} {r['batched'] * 1e3:>11.2f} {r['loop'] * 1e3:>9.2f} {r['loop'] / r['batched']:>13.2f}  {r['err']:.1e}")
        print(f"-- same total width {total}: branch width {total} / C")
        r = same_total_width(kind, x, cin, total, args.steps, norm)
        one, many, loop16 = r["one"], r["many"], r["loop16"]
        print(f"   C=1: {one * 1e3:.2f} ms   C=16: {many * 1e3:.2f} ms   loop C=16: {loop16 * 1e3:.2f} ms")
        print(f"   step(C=16) / step(C=1) = {many / one:.2f}   (target <= 2)")
        print(f"   loop(C=16) / batched(C=16) = {loop16 / many:.2f}   (target >= 3)")
        flops = block_flops(kind, x, cin, total // 16, 16)
        ideal = flops / peak
        print(f"   FLOP bound: {flops / 1e6:.0f} MFLOP per step = {ideal * 1e3:.2f} ms at the matmul peak; loop(C=16) / that = "
              f"{loop16 / ideal:.2f} (about the most any implementation could gain over the loop"
              f"{'; oneDNN convolutions can beat the MKL matmul peak' if kind == 'cnn' else ''})")
        if many / one > 2 or loop16 / many < 3:
            explain(kind, x, cin, total, norm, one, args.steps)
        print()


if __name__ == "__main__":
    main()
