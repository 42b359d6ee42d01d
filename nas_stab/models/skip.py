"""The skip connection of a residual block: how the shortcut x and the
(scaled, aggregated) branch output f are combined.

    plain     x + f
    none      f
    xskip     lambda x + f                       (xSkip)
    xskip_ln  Norm(lambda x + f)                 (xSkip+LN)
    rskip_ln  y1 = Norm1(x + f); yk = Normk(x + y(k-1)), k = 2..lambda   (rSkip+LN)
    deepnorm  LN(a x + f), a = L^(1/4)           (DeepNet's DeepNorm, see base.deepnorm_constants)

Every Norm has its own affine. Norm is `skip_norm`: ln (default; for CNNs,
per docs/papers.md, each sample over (channels, H, W) with a per-channel affine, or
channel-only with `ln_mode: channel`) or bn. With lambda = 1, xskip_ln and
rskip_ln are both the post-LN block Norm(x + f). ReLU networks apply their
ReLU to the output of this module.
"""
from __future__ import annotations

import torch
from torch import nn

from nas_stab.models.base import Tap, deepnorm_constants
from nas_stab.models.layers import make_norm

NORMED = ("xskip_ln", "rskip_ln", "deepnorm")


class Skip(nn.Module):
    def __init__(self, kind: str, ch: int, *, lam: float = 1.0, norm: str = "ln", conv: bool = False,
                 ln_mode: str = "chw", L: int = 1):
        super().__init__()
        self.kind = kind
        if kind == "deepnorm":
            self.lam = deepnorm_constants(L / 2)["enc"][0]
        else:
            self.lam = float(lam)
        count = int(lam) if kind == "rskip_ln" else (1 if kind in NORMED else 0)
        self.norms = nn.ModuleList(make_norm(norm, ch, conv=conv, ln_mode=ln_mode) for _ in range(count))
        # probe taps (no-ops): the scaled branch sum f, and the stream before the last Norm
        self.branch_tap, self.stream_tap = Tap(), Tap()

    def forward(self, x: torch.Tensor, f: torch.Tensor) -> torch.Tensor:
        k = self.kind
        f = self.branch_tap(f)
        if k == "plain":
            return self.stream_tap(x + f)
        if k == "none":
            return self.stream_tap(f)
        if k == "xskip":
            return self.stream_tap(self.lam * x + f)
        if k in ("xskip_ln", "deepnorm"):
            return self.norms[0](self.stream_tap(self.lam * x + f))
        y = x + f  # rskip_ln: the stream tapped is the input of the last Norm
        for i, norm in enumerate(self.norms):
            y = norm(self.stream_tap(y) if i == len(self.norms) - 1 else y)
            if i < len(self.norms) - 1:
                y = x + y
        return y

    def extra_repr(self) -> str:
        return f"{self.kind}, lambda={self.lam:.4g}"
