"""Transformer on Multi30k de->en: training and decoding throughput.

Prints training tokens/s (forward + backward + Adam step on length-bucketed
batches of `--max-tokens`; target tokens, and source + target tokens) and
decoding tokens/s (generated tokens, EOS included) for greedy search and beam
4 on validation sentences, after warm-up. Throughputs are medians over
repeated timings, so a shared machine's load shows as spread, not bias.

    python benchmarks/bench_translation.py                         # d_model 256, 3+3 layers, 1 thread
    python benchmarks/bench_translation.py --d-model 128 --threads 2
    python benchmarks/bench_translation.py --branches 4 --heads-per-branch 1 --head-dim 32

Also prints the step time under the math attention kernel (what the Hessian
probe uses) next to the default kernel.
"""
from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch
import yaml

from nas_stab.config import loads_spec
from nas_stab.models import build_model
from nas_stab.tasks import load_task

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=str(ROOT.parent / "shared" / "data"))
    ap.add_argument("--d-model", type=int, default=256)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--branches", type=int, default=1)
    ap.add_argument("--heads-per-branch", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=None)
    ap.add_argument("--ffn", type=int, default=512, help="ffn_per_branch")
    ap.add_argument("--vocab", type=int, default=8000)
    ap.add_argument("--max-tokens", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=12, help="timed training steps (after 3 warm-up steps)")
    ap.add_argument("--decode-sentences", type=int, default=200)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    model = {"arch": "transformer", "d_model": args.d_model, "enc_layers": args.layers, "dec_layers": args.layers,
             "branches": args.branches, "heads_per_branch": args.heads_per_branch, "ffn_per_branch": args.ffn,
             "norm": "ln", "dropout": 0.1}
    if args.head_dim:
        model["head_dim"] = args.head_dim
    data = {"name": "bench", "task": {"kind": "translation", "max_decode_len": 20,
                                      "dataset": {"name": "multi30k", "root": args.root, "vocab_size": args.vocab,
                                                  "val": args.decode_sentences}},
            "model": model, "search": {"objective": "bleu"},
            "train": {"optimizer": "adam", "lr": 5e-4, "max_tokens": args.max_tokens, "steps": 100, "label_smoothing": 0.1}}
    spec = loads_spec(yaml.safe_dump(data))
    t0 = time.perf_counter()
    task = load_task(spec, 0, torch.device("cpu"))
    t_data = time.perf_counter() - t0
    torch.manual_seed(0)
    net = build_model(spec, task.info)
    n_params = sum(p.numel() for p in net.parameters())
    print(f"torch {torch.__version__}, {args.threads} thread(s); {task.data.note}")
    print(f"data + tokenizer: {t_data:.1f} s; model: {n_params / 1e6:.2f} M parameters, d_model {args.d_model}, "
          f"{args.layers}+{args.layers} layers, {args.branches} x {args.heads_per_branch} heads, max_tokens {args.max_tokens}")

    opt = torch.optim.Adam(net.parameters(), lr=5e-4, betas=(0.9, 0.98))
    it = task.train_batches(torch.Generator().manual_seed(0))

    def train_steps(n, ctx=None):
        rates, tgt_rates, times = [], [], []
        for _ in range(n):
            b = next(it)
            t = time.perf_counter()
            if ctx is not None:
                with ctx():
                    loss = task.loss(net, b)
                    opt.zero_grad()
                    loss.backward()
            else:
                loss = task.loss(net, b)
                opt.zero_grad()
                loss.backward()
            opt.step()
            dt = time.perf_counter() - t
            tgt = int(b[2].ne(0).sum())
            src = int(b[0].ne(0).sum())
            rates.append((src + tgt) / dt)
            tgt_rates.append(tgt / dt)
            times.append(dt)
        return statistics.median(tgt_rates), statistics.median(rates), statistics.median(times)

    train_steps(3)
    tgt_s, all_s, step_s = train_steps(args.steps)
    print(f"train: {tgt_s:,.0f} target tok/s ({all_s:,.0f} src+tgt tok/s), {step_s * 1000:.0f} ms/step "
          f"(median of {args.steps}); one Multi30k epoch = {task.steps_per_epoch} steps")

    from torch.nn.attention import SDPBackend, sdpa_kernel

    m_tgt, _, m_step = train_steps(max(4, args.steps // 3), ctx=lambda: sdpa_kernel(SDPBackend.MATH))
    print(f"train, math attention kernel: {m_tgt:,.0f} target tok/s, {m_step * 1000:.0f} ms/step")

    net.eval()
    split = task.data.splits["val"]
    for beam in (1, 4):
        task.translate_ids(net, split, beam)  # warm-up
        times, toks = [], 0
        for _ in range(2):
            t = time.perf_counter()
            hyps = task.translate_ids(net, split, beam)
            times.append(time.perf_counter() - t)
            toks = sum(len(h) + 1 for h in hyps)
        dt = min(times)
        name = "greedy" if beam == 1 else f"beam {beam}"
        print(f"decode {name}: {toks / dt:,.0f} tok/s, {len(split) / dt:,.1f} sentences/s "
              f"({len(split)} sentences, {toks} tokens, {dt:.2f} s)")
    print("(an untrained model: its outputs run to the length limit, src + 20 tokens)")


if __name__ == "__main__":
    main()
