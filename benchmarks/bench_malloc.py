"""The allocator fix of issue 8 (`nas_stab/training/malloc.py`), before and after.

Each model's training step (forward, cross-entropy, backward, SGD step; one
torch thread) is timed in fresh subprocesses, with glibc's malloc as it comes
("raw") and as `train_run` sets it ("tuned"), alternating raw, tuned, raw,
tuned, ...; prints the median CPU time per step and the minor page faults per
step of each.

    python benchmarks/bench_malloc.py [--rounds 3] [--steps 20]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

MODELS = {
    "mlp_resnet w64 C16 b2 (STAM), batch 128": ("mlp_resnet", "depth: 4, width: 64, branches: 16, branch_depth: 2", (784,), 128),
    "mlp_resnet w512 d4, batch 256": ("mlp_resnet", "depth: 4, width: 512", (784,), 256),
    "resnet-20 w16 BN, batch 64": ("resnet", "depth: 20, width: 16, norm: bn", (3, 32, 32), 64),
    "resnet-20 w16 C4 BN, batch 64": ("resnet", "depth: 20, width: 16, norm: bn, branches: 4", (3, 32, 32), 64),
    "resnext-29 w8 C4 BN, batch 64": ("resnext", "depth: 29, width: 8, norm: bn, branches: 4", (3, 32, 32), 64),
}

CHILD = r"""
import json, resource, statistics, sys, time
import torch, torch.nn.functional as F
torch.set_num_threads(1)
arch, knobs, shape, batch, steps, tuned = json.loads(sys.argv[1])
if tuned:
    from nas_stab.training.malloc import keep_freed_memory
    assert keep_freed_memory()
from nas_stab.data import DataInfo
from nas_stab.models import build_model
from nas_stab.config import loads_spec
spec = loads_spec("name: x\ntask: {dataset: {name: synthetic}}\nmodel: {arch: %s, %s}\n" % (arch, knobs))
torch.manual_seed(0)
model = build_model(spec, DataInfo("x", tuple(shape), 10))
x, y = torch.randn(batch, *shape), torch.randint(0, 10, (batch,))
opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
def step():
    opt.zero_grad(set_to_none=True)
    F.cross_entropy(model(x), y).backward()
    opt.step()
for _ in range(3):
    step()
ts, f0 = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(steps):
    t0 = time.process_time()
    step()
    ts.append(time.process_time() - t0)
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / steps
print(json.dumps({"ms": statistics.median(ts) * 1e3, "faults": faults}))
"""


def run(model: str, steps: int, tuned: bool) -> dict:
    arch, knobs, shape, batch = MODELS[model]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    out = subprocess.run([sys.executable, "-c", CHILD, json.dumps([arch, knobs, shape, batch, steps, tuned])],
                         capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.2f}; {a.rounds} rounds of raw/tuned subprocesses, {a.steps} timed steps each; CPU time")
    print(f"{'model':<42} {'raw ms':>8} {'tuned ms':>9} {'tuned/raw':>10} {'faults/step raw':>16} {'tuned':>6}")
    for model in MODELS:
        res = {False: [], True: []}
        for _ in range(a.rounds):
            for tuned in (False, True):
                res[tuned].append(run(model, a.steps, tuned))
        raw = statistics.median(r["ms"] for r in res[False])
        tun = statistics.median(r["ms"] for r in res[True])
        fr = statistics.median(r["faults"] for r in res[False])
        ft = statistics.median(r["faults"] for r in res[True])
        print(f"{model:<42} {raw:>8.2f} {tun:>9.2f} {tun / raw:>10.2f} {fr:>16.0f} {ft:>6.0f}")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
