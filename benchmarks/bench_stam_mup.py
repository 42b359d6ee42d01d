"""STAM meets muP: is STAM's 1/sqrt(C) what muP prescribes for C parallel branches?

Branches are a width-like axis: C branches of width m summed with weight alpha are one layer of width C*m
followed by a fixed contraction over C. A coordinate check over C (TP-V Figure 5's diagnostic, with the
branch count in place of the width) measures, for each aggregation, the RMS of the scaled branch sum
(`alpha * sum_k f_k(x)`, every residual block of an MLP ResNet) at init and the RMS of its change after K
Adam steps, on a fixed probe batch of MNIST-1D, and fits their slopes against C on log-log axes:

- sum (alpha = 1), average (alpha = 1/C), STAM (alpha = 1/sqrt(C));
- muP's prescription: treating C as a width with base C = 1, the contraction over C*m coordinates takes
  muP's hidden-layer rules: entries 1/sqrt(fan_in) at init (alpha = 1/sqrt(C): STAM's) and, with Adam, the
  learning rate of the weights feeding it divided by the fan-in multiplier C; written in STAM's
  parametrization (alpha outside the weights), the branches' Adam lr x 1/sqrt(C).

muP's criterion: both slopes 0 (activations and their updates neither blow up nor vanish as C grows).

    python benchmarks/bench_stam_mup.py                    # C = 1..32, 3 seeds, 10 steps (about 1 min)
    python benchmarks/bench_stam_mup.py --steps 50 --seeds 5
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nas_stab.analysis.intervals import widen_replicates  # noqa: E402
from nas_stab.config import loads_spec  # noqa: E402
from nas_stab.models import build_model  # noqa: E402
from nas_stab.models.parametrization import LR_MULT  # noqa: E402
from nas_stab.tasks import load_task  # noqa: E402
from nas_stab.training.optim import build_optimizer  # noqa: E402
from nas_stab.training.step import train_step  # noqa: E402

SPEC = """\
name: stam-mup
task: {{dataset: {{name: mnist1d, size: 4000}}}}
model: {{arch: mlp_resnet, depth: {depth}, width: {width}, branches: {C}, aggregation: {agg}, tau: 1}}
train: {{optimizer: adam, lr: {lr}, batch_size: 64, steps: {steps}, threads: 1}}
stability: {{hessian: false}}
"""
FORMS = {"sum": "sum", "average": "avg", "stam": "stam", "mup": "stam"}  # form -> model.aggregation


def measure(form: str, C: int, seed: int, *, width: int, depth: int, lr: float, steps: int) -> tuple[float, float]:
    """(RMS of the scaled branch sums at init, RMS of their change after `steps` Adam steps), over blocks."""
    spec = loads_spec(SPEC.format(depth=depth, width=width, C=C, agg=FORMS[form], lr=lr, steps=steps))
    torch.manual_seed(seed)
    task = load_task(spec, seed, torch.device("cpu"))
    model = build_model(spec, task.info)
    if form == "mup":
        for name, p in model.named_parameters():
            if ".branch." in name:
                setattr(p, LR_MULT, C ** -0.5)
    taps = [b.skip.branch_tap for b in model.blocks]
    seen: list[torch.Tensor] = []
    hooks = [t.register_forward_hook(lambda _m, args, _out: seen.append(args[0].detach().clone())) for t in taps]

    def branch_sums() -> list[torch.Tensor]:
        seen.clear()
        model.eval()
        with torch.no_grad():
            model(task.probe_batch[0])
        model.train()
        return list(seen)

    before = branch_sums()
    opt = build_optimizer(model, spec.train)
    gen = torch.Generator().manual_seed(seed)
    batches = task.train_batches(gen)
    for step in range(1, steps + 1):
        train_step(model, task, opt, spec.train, next(batches), step, steps)
    after = branch_sums()
    for h in hooks:
        h.remove()
    rms = lambda t: float(t.pow(2).mean().sqrt())  # noqa: E731
    return (float(np.mean([rms(b) for b in before])), float(np.mean([rms(a - b) for a, b in zip(after, before)])))


def slope(Cs, values) -> tuple[float, float, float]:
    """The log-log slope against C and its 90% seed-bootstrap interval (values: [seeds, len(Cs)])."""
    x = np.log2(np.asarray(Cs, dtype=float))
    y = np.log2(np.asarray(values))
    fit = lambda yy: float(np.polyfit(x, yy.mean(0), 1)[0])  # noqa: E731
    rng = np.random.default_rng(0)
    reps = [fit(y[rng.integers(0, len(y), len(y))]) for _ in range(1000)]
    lo, hi = widen_replicates(reps, len(y))
    return fit(y), lo, hi


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--branches", default="1,2,4,8,16,32")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--out", help="also write the measurements as CSV (per form and C: the seed means; per form: the slopes)")
    a = ap.parse_args(argv)
    rows: list[dict] = []
    torch.set_num_threads(1)
    Cs = [int(c) for c in a.branches.split(",")]
    print(f"MLP ResNet width {a.width}, {a.depth} blocks, MNIST-1D, Adam lr {a.lr}, {a.steps} steps, {a.seeds} seeds; "
          "RMS of the scaled branch sum alpha * sum_k f_k(x), mean over blocks")
    print("| form | alpha | " + " | ".join(f"C={c} init / update" for c in Cs) + " | init slope (90%) | update slope (90%) |")
    print("|---|---|" + "---|" * len(Cs) + "---|---|")
    for form in FORMS:
        res = np.array([[measure(form, C, s, width=a.width, depth=a.depth, lr=a.lr, steps=a.steps) for C in Cs]
                        for s in range(a.seeds)])  # [seeds, C, 2]
        alpha = {"sum": "1", "average": "1/C", "stam": "1/sqrt(C)", "mup": "1/sqrt(C), branch lr x 1/sqrt(C)"}[form]
        cells = " | ".join(f"{res[:, i, 0].mean():.3g} / {res[:, i, 1].mean():.3g}" for i in range(len(Cs)))
        s0, s1 = slope(Cs, res[..., 0]), slope(Cs, res[..., 1])
        print(f"| {form} | {alpha} | {cells} | {s0[0]:+.2f} ({s0[1]:+.2f} to {s0[2]:+.2f}) | "
              f"{s1[0]:+.2f} ({s1[1]:+.2f} to {s1[2]:+.2f}) |")
        rows += [{"form": form, "alpha": alpha, "C": C, "init": res[:, i, 0].mean(), "update": res[:, i, 1].mean(),
                  "init_slope": s0[0], "init_lo": s0[1], "init_hi": s0[2], "update_slope": s1[0], "update_lo": s1[1],
                  "update_hi": s1[2], "width": a.width, "depth": a.depth, "lr": a.lr, "steps": a.steps, "seeds": a.seeds}
                 for i, C in enumerate(Cs)]
    if a.out:
        import pandas as pd

        pd.DataFrame(rows).to_csv(a.out, index=False, float_format="%.6g")
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
