"""The papers' predictions about the stability metrics, measured (no training).

    nice python benchmarks/paper_checks_stability.py [--seeds 2]

Prints, for each prediction that tests/test_stability_papers.py checks, the
numbers measured through the code a run uses (`build_model`,
`build_optimizer`, `Prober.snapshot` on the digits probe batch), beside the
prediction. The settings are the tests' (docs/metrics.md explains each
metric); `--seeds` sets how many seeds the seed-averaged checks use.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from test_stability_papers import rms_over_seeds, slope, snap


def _row(name, vals):
    return f"  {name:<22}" + "".join(f"{v:>11.4g}" for v in vals)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(1)
    seeds = list(range(args.seeds))
    t0 = time.perf_counter()
    Cs = [1, 2, 4, 8, 16]

    print("1. STAM Thm 1: fwd_ratio at init, one block, skip none, branch depth 2 (RMS over seeds)")
    print("   predicted: slope in C +0.5 (sum), 0 (stam), -0.5 (avg)")
    print(_row("C", Cs))
    for agg in ("sum", "stam", "avg"):
        v = [rms_over_seeds("fwd_ratio", seeds, branches=C, branch_depth=2, aggregation=agg, skip="none") for C in Cs]
        print(_row(agg, v) + f"   slope {slope(Cs, v):+.3f}")

    print("\n2. STAM Thm 2: branch_grad_norm at init, width 128 (RMS over 3 x seeds)")
    print("   predicted: ~sqrt(C) for sum (x4 over C = 1..16), flat for stam, falling for avg")
    print(_row("C", Cs))
    for agg in ("sum", "stam", "avg"):
        v = [rms_over_seeds("branch_grad_norm", range(3 * len(seeds)), branches=C, branch_depth=2, aggregation=agg,
                            skip="none", width=128) for C in Cs]
        print(_row(agg, v) + f"   slope {slope(Cs, v):+.3f}, max/min {max(v) / min(v):.2f}")

    print("\n3. STAM A.4: update_norm of one SGD step (lr 1e-3), sum, branch depth 2")
    print("   predicted: grows ~ b C^(1/b) = 2 sqrt(C) with stam_forward, flat with stam_update")
    print(_row("C", Cs))
    for init in ("stam_forward", "stam_update", "kaiming"):
        v = [rms_over_seeds("update_norm", seeds, branches=C, branch_depth=2, aggregation="sum", init=init, skip="none",
                            lr=0.001) for C in Cs]
        print(_row(init, v) + f"   slope {slope(Cs, v):+.3f}")

    depths = [3, 10, 30, 100, 300]
    print("\n4. tau Thm 1: fwd_ratio at init against depth (seed 0)")
    print("   predicted: explodes for L^-1/4, bounded for 1/sqrt(L)")
    print(_row("L", depths))
    for tau in ("L^-0.25", "1/sqrt(L)", "1/L"):
        print(_row(tau, [snap(depth=L, tau=tau)["fwd_ratio"] for L in depths]))

    print("\n5. post-LN (xskip_ln, depth 4): fwd_ratio with lambda (tau 1) and tau (lambda 1)")
    print("   predicted: changes with both (before the LN)")
    print(_row("lambda 1, 2, 3", [snap(depth=4, skip="xskip_ln", skip_lambda=k)["fwd_ratio"] for k in (1, 2, 3)]))
    print(_row("tau 0.1, 1, 10", [snap(depth=4, skip="xskip_ln", tau=t)["fwd_ratio"] for t in (0.1, 1, 10)]))

    depths = [2, 8, 32, 64]
    print("\n6. incremental explosion: one Adam step (lr 1e-4) at init, update_norm / loss_drop against depth")
    print("   predicted: grows with depth for tau = 1, bounded for tau = 1/sqrt(L) and DeepNorm")
    print(_row("L", depths))
    for name, kw in (("tau=1", dict(tau=1)), ("tau=1/sqrt(L)", dict(tau="1/sqrt(L)")), ("deepnorm", dict(skip="deepnorm"))):
        s = [[snap(x, depth=L, lr=1e-4, opt="adam", **kw) for x in seeds] for L in depths]
        print(_row(name + " update", [statistics.median(a["update_norm"] for a in r) for r in s]))
        print(_row(name + " loss_drop", [statistics.median(a["loss_drop"] for a in r) for r in s]))

    depths = [4, 16, 32, 48]
    print("\n7. Path-BN Fig. 4: grad_ratio (hidden-stream gradients) at init, mlp width 32 in path space")
    print("   predicted: grows fast with depth under BN, much less under Path-BN")
    print(_row("L", depths))
    for norm in ("bn", "path_bn"):
        print(_row(norm, [snap(arch="mlp", depth=L, width=32, norm=norm, parametrization="path")["grad_ratio"]
                          for L in depths]))
    print(f"\n({time.perf_counter() - t0:.0f}s; eos_ratio against a dense Hessian: pytest tests/test_stability_papers.py -k eos)")


if __name__ == "__main__":
    main()
