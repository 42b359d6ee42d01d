"""`mlp` (plain feed-forward) and `mlp_resnet` (the ResNet of the tau paper).

mlp_resnet, with L = `depth` residual blocks (Zhang et al., Section 2)::

    h0 = relu(A x)
    h_l = relu(h_{l-1} + tau * alpha * sum_k F_k(h_{l-1}))    l = 1..L
    h = relu(W h_L);  y = B h

F_k is branch k: one linear map (`branch_depth: 1`, the tau paper) or b
linear maps with ReLUs between them (STAM's depth-b branches). All C branches
run as one matmul (first layer) and batched matmuls (later layers), never a
Python loop over branches. Init: N(0, 2/m) for A, W and the branches,
N(0, 2/d) for B (d = classes), as in the tau paper.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from nas_stab.models import ARCHS
from nas_stab.models.base import StableModel, Tau, branch_alpha, kaiming_normal_


class MultiBranch(nn.Module):
    """C parallel ReLU branches of depth b, m -> m, computed as batched matmuls.

    Returns the aggregated output alpha * sum_k F_k(x).
    """

    def __init__(self, width: int, branches: int, depth: int, alpha: float):
        super().__init__()
        self.C, self.b, self.m, self.alpha = branches, depth, width, alpha
        # first layer of every branch stacked: one [C*m, m] matmul
        self.first = nn.Parameter(torch.empty(branches * width, width))
        # later layers: block-diagonal, one [C, m, m] batched matmul each
        self.rest = nn.ParameterList(nn.Parameter(torch.empty(branches, width, width)) for _ in range(depth - 1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        kaiming_normal_(self.first, self.m)
        for w in self.rest:
            kaiming_normal_(w, self.m)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        h = F.linear(x, self.first)  # [n, C*m]
        if self.b > 1:
            h = h.view(n, self.C, self.m).transpose(0, 1)  # [C, n, m]
            for w in self.rest:
                h = torch.bmm(F.relu(h), w.transpose(1, 2))
            return h.sum(0) * self.alpha
        return h.view(n, self.C, self.m).sum(1) * self.alpha


class ResBlock(nn.Module):
    def __init__(self, width: int, branches: int, branch_depth: int, alpha: float, tau: Tau):
        super().__init__()
        self.branch = MultiBranch(width, branches, branch_depth, alpha)
        self.tau = tau  # shared module: one tau for all blocks

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return F.relu(h + self.tau() * self.branch(h))


class MLPResNet(StableModel):
    def __init__(self, in_dim: int, classes: int, cfg):
        super().__init__()
        m, L = cfg.width, cfg.depth
        self.A = nn.Linear(in_dim, m, bias=False)
        self.tau = Tau(cfg.tau, L)
        a = branch_alpha(cfg)
        self.blocks = nn.ModuleList(ResBlock(m, cfg.branches, cfg.branch_depth, a, self.tau) for _ in range(L))
        self.W = nn.Linear(m, m, bias=False)
        self.B = nn.Linear(m, classes, bias=False)
        kaiming_normal_(self.A.weight, m)
        kaiming_normal_(self.W.weight, m)
        kaiming_normal_(self.B.weight, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.A(x.flatten(1)))
        for block in self.blocks:
            h = block(h)
        return self.B(F.relu(self.W(h)))


class Layer(nn.Module):
    def __init__(self, i: int, o: int):
        super().__init__()
        self.linear = nn.Linear(i, o)
        kaiming_normal_(self.linear.weight, i)
        nn.init.zeros_(self.linear.bias)

    def forward(self, x):
        return F.relu(self.linear(x))


class MLP(StableModel):
    """Plain feed-forward: `depth` hidden ReLU layers of `width`; the layers are its `blocks`."""

    def __init__(self, in_dim: int, classes: int, cfg):
        super().__init__()
        dims = [in_dim] + [cfg.width] * cfg.depth
        self.blocks = nn.ModuleList(Layer(i, o) for i, o in zip(dims[:-1], dims[1:]))
        self.head = nn.Linear(dims[-1], classes)
        nn.init.normal_(self.head.weight, 0.0, 1.0 / math.sqrt(dims[-1]))
        nn.init.zeros_(self.head.bias)

    def forward(self, x):
        h = x.flatten(1)
        for b in self.blocks:
            h = b(h)
        return self.head(h)


def _not_yet(spec, allowed: dict) -> tuple[tuple, str] | None:
    m = spec.model
    for key, ok in allowed.items():
        v = getattr(m, key)
        if v not in ok:
            return ("model", key), f"{key}: {v!r} is not supported yet on {m.arch} (supported: {', '.join(map(str, ok))})"
    return None


def _check_mlp(spec):
    m = spec.model
    if m.branches != 1:
        return ("model", "branches"), "mlp has no residual branches; use arch mlp_resnet for branches > 1"
    return _not_yet(spec, {"skip": ("plain",), "norm": ("none",), "parametrization": ("weight",), "init": ("kaiming",)})


def _check_mlp_resnet(spec):
    return _not_yet(spec, {"skip": ("plain",), "norm": ("none",), "parametrization": ("weight",), "init": ("kaiming",)})


@ARCHS.register("mlp", task="classification", check=_check_mlp, doc="plain feed-forward ReLU network")
def build_mlp(spec, info):
    return MLP(math.prod(info.in_shape), info.classes, spec.model)


@ARCHS.register("mlp_resnet", task="classification", check=_check_mlp_resnet, doc="the tau paper's ResNet, multi-branch")
def build_mlp_resnet(spec, info):
    return MLPResNet(math.prod(info.in_shape), info.classes, spec.model)
