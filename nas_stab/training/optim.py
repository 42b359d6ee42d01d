"""Optimizers and learning-rate schedules named in the YAML."""
from __future__ import annotations

import math

import torch


def build_optimizer(model: torch.nn.Module, t) -> torch.optim.Optimizer:
    """sgd | adam | adamw. A parameter with a `_nas_lr_mult` (muP, Depth-muP, CompleteP) trains at that multiple
    of the lr, in a group of its own (with Adam, `_nas_eps_mult` multiplies its eps). Scalar (0-d) parameters -- learnable tau, Fixup
    biases and multipliers -- train at `scalar_lr_mult` x lr (the tau paper's
    and Fixup's lr/10) with `scalar_weight_decay`, by default the same weight
    decay as every other parameter (Fixup's code decays them too). Path-space
    models need nothing special: their trainable parameters are the path
    values, so plain SGD is G-SGD."""
    params = [p for p in model.parameters() if p.requires_grad]
    regular = [p for p in params if p.ndim > 0]
    scalars = [p for p in params if p.ndim == 0]
    # muP / Depth-muP / CompleteP give parameters their own lr multipliers (models/parametrization.py); the weight
    # decay of such a group is divided by its multiplier, as the mup package's MuAdam and MuSGD scale it; CompleteP
    # also gives the blocks an Adam eps multiplier (`_nas_eps_mult`)
    by_mult: dict[tuple[float, float], list] = {(1.0, 1.0): []}
    for p in regular:
        key = (float(getattr(p, "_nas_lr_mult", 1.0)), float(getattr(p, "_nas_eps_mult", 1.0)))
        by_mult.setdefault(key, []).append(p)
    adam = t.optimizer != "sgd"
    groups = [{"params": ps, "lr": t.lr * k, "weight_decay": t.weight_decay / k, "lr_mult": k, **({"eps": t.eps * e} if adam else {})}
              for (k, e), ps in by_mult.items() if ps or (k, e) == (1.0, 1.0)]
    if scalars:
        wd = t.weight_decay if t.scalar_weight_decay is None else t.scalar_weight_decay
        groups.append({"params": scalars, "lr": t.lr * t.scalar_lr_mult, "weight_decay": wd, "lr_mult": t.scalar_lr_mult})
    if t.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=t.lr, momentum=t.momentum, nesterov=t.nesterov and t.momentum > 0)
    cls = torch.optim.Adam if t.optimizer == "adam" else torch.optim.AdamW
    return cls(groups, lr=t.lr, betas=tuple(t.betas), eps=t.eps)


def lr_factor(t, step: int, total: int) -> float:
    """Multiplier of the base lr before optimizer step `step` (0-based)."""
    w = t.warmup_steps
    if w and step < w:
        return (step + 1) / w
    if t.schedule == "constant":
        return 1.0
    if t.schedule == "inverse_sqrt":
        return math.sqrt(max(w, 1) / (step + 1)) if step + 1 > max(w, 1) else 1.0
    span = max(1, total - w)
    frac = min(1.0, (step - w) / span)
    final = t.final_lr_frac
    if t.schedule == "cosine":
        return final + (1 - final) * 0.5 * (1 + math.cos(math.pi * frac))
    if t.schedule == "linear":
        return 1.0 - (1 - final) * frac
    if t.schedule == "step":
        every = t.step_every or max(1, span // 3)
        return t.step_gamma ** ((step - w) // every)
    raise ValueError(f"unknown schedule {t.schedule!r}")


def set_lr(optimizer: torch.optim.Optimizer, base_lr: float, factor: float) -> float:
    lr = base_lr * factor
    for g in optimizer.param_groups:
        g["lr"] = lr * g.get("lr_mult", 1.0)
    return lr


def total_steps(t, steps_per_epoch: int) -> int:
    if t.steps is not None:
        return t.steps
    if t.epochs is not None:
        return max(1, math.ceil(t.epochs * steps_per_epoch))
    return 1000
