"""Model architectures, one registry: `ARCHS` keyed by the YAML `model.arch`.

Every model is an `nn.Module` whose `forward` maps a batch to outputs, and
which exposes what the stability probes need (see `base.StableModel`):

- `blocks`: the residual blocks in order (forward hooks read their norms);
- `branch_weights()`: (name, parameter) of the residual branches' weights.

Scalar parameters (0-d tensors: learnable tau, Fixup biases) are trained at
`train.scalar_lr_mult` x lr by the optimizer builder.
"""
from __future__ import annotations

from nas_stab.config import hooks
from nas_stab.config.schema import Spec
from nas_stab.models import catalog  # noqa: F401 - the built-in architectures' entries (their builders load on first use)
from nas_stab.models.archs import ARCHS
from nas_stab.models.parametrization_rules import WIDTH_FORMS
from nas_stab.models.parametrization_rules import check as check_parametrization

__all__ = ["ARCHS", "build_model", "check_model"]

ARCHS.load_plugins("nas_stab.models")  # installed packages' architectures (docs/plugins.md)


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
