"""`resnet`: the CIFAR ResNet of He et al. (2016), depth 6n + 2, with every knob.

    stem : conv3x3(in -> w), Norm, ReLU
    3 stages of n blocks, widths w, 2w, 4w; the first block of stages 2 and 3
         has stride 2 and an option-A shortcut (subsample + zero channels,
         parameter-free, as in He et al.'s CIFAR models and Fixup's code)
    block: relu(Skip(shortcut(x), tau * sum_k alpha_k B_k(x)))
         B_k = conv3x3 -> Norm -> ReLU -> conv3x3 -> Norm   (C branches as
         one groups=1 conv to C*out channels and one groups=C conv)
    head : global average pool, linear

`block: preact` (He et al.'s pre-activation ResNet): the stem is the conv
alone, each branch is Norm -> ReLU -> conv3x3 -> Norm -> ReLU -> conv3x3,
nothing follows the addition, and a final Norm and ReLU precede the pooling
(see `residual`). L = 3n residual blocks. He fan-out init per branch (the fan of one branch, as
the STAM authors' sqrt(C) correction of grouped convs gives). The stem, the
shortcut and the classifier stay in weight space under `parametrization:
path` (docs/papers.md); the stem uses BN where the branches use path_bn. Fixup: the
stem's and classifier's scalar biases, zero classifier (Fixup's ResNet).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from nas_stab.config.schema import Spec
from nas_stab.models.base import StableModel, Tau, branch_alpha, branch_init_gain, model_tau, record_init, scalar, uses_path, uses_scalar_bias
from nas_stab.models.branches import MultiBranch, fixup_classifier_, he_fan_out_
from nas_stab.models.layers import make_norm
from nas_stab.models.residual import PadShortcut, ResidualBlock
from nas_stab.models.skip import Skip


class CifarResNet(StableModel):
    """Stem, three stages of residual blocks, pooled linear head.

    `branch_layers(cin, planes, stride)` gives one branch's `(kernel, out,
    stride)` layers; `shortcut(cin, cout, stride)` the module where the
    shape changes; `expansion` is out / planes.
    """

    def __init__(self, in_shape, classes: int, cfg, *, per_block: int, branch_layers, shortcut, expansion: int = 1):
        super().__init__()
        w, n = cfg.width, (cfg.depth - 2) // (3 * per_block)
        L = 3 * n
        self.tau = Tau(model_tau(cfg), L, learnable=cfg.tau_learnable)
        self.preact = cfg.block == "preact"
        stem_norm = "none" if self.preact else ("bn" if cfg.norm == "path_bn" else cfg.norm)
        self.stem = nn.Conv2d(in_shape[0], w, 3, padding=1, bias=False)
        he_fan_out_(self.stem.weight)
        self.stem_norm = make_norm(stem_norm, w, conv=True, ln_mode=cfg.ln_mode)
        sb = uses_scalar_bias(cfg)
        self.biases = nn.ParameterList(scalar() for _ in range(2)) if sb else None
        path, alpha = uses_path(cfg), branch_alpha(cfg)
        b = len(branch_layers(w, w, 1))
        gain = branch_init_gain(cfg, b, L)
        self.blocks = nn.ModuleList()
        cin = w
        for s in range(3):
            planes = w * 2 ** s
            cout = planes * expansion
            for i in range(n):
                stride = 2 if s > 0 and i == 0 else 1
                branch = MultiBranch(cin, branch_layers(cin, planes, stride), C=cfg.branches, alpha=alpha,
                                     norm=cfg.norm, path=path, ln_mode=cfg.ln_mode, scalar_bias=sb,
                                     fixup_scale=cfg.init == "fixup", init=cfg.init, gain=gain, L=L,
                                     preact=self.preact)
                skip = Skip(cfg.skip, cout, lam=cfg.skip_lambda, norm=cfg.skip_norm, conv=True, ln_mode=cfg.ln_mode, L=L)
                reshape = stride != 1 or cin != cout
                sc = shortcut(cin, cout, stride) if reshape and cfg.skip != "none" else None
                self.blocks.append(ResidualBlock(branch, skip, self.tau, sc))
                cin = cout
        self.final_norm = make_norm(cfg.norm, cin, conv=True, ln_mode=cfg.ln_mode) if self.preact else None
        self.head = nn.Linear(cin, classes)
        nn.init.normal_(self.head.weight, 0.0, cin ** -0.5)
        record_init(self.head.weight, cin, 1.0)  # its SP init, for muP (parametrization.py)
        nn.init.zeros_(self.head.bias)
        if cfg.init == "fixup":
            fixup_classifier_(self.head)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem_norm(self.stem(x))
        if self.biases is not None:
            h = h + self.biases[0]
        if not self.preact:
            h = F.relu(h)
        for block in self.blocks:
            h = block(h)
        if self.preact:
            assert self.final_norm is not None, "a preact resnet has a final norm"
            h = F.relu(self.final_norm(h))
        h = h.mean((2, 3))
        if self.biases is not None:
            h = h + self.biases[1]
        return self.head(F.dropout(h, self.dropout, self.training))


def _basic(cin: int, planes: int, stride: int):
    return [(3, planes, stride), (3, planes, 1)]


def build_resnet(spec: Spec, info):
    return CifarResNet(info.in_shape, info.classes, spec.model, per_block=2, branch_layers=_basic, shortcut=PadShortcut)
