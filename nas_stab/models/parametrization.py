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

Supported: muP for the MLP family (`mlp`, `mlp_resnet`), the convolutional `resnet` and the encoder-decoder
`transformer`, Depth-muP for the first three, in weight space; anything else is refused by validation (`check`)
with the reason. A convolution's weight ``[out, in, k, k]`` follows the same rules as a linear one (its kernel dims
do not grow with width), as in the `mup` package: the resnet's stem (3 input channels) is an input weight, its
convolutions hidden weights, its linear head the readout; BatchNorm's and LayerNorm's gains and biases are vectors.

The transformer's width is `model.d_model` (`model.base_width` is the base d_model). muP needs every hidden
dimension to grow with it, so when d_model differs from the base (or is searched) validation requires the FFN
width to scale with d_model (`model.ffn_ratio`) and the head size to be d_model / heads (`model.head_dim` unset):
a fixed FFN would make `fc1` a readout-shaped hidden weight. Its rules, beyond the table:

- The embedding ``[V, d]`` is also the readout (tied, `F.linear(x, embed.weight)`), as the `mup` package's
  `MuSharedReadout`: its init std is the base model's d0^-1/2 (constant in width), the readout reads its input
  times 1/r (`Transformer.readout_mult`), and the embedding's multiplier sqrt(d) becomes the base's sqrt(d0)
  (`Transformer.embed_scale`), so the embedded tokens keep SP's O(1) entries at every width.
- Attention logits are q.k scaled by sqrt(dh0) / dh (`MultiHeadAttention.scale`, dh0 the base head size): TP-V's
  1/dh, equal to SP's 1/sqrt(dh) at the base width (q and k become correlated during training, so q.k grows
  like dh, not sqrt(dh)). The probes' `attn_logit_max` uses the same scale.
