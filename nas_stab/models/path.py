"""Path space: from a weight-space network to its path values (Path-BN, Theorem 1).

The path-reparameterization rescales every hidden unit of a chain by the
product of the diagonal weights downstream of it (positive scale invariance
of ReLU), walking from the chain's last layer back to its first:

    c^n = 1,   c^(l-1)_k = W^l_kk c^l_k                   (W^l_kk > 0)
    v^1_jk = W^1_jk c^1_j                                  (the head)
    v^l_jk = W^l_jk c^l_j / c^(l-1)_k * v^1_kk,  j != k    (ratio layers; u = v / v^1_kk)

so a path-space model loaded with these values computes exactly the same
function as the weight-space one (with `norm: none`; a norm between layers
is not scale-equivariant across them). Used by the tests of Theorem 1 and
handy to start path-space training from a trained weight-space network.
"""
from __future__ import annotations

import torch
from torch import nn

from nas_stab.models.layers import Layer


def chains(model: nn.Module) -> list[list[tuple[str, Layer]]]:
    """The path-space chains of `model`: lists of (name, layer), head first."""
    out: dict[int, list[tuple[str, Layer]]] = {}
    for name, mod in model.named_modules():
        if isinstance(mod, Layer) and mod.path:
            head = mod.head if mod.ratio else mod
            out.setdefault(id(head), []).append((name, mod))
    return list(out.values())


def _diag(w: torch.Tensor, layer: Layer) -> torch.Tensor:
    """Entry (o, o mod in [, centre, centre]) of each output unit o."""
    return w.reshape(w.shape[0], -1).gather(1, layer.diag_index.view(-1, 1).to(w.device)).view(-1)


def _per_input(vec: torch.Tensor, layer: Layer) -> torch.Tensor:
    """A per-(global input channel) vector laid out like the layer's weight."""
    v = vec.view(layer.C, 1, layer.cin).expand(layer.C, layer.cout, layer.cin).reshape(layer.C * layer.cout, layer.cin)
    return v.view(*v.shape, 1, 1) if layer.conv else v


def _per_output(vec: torch.Tensor, layer: Layer) -> torch.Tensor:
    return vec.view(-1, *([1] * (layer.weight.ndim - 1)))


@torch.no_grad()
def path_values(weights: list[torch.Tensor], layers: list[Layer]) -> list[torch.Tensor]:
    """Path values of one chain given its weight-space tensors (same shapes)."""
    n = len(layers)
    # c[k]: the scale of layer k's units; c[-1] = 1, every other entry is set below
    c = [torch.ones(weights[-1].shape[0], dtype=weights[-1].dtype, device=weights[-1].device)] * n
    for k in range(n - 1, 0, -1):
        d = _diag(weights[k], layers[k])
        if (d <= 0).any():
            raise ValueError(f"path space needs positive diagonal weights; layer {k} has {int((d <= 0).sum())} non-positive")
        c[k - 1] = d * c[k]
    v1 = weights[0] * _per_output(c[0], layers[0])
    out = [v1]
    d1 = _diag(v1, layers[0])
    for k in range(1, n):
        layer = layers[k]
        v = weights[k] * _per_output(c[k], layer) / _per_input(c[k - 1], layer) * _per_input(d1, layer)
        out.append(v * (1 - layer.mask))
    return out


@torch.no_grad()
def load_weight_space(path_model: nn.Module, weight_model: nn.Module) -> None:
    """Copy `weight_model` (weight space, same architecture) into `path_model`
    (path space): chains get their path values, everything else is copied."""
    src = dict(weight_model.named_parameters())
    in_chain = set()
    for chain in chains(path_model):
        names = [n for n, _ in chain]
        vals = path_values([src[n + ".weight"] for n in names], [m for _, m in chain])
        for (name, layer), v in zip(chain, vals):
            layer.weight.copy_(v)
            in_chain.add(name + ".weight")
    for name, p in path_model.named_parameters():
        if name not in in_chain:
            p.copy_(src[name])
    bufs = dict(weight_model.named_buffers())
    for name, b in path_model.named_buffers():
        if name in bufs and bufs[name].shape == b.shape and name.split(".")[-1] not in ("mask", "diag_index"):
            b.copy_(bufs[name])
