"""Every built-in architecture's registry entry (`ARCHS`, keyed by the YAML `model.arch`): where its builder lives,
the task it serves, what `nas-stab list` says of it, its check (`models/checks.py`: which knob values it
accepts), and its parametrization roles: the width parametrizations it supports (`parametrizations`, of
`parametrization_rules.WIDTH_FORMS`), the module whose weight is its readout (`readout`) and the model key its width
is (`width_key`, default width). The builders (torch) are imported the first time a model is built (`Registry.declare`), so validating an
experiment reads these entries and nothing else. A plugin architecture declares itself the same way.
"""
from __future__ import annotations

from nas_stab.models import checks
from nas_stab.models.archs import ARCHS

ARCHS.declare("mlp", "nas_stab.models.mlp:build_mlp", task="classification", check=checks.check_mlp,
              parametrizations=("mup", "depth_mup"), readout="head", doc="plain feed-forward ReLU network")
ARCHS.declare("mlp_resnet", "nas_stab.models.mlp:build_mlp_resnet", task="classification",
              check=checks.check_mlp_resnet, parametrizations=("mup", "depth_mup", "completep", "umup"), readout="B",
              doc="the tau paper's ResNet, multi-branch")
ARCHS.declare("plainnet", "nas_stab.models.plainnet:build_plainnet", task="classification", check=checks.check_plainnet,
              doc="CNN without skips, depth conv layers in `stages` stages (3: widths w, 2w, 4w; 1: constant width)")
ARCHS.declare("resnet", "nas_stab.models.resnet:build_resnet", task="classification", check=checks.check_resnet,
              parametrizations=("mup", "depth_mup", "completep"), readout="head", doc="CIFAR ResNet (depth 6n+2), multi-branch basic blocks")
ARCHS.declare("resnext", "nas_stab.models.resnext:build_resnext", task="classification", check=checks.check_resnext,
              doc="the STAM authors' CIFAR ResNeXt (depth 9n+2): grouped bottlenecks, alpha on the branch sum")
ARCHS.declare("transformer", "nas_stab.models.transformer:build_transformer", task="translation",
              check=checks.check_transformer, parametrizations=("mup",), readout="embed", width_key="d_model",
              doc="encoder-decoder Transformer; heads and FFN slices are the branches (STAM)")
