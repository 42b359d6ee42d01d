"""Tasks: what a batch is, what the loss is, and how a model is evaluated.

The training loop is generic; a task object supplies the task-specific parts:

- `info`: `DataInfo` for building the model;
- `train_batches(gen)`: an endless iterator of training batches on the device;
- `steps_per_epoch`: optimizer steps in one pass over the training set;
- `loss(model, batch)`: the scalar training loss;
- `probe_batch`: the fixed batch every stability metric is computed on;
- `forward(model, batch)`: the model's output on a batch (update ratio);
- `evaluate(model, split)`: {metric: value} for "val" or "test".
"""
from __future__ import annotations

from nas_stab.config.schema import Spec
from nas_stab.tasks import (  # importing a task module registers its task
    classification,  # noqa: F401
    translation,  # noqa: F401
)
from nas_stab.tasks.kinds import TASKS


def load_task(spec: Spec, seed: int, device):
    """Build the task object of `spec.task.kind` for one trained run."""
    return TASKS.get(spec.task.kind)(spec, seed, device)
