"""What every model offers the training loop and the stability probes."""
from __future__ import annotations

import math

import torch
from torch import nn

from nas_stab.spec.knobs import alpha, parse_tau, tau_value


class StableModel(nn.Module):
    """Base class: `blocks` (residual blocks, in order) and `branch_weights()`."""

    blocks: nn.ModuleList

    def branch_weights(self) -> list[tuple[str, nn.Parameter]]:
        """Weights of the residual branches (default: every matrix in `blocks`)."""
        out = []
        for i, b in enumerate(self.blocks):
            for n, p in b.named_parameters():
                if p.ndim >= 2:
                    out.append((f"blocks.{i}.{n}", p))
        return out


def branch_alpha(model_cfg) -> float:
    """The aggregation weight alpha for this configuration."""
    return alpha(model_cfg.aggregation, model_cfg.branches, model_cfg.aggregation_base, model_cfg.alpha_scale)


class Tau(nn.Module):
    """The residual scale tau, shared by all blocks.

    Fixed: a buffer. Learnable: ONE 0-d parameter shared by every block; each
    block's use contributes to its gradient, and a hook divides the total by
    the number of blocks L, so its gradient is the average of the per-block
    gradients (the tau paper's code).
    """

    def __init__(self, tau, L: int):
        super().__init__()
        form, learnable = parse_tau(tau)
        value = torch.tensor(tau_value(form, L), dtype=torch.float32)
        self.learnable = learnable
        self.L = L
        if learnable:
            self.value = nn.Parameter(value)
            self.value.register_hook(lambda g: g / L)
        else:
            self.register_buffer("value", value)

    def forward(self) -> torch.Tensor:
        return self.value

    def extra_repr(self) -> str:
        return f"value={float(self.value):.4g}, learnable={self.learnable}, L={self.L}"


def kaiming_normal_(w: torch.Tensor, fan: int, gain: float = 2.0) -> torch.Tensor:
    """N(0, gain / fan) in place."""
    with torch.no_grad():
        return w.normal_(0.0, math.sqrt(gain / fan))
