"""One optimizer step, the one `train_run` takes and `nas-stab probe --steps K` takes too.

Per step, in this order: the learning rate of the schedule, the forward pass and
loss on the batch, a check of the loss (the caller may stop here: no update),
the gradients, clipping to `train.grad_clip` with a check of the gradient norm
(the caller may stop here too: no update), and the optimizer's update.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from nas_stab.training.optim import lr_factor, set_lr

# stop(what, value) -> True to stop before the update; `what` is "loss" or "gradient norm"
StopCheck = Callable[[str, float], bool]


@dataclass
class Step:
    lr: float  # the base learning rate of this step (before a parameter group's lr_mult)
    loss: float  # the training loss on the batch, before the update
    stopped: bool  # the check stopped the step before the update


def schedule_lr(optimizer: torch.optim.Optimizer, t, index: int, total: int) -> float:
    """Set the learning rate the schedule gives optimizer step `index` (0-based); returns it."""
    return set_lr(optimizer, t.lr, lr_factor(t, index, total))


def train_step(model: torch.nn.Module, task, optimizer: torch.optim.Optimizer, t, batch, step: int, total: int,
               stop: StopCheck | None = None) -> Step:
    """Optimizer step number `step` (1-based, of `total`) on `batch` with the settings `t` (train:)."""
    lr = schedule_lr(optimizer, t, step - 1, total)
    loss = task.loss(model, batch)
    loss_value = loss.detach().item()
    if stop is not None and stop("loss", loss_value):
        return Step(lr, loss_value, stopped=True)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if t.grad_clip:
        gnorm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip))
        if stop is not None and stop("gradient norm", gnorm):
            return Step(lr, loss_value, stopped=True)
    optimizer.step()
    return Step(lr, loss_value, stopped=False)
