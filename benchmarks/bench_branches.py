"""Multi-branch blocks: one grouped/batched op vs a Python loop over branches.

Prints the training-step time (forward + backward + SGD step) of nas_stab's
`MultiBranch` (one shared-input matmul/conv, then block-diagonal bmm/grouped
conv, one weighted contraction over branches) against a per-branch loop of
ordinary modules holding the same weights, after checking both compute the
same function. Both are measured side by side in one run, alternating, and
the fastest step of each is reported, so the ratios are robust to the load of
a shared machine.

    python benchmarks/bench_branches.py            # MLP and CNN blocks, 1 thread
    python benchmarks/bench_branches.py --threads 2 --steps 30

Two settings:
1. C copies of a branch (STAM): C = 1, 4, 16 branches of the same width;
   cost grows with C for both, the ratio loop / batched is the point.
2. Same total width (issue 8's target): branch width = total / C, so the
   FLOPs are the same for every C; the step at C = 16 should cost at most 2x
   the step at C = 1, and at least 3x less than the loop at C = 16.
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn

from nas_stab.models.branches import MultiBranch


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
    """Fastest seconds per call of each fn, calls interleaved (A, B, A, B, ...).

    The minimum, not the median: on a shared machine other processes only ever
    add time, so the fastest of many interleaved steps is the least noisy
    estimate of each op's own cost (timeit's advice)."""
    for f in fns.values():
        for _ in range(warmup):
            f()
    times = {k: [] for k in fns}
    for _ in range(steps):
        for k, f in fns.items():
            t0 = time.perf_counter()
            f()
            times[k].append(time.perf_counter() - t0)
    return {k: min(v) for k, v in times.items()}


def build(kind: str, cin: int, hidden: int, C: int, norm: str, seed: int = 0) -> MultiBranch:
    torch.manual_seed(seed)
    if kind == "mlp":
        layers = [(0, hidden, 1), (0, cin, 1)]
    else:
        layers = [(3, hidden, 1), (3, cin, 1)]
    return MultiBranch(cin, layers, C=C, alpha=C ** -0.5, norm=norm)


def compare(kind: str, x: torch.Tensor, cin: int, hidden: int, C: int, steps: int, norm: str = "none") -> dict:
    mb = build(kind, cin, hidden, C, norm)
    loop = LoopBranches(mb)
    with torch.no_grad():
        a, b = mb(x), loop(x)
    err = ((a - b).abs().max() / a.abs().max()).item()
    assert err < 1e-4, f"batched and loop differ: {err}"
    t = timed({"batched": step_fn(mb, x), "loop": step_fn(loop, x)}, steps)
    return {**t, "err": err}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--steps", type=int, default=30, help="timed steps per configuration")
    p.add_argument("--skip-cnn", action="store_true")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), fastest of {args.steps} interleaved training steps\n")

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
        res = {C: compare(kind, x, cin, total // C, C, args.steps, norm) for C in (1, 16)}
        one, many = res[1]["batched"], res[16]["batched"]
        loop16 = res[16]["loop"]
        print(f"   C=1: {one * 1e3:.2f} ms   C=16: {many * 1e3:.2f} ms   loop C=16: {loop16 * 1e3:.2f} ms")
        print(f"   step(C=16) / step(C=1) = {many / one:.2f}   (target <= 2)")
        print(f"   loop(C=16) / batched(C=16) = {loop16 / many:.2f}   (target >= 3)\n")


if __name__ == "__main__":
    main()
