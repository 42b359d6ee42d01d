"""Paper checks of the stability metrics, at initialization (no training).

    nice python scripts/paper_checks_stability.py [--seeds 5] [--quick]

1. STAM (Figure 2, Theorem 1): the output norm of the first multi-branch
   aggregation, relative to its input, is flat in C for STAM (alpha = 1/sqrt(C)),
   grows like sqrt(C) for sum and shrinks like 1/sqrt(C) for average.
   Measured as `fwd_ratio` of a one-block `mlp_resnet` with `skip: none`, so the
   block output is relu(sum_k alpha_k B_k(h)) -- the paper's "output norm after
   the first aggregation" (with the skip the identity dominates; shown too).
   Expected log-log slopes in C: +0.5, 0, -0.5.
2. tau (Zhang et al., Theorem 4 / Figure 1): across depths 3 to 1000 at width
   128 (one linear map per branch, the paper's block), the forward norm grows
   with depth for tau = L^-0.25 and stays bounded for 1/sqrt(L) and 1/L.
3. Incremental explosion: `update_ratio` (the output change of one SGD step on
   the probe batch, relative) grows with depth for an unscaled residual network
   (tau = 1) and stays flat with tau = 1/sqrt(L).

Every number is a median over seeds; the data is the offline digits set's
fixed probe batch (256 examples). The functions are reused by
tests/test_stability_papers.py with smaller settings.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import torch

from nas_stab.models import build_model
from nas_stab.spec import loads_spec
from nas_stab.stability.probes import Prober
from nas_stab.tasks import load_task

BASE = """\
name: paper-check
task: {{dataset: {{name: digits}}}}
model: {{arch: mlp_resnet, depth: {depth}, width: {width}, branches: {branches}, branch_depth: {b},
        aggregation: {agg}, tau: "{tau}", skip: {skip}}}
