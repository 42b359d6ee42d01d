"""The residual block shared by mlp_resnet, resnet and resnext:

    post   : out = relu(Skip(shortcut(x), tau * sum_k alpha_k B_k(x)))
    preact : a = relu(Norm(x));  out = Skip(s, tau * sum_k alpha_k B_k(a))
             with s = x, or shortcut(a) where the shape changes

`preact` is He et al.'s pre-activation block ("Identity Mappings in Deep
Residual Networks", 2016): nothing after the addition, and a reshaping
shortcut reads the pre-activated input (their `both_preact` blocks).

tau is the one `Tau` module shared by all blocks (the tau paper); the
shortcut is never scaled (STAM's ResNeXt: alpha multiplies the branches
only); a downsampling block's shortcut is the one the architecture chooses
and plays x in the skip (docs/papers.md, rSkip decision).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nas_stab.models.base import Tau
from nas_stab.models.branches import MultiBranch
from nas_stab.models.skip import Skip


class ResidualBlock(nn.Module):
    _tau: Tau  # set in __init__ past nn.Module's registration

    def __init__(self, branch: MultiBranch, skip: Skip, tau: Tau, shortcut: nn.Module | None = None):
        super().__init__()
        self.branch = branch
        self.skip = skip
        self.shortcut = shortcut if shortcut is not None else nn.Identity()
        object.__setattr__(self, "_tau", tau)  # shared: registered once, on the model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.branch.preact:
            return self._preact(x)
        f = self._tau() * self.branch(x)
        if self.skip.kind == "none":
            return F.relu(self.skip(x, f))  # f itself (through the probes' taps)
        return F.relu(self.skip(self.shortcut(x), f))

    def _preact(self, x: torch.Tensor) -> torch.Tensor:
        a = self.branch.preactivate(x)
        f = self._tau() * self.branch(a, preactivated=True)
        if self.skip.kind == "none":
            return f
        s = x if isinstance(self.shortcut, nn.Identity) else self.shortcut(a)
        return self.skip(s, f)


class PadShortcut(nn.Module):
    """CIFAR ResNet option A (He et al. 2016): subsample by `stride` and pad the
    new channels with zeros. Parameter-free, so the shortcut stays an identity."""

    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.cin, self.cout, self.stride = cin, cout, stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride > 1:
            x = x[:, :, :: self.stride, :: self.stride]
        if self.cout > self.cin:
            x = F.pad(x, (0, 0, 0, 0, 0, self.cout - self.cin))
        return x

    def extra_repr(self) -> str:
        return f"{self.cin}->{self.cout}, stride={self.stride}"


class ProjectionShortcut(nn.Sequential):
    """1x1 convolution (+ norm) where the shape changes (ResNeXt's shortcut; the
    pre-activation block passes an Identity norm: its input is already normalized)."""

    def __init__(self, cin: int, cout: int, stride: int, norm: nn.Module):
        conv = nn.Conv2d(cin, cout, 1, stride=stride, bias=False)
        nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
        super().__init__(conv, norm)
