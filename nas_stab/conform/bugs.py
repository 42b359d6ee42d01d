"""Bugs a parametrization's implementation is known to ship with, injected into a correctly built model: what
`nas-stab conform` must catch (tests/test_conform.py, benchmarks/bench_conform.py). Each is the kind of mistake
the field's own code has made: a multiplier or an lr rule dropped, a model re-initialized after muP was applied, a
base model at the wrong width, a flag read and never applied.

A bug is a `Mutate` (measure.py): it receives the model as built, its spec, the data's info and `rebuild(spec)`
(the model of another spec from the same seed), and returns the model to measure.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from nas_stab.config.schema import Spec
from nas_stab.conform.measure import Mutate
from nas_stab.models.parametrization import EPS_MULT, LR_MULT
from nas_stab.models.parametrization_rules import readout, width_key
from nas_stab.models.transformer_layers import MultiHeadAttention


def _r(spec: Spec) -> float:
    m = spec.model
    w = float(getattr(m, width_key(m.arch)))
    return w / float(m.base_width or w)


def _head(model: nn.Module, spec: Spec) -> nn.Module:
    return model.get_submodule(readout(spec.model.arch))


def readout_multiplier_missing(model: nn.Module, spec: Spec, info: Any, rebuild: Callable[[Spec], nn.Module]) -> nn.Module:
    """The readout's 1/width output multiplier dropped (the model's forward reads its input unscaled)."""
    if spec.model.arch == "transformer":
        model.readout_mult = 1.0  # type: ignore[assignment]  # Module.__setattr__ takes any value
    else:
        _head(model, spec)._forward_pre_hooks.clear()
    return model


def attention_sqrt_scaling(model: nn.Module, spec: Spec, info: Any, rebuild: Callable[[Spec], nn.Module]) -> nn.Module:
    """Attention logits scaled 1/sqrt(head size) (SP's) instead of muP's 1/head size."""
    for m in model.modules():
        if isinstance(m, MultiHeadAttention):
            m.scale = None
    return model


def hidden_adam_lr_unscaled(model: nn.Module, spec: Spec, info: Any, rebuild: Callable[[Spec], nn.Module]) -> nn.Module:
    """The hidden weights' Adam lr left at the base lr (not x 1/fan_in multiplier)."""
    head = readout(spec.model.arch) + ".weight"
    for n, p in model.named_parameters():
        if p.ndim >= 2 and n != head and getattr(p, LR_MULT, 1.0) < 1.0:
            setattr(p, LR_MULT, 1.0)
    return model


def vector_lr_scaled_like_hidden(model: nn.Module, spec: Spec, info: Any, rebuild: Callable[[Spec], nn.Module]) -> nn.Module:
    """The lr of the input layer, the embedding and the norms' gains and biases scaled like a hidden weight's
    (x 1/width multiplier) instead of kept."""
    head = readout(spec.model.arch) + ".weight"
    r = _r(spec)
    for n, p in model.named_parameters():
        if n != head and p.ndim >= 1 and getattr(p, LR_MULT, 1.0) == 1.0:
            setattr(p, LR_MULT, 1.0 / r)
    return model


def wrong_base_shapes(model: nn.Module, spec: Spec, info: Any, rebuild: Callable[[Spec], nn.Module]) -> nn.Module:
    """The base model built at the model's own width (base shapes set from the target model, not the base): every
    width is its own base, and muP's rules scale nothing."""
    m = spec.model
    return rebuild(dataclasses.replace(spec, model=dataclasses.replace(m, base_width=int(getattr(m, width_key(m.arch))))))


def readout_reinitialized(model: nn.Module, spec: Spec, info: Any, rebuild: Callable[[Spec], nn.Module]) -> nn.Module:
    """The readout re-initialized with PyTorch's default (std ~ 1/sqrt(fan_in)) after muP was applied: its init no
    longer scaled (the mup package warns that a model must be initialized after set_base_shapes)."""
    w = _head(model, spec).weight
    assert isinstance(w, torch.Tensor)
    with torch.no_grad():
        nn.init.kaiming_uniform_(w, a=math.sqrt(5))
    return model


def adam_eps_unscaled(model: nn.Module, spec: Spec, info: Any, rebuild: Callable[[Spec], nn.Module]) -> nn.Module:
    """CompleteP's Adam eps left at the base eps in the residual blocks."""
    for p in model.parameters():
        if hasattr(p, EPS_MULT):
            setattr(p, EPS_MULT, 1.0)
    return model


def _width_only(spec: Spec, rebuild: Callable[[Spec], nn.Module]) -> nn.Module:
    return rebuild(dataclasses.replace(spec, model=dataclasses.replace(spec.model, parametrization="mup")))


def _tau_value(model: nn.Module) -> torch.Tensor:
    """The model's one Tau's value (a buffer, or a parameter when tau is learnable)."""
    found = dict(model.named_buffers()).get("tau.value")
    return found if found is not None else model.get_parameter("tau.value")


def depth_branch_multiplier_missing(model: nn.Module, spec: Spec, info: Any, rebuild: Callable[[Spec], nn.Module]) -> nn.Module:
    """The depth form's branch multiplier (L0 / L)^alpha dropped; its lr (and eps) rules kept."""
    ref = _width_only(spec, rebuild)
    mine, theirs = _tau_value(model), _tau_value(ref)
    with torch.no_grad():
        mine.copy_(theirs)  # the depth forms' models share one Tau: its value is the branches' multiplier
    return model


def depth_lr_rule_missing(model: nn.Module, spec: Spec, info: Any, rebuild: Callable[[Spec], nn.Module]) -> nn.Module:
    """Depth-muP's Adam rule for the blocks (lr x (L0 / L)^(1/2)) dropped; the branch multiplier kept."""
    ref = dict(_width_only(spec, rebuild).named_parameters())
    for n, p in model.named_parameters():
        setattr(p, LR_MULT, getattr(ref[n], LR_MULT, 1.0))
    return model


def flag_not_applied(model: nn.Module, spec: Spec, info: Any, rebuild: Callable[[Spec], nn.Module]) -> nn.Module:
    """`model.parametrization` read and never applied: the model is built in SP."""
    return rebuild(dataclasses.replace(spec, model=dataclasses.replace(spec.model, parametrization="weight")))


@dataclass(frozen=True)
class Bug:
    name: str
    mutate: Mutate
    forms: tuple[str, ...]  # the parametrizations it applies to
    archs: tuple[str, ...] = ("mlp_resnet", "resnet", "transformer")
    adam_only: bool = False

    def applies(self, spec: Spec) -> bool:
        return (spec.model.parametrization in self.forms and spec.model.arch in self.archs
                and (not self.adam_only or spec.train.optimizer in ("adam", "adamw")))

    @property
    def what(self) -> str:
        return (self.mutate.__doc__ or self.name).split("\n")[0]


WIDTH, DEPTH = ("mup",), ("depth_mup", "completep")
BUGS = [
    Bug("readout multiplier missing", readout_multiplier_missing, WIDTH),
    Bug("attention 1/sqrt(d) under muP", attention_sqrt_scaling, WIDTH, ("transformer",)),
    Bug("hidden Adam lr not scaled", hidden_adam_lr_unscaled, WIDTH, adam_only=True),
    Bug("embedding / norm / input lr scaled like hidden", vector_lr_scaled_like_hidden, WIDTH, adam_only=True),
    Bug("wrong base shapes", wrong_base_shapes, WIDTH),
    Bug("readout init not scaled", readout_reinitialized, WIDTH, ("mlp_resnet", "resnet")),
    Bug("Adam eps not scaled (CompleteP)", adam_eps_unscaled, ("completep",), ("mlp_resnet", "resnet"), adam_only=True),
    Bug("depth branch multiplier missing", depth_branch_multiplier_missing, DEPTH, ("mlp_resnet", "resnet")),
    Bug("Depth-muP lr rule missing", depth_lr_rule_missing, ("depth_mup",), ("mlp_resnet", "resnet"), adam_only=True),
    Bug("parametrization flag parsed, not applied", flag_not_applied, WIDTH + DEPTH),
]
