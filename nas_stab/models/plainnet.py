"""`plainnet`: a CNN without skips, `depth` 3x3 conv layers (the stacked CNN
of the Path-BN paper's Figure 4; He et al.'s CIFAR "plain" baselines).

    layer i: relu(Norm(conv3x3(h)))       i = 0..depth-1
    `stages` S (default 3): layer i is in stage s = floor(S i / depth), with
    width * 2^s channels; the first layer of each stage s > 0 has stride 2.
    S = 3: widths w, 2w, 4w (He et al.); S = 1: every layer w channels at
    stride 1 (the Path-BN paper's constant-width stacked CNN); a net of fewer
    than S layers has one layer per stage
    head: global average pool, linear

Each conv layer is one of `blocks`. In path space the chains are the runs of
same-width stride-1 layers; the first layer (from the input channels, modulo
pairing) and each stage's first layer start a chain and use ordinary BN under
path_bn (docs/papers.md). With one stage the whole net is ONE chain: layer 0
(input channels -> w) is its head, layers 1..depth-1 its ratio layers.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nas_stab.config.schema import Spec
from nas_stab.models.base import StableModel, uses_path
from nas_stab.models.stack import build_stack


def stage_dims(depth: int, width: int, stages: int = 3) -> list[tuple[int, int, int]]:
    """(kernel, out, stride) of each layer: stage of layer i is floor(stages i / depth)."""
    dims, prev = [], 0
    for i in range(depth):
        s = min(stages - 1, stages * i // depth)
        dims.append((3, width * 2 ** s, 2 if s > prev else 1))
        prev = s
    return dims


class PlainNet(StableModel):
    def __init__(self, in_shape, classes: int, cfg):
        super().__init__()
        dims = stage_dims(cfg.depth, cfg.width, cfg.stages)
        self.blocks = build_stack(dims, in_shape[0], conv=True, norm=cfg.norm, path=uses_path(cfg), ln_mode=cfg.ln_mode,
                                  layer_skip=cfg.layer_skip)
        cout = dims[-1][1]
        self.head = nn.Linear(cout, classes)
        nn.init.normal_(self.head.weight, 0.0, cout ** -0.5)
        nn.init.zeros_(self.head.bias)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x
        for b in self.blocks:
            h = b(h)
        return self.head(F.dropout(h.mean((2, 3)), self.dropout, self.training))


def build_plainnet(spec: Spec, info):
    return PlainNet(info.in_shape, info.classes, spec.model)
