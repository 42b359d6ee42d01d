"""`mlp` (plain feed-forward) and `mlp_resnet` (the ResNet of the tau paper).

mlp_resnet, with L = `depth` residual blocks (Zhang et al., Section 2)::

    h0  = relu(A x)
    h_l = relu(Skip(h_{l-1}, tau * sum_k alpha_k F_k(h_{l-1})))    l = 1..L
    y   = B relu(W h_L)

F_k is branch k: one linear map (`branch_depth: 1`, the tau paper) or b
linear maps with ReLUs between them (STAM's depth-b branches), each followed
by `norm`. All C branches run as one matmul (first layer) and batched
matmuls (later layers), never a Python loop over branches. Init: N(0, 2/m)
for A, W and the branch layers followed by a ReLU; the last branch layer
N(0, 2/m) when b = 1 (the tau paper) and N(0, 1/m) when b >= 2 (STAM's
Kaiming init, Section 3.1, under which Theorem 1's ||N(h)|| ~
sqrt(sum alpha^2) ||h|| holds exactly); B is N(0, 2/d), d = classes.

The paper's init assumes ||x|| = 1 (`task.dataset.normalize: unit`), so that
||h0|| ~ 1 and the logits start small. Two calibrations keep that scale
elsewhere (docs/papers.md): with `normalize: standard` (E||x||^2 ~ D, the
input dimension) A is N(0, 2/(m D)), the paper's A applied to x / sqrt(D);
with a skip that normalizes the stream (xskip_ln, rskip_ln, deepnorm: every
unit of h_L has variance ~1, ||h_L||^2 ~ m) B is N(0, 2/(d m)). Without
them MNIST starts at a loss of 20-70 for 10 classes.

`block: preact` (Tensor Programs VI, Bordelon et al. 2023: nothing nonlinear
on the residual stream)::

    h0  = A x
    h_l = h_{l-1} + tau * sum_k alpha_k F_k(relu(Norm(h_{l-1})))    l = 1..L
    y   = B relu(W relu(Norm(h_L)))

`init: fan_in` (the standard parametrization of Tensor Programs V): every
weight N(0, gain / fan_in), gain 2 before a ReLU (A, W, the branch layers)
and 1 on the readout B: A is N(0, 2/D) and B N(0, 1/m), where the tau
paper's init (`kaiming`) has A N(0, 2/m) (fan-out, or 2/(m D) on standard
inputs) and B N(0, 2/d). Under it hidden units keep O(1) entries at every
width; under the tau paper's they shrink like m^-1/2 (||h|| ~ 1).

mlp: `depth` hidden layers relu(Norm(W h + b)) of `width`, the same fan-out
init; the hidden layers are its `blocks`. `layer_skip`: layers 2..depth are
relu(Norm(W h + b) + h), the identity path of a Path-BN layer in weight space. Biases only in weight space without
a norm (a norm brings its own shift; path space is bias-free).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from nas_stab.config.schema import Spec
from nas_stab.models.base import StableModel, Tau, branch_alpha, branch_init_gain, kaiming_normal_, model_tau, scalar, uses_path, uses_scalar_bias
from nas_stab.models.branches import MultiBranch, fixup_classifier_
from nas_stab.models.layers import make_norm
from nas_stab.models.residual import ResidualBlock
from nas_stab.models.skip import Skip
from nas_stab.models.stack import build_stack

NORMED_STREAM = ("xskip_ln", "rskip_ln", "deepnorm")


class MLPResNet(StableModel):
    def __init__(self, in_dim: int, classes: int, cfg, *, unit_inputs: bool = False):
        super().__init__()
        m, L, b = cfg.width, cfg.depth, cfg.branch_depth
        self.preact = cfg.block == "preact"
        self.A = nn.Linear(in_dim, m, bias=False)
        self.tau = Tau(model_tau(cfg), L, learnable=cfg.tau_learnable)
        path = uses_path(cfg)
        self.blocks = nn.ModuleList()
        for _ in range(L):
            branch = MultiBranch(
                m, [(0, m, 1)] * b, C=cfg.branches, alpha=branch_alpha(cfg), norm=cfg.norm, path=path,
                scalar_bias=uses_scalar_bias(cfg), fixup_scale=cfg.init == "fixup", init=cfg.init,
                gain=branch_init_gain(cfg, b, L), last_gain=2.0 if b == 1 else 1.0, L=L, preact=self.preact)
            skip = Skip(cfg.skip, m, lam=cfg.skip_lambda, norm=cfg.skip_norm, L=L)
            self.blocks.append(ResidualBlock(branch, skip, self.tau))
        self.final_norm = make_norm(cfg.norm, m, conv=False) if self.preact else None
        self.W = nn.Linear(m, m, bias=False)
        self.B = nn.Linear(m, classes, bias=False)
        fan_in = cfg.init == "fan_in"  # TP-V's SP: every weight by its fan-in (He's gain 2 before a ReLU, 1 on the readout)
        kaiming_normal_(self.A.weight, in_dim if fan_in else m * (1 if unit_inputs else in_dim))  # the paper's A on x / E||x||
        kaiming_normal_(self.W.weight, m)
        if fan_in:
            kaiming_normal_(self.B.weight, m, gain=1.0)
        else:
            kaiming_normal_(self.B.weight, classes * (m if cfg.skip in NORMED_STREAM else 1))
        self.biases = nn.ParameterList(scalar() for _ in range(2)) if uses_scalar_bias(cfg) else None
        if cfg.init == "fixup":
            fixup_classifier_(self.B)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.A(x.flatten(1))
        if self.biases is not None:
            h = h + self.biases[0]
        if not self.preact:  # the pre-activation stream stays linear: each branch applies its own relu
            h = F.relu(h)
        for block in self.blocks:
            h = block(h)
        if self.final_norm is not None:
            h = F.relu(self.final_norm(h))
        h = F.relu(self.W(h))
        if self.biases is not None:
            h = h + self.biases[1]
        return self.B(F.dropout(h, self.dropout, self.training))


class MLP(StableModel):
    """Plain feed-forward: `depth` hidden ReLU layers of `width`; the layers are its `blocks`."""

    def __init__(self, in_dim: int, classes: int, cfg):
        super().__init__()
        path = uses_path(cfg)
        self.blocks = build_stack([(1, cfg.width, 1)] * cfg.depth, in_dim, conv=False, norm=cfg.norm, path=path,
                                  bias=cfg.norm == "none" and not path, layer_skip=cfg.layer_skip)
        self.head = nn.Linear(cfg.width, classes)
        kaiming_normal_(self.head.weight, cfg.width, gain=1.0)  # N(0, 1/width)
        nn.init.zeros_(self.head.bias)
        self.dropout = cfg.dropout

    def forward(self, x):
        h = x.flatten(1)
        for b in self.blocks:
            h = b(h)
        return self.head(F.dropout(h, self.dropout, self.training))


def build_mlp(spec: Spec, info):
    return MLP(math.prod(info.in_shape), info.classes, spec.model)


def build_mlp_resnet(spec: Spec, info):
    return MLPResNet(math.prod(info.in_shape), info.classes, spec.model,
                     unit_inputs=spec.task.dataset.normalize == "unit")
