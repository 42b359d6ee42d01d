"""Translation: label-smoothed cross-entropy, greedy/beam decoding, sacreBLEU.

A batch is ``(src [B, S], tgt_in [B, T], tgt_out [B, T])`` of subword ids on
the device (pad 0): the model reads `src` and `tgt_in` (BOS + target) and
predicts `tgt_out` (target + EOS). Training batches are bucketed by length:
each epoch sorts the pairs by length (random order within a length), cuts
them into batches of at most `train.max_tokens` padded tokens (sentences x
longest side), or of `train.batch_size` sentences when `max_tokens` is not
set, and shuffles the batches.

`evaluate` returns the per-token cross-entropy (no label smoothing) and
sacreBLEU's corpus BLEU of the detokenized hypotheses against the raw
references: ``{"val_loss", "bleu"}`` for "val", ``{"test_loss",
"test_bleu"}`` for "test". Decoding is greedy for ``task.beam: 1``, else
beam search with ``task.length_penalty``; outputs are at most
``task.max_decode_len`` tokens longer than their source.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from nas_stab.config.schema import Spec
from nas_stab.data import load_dataset
from nas_stab.data.text import PAD
from nas_stab.models.transformer_decode import decode
from nas_stab.tasks.kinds import TASKS

__all__ = ["Translation", "bleu"]

EVAL_FLOATS = 2**24  # cap on logits held at once during evaluation (64 MB)


def bleu(hypotheses: list[str], references: list[str]) -> float:
    """sacreBLEU corpus BLEU (default 13a tokenization) of detokenized strings, one reference each."""
    import sacrebleu  # deferred: loads sacreBLEU only when this runs

    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")
    return float(sacrebleu.corpus_bleu(hypotheses, [references]).score)


@TASKS.register("translation")
class Translation:
    def __init__(self, spec: Spec, seed: int, device):
        self.spec = spec
        self.device = device
        self.data = load_dataset(spec, device)
        self.info = self.data.info
        self.V = self.info.extra["vocab"]
        self.train_split = self.data.splits["train"]
        self.max_tokens = spec.train.max_tokens
        self.batch_size = spec.train.batch_size
        self.label_smoothing = spec.train.label_smoothing
        # per-pair lengths on the CPU: batching decisions never touch the device
        self._src_len = self.train_split.src_len.cpu()
        self._tgt_len = self.train_split.tgt_len.cpu()
        self._len = torch.maximum(self._src_len, self._tgt_len)
        self.steps_per_epoch = len(self._plan(torch.Generator().manual_seed(0)))
        n = min(spec.stability.probe_batch, len(self.train_split))
        g = torch.Generator().manual_seed(12345)
        idx = torch.randperm(len(self.train_split), generator=g)[:n].sort().values
        self.probe_batch = self._batch(self.train_split, idx, self._src_len, self._tgt_len)

    # ------------------------------------------------------------ batches

    def _plan(self, gen: torch.Generator) -> list[torch.Tensor]:
        """One epoch of batches (CPU index tensors), bucketed by length, in random order."""
        n = len(self._len)
        order = torch.argsort(self._len.double() + torch.rand(n, generator=gen, dtype=torch.float64))
        lens = self._len[order].tolist()
        batches, start, cur = [], 0, 0
        if self.max_tokens:
            for i, ln in enumerate(lens):
                m = max(cur, ln)
                if i > start and (i - start + 1) * m > self.max_tokens:
                    batches.append(order[start:i])
                    start, m = i, ln
                cur = m
            batches.append(order[start:])
        else:
            batches = list(order.split(self.batch_size))
        perm = torch.randperm(len(batches), generator=gen).tolist()
        return [batches[i] for i in perm]

    def _batch(self, split, idx: torch.Tensor, src_len: torch.Tensor, tgt_len: torch.Tensor):
        S, T = int(src_len[idx].max()), int(tgt_len[idx].max())
        i = idx.to(split.src.device)
        src = split.src[i, :S]
        tgt = split.tgt[i, : T + 1]
        return src, tgt[:, :-1], tgt[:, 1:]

    def train_batches(self, gen: torch.Generator):
        """Endless length-bucketed batches; a new random plan every epoch."""
        while True:
            for idx in self._plan(gen):
                yield self._batch(self.train_split, idx, self._src_len, self._tgt_len)

    def measure_work(self) -> dict[str, float]:
        """What the measurements' cost model (training/budget.py) counts, in padded tokens (source + target
        input): a training batch (the mean of one epoch's plan), the probe batch (and its sentences), and one validation: the
        loss's forward pass over the split plus the decoding, counted as 1.25 x beam x its target tokens
        (fitted on a small Transformer, docs/run-directory.md)."""
        plan = self._plan(torch.Generator().manual_seed(0))
        train = sum(len(i) * (int(self._src_len[i].max()) + int(self._tgt_len[i].max())) for i in plan) / max(1, len(plan))
        probe = sum(float(t.numel()) for t in self.probe_batch[:2])
        s = self.data.splits.get("val")
        val = 0.0
        if s is not None:
            val = float(s.src_len.sum() + s.tgt_len.sum()) + 1.25 * self.spec.task.beam * float(s.tgt_len.sum())
        return {"train": float(train), "probe": probe, "probe_rows": float(self.probe_batch[0].shape[0]), "val": val}

    # ------------------------------------------------------------ loss

    def forward(self, model, batch):
        return model(batch[0], batch[1])

    def loss(self, model, batch):
        logits = model(batch[0], batch[1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch[2].reshape(-1),
                               ignore_index=PAD, label_smoothing=self.label_smoothing)

    # ------------------------------------------------------------ evaluation

    def _eval_order(self, split):
        src_len = split.src_len.cpu()
        tgt_len = split.tgt_len.cpu()
        return torch.argsort(torch.maximum(src_len, tgt_len), stable=True), src_len, tgt_len

    @torch.no_grad()
    def eval_loss(self, model, split) -> float:
        """Mean per-token cross-entropy (nats, no label smoothing) over the split."""
        order, src_len, tgt_len = self._eval_order(split)
        total, count, i = 0.0, 0, 0
        lens = torch.maximum(src_len, tgt_len)[order].tolist()
        while i < len(order):
            # as many sentences as keep the logits under EVAL_FLOATS (lengths ascend)
            j = i + 1
            while j < len(order) and (j + 1 - i) * lens[j] * self.V <= EVAL_FLOATS and j - i < self.spec.train.eval_batch:
                j += 1
            src, tin, tout = self._batch(split, order[i:j], src_len, tgt_len)
            logits = model(src, tin).float()
            total += float(F.cross_entropy(logits.reshape(-1, self.V), tout.reshape(-1), ignore_index=PAD, reduction="sum"))
            count += int(tout.ne(PAD).sum())
            i = j
        return total / max(count, 1)

    @torch.no_grad()
    def translate_ids(self, model, split, beam: int | None = None) -> list[list[int]]:
        """Decoded token ids for every sentence of `split`, in the split's order."""
        t = self.spec.task
        beam = beam or t.beam
        src_len = split.src_len.cpu()
        order = torch.argsort(src_len, stable=True)
        per = max(1, min(self.spec.train.eval_batch, EVAL_FLOATS // (self.V * beam)))
        out: list[list[int]] = [[] for _ in range(len(order))]
        for chunk in order.split(per):
            S = int(src_len[chunk].max())
            src = split.src[chunk.to(split.src.device), :S]
            limits = src_len[chunk] - 1 + t.max_decode_len
            hyps = decode(model, src, limits, beam=beam, length_penalty=t.length_penalty)
            for k, h in zip(chunk.tolist(), hyps):
                out[k] = h
        return out

    def translate(self, model, split_name: str = "val", beam: int | None = None) -> list[str]:
        """Detokenized hypotheses for a split (model put in eval mode, then restored)."""
        was = model.training
        model.eval()
        try:
            return self.data.detokenize(self.translate_ids(model, self.data.splits[split_name], beam))
        finally:
            model.train(was)

    @torch.no_grad()
    def evaluate(self, model, split: str) -> dict:
        s = self.data.splits.get(split)
        if s is None:
            return {}
        was = model.training
        model.eval()
        try:
            loss = self.eval_loss(model, s)
            hyps = self.data.detokenize(self.translate_ids(model, s))
        finally:
            model.train(was)
        score = bleu(hyps, s.tgt_text)
        loss = loss if math.isfinite(loss) else float("nan")
        if split == "val":
            return {"val_loss": loss, "bleu": score}
        return {"test_loss": loss, "test_bleu": score}
