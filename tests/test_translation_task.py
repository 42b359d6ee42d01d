"""Translation task end to end: BLEU, decoding through the task, learning the synthetic task, train_run."""
from __future__ import annotations

import math
import time

import pytest
import sacrebleu
import torch
import yaml

from nas_stab.config import loads_spec
from nas_stab.models import build_model
from nas_stab.tasks import load_task
from nas_stab.tasks.translation import bleu
from nas_stab.training.optim import lr_factor

CPU = torch.device("cpu")


def test_bleu_of_perfect_hypotheses_is_100():
    refs = ["A man in an orange hat starring at something.", "Two dogs play in the snow!", "A girl runs."]
    assert bleu(refs, refs) == pytest.approx(100.0)


def test_bleu_equals_sacrebleu():
    refs = ["A man in an orange hat starring at something.", "Two dogs play in the snow!", "A little girl climbing into a playhouse."]
    hyps = ["A man in a orange hat stares at something .", "Two dogs are playing in snow!", "A girl climbs into a wooden playhouse."]
    ours = bleu(hyps, refs)
    theirs = sacrebleu.corpus_bleu(hyps, [refs]).score
    assert ours == theirs and 0 < ours < 100
    assert bleu(["x y z"] * 3, refs) < 5
    with pytest.raises(ValueError):
        bleu(hyps[:2], refs)


def tiny_spec(steps=300, size=3000, **model):
    m = {"arch": "transformer", "d_model": 64, "heads_per_branch": 4, "ffn_per_branch": 128, "enc_layers": 2,
         "dec_layers": 2, "norm": "ln", **model}
    data = {"name": "learn", "task": {"kind": "translation", "dataset": {"name": "synthetic", "size": size, "vocab_size": 300,
                                                                         "val": 200, "test": 200},
                                      "max_decode_len": 8},
            "model": m,
            "train": {"optimizer": "adam", "lr": 0.003, "betas": [0.9, 0.98], "max_tokens": 1200, "steps": steps,
                      "schedule": "inverse_sqrt", "warmup_steps": min(60, steps), "label_smoothing": 0.1, "eval_batch": 256},
            "stability": {"every": 0, "probe_batch": 32, "hessian": False},
            "search": {"objective": "bleu"}}
    return loads_spec(yaml.safe_dump(data))


def train(spec, seed=0):
    torch.manual_seed(seed)
    task = load_task(spec, seed, CPU)
    model = build_model(spec, task.info)
    t = spec.train
    opt = torch.optim.Adam(model.parameters(), lr=t.lr, betas=tuple(t.betas))
    it = task.train_batches(torch.Generator().manual_seed(seed))
    for step in range(t.steps):
        for g in opt.param_groups:
            g["lr"] = t.lr * lr_factor(t, step, t.steps)
        loss = task.loss(model, next(it))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return task, model


@pytest.fixture(scope="module")
def learned():
    t0 = time.perf_counter()
    task, model = train(tiny_spec(steps=320))
    return task, model, time.perf_counter() - t0


@pytest.mark.slow  # over 15 s: CI runs it in its slow stage (pytest -m slow)
def test_learns_synthetic_task_to_bleu_above_90(learned):
    """A 2+2-layer d=64 Transformer, 320 Adam steps (about 20-40 s on one shared core)."""
    task, model, _ = learned
    ev = task.evaluate(model, "val")
    assert set(ev) == {"val_loss", "bleu"}
    assert ev["bleu"] > 90, ev
    assert ev["val_loss"] < 0.5
    test = task.evaluate(model, "test")
    assert set(test) == {"test_loss", "test_bleu"} and test["test_bleu"] > 90


def test_untrained_model_scores_low():
    spec = tiny_spec(steps=1)
    task = load_task(spec, 0, CPU)
    torch.manual_seed(0)
    model = build_model(spec, task.info)
    assert task.evaluate(model, "val")["bleu"] < 5


def test_evaluate_bleu_is_sacrebleu_of_the_detokenized_output(learned):
    task, model, _ = learned
    hyps = task.translate(model, "val")
    refs = task.data.splits["val"].tgt_text
    assert task.evaluate(model, "val")["bleu"] == sacrebleu.corpus_bleu(hyps, [refs]).score
    assert all(isinstance(h, str) for h in hyps) and len(hyps) == len(refs)
    # beam 1 through the task equals greedy; beam 4 decodes as well
    assert task.translate(model, "val", beam=1) == hyps
    b4 = task.translate(model, "val", beam=4)
    assert bleu(b4, refs) > 50
    assert model.training  # translate restores the mode


@pytest.mark.slow
def test_learns_synthetic_task_to_bleu_above_97_with_beam():
    """Longer: more data and steps, beam 4 (about 2 minutes)."""
    import dataclasses

    spec = tiny_spec(steps=800, size=8000)
    spec = dataclasses.replace(spec, task=dataclasses.replace(spec.task, beam=4))
    task, model = train(spec)
    assert task.evaluate(model, "val")["bleu"] > 97
    assert task.evaluate(model, "test")["test_bleu"] > 97


def test_train_run_reports_translation_and_stability_metrics():
    import dataclasses

    from nas_stab.training.loop import train_run

    spec = tiny_spec(steps=30, size=800)
    spec = dataclasses.replace(spec, stability=dataclasses.replace(spec.stability, every=15, hessian=True, hessian_iters=3),
                               train=dataclasses.replace(spec.train, eval_every=15))
    r = train_run(spec, 0)
    assert r.status == "complete", r.error
    for k in ("bleu", "val_loss", "test_bleu", "test_loss", "train_loss"):
        assert k in r.metrics and math.isfinite(r.metrics[k]), k
    for k in ("fwd_ratio", "grad_ratio", "update_ratio", "sharpness"):
        assert math.isfinite(r.metrics[f"init_{k}"]) and math.isfinite(r.metrics[f"final_{k}"]), k
    L = 2 * 2 + 3 * 2
    assert all(f"fwd_norm.{i}" in r.history[0] for i in range(L))
