"""A plain stack of ReLU layers (mlp, plainnet): no skips, one branch.

Each layer is one of the model's `blocks`:  h = relu(Norm(W h)).
In path space the whole stack is one chain per run of ch -> ch stride-1
layers (the Path-BN paper's plain networks: the first layer holds the path
values, every later layer the ratios with a constant diagonal); with
`path_bn` a chain layer computes relu(BN(off-diagonal part) + h) (equation
10), a head relu(BN(W h)). `layer_skip` (weight space) gives each layer that
would continue a chain the same identity path: relu(Norm(W h) + h), so a
Path-BN net can be compared with a weight-space net of the same skips.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nas_stab.models.base import kaiming_normal_
from nas_stab.models.layers import Layer, continues_chain, make_norm


class PlainLayer(nn.Module):
    def __init__(self, layer: Layer, norm: nn.Module, *, path_bn: bool, bias: bool, skip: bool = False):
        super().__init__()
        self.layer = layer
        self.norm = norm
        self.path_bn = path_bn
        self.skip = skip  # weight space: relu(Norm(W h) + h), the identity path of a Path-BN layer
        self.bias = nn.Parameter(torch.zeros(layer.cout)) if bias else None

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        y = self.layer(h)
        if self.bias is not None:
            y = y + self.bias.view(1, -1, *([1] * (y.ndim - 2)))
        if self.layer.ratio and not self.path_bn:
            y = self.norm(y + h)
        elif self.layer.ratio or self.skip:  # a Path-BN ratio layer, or a weight-space skip
            y = self.norm(y) + h
        else:
            y = self.norm(y)
        return F.relu(y)


def build_stack(dims: list[tuple[int, int, int]], cin: int, *, conv: bool, norm: str, path: bool,
                ln_mode: str = "chw", bias: bool = False, layer_skip: bool = False) -> nn.ModuleList:
    """Layers `(kernel, out, stride)` from `cin` input channels, He fan-out init
    (`path`: diagonal path values 1, as the Path-BN paper initializes them;
    `layer_skip`, weight space only: an identity skip wherever a chain would continue)."""
    if layer_skip and path:
        raise ValueError("layer_skip is the weight-space control; in path space the chain layers carry the identity")
    blocks = nn.ModuleList()
    head, ch = None, cin
    for i, (k, out, stride) in enumerate(dims):
        cont = path and i > 0 and continues_chain(ch, out, stride)
        layer = Layer(ch, out, conv=conv, k=k, stride=stride, path=path, head=head if cont else None)
        if path and not cont:
            head = layer
        kaiming_normal_(layer.weight, layer.fan_out())
        if path:
            layer.init_path_diagonal()
        kind = "bn" if (norm == "path_bn" and not layer.ratio) else norm
        skip = layer_skip and i > 0 and continues_chain(ch, out, stride)
        blocks.append(PlainLayer(layer, make_norm(kind, out, conv=conv, ln_mode=ln_mode), path_bn=norm == "path_bn",
                                 bias=bias, skip=skip))
        ch = out
    return blocks
