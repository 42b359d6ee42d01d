"""Every built-in architecture's registry entry (`ARCHS`, keyed by the YAML `model.arch`): where its builder lives,
the task it serves, what `nas-stab list` says of it, and its check (`models/checks.py`: which knob values it
accepts). The builders (torch) are imported the first time a model is built (`Registry.declare`), so validating an
experiment reads these entries and nothing else. A plugin architecture declares itself the same way.
"""
from __future__ import annotations

from nas_stab.models import checks
from nas_stab.models.archs import ARCHS

ARCHS.declare("mlp", "nas_stab.models.mlp:build_mlp", task="classification", check=checks.check_mlp,
              doc="plain feed-forward ReLU network")
ARCHS.declare("mlp_resnet", "nas_stab.models.mlp:build_mlp_resnet", task="classification",
              check=checks.check_mlp_resnet, doc="the tau paper's ResNet, multi-branch")
ARCHS.declare("plainnet", "nas_stab.models.plainnet:build_plainnet", task="classification", check=checks.check_plainnet,
              doc="CNN without skips, depth conv layers in `stages` stages (3: widths w, 2w, 4w; 1: constant width)")
ARCHS.declare("resnet", "nas_stab.models.resnet:build_resnet", task="classification", check=checks.check_resnet,
              doc="CIFAR ResNet (depth 6n+2), multi-branch basic blocks")
ARCHS.declare("resnext", "nas_stab.models.resnext:build_resnext", task="classification", check=checks.check_resnext,
              doc="the STAM authors' CIFAR ResNeXt (depth 9n+2): grouped bottlenecks, alpha on the branch sum")
ARCHS.declare("transformer", "nas_stab.models.transformer:build_transformer", task="translation",
              check=checks.check_transformer,
              doc="encoder-decoder Transformer; heads and FFN slices are the branches (STAM)")