train: {{optimizer: sgd, lr: {lr}, momentum: 0.0, batch_size: 128, steps: 1}}
stability: {{probe_batch: {probe}, hessian: false}}
"""

_tasks: dict = {}


def model_and_task(seed: int, *, depth=1, width=128, branches=1, b=1, agg="stam", tau="1", skip="plain", lr=0.01, probe=256):
    spec = loads_spec(BASE.format(depth=depth, width=width, branches=branches, b=b, agg=agg, tau=tau, skip=skip, lr=lr, probe=probe))
    key = probe
    if key not in _tasks:
        _tasks[key] = load_task(spec, 0, torch.device("cpu"))
    task = _tasks[key]
    torch.manual_seed(seed)
    return spec, build_model(spec, task.info), task


def slope(xs, ys) -> float:
    """Least-squares slope of log(y) against log(x)."""
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (c - my) for a, c in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


# ---------------------------------------------------------------- 1. STAM


def stam_fwd_ratios(Cs, seeds, *, width=256, b=2, skip="none", depth=1, probe=256) -> dict[str, list[float]]:
    out = {}
    for agg in ("sum", "avg", "stam"):
        meds = []
        for C in Cs:
            vals = []
            for s in seeds:
                spec, model, task = model_and_task(s, depth=depth, width=width, branches=C, b=b, agg=agg, skip=skip, probe=probe)
                norms, first_in = Prober(model, task, spec).forward_norms()
                vals.append(norms[-1] / first_in)
            meds.append(statistics.median(vals))
        out[agg] = meds
    return out


# ---------------------------------------------------------------- 2. tau


def tau_fwd_ratios(depths, taus, seeds, *, width=128, probe=256) -> dict[str, list[float]]:
    out = {}
    for tau in taus:
        meds = []
        for L in depths:
            vals = []
            for s in seeds:
                spec, model, task = model_and_task(s, depth=L, width=width, b=1, tau=tau, probe=probe)
                norms, first_in = Prober(model, task, spec).forward_norms()
                vals.append(norms[-1] / first_in if math.isfinite(norms[-1]) else math.inf)
                del model
            meds.append(statistics.median(vals))
        out[tau] = meds
    return out


# ---------------------------------------------------------------- 3. incremental explosion


def update_ratios(depths, taus, seeds, *, lr, width=128, probe=256) -> dict[str, list[float]]:
    out = {}
    for tau in taus:
        meds = []
        for L in depths:
            vals = []
            for s in seeds:
                spec, model, task = model_and_task(s, depth=L, width=width, b=1, tau=tau, lr=lr, probe=probe)
                opt = torch.optim.SGD(model.parameters(), lr=lr)
                vals.append(Prober(model, task, spec, hessian=False).snapshot(opt, 0)["update_ratio"])
            meds.append(statistics.median(vals))
        out[tau] = meds
    return out


def _row(name, vals, fmt="{:.3g}"):
    return f"  {name:<12}" + "".join(f"{fmt.format(v):>10}" for v in vals)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="fewer sizes (a smoke test of the script)")
    ap.add_argument("--lr", type=float, default=1e-4,
                    help="SGD learning rate of check 3 (1e-4: a small, linear-regime update at depth 2 for both taus)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    seeds = list(range(args.seeds))
    t0 = time.perf_counter()
    print(f"torch {torch.__version__}; digits probe batch of 256; medians over seeds {seeds}\n")

    # 1
    Cs = [1, 2, 4, 8, 16] if args.quick else [1, 2, 4, 8, 16, 32, 64]
    print("1. STAM Figure 2: fwd_ratio of a one-block mlp_resnet at init, width 256, branch_depth 2")
    for skip, what in (("none", "skip: none -- relu(sum_k alpha_k B_k(h)), the paper's aggregated output"),
                       ("plain", "skip: plain -- relu(h + sum_k alpha_k B_k(h)), for reference")):
        r = stam_fwd_ratios(Cs, seeds, skip=skip)
        print(f" {what}")
        print(_row("C", Cs, "{}"))
        for agg, vals in r.items():
            print(_row(agg, vals) + f"   slope {slope(Cs, vals):+.3f}")
        if skip == "none":
            print("  expected slopes: sum +0.5, stam 0, avg -0.5  ->  "
                  + ", ".join(f"{agg} {slope(Cs, v):+.2f}" for agg, v in r.items()))
    print()

    # 2
    depths = [3, 10, 30, 100] if args.quick else [3, 10, 30, 100, 300, 1000]
    taus = ["L^-0.25", "1/sqrt(L)", "1/L"]
    print("2. tau paper Theorem 4 / Figure 1: forward norm at init (fwd_ratio = RMS of the last block's output / "
          "RMS of the first block's input), width 128, one linear map per branch")
    r = tau_fwd_ratios(depths, taus, seeds[:3])
    print(_row("L", depths, "{}"))
    for tau, vals in r.items():
        fin = [(L, v) for L, v in zip(depths, vals) if math.isfinite(v)]
        print(_row(tau, vals) + (f"   slope {slope(*zip(*fin)):+.3f}" if len(fin) > 1 else ""))
    print("  expected: L^-0.25 grows with L (at least like L^(1/4), in fact like exp(c sqrt(L))); 1/sqrt(L) and 1/L bounded")
    print()

    # 3
    depths3 = [2, 4, 8, 16, 32] if args.quick else [2, 4, 8, 16, 32, 64, 128]
    taus3 = ["1", "1/sqrt(L)"]
    print(f"3. incremental explosion: update_ratio of one SGD step (lr {args.lr:g}) at init, width 128")
    r = update_ratios(depths3, taus3, seeds[:3], lr=args.lr)
    print(_row("L", depths3, "{}"))
    for tau, vals in r.items():
        fin = [(L, v) for L, v in zip(depths3, vals) if math.isfinite(v)]
        print(_row(f"tau={tau}", vals) + (f"   slope {slope(*zip(*fin)):+.3f}" if len(fin) > 1 else "")
              + f"   max/min {max(v for _, v in fin) / min(v for _, v in fin):.3g}")
    print("  expected: grows with L for tau = 1, flat for tau = 1/sqrt(L)")
    print(f"\n({time.perf_counter() - t0:.0f}s)")


if __name__ == "__main__":
    main()
