"""`resnext`: the STAM authors' CIFAR ResNeXt, depth 9n + 2, L = 3n blocks.

Their bottleneck (docs/papers.md, STAM section): a 1x1 conv with groups=1 to
`planes*C` channels, a 3x3 conv with groups=C (stride 2 at the first block of
stages 2 and 3), a 1x1 conv with groups=C to `4*planes*C` channels, each
followed by a norm over all of those channels (one BN over the grouped
channels IS a separate BN per branch), then the C chunks are weighted by
alpha and summed (their `alpha_scale / sqrt(C)` is `aggregation: stam,
alpha_scale: 0.3`; we weight each branch before summing, as their broken
non-uniform option meant to), the shortcut (a 1x1 conv + norm where the shape
changes, never scaled) is added and a ReLU applied (`block: preact`: norm
and ReLU before each conv, the shortcut a plain 1x1 conv of the
pre-activated input, nothing after the addition; see `resnet`). He fan-out init of the
fan of one branch (their sqrt(C) correction of the grouped convs).

Widths: stem `width` channels; stage s has `planes = width * 2^s` per branch
and `4 * planes` output channels (Xie et al.'s ResNeXt-29 is depth 29,
width 64; the STAM experiments vary C at fixed planes, i.e. C copies).
"""
from __future__ import annotations

from nas_stab.config.schema import Spec
from nas_stab.models.layers import make_norm
from nas_stab.models.residual import ProjectionShortcut
from nas_stab.models.resnet import CifarResNet


def _bottleneck(cin: int, planes: int, stride: int):
    return [(1, planes, 1), (3, planes, stride), (1, 4 * planes, 1)]


def build_resnext(spec: Spec, info):
    cfg = spec.model
    sc_norm = "none" if cfg.block == "preact" else ("bn" if cfg.norm == "path_bn" else cfg.norm)

    def shortcut(cin, cout, stride):
        return ProjectionShortcut(cin, cout, stride, make_norm(sc_norm, cout, conv=True, ln_mode=cfg.ln_mode))

    return CifarResNet(info.in_shape, info.classes, cfg, per_block=3, branch_layers=_bottleneck,
                       shortcut=shortcut, expansion=4)