- Its projections are Xavier-initialized; the init records each tensor's Xavier std (`transformer_layers._record_xavier`), so
  the hidden rule (std x 1/sqrt(r_in)) is applied exactly as for the recorded He inits (Xavier's std already
  falls like 1/sqrt(r) when both fans grow by r: the factor is then 1 up to the FFN width's rounding).
- `readout_zero_init` is refused: zeroing the tied readout would zero the input embedding.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import nn

from nas_stab.config.schema import Spec
from nas_stab.models.base import Tau
from nas_stab.models.parametrization_rules import DEPTH_ALPHA, WIDTH_FORMS, check, readout, supported, width_key
from nas_stab.models.transformer_layers import MultiHeadAttention

__all__ = ["DEPTH_ALPHA", "EPS_MULT", "LR_MULT", "WIDTH_FORMS", "apply", "check", "classify", "supported", "width_key"]

# u-muP's weight rules (Blake et al. 2024, Table 2; the unit-scaling package's Linear, LinearReadout, optim.Adam): a weight
# of fan-in n is N(0, 1) times a forward multiplier (n^-1/2 for an input or hidden weight, n^-1 for the readout) and
# trains at Adam lr x (n^-1/2 for an input or hidden weight, 1 for the readout); vectors (norm gains) keep init and lr
UMUP_MULT = {"weight": 0.5, "output": 1.0}  # forward multiplier n^-power
UMUP_ADAM_LR = {"weight": 0.5, "output": 0.0}  # Adam lr x n^-power
LR_MULT = "_nas_lr_mult"  # the attribute build_optimizer reads on a parameter (default 1)
EPS_MULT = "_nas_eps_mult"  # Adam's eps multiplier build_optimizer reads on a parameter (default 1)


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
        if name.startswith(readout + ".") and name.endswith("weight"):
            # the readout even at the base width, where none of its dims grow (else readout_zero_init, applied to
            # readouts, skipped the base model: its readout kept its SP init while every wider one started at 0)
            kind = "readout"
        elif ninf == 0:
            kind = "fixed"
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


def apply(model: nn.Module, spec: Spec, info, build) -> list[str]:
    """Turn the SP `model` built by `build(spec, info)` into `spec.model.parametrization` in place (init,
    readout multiplier, per-parameter lr multipliers; the transformer's embedding multiplier and attention
    scale); returns notes (tensors whose SP init is unknown)."""
    m = spec.model
    if m.parametrization == "umup":
        _umup(model, readout(m.arch), m.readout_zero_init, spec.train.batch_size)
        return []
    wkey = width_key(m.arch)
    base_width = m.base_width or getattr(m, wkey)
    width: dict[str, Any] = {wkey: base_width}  # ModelConfig.width or .d_model (dataclasses.replace)
    base_model = dataclasses.replace(m, parametrization="weight", **width)
    with torch.random.fork_rng(devices=[]):
        base = build(dataclasses.replace(spec, model=base_model), info)
    head_name = readout(m.arch)  # the module whose weight is the readout (the transformer's: the tied embedding)
    kinds = classify(model, base, head_name)
    notes = _rescale(model, base, kinds, spec)
    r_in = next((c["r_in"] for c in kinds.values() if c["kind"] == "readout"), 1.0)
    if m.arch == "transformer":
        _transformer_multipliers(model, base, r_in)
    else:
        head = model.get_submodule(head_name)
        if r_in != 1.0:
            head.register_forward_pre_hook(lambda _m, args, k=1.0 / r_in: (args[0] * k, *args[1:]))
        head._nas_output_mult = 1.0 / r_in  # type: ignore[assignment]  # for the record (and the tests); torch's stub: Tensor | Module only
    if m.parametrization in DEPTH_ALPHA:
        _depth_scaling(model, spec, info, build, DEPTH_ALPHA[m.parametrization])
    return notes


def _umup(model: nn.Module, readout: str, zero_readout: bool, batch: int) -> None:
    """u-muP (Blake et al. 2024) in its abc-equivalent form for Adam.

    u-muP's weight W of fan-in n is N(0, 1) and computes c W x with the forward multiplier c (UMUP_MULT), training at
    Adam lr eta x s (UMUP_ADAM_LR). nas_stab stores theta = c W instead: N(0, c^2), the same forward, and Adam
    (invariant to a gradient's scale but for eps) moves theta by c times W's step, i.e. at lr eta x c x s. No base
    width: the rules are absolute in n. Vectors (norm gains, biases) and scalars keep their init and lr (u-muP's
    bias and norm rules are lr x 1).

    Adam's eps: the package's backward passes are unit-scaled, so the gradient its Adam sees is the true gradient of
    theta times a constant k per tensor: its loss's factor (the package's cross entropy sums over the batch and
    scales its backward by V / sqrt(V - 1), V the classes: batch x V / sqrt(V - 1) times the mean's gradient) times
    1 / sqrt(batch) (every weight's and norm gain's gradient scale in the package's Linear and LayerNorm), and for
    everything before the readout also n_r / sqrt(V) (the readout, of fan-in n_r, scales its input's gradient by
    V^-1/2 where its true gradient carries n_r^-1). Each tensor's eps is divided by its k (`EPS_MULT`), so that Adam
    takes the package's steps (tests/test_umup.py checks the trajectory against the package's Adam)."""
    head = model.get_parameter(readout + ".weight")
    V, n_r = head.shape[0], head.shape[1]
    loss_k = batch * V / math.sqrt(V - 1) if V > 1 else float(batch)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 0:
                continue
            k = loss_k / math.sqrt(batch) * (1.0 if p is head else n_r / math.sqrt(V))
            setattr(p, EPS_MULT, 1.0 / k)
            if p.ndim == 1:  # a norm gain or bias: init and lr as they are (u-muP's bias and norm rules: lr x 1)
                continue
            kind = "output" if p is head else "weight"
            fan_in = math.prod(p.shape[1:])
            c = fan_in ** -UMUP_MULT[kind]
            if kind == "output" and zero_readout:
                p.zero_()
            else:
                p.normal_(0.0, c)
            setattr(p, LR_MULT, c * fan_in ** -UMUP_ADAM_LR[kind])


def _rescale(model: nn.Module, base: nn.Module, kinds: dict[str, dict[str, Any]], spec: Spec) -> list[str]:
    """Each parameter's muP init (its SP init times the exact ratio of the target std to its SP std) and its lr
    multiplier; notes for tensors whose SP init is not recorded."""
    notes: list[str] = []
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
            if c["kind"] == "readout" and spec.model.readout_zero_init:
                p.zero_()
            setattr(p, LR_MULT, mult)
    return notes


def _transformer_multipliers(model: nn.Module, base: nn.Module, r: float) -> None:
    """The transformer's forward multipliers: the tied readout reads its input times 1/r (MuSharedReadout), the
    embedding keeps the base model's multiplier sqrt(d0), and every attention scales its logits by sqrt(dh0) / dh
    (TP-V's 1/dh, SP's 1/sqrt(dh) at the base width, where the scale stays None: SDPA's own, bit for bit)."""
    model.readout_mult = 1.0 / r  # type: ignore[assignment]  # Module.__setattr__ takes any value; torch's stub: Tensor | Module
    model.embed_scale = base.embed_scale
    base_modules = dict(base.named_modules())
    for name, mod in model.named_modules():
        if isinstance(mod, MultiHeadAttention):
            dh0 = base_modules[name].dh
            if mod.dh != dh0:
                mod.scale = math.sqrt(dh0) / mod.dh


def _depth_scaling(model: nn.Module, spec: Spec, info, build, alpha: float) -> None:
    """Depth-muP (alpha 1/2) or CompleteP (alpha 1) relative to base_depth: the residual branches times
    (L0 / L)^alpha (through tau) and, with Adam, the blocks' learning rates times (L0 / L)^(1 - alpha), where L
    and L0 count residual blocks (`Tau.L`): the mlp_resnet's depth, the resnet's 3n of depth 6n + 2. CompleteP
    also multiplies the blocks' Adam eps by (L0 / L)^alpha (its Table 1)."""
    m = spec.model
    tau = model.tau
    assert isinstance(tau, Tau), "depth_mup's architectures (supported('depth_mup')) share one Tau"
    L = tau.L
    if m.base_depth is None or m.base_depth == m.depth:
        L0 = L
    else:
        with torch.device("meta"):  # only its block count: no memory, no init
            L0 = build(dataclasses.replace(spec, model=dataclasses.replace(m, depth=m.base_depth, parametrization="weight")),
                       info).tau.L
    ratio = L0 / L
    with torch.no_grad():
        tau.value.mul_(ratio ** alpha)
    if spec.train.optimizer in ("adam", "adamw"):
        for name, p in model.named_parameters():
            if name.startswith("blocks."):
                setattr(p, LR_MULT, getattr(p, LR_MULT, 1.0) * ratio ** (1.0 - alpha))
                if spec.model.parametrization == "completep":
                    setattr(p, EPS_MULT, ratio ** alpha)
