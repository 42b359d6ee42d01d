"""What every model offers the training loop and the stability probes, and the
small shared pieces: the shared residual scale `Tau`, aggregation weight,
initialization gains of the papers.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from nas_stab.config.knobs import alpha, parse_tau, tau_form, tau_value


class Tap(nn.Module):
    """A no-op marker inside a block: returns its first argument unchanged.

    The stability probes hook it to see an intermediate value that is not a
    module's output: the residual stream before the normalization that
    follows the addition (`stream`), the scaled branch sum (`branch`), the
    attention queries and keys (`logits`: called as tap(q, k, mask, causal)).
    No parameters, no buffers, no cost when nothing is hooked.
    """

    def forward(self, x, *context):
        return x


class StableModel(nn.Module):
    """Base class: `blocks` (residual blocks, in order) and `branch_weights()`."""

    blocks: nn.ModuleList

    def branch_weights(self) -> list[tuple[str, nn.Parameter]]:
        """Weights of the residual branches: every matrix or kernel in `blocks`
        except shortcut projections and skip norms (they are not branches)."""
        out = []
        for i, b in enumerate(self.blocks):
            for n, p in b.named_parameters():
                if p.ndim >= 2 and not n.startswith(("shortcut.", "skip.")):
                    out.append((f"blocks.{i}.{n}", p))
        return out


def branch_alpha(model_cfg) -> float:
    """The aggregation weight alpha for this configuration."""
    return alpha(model_cfg.aggregation, model_cfg.branches, model_cfg.aggregation_base, model_cfg.alpha_scale,
                 getattr(model_cfg, "aggregation_exponent", None))


def model_tau(model_cfg):
    """The tau form of this configuration (`model.tau`, or L^-p with `model.tau_exponent`)."""
    return tau_form(model_cfg.tau, getattr(model_cfg, "tau_exponent", None))


class Tau(nn.Module):
    """The residual scale tau, shared by all blocks.

    Fixed: a buffer. Learnable (`tau: {init: ..., learnable: true}` or
    `tau_learnable: true`): ONE 0-d parameter shared by every block; each
    block's use contributes to its gradient, scaled by 1/L, so its gradient
    is the average of the per-block gradients (the tau paper's code).
    """

    value: torch.Tensor  # a buffer, or the parameter when learnable

    def __init__(self, tau, L: int, *, learnable: bool = False):
        super().__init__()
        form, learnable_form = parse_tau(tau)
        learnable = learnable or learnable_form
        value = torch.tensor(tau_value(form, L), dtype=torch.float32)
        self.learnable = learnable
        self.L = L
        if learnable:
            self.value = nn.Parameter(value)
        else:
            self.register_buffer("value", value)

    def forward(self) -> torch.Tensor:
        if not self.learnable:
            return self.value
        # value in the forward pass, gradient scaled by 1/L: summed over the L
        # blocks that use it, the parameter receives the average. Written into
        # the graph (not a tensor hook) so it survives deepcopy and pickling.
        v = self.value
        return v / self.L + (v * (1.0 - 1.0 / self.L)).detach()

    def extra_repr(self) -> str:
        return f"value={float(self.value):.4g}, learnable={self.learnable}, L={self.L}"


def record_init(w: torch.Tensor, fan: float, gain: float) -> None:
    """Record on `w` that its SP init has variance gain / fan (`_nas_fan`, `_nas_gain`): the muP rescaling
    (`parametrization.py`) needs each tensor's SP std exactly, not a sample estimate."""
    w._nas_fan, w._nas_gain = fan, gain  # type: ignore[attr-defined]  # a Tensor takes new attributes at run time


def kaiming_normal_(w: torch.Tensor, fan: int, gain: float = 2.0) -> torch.Tensor:
    """N(0, gain / fan) in place, its fan and gain recorded on the tensor (`record_init`)."""
    record_init(w, fan, gain)
    with torch.no_grad():
        return w.normal_(0.0, math.sqrt(gain / fan))


def scalar() -> nn.Parameter:
    """A 0-d parameter initialized to 0 (Fixup bias). 0-d parameters train at
    `train.scalar_lr_mult` x lr (the optimizer builder picks them by ndim)."""
    return nn.Parameter(torch.zeros(()))


def uses_path(cfg) -> bool:
    """`norm: path_bn` implies the path-space parametrization."""
    return cfg.parametrization == "path" or cfg.norm == "path_bn"


def uses_scalar_bias(cfg) -> bool:
    return cfg.init == "fixup" if cfg.scalar_bias is None else bool(cfg.scalar_bias)


def deepnorm_constants(enc_layers: float, dec_layers: int = 0) -> dict[str, tuple[float, float]]:
    """DeepNet's (alpha, beta) per stack: {"enc": (alpha, beta)} and, with decoder layers, "dec".

    Encoder only (N layers of 2 sublayers each, attention + FFN): alpha = (2N)^(1/4),
    beta = (8N)^(-1/4). Encoder-decoder (N encoder, M decoder layers): encoder
    alpha = 0.81 (N^4 M)^(1/16), beta = 0.87 (N^4 M)^(-1/16); decoder alpha = (3M)^(1/4),
    beta = (12M)^(-1/4). A residual block of a vision model is one sublayer with two
    weight layers, like an FFN, so a stack of L blocks is N = L / 2 layers:
    alpha = L^(1/4), beta = (4L)^(-1/4).
    """
    N, M = enc_layers, dec_layers
    if not M:
        return {"enc": ((2 * N) ** 0.25, (8 * N) ** -0.25)}
    return {
        "enc": (0.81 * (N**4 * M) ** (1 / 16), 0.87 * (N**4 * M) ** (-1 / 16)),
        "dec": ((3 * M) ** 0.25, (12 * M) ** -0.25),
    }


def branch_init_gain(cfg, b: int, L: int) -> float:
    """Multiplier of the (Kaiming) init of every residual-branch weight.

    stam_forward: C^(-1/(2b)) keeps the forward norm of a sum of C branches of
    depth b flat (STAM, Appendix A.4); stam_update: (bC)^(-1/(2(b-1))) keeps the
    per-step output update flat instead (needs b >= 2); deepnorm (the init, or
    `skip: deepnorm`): DeepNet's beta. Fixup and zero_last are applied per
    layer by the branch module (they zero the last layer).
    """
    C = cfg.branches
    if cfg.init == "stam_forward":
        return C ** (-1.0 / (2 * b))
    if cfg.init == "stam_update":
        return (b * C) ** (-1.0 / (2 * (b - 1)))
    if cfg.init == "deepnorm" or cfg.skip == "deepnorm":
        return deepnorm_constants(L / 2)["enc"][1]
    return 1.0
