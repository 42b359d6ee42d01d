"""The plugin's model: an MLP (input layer, `depth` hidden layers of `width`, readout `head`), imported the first
time a run builds `moons_mlp`. Its weights are initialized with `nas_stab.models.base.kaiming_normal_`, which
records each tensor's fan and gain: muP (`model.parametrization: mup`) then rescales them exactly, relative to
the same model at `model.base_width` (docs/plugins.md, "Parametrization roles")."""
from __future__ import annotations

import torch
from torch import nn

from nas_stab.config.schema import Spec
from nas_stab.data.base import DataInfo
from nas_stab.models.base import StableModel, kaiming_normal_


class MoonsMLP(StableModel):
    def __init__(self, d_in: int, width: int, depth: int, classes: int, activation: str):
        super().__init__()
        self.blocks = nn.ModuleList()  # no residual blocks: the probes' per-block norms stay empty
        self.inp = nn.Linear(d_in, width)
        self.hidden = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))
        self.head = nn.Linear(width, classes)
        self.act = nn.ReLU() if activation == "relu" else nn.Tanh()
        gain = 2.0 if activation == "relu" else 1.0
        kaiming_normal_(self.inp.weight, d_in, gain)
        for layer in self.hidden:
            kaiming_normal_(layer.weight, width, gain)
        kaiming_normal_(self.head.weight, width, 1.0)
        for layer in (self.inp, *self.hidden, self.head):
            nn.init.zeros_(layer.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.inp(x.flatten(1)))
        for layer in self.hidden:
            h = self.act(layer(h))
        return self.head(h)


def build(spec: Spec, info: DataInfo) -> MoonsMLP:
    """`model.width`, `model.depth` (hidden layers) and the plugin's own option `model.activation`."""
    d_in = 1
    for d in info.in_shape:
        d_in *= int(d)
    return MoonsMLP(d_in, spec.model.width, spec.model.depth, info.classes, spec.model.options.activation)
