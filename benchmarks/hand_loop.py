"""A hand-written PyTorch training loop: the baseline of benchmarks/bench_trial.py.

    python benchmarks/hand_loop.py SPEC.yaml

What a user would write for one run of SPEC (one configuration, no search
dimensions): the data and the model come from nas_stab (the same tensors and
the same initialization a `nas-stab run` of SPEC trains), the rest is plain
PyTorch: SGD with the spec's lr and momentum, `train.steps` steps over
batches gathered by index from one `randperm` per epoch (drop last), and one
evaluation on the validation and the test split at the end. It prints the
final metrics. Write your own loop with the same interface (a spec path as the
only argument) and pass it to bench_trial.py with `--hand`.
"""
from __future__ import annotations

import os
import sys

import torch
import torch.nn.functional as F

from nas_stab.config import load_spec
from nas_stab.models import build_model
from nas_stab.tasks import load_task


def main(path: str) -> None:
    spec = load_spec(path)
    t = spec.train
    torch.set_num_threads(t.threads or os.cpu_count() or 1)
    seed = 0
    torch.manual_seed(seed)
    task = load_task(spec, seed, torch.device("cpu"))
    model = build_model(spec, task.info)
    opt = torch.optim.SGD(model.parameters(), lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    d = task.data
    gen = torch.Generator().manual_seed(seed)
    bs, n = t.batch_size, len(d.x_train)
    step = 0
    while step < t.steps:
        perm = torch.randperm(n, generator=gen)
        for i in range(0, n - bs + 1, bs):
            idx = perm[i : i + bs]
            x, y = d.prepare(d.x_train.index_select(0, idx)), d.y_train.index_select(0, idx)
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            step += 1
            if step == t.steps:
                break
    model.eval()
    with torch.no_grad():
        for name, x, y in (("val", d.x_val, d.y_val), ("test", d.x_test, d.y_test)):
            loss_sum, correct = 0.0, 0
            for i in range(0, len(x), t.eval_batch):
                out = model(d.prepare(x[i : i + t.eval_batch]))
                loss_sum += F.cross_entropy(out, y[i : i + t.eval_batch], reduction="sum").item()
                correct += (out.argmax(1) == y[i : i + t.eval_batch]).sum().item()
            print(f"{name}_loss {loss_sum / len(x):.4f} {name}_acc {correct / len(x):.4f}")


if __name__ == "__main__":
    main(sys.argv[1])
