"""Model architectures, one registry: `ARCHS` keyed by the YAML `model.arch`.

Every model is an `nn.Module` whose `forward` maps a batch to outputs, and
which exposes what the stability probes need (see `base.StableModel`):

- `blocks`: the residual blocks in order (forward hooks read their norms);
- `branch_weights()`: (name, parameter) of the residual branches' weights.

Scalar parameters (0-d tensors: learnable tau, Fixup biases) are trained at
`train.scalar_lr_mult` x lr by the optimizer builder.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nas_stab.config import hooks
from nas_stab.config.schema import ModelConfig, Spec
from nas_stab.models import catalog  # noqa: F401 - the built-in architectures' entries (their builders load on first use)
from nas_stab.models.archs import ARCHS
from nas_stab.models.parametrization_rules import WIDTH_FORMS
from nas_stab.models.parametrization_rules import check as check_parametrization

__all__ = ["ARCHS", "build_model", "check_model"]

ARCHS.load_plugins("nas_stab.models")  # installed packages' architectures (docs/plugins.md)


def arch_options(section: Mapping[str, Any], _parent: Mapping[str, Any]) -> type | None:
    """The options class of the architecture a `model:` mapping names; KeyError when none is registered."""
    arch = section.get("arch", ModelConfig.arch)
    if not isinstance(arch, str) or arch not in ARCHS:
        raise KeyError(arch)
    return ARCHS.entry(arch).info.get("options")


def arch_option_classes(plugins: bool) -> list[tuple[str, str, type | None]]:
    """Every architecture's (YAML name, task kind, options class)."""
    return [(name, e.info.get("task", "classification"), e.info.get("options"))
            for name, e in ARCHS.items() if plugins or "plugin" not in e.info]


hooks.register_options("model", arch_options, arch_option_classes)


@hooks.register("config", "model")
def check_model(spec: Spec) -> tuple[tuple, str] | None:
    """(key path, reason) if the model section cannot be built, else None."""
    m = spec.model
    if m.arch not in ARCHS:
        return ("model", "arch"), ARCHS.unknown(m.arch)
    entry = ARCHS.entry(m.arch)
    task = entry.info.get("task", "classification")
    if task != spec.task.kind:
        return ("model", "arch"), f"{m.arch!r} is a {task} architecture; task.kind is {spec.task.kind!r}"
    check = entry.info.get("check")
    problem = check(spec) if check else None
    if problem is None:
        problem = check_parametrization(spec)
    return problem


def build_model(spec: Spec, info):
    """Build the architecture named by `spec.model.arch` for data described by `info`, in the parametrization
    `spec.model.parametrization` (weight/sp and path as built; mup, depth_mup and completep rescaled by `parametrization.apply`)."""
    build = ARCHS.get(spec.model.arch)
    model = build(spec, info)
    if spec.model.parametrization in WIDTH_FORMS:
        from nas_stab.models.parametrization import apply  # deferred: loads torch only when this runs

        apply(model, spec, info, build)
    return model
