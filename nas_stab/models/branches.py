"""C parallel residual branches as grouped operations, aggregated with alpha.

    B_k(x) = W_b phi(... phi(W_1 x))          (a norm after each layer if any)
    out    = sum_k alpha_k * B_k(x)

(STAM, equations 1-2.) The first layer of all branches is one shared-input
layer producing C*ch channels, later layers are grouped (block-diagonal), and
the aggregation is one weighted contraction over the branch axis: each branch
is weighted before the sum. With Fixup-style scalar biases (Fixup; the tau
paper's normalization-free ResNets) branch k is

    B_k(x) = s_k * W_b(phi(... phi(W_1(x + a_1) + c_1) + a_2 ...) + a_b) + d_k

with 0-d parameters (a_1 is shared: all branches read the same input) and the
Fixup multiplier s_k only under `init: fixup`.

Pre-activation (`preact`, He et al. 2016b): each layer is preceded by its
norm and ReLU instead of followed by them,

    B_k(x) = W_b relu(Norm_b(... W_2 relu(Norm_2(W_1 relu(Norm_1(x))))))

with Norm_1 over the shared input (one norm for all branches; see
`preactivate`, which the residual block calls so that a reshaping shortcut
reads the pre-activated input, as He et al.'s code does) and nothing after
the last layer.

Path space: see `layers`. With `norm: path_bn`, a layer that continues a
chain computes `BN(off-diagonal part) + input` (Path-BN, equation 10), a head
uses ordinary BN; with `bn`/`none` it computes `norm(off + input)`, ordinary
BN on the reparameterized network.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from typing import cast

import torch
import torch.nn.functional as F
from torch import nn

from nas_stab.models.base import kaiming_normal_, scalar
from nas_stab.models.layers import Layer, continues_chain, make_norm, norm_gain


class MultiBranch(nn.Module):
    """C branches of identical structure over a shared input; returns their
    alpha-weighted sum.

    Args:
        cin: input channels (features).
        layers: per layer `(kernel, out_channels, stride)`; kernel 0 = linear.
        C: number of branches; alpha: aggregation weight of every branch.
        norm: none | bn | ln | path_bn, after every layer of every branch.
        path: path-space parametrization (implied by path_bn).
        scalar_bias: Fixup-style 0-d biases; fixup_scale: Fixup's multiplier.
        init: kaiming | fixup | zero_last | deepnorm | stam_forward | stam_update.
        gain: multiplier of every layer's init (stam_*, deepnorm; see
            `base.branch_init_gain`).
        last_gain: Kaiming gain of the last layer (2 = He; 1 = STAM's N(0, 1/d)).
        L: residual blocks in the network (Fixup's L^(-1/(2b-2))).
        preact: norm and ReLU before each layer, nothing after the last.
    """

    alpha: torch.Tensor  # a buffer (registered in __init__)

    def __init__(self, cin: int, layers: list[tuple[int, int, int]], *, C: int, alpha: float, norm: str = "none",
                 path: bool = False, ln_mode: str = "chw", scalar_bias: bool = False, fixup_scale: bool = False,
                 init: str = "kaiming", gain: float = 1.0, last_gain: float = 2.0, L: int = 1, preact: bool = False):
        super().__init__()
        if preact and path:
            raise ValueError("path-space chains are conv -> norm -> relu; the pre-activation block is not")
        self.C, self.b, self.preact = C, len(layers), preact
        self.conv = layers[0][0] > 0
        self.path_bn = norm == "path_bn"
        self.layers = nn.ModuleList()
        self.norms = nn.ModuleList()
        head, ch = None, cin
        for i, (k, out, stride) in enumerate(layers):
            cont = path and i > 0 and continues_chain(ch, out, stride)
            layer = Layer(ch, out, C=C, grouped=i > 0, conv=self.conv, k=max(k, 1), stride=stride,
                          path=path, head=head if cont else None)
            if path and not cont:
                head = layer
            self.layers.append(layer)
            if preact:  # the norm of this layer's input (the first one is shared by every branch)
                self.norms.append(make_norm(norm, ch, C=1 if i == 0 else C, conv=self.conv, ln_mode=ln_mode))
            else:
                kind = "bn" if (norm == "path_bn" and not layer.ratio) else norm
                self.norms.append(make_norm(kind, out, C=C, conv=self.conv, ln_mode=ln_mode))
            ch = out
        self.cout = ch
        self.register_buffer("alpha", torch.full((C,), float(alpha)), persistent=False)
        self.scalar_bias = scalar_bias
        if scalar_bias:
            self.in_bias = nn.ParameterList([scalar()] + [scalar() for _ in range((self.b - 1) * C)])
            self.out_bias = nn.ParameterList(scalar() for _ in range(self.b * C))
        self.scale = nn.ParameterList(nn.Parameter(torch.ones(())) for _ in range(C)) if fixup_scale else None
        self.reset_parameters(init, gain, last_gain, L)

    def reset_parameters(self, init: str, gain: float, last_gain: float, L: int) -> None:
        with torch.no_grad():
            for i, layer in enumerate(cast(Sequence[Layer], self.layers)):  # every one a Layer (__init__)
                last = i == self.b - 1
                kaiming_normal_(layer.weight, layer.fan_out(), last_gain if last else 2.0)
                layer.weight.mul_(gain)
                if init == "fixup":
                    if last:
                        layer.weight.zero_()
                    else:  # Fixup: every non-last branch layer scaled by L^(-1/(2m-2))
                        layer.weight.mul_(L ** (-1.0 / (2 * self.b - 2)))
                if layer.path:
                    layer.init_path_diagonal()
            if init == "zero_last":
                g = None if self.preact else norm_gain(self.norms[-1])
                (g if g is not None else cast(Layer, self.layers[-1]).weight).zero_()

    def _per_branch(self, params: nn.ParameterList, start: int) -> torch.Tensor:
        return torch.stack(list(params[start:start + self.C]))

    def _add_branch_scalar(self, h: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        n = h.shape[0]
        return (h.view(n, self.C, -1) + v.view(1, self.C, 1)).view(h.shape)

    def _weights(self) -> torch.Tensor:
        """Per-branch aggregation weights alpha_k (times Fixup's multiplier s_k)."""
        return self.alpha if self.scale is None else self.alpha * torch.stack(list(self.scale))

    def preactivate(self, x: torch.Tensor) -> torch.Tensor:
        """relu(Norm_1(x)): the pre-activation of the shared input (preact only)."""
        return F.relu(self.norms[0](x))

    def forward(self, x: torch.Tensor, *, preactivated: bool = False) -> torch.Tensor:
        """The alpha-weighted branch sum. `preactivated`: x is already `preactivate(input)`."""
        pre = self.preact
        h = self.preactivate(x) if pre and not preactivated else x
        last = self.b - 1
        for i, (layer, norm) in enumerate(zip(self.layers, self.norms)):
            if pre and i > 0:
                h = F.relu(norm(h))
            if self.scalar_bias:
                h = h + self.in_bias[0] if i == 0 else self._add_branch_scalar(h, self._per_branch(self.in_bias, 1 + (i - 1) * self.C))
            if i == last and (pre or isinstance(norm, nn.Identity)):
                return self._fused_last(h)
            y = layer(h)
            if layer.ratio:  # the diagonal of a chain layer is the identity
                y = norm(y) + h if self.path_bn else norm(y + h)
            elif not pre:
                y = norm(y)
            if i < last:
                if self.scalar_bias:
                    y = self._add_branch_scalar(y, self._per_branch(self.out_bias, i * self.C))
                if not pre:
                    y = F.relu(y)
            h = y
        n = h.shape[0]
        out = torch.matmul(self._weights(), h.view(n, self.C, -1))  # [n, ch*H*W]: each branch weighted, then summed
        return self._add_out_bias(out.view(n, self.cout, *h.shape[2:]))

    def _fused_last(self, h: torch.Tensor) -> torch.Tensor:
        """Last layer and aggregation in ONE dense op (no norm after the last layer).

        sum_k a_k W_k h_k is a dense layer whose weight is the branches' last
        weights side by side along the input axis, each times a_k (ResNeXt's
        equivalence of aggregation and a 1x1 conv over the concatenation);
        when every branch reads the same input (b = 1) it is the single
        weight sum_k a_k W_k. Same function and gradients as weighting each
        branch's output and summing, without the C x larger intermediate.
        With one branch it is a_0 (W_0 h): a dense layer's output is scaled
        when it is smaller than the weight (a training batch), else the
        weight, and never summed over the one branch (the two weight-sized
        copies and their backward cost a width-512 mlp_resnet ~6% of its step).
        """
        layer = cast(Layer, self.layers[-1])
        a = self._weights()
        w = layer.effective_weight()
        if self.C == 1:
            if not layer.conv and h.shape[0] * layer.cout <= w.numel():
                return self._finish_last(h, F.linear(h, w) * a, a, layer)
            wd = w * a
        else:
            wv = w.view(self.C, layer.cout, *w.shape[1:]) * a.view(self.C, *([1] * w.ndim))
            # grouped: [C, out, in, ...] -> [out, C*in, ...]
            wd = wv.transpose(0, 1).reshape(layer.cout, self.C * layer.cin, *w.shape[2:]) if layer.grouped else wv.sum(0)
        y = F.conv2d(h, wd, stride=layer.stride, padding=layer.k // 2) if layer.conv else F.linear(h, wd)
        return self._finish_last(h, y, a, layer)

    def _finish_last(self, h: torch.Tensor, y: torch.Tensor, a: torch.Tensor, layer) -> torch.Tensor:
        if layer.ratio:  # the identity diagonal of each branch: + sum_k a_k h_k
            n = h.shape[0]
            y = y + torch.matmul(a, h.view(n, self.C, -1)).view(y.shape)
        return self._add_out_bias(y)

    def _add_out_bias(self, out: torch.Tensor) -> torch.Tensor:
        if self.scalar_bias:
            out = out + (self.alpha * self._per_branch(self.out_bias, (self.b - 1) * self.C)).sum()
        return out

    def extra_repr(self) -> str:
        return f"C={self.C}, b={self.b}, alpha={float(self.alpha[0]):.4g}" + (", preact" if self.preact else "")


def fixup_classifier_(linear: nn.Linear) -> None:
    """Fixup: the classification layer starts at zero."""
    with torch.no_grad():
        linear.weight.zero_()
        if linear.bias is not None:
            linear.bias.zero_()


def he_fan_out_(w: torch.Tensor) -> None:
    """He fan-out init of an ordinary (one-branch) conv or linear weight."""
    fan = w.shape[0] * (math.prod(w.shape[2:]) if w.ndim > 2 else 1)
    kaiming_normal_(w, fan)
