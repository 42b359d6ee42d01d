"""`model.parametrization`: mup (Maximal Update Parametrization) and depth_mup (muP + Depth-muP).

The same key also selects `weight` (the default; `sp` is its other name: the standard parametrization) and
`path` (the Path-BN paper's path space, `layers.py`).

muP (Yang et al. 2022, "Tensor Programs V", Table 3; Microsoft's `mup` package) is stated relative to a
*base* model: the same architecture at `model.base_width`, where muP and SP coincide. Which dimensions of a
parameter are "infinite" (grow with width) is found as the `mup` package finds it, by comparing each
parameter's shape with the base model's: a dimension that differs grows with width, by the multiplier
`r = dim / base_dim`. With ``fan_out = shape[0]`` and ``fan_in = shape[1]`` (nas_stab's weights are
``[C * out, in, ...]``, as `nn.Linear`'s):

| parameter | infinite dims | init std (vs the base model's) | Adam lr | SGD lr |
| --- | --- | --- | --- | --- |
| hidden weight | fan_in and fan_out | x 1/sqrt(r_in) (variance 1/fan_in) | x 1/r_in | x r_out / r_in |
| input weight, vector (norm gain, bias) | one | x 1 (constant in width) | x 1 | x r |
| readout weight | fan_in | x 1, and its input scaled by 1/r_in (output multiplier) | x 1 | x r_in |
| anything else | none | unchanged | x 1 | x 1 |

These are the `mup` package's rules (`set_base_shapes` with `MuReadout`, `MuAdam`, `MuSGD`);
`tests/test_parametrization.py` checks them against the package on a small model. nas_stab's SP inits are
known exactly (`base.kaiming_normal_` records each tensor's fan and gain), so the muP init rescales each
tensor by the exact ratio of the target std to its SP std; a tensor initialized otherwise keeps its SP
init, with a note. `model.readout_zero_init` starts the readout at zero (TP-V's recommendation).

Depth-muP (Yang et al. 2023, "Tensor Programs VI"; Bordelon et al. 2023) adds, relative to
`model.base_depth` L0: every residual branch multiplied by sqrt(L0 / L) (on top of `model.tau`: with
`tau: 1` the branches are a / sqrt(L) with a = sqrt(L0)), and with Adam the learning rate of every
parameter inside the residual blocks multiplied by sqrt(L0 / L) (SGD's stays: TP-VI's alpha = 1/2, gamma =
1/2 for Adam, gamma = 0 for SGD).

Supported: the MLP family (`mlp`, `mlp_resnet`) and the convolutional `resnet` in weight space; other
architectures are refused by validation (`check`) with the reason. A convolution's weight ``[out, in, k, k]``
follows the same rules as a linear one (its kernel dims do not grow with width), as in the `mup` package: the
resnet's stem (3 input channels) is an input weight, its convolutions hidden weights, its linear head the
readout; BatchNorm's and LayerNorm's gains and biases are vectors.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

__all__ = ["LR_MULT", "SUPPORTED", "WIDTH_FORMS", "apply", "check", "classify"]

WIDTH_FORMS = ("mup", "depth_mup")  # the values of model.parametrization this module applies (weight = sp, path: elsewhere)
SUPPORTED = ("mlp", "mlp_resnet", "resnet")
READOUT = {"mlp": "head", "mlp_resnet": "B", "resnet": "head"}  # the module whose output is the logits
LR_MULT = "_nas_lr_mult"  # the attribute build_optimizer reads on a parameter (default 1)


def check(spec) -> tuple[tuple, str] | None:
    """(key path, reason) when the parametrization cannot be applied to this model, else None."""
    m = spec.model
    if m.parametrization not in WIDTH_FORMS:
        return None
    if m.arch not in SUPPORTED:
        return ("model", "parametrization"), (f"{m.parametrization} is implemented for {', '.join(SUPPORTED)}; "
                                              f"not yet for {m.arch!r}")
    if m.norm == "path_bn":
        return ("model", "parametrization"), f"{m.parametrization} is defined in weight space; norm: path_bn implies path space"
    searched = set(getattr(getattr(spec, "space", None), "keys", ()) or ())
    if "model.width" in searched and m.base_width is None:
        return ("model", "base_width"), (f"model.width is searched: {m.parametrization} needs a fixed base width "
                                         "(model.base_width; each width would otherwise be its own base, i.e. sp)")
    if m.parametrization == "depth_mup" and "model.depth" in searched and m.base_depth is None:
        return ("model", "base_depth"), "model.depth is searched: depth_mup needs a fixed base depth (model.base_depth)"
    if m.base_width is not None and m.base_width > m.width * 64:
        return ("model", "base_width"), f"base_width {m.base_width} is more than 64x the width {m.width}"
    return None


def classify(model: nn.Module, base: nn.Module, readout: str) -> dict[str, dict[str, Any]]:
    """Per parameter name: {ninf, r_in, r_out, main (the multiplier of the last infinite dim), kind}, kind one
    of hidden, vector, readout, fixed (the table in the module docstring)."""
    base_shapes = {n: tuple(p.shape) for n, p in base.named_parameters()}
    out = {}
    for name, p in model.named_parameters():
        b = base_shapes.get(name)
        if b is None or len(b) != p.ndim:
            raise ValueError(f"parameter {name}: shape {tuple(p.shape)} has no counterpart in the base model ({b})")
        mult = [d / bd if d != bd else None for d, bd in zip(p.shape, b)]
        inf = [m for m in mult if m is not None]
        ninf = len(inf)
        r_out = (mult[0] or 1.0) if p.ndim >= 1 else 1.0
        r_in = (mult[1] or 1.0) if p.ndim >= 2 else 1.0
        main = next((m for m in reversed(mult) if m is not None), 1.0)
        if ninf == 0:
            kind = "fixed"
        elif name.startswith(readout + ".") and name.endswith("weight"):
            kind = "readout"
        elif ninf >= 2:
            kind = "hidden"
        else:
            kind = "vector"
        out[name] = {"ninf": ninf, "r_in": r_in, "r_out": r_out, "main": main, "kind": kind}
    return out


def _lr_mult(c: dict[str, Any], optimizer: str) -> float:
    if optimizer in ("adam", "adamw"):
        return 1.0 / c["main"] if c["ninf"] >= 2 else 1.0
    if c["ninf"] == 1:
        return c["main"]
    if c["ninf"] >= 2:
        return c["r_out"] / c["r_in"]
    return 1.0


def _std(p: torch.Tensor) -> float | None:
    fan, gain = getattr(p, "_nas_fan", None), getattr(p, "_nas_gain", None)
    return math.sqrt(gain / fan) if fan else None


def apply(model: nn.Module, spec, info, build) -> list[str]:
    """Turn the SP `model` built by `build(spec, info)` into `spec.model.parametrization` in place (init,
    readout multiplier, per-parameter lr multipliers); returns notes (tensors whose SP init is unknown)."""
    m = spec.model
    notes: list[str] = []
    base_width = m.base_width or m.width
    base_spec = dataclasses.replace(spec, model=dataclasses.replace(m, width=base_width, parametrization="weight"))
    with torch.random.fork_rng(devices=[]):
        base = build(base_spec, info)
    readout = READOUT[m.arch]
    kinds = classify(model, base, readout)
    base_params = dict(base.named_parameters())
    with torch.no_grad():
        for name, p in model.named_parameters():
            c = kinds[name]
            mult = _lr_mult(c, spec.train.optimizer)
            if c["kind"] != "fixed":
                now, then = _std(p), _std(base_params[name])
                if now and then:
                    target = then / math.sqrt(c["r_in"]) if c["kind"] == "hidden" else then
                    p.mul_(target / now)
                elif p.ndim >= 2 and p.abs().sum() > 0:
                    notes.append(f"{name}: SP init kept (its init is not one nas_stab records)")
            if c["kind"] == "readout" and m.readout_zero_init:
                p.zero_()
            setattr(p, LR_MULT, mult)
    r_in = next((c["r_in"] for c in kinds.values() if c["kind"] == "readout"), 1.0)
    head = model.get_submodule(readout)
    if r_in != 1.0:
        head.register_forward_pre_hook(lambda _m, args, k=1.0 / r_in: (args[0] * k, *args[1:]))
    head._nas_output_mult = 1.0 / r_in  # for the record (and the tests)
    if m.parametrization == "depth_mup":
        L, L0 = m.depth, (m.base_depth or m.depth)
        dm = math.sqrt(L0 / L)
        tau = getattr(model, "tau", None)
        if tau is not None:
            with torch.no_grad():
                tau.value.mul_(dm)
        if spec.train.optimizer in ("adam", "adamw"):
            for name, p in model.named_parameters():
                if name.startswith("blocks."):
                    setattr(p, LR_MULT, getattr(p, LR_MULT, 1.0) * dm)
    return notes
