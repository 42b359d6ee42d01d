"""One configuration of `nas-stab probe`: a snapshot at init, K training steps on the probe batch
(the training loop's own step, training/step.py), a second snapshot."""
from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any

from nas_stab.metrics import PROBE_EXTRA, STABILITY_METRICS

if TYPE_CHECKING:
    from nas_stab.config.schema import Spec

PER_LAYER = ("fwd_norm.", "grad_stream.", "bn_sigma.")  # the per-block / per-BatchNorm values of a snapshot in probe.csv


class TaskCache:
    """Data is loaded once per distinct (task, probe batch, batch settings), not once per configuration."""

    def __init__(self):
        self.key = None
        self.task = None

    def get(self, spec: Spec, seed, device):
        from nas_stab.config import to_plain  # deferred: loads PyYAML only when this runs
        from nas_stab.tasks import load_task  # deferred: loads torch, PyYAML, NumPy only when this runs

        t = spec.train
        key = json.dumps([to_plain(spec.task), spec.stability.probe_batch, t.batch_size, t.label_smoothing,
                          getattr(t, "max_tokens", None), seed, str(device)], sort_keys=True, default=str)
        if key != self.key:
            self.task, self.key = load_task(spec, seed, device), key
        return self.task


def _nonfinite_loss(what: str, value: float) -> bool:
    """The probe's check of a step: stop on a non-finite loss (gradient norms are not checked)."""
    return what == "loss" and not math.isfinite(value)


def probe_one(spec: Spec, seed: int, steps: int, tasks: TaskCache | None = None) -> dict[str, Any]:
    """Snapshot at init, then K optimizer steps on the probe batch and a second snapshot."""
    from nas_stab.models import build_model  # deferred: loads torch, PyYAML, NumPy only when this runs
    from nas_stab.stability.divergence import explain_nonfinite  # deferred: loads torch, PyYAML, NumPy only when this runs
    from nas_stab.stability.probes import Prober  # deferred: loads torch, PyYAML, NumPy only when this runs
    from nas_stab.training.loop import pick_device, seed_everything  # deferred: loads torch, PyYAML, NumPy only when this runs
    from nas_stab.training.optim import build_optimizer, total_steps  # deferred: loads torch, PyYAML, NumPy only when this runs
    from nas_stab.training.step import schedule_lr, train_step  # deferred: loads torch, PyYAML, NumPy only when this runs

    t = spec.train
    device = pick_device(t.device)
    seed_everything(seed)
    task = (tasks or TaskCache()).get(spec, seed, device)
    seed_everything(seed)  # the model's init does not depend on whether the data was cached
    model = build_model(spec, task.info).to(device)
    optimizer = build_optimizer(model, t)
    total = total_steps(t, task.steps_per_epoch)
    prober = Prober(model, task, spec)
    row: dict[str, Any] = {"status": "ok", "error": "", "n_params": sum(p.numel() for p in model.parameters()),
                           "blocks": len(getattr(model, "blocks", []))}

    def snap(prefix: str, step: int, final: bool) -> None:
        s = prober.snapshot(optimizer, step, final=final)
        row[f"{prefix}lr"] = optimizer.param_groups[0]["lr"]
        for k in STABILITY_METRICS + PROBE_EXTRA:
            if k in s:
                row[prefix + k] = s[k]
        for k, v in s.items():
            if k.startswith(PER_LAYER):
                row[prefix + k] = v
        if prober.nonfinite and row["status"] == "ok":
            what, value = prober.nonfinite
            row["status"], row["error"] = "nonfinite", f"{prefix.rstrip('_')}: non-finite {what} ({value})"

    schedule_lr(optimizer, t, 0, total)
    snap("init_", 0, final=False)
    if steps:
        model.train()
        for k in range(1, steps + 1):
            done = train_step(model, task, optimizer, t, task.probe_batch, k, total, _nonfinite_loss)
            if done.stopped:
                found = explain_nonfinite(model, task, task.probe_batch)
                what = f"{found[0]} ({found[1]}) at step {k + found[2]}" if found else f"loss ({done.loss}) at step {k}"
                row["status"], row["error"] = "nonfinite", f"training on the probe batch: non-finite {what}"
                break
        else:
            snap("final_", steps, final=True)
    return row
