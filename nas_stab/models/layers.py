"""Weight layers for C parallel branches, in weight or path space.

Activations of C branches are kept side by side in ONE tensor: `[n, C*ch]`
(MLP) or `[n, C*ch, H, W]` (CNN), branch k in channels `k*ch:(k+1)*ch`. A
layer is either *shared-input* (the first layer of a block: every branch reads
the same input, one matmul / groups=1 conv to C*out channels) or *grouped*
(block-diagonal: branch k reads only its own channels; a batched matmul or a
groups=C conv). Never a Python loop over branches.

Path space (Path-BN paper, Section 3; G-SGD of Meng et al. 2019). A *chain*
is a run of layers rescaled together: its first layer (the *head*) holds the
path values `v^1` as its trainable weights; every later layer holds path
values `v^l` whose effective weight is the ratio `v^l_jk / v^1_kk` off the
diagonal and the constant 1 on it. Unit o of a layer pairs with input
`o mod in` (the G-SGD code's modulo pairing; for a conv the diagonal entry is
the kernel centre). A layer continues the chain only when it maps a branch's
`ch` channels to `ch` channels at stride 1 (then its diagonal is an exact
identity); otherwise it starts a new chain. Autograd through the ratio gives
exactly the paper's path gradients (its equations 6-7), so plain SGD on the
trainable tensors is G-SGD.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Layer(nn.Module):
    """One weight layer of C branches: `cin -> cout` channels per branch.

    Args:
        conv: a `k x k` convolution (padding k//2) instead of a linear map.
        grouped: branch k reads only its own `cin` channels (else all branches
            read the same `cin` input channels).
        head: in path space, the chain head whose diagonal path values divide
            this layer's (None: this layer is a head itself, or weight space).
        path: path-space parametrization.
    """

    mask: torch.Tensor  # buffers (registered in __init__ when used): a ratio layer's diagonal, a path layer's index
    diag_index: torch.Tensor

    def __init__(self, cin: int, cout: int, *, C: int = 1, grouped: bool = False, conv: bool = False,
                 k: int = 1, stride: int = 1, path: bool = False, head: Layer | None = None):
        super().__init__()
        self.cin, self.cout, self.C, self.grouped = cin, cout, C, grouped
        self.conv, self.k, self.stride = conv, (k if conv else 1), stride
        self.path = path
        shape = (C * cout, cin, self.k, self.k) if conv else (C * cout, cin)
        self.weight = nn.Parameter(torch.empty(shape))
        self.ratio = path and head is not None
        self._head = (head,)  # a reference, not a submodule (the head is registered where it lives)
        if self.ratio:
            assert head is not None, "a ratio layer has a head"
            if not (grouped or C == 1) or cin != cout or stride != 1 or head.cout != cin:
                raise ValueError("a chain continues only through a ch -> ch layer at stride 1")
            self.register_buffer("mask", self._diag_mask(), persistent=False)
        if path:
            o = torch.arange(C * cout)
            centre = (self.k // 2) * self.k + self.k // 2
            self.register_buffer("diag_index", ((o % cout) % cin) * self.k * self.k + centre, persistent=False)

    @property
    def head(self) -> Layer | None:
        return self._head[0]

    def fan_out(self) -> int:
        """Fan-out of one branch (He fan-out init uses the per-branch fan)."""
        return self.cout * self.k * self.k

    def _diag_mask(self) -> torch.Tensor:
        m = torch.zeros_like(self.weight)
        o = torch.arange(self.C * self.cout)
        c = self.k // 2
        if self.conv:
            m[o, o % self.cout, c, c] = 1.0
        else:
            m[o, o % self.cout] = 1.0
        return m

    def diag(self) -> torch.Tensor:
        """Path values of the diagonal paths through this layer's units (heads only)."""
        return self.weight.reshape(self.weight.shape[0], -1).gather(1, self.diag_index.view(-1, 1)).view(-1)

    def init_path_diagonal(self) -> None:
        """Path-BN init: diagonal path values of a head are 1; a ratio layer's
        masked diagonal entries are unused (set to 0)."""
        with torch.no_grad():
            if self.ratio:
                self.weight.mul_(1 - self.mask)
            elif self.path:
                flat = self.weight.view(self.weight.shape[0], -1)
                flat.scatter_(1, self.diag_index.view(-1, 1), 1.0)

    def effective_weight(self) -> torch.Tensor:
        """The weight the layer applies: for a ratio layer, only its OFF-diagonal
        part `v^l_jk / v^1_kk` (the diagonal identity is added by the caller, so
        that Path-BN can normalize the off-diagonal sum alone)."""
        if not self.ratio:
            return self.weight
        head = self.head
        assert head is not None, "a ratio layer has a head"
        d = head.diag().view(self.C, 1, self.cin).expand(self.C, self.cout, self.cin)
        d = d.reshape(self.C * self.cout, self.cin)
        if self.conv:
            d = d.view(*d.shape, 1, 1)
        return self.weight * (1 - self.mask) / d

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.effective_weight()
        groups = self.C if self.grouped else 1
        if self.conv:
            return F.conv2d(x, w, stride=self.stride, padding=self.k // 2, groups=groups)
        if groups == 1:
            return F.linear(x, w)
        n = x.shape[0]
        xb = x.view(n, self.C, self.cin).transpose(0, 1)  # [C, n, cin]
        y = torch.bmm(xb, w.view(self.C, self.cout, self.cin).transpose(1, 2))  # [C, n, cout]
        return y.transpose(0, 1).reshape(n, self.C * self.cout)

    def extra_repr(self) -> str:
        kind = f"conv{self.k}x{self.k}" if self.conv else "linear"
        role = "ratio" if self.ratio else ("head" if self.path else "weight")
        return f"{kind}, {self.cin}->{self.cout} x C={self.C}, grouped={self.grouped}, stride={self.stride}, {role}"


def continues_chain(cin: int, cout: int, stride: int) -> bool:
    return cin == cout and stride == 1


# ------------------------------------------------------------------ norms


class BranchLayerNorm(nn.Module):
    """Layer norm of each branch separately, with a per-channel affine.

    MLP: over a branch's features. CNN, mode "chw": over (channels, H, W) of
    each branch (GroupNorm with one group per branch); mode "channel": over a
    branch's channels at each position.
    """

    def __init__(self, C: int, ch: int, *, conv: bool, mode: str = "chw", eps: float = 1e-5):
        super().__init__()
        self.C, self.ch, self.conv, self.mode, self.eps = C, ch, conv, mode, eps
        self.weight = nn.Parameter(torch.ones(C * ch))
        self.bias = nn.Parameter(torch.zeros(C * ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.conv and self.mode == "chw":
            return F.group_norm(x, self.C, self.weight, self.bias, self.eps)
        n = x.shape[0]
        rest = x.shape[2:]
        xv = x.view(n, self.C, self.ch, *rest)
        if self.conv:  # channel-only: normalize dim 2 at each position
            mu = xv.mean(2, keepdim=True)
            var = xv.var(2, unbiased=False, keepdim=True)
            y = (xv - mu) * torch.rsqrt(var + self.eps)
        else:
            y = F.layer_norm(xv, (self.ch,), eps=self.eps)
        shape = (1, self.C * self.ch) + (1,) * len(rest)
        return y.reshape(x.shape) * self.weight.view(shape) + self.bias.view(shape)

    def extra_repr(self) -> str:
        return f"C={self.C}, ch={self.ch}, conv={self.conv}, mode={self.mode}"


def make_norm(kind: str, ch: int, *, C: int = 1, conv: bool, ln_mode: str = "chw") -> nn.Module:
    """The normalization `kind` over C branches of `ch` channels each.

    bn and path_bn: BatchNorm over the C*ch channels (per channel, so per
    branch); ln: `BranchLayerNorm`; none: identity.
    """
    if kind in ("bn", "path_bn"):
        return nn.BatchNorm2d(C * ch) if conv else nn.BatchNorm1d(C * ch)
    if kind == "ln":
        return BranchLayerNorm(C, ch, conv=conv, mode=ln_mode)
    if kind == "none":
        return nn.Identity()
    raise ValueError(f"unknown norm {kind!r}")


def norm_gain(norm: nn.Module) -> nn.Parameter | None:
    """The multiplicative affine parameter of a norm (zero_last zeroes it)."""
    return getattr(norm, "weight", None)
