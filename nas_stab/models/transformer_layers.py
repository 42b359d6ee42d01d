"""The pieces of `transformer` (transformer.py's docstring describes the model and its init): multi-head
attention whose heads are the branches, the FFN whose hidden slices are the branches, the residual
`Sublayer` (skip, tau, norm, dropout) around either, and the sinusoidal positions."""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from nas_stab.models.base import Tap, Tau, record_init

QKV_GAIN = 2 ** -0.5  # fairseq's MultiheadAttention: "the scaled initialization" of q, k, v


def _xavier_(w: torch.Tensor, fan_in: int, fan_out: int, gain: float = 1.0, normal: bool = False) -> None:
    with torch.no_grad():
        if normal:
            w.normal_(0.0, gain * math.sqrt(2.0 / (fan_in + fan_out)))
        else:
            a = gain * math.sqrt(6.0 / (fan_in + fan_out))
            w.uniform_(-a, a)


def _record_xavier(w: torch.Tensor, fan_in: int, fan_out: int, gains: tuple[float, ...]) -> None:
    """Record the Xavier init of the whole parameter `w` (equal row blocks, one per gain: q, k, v share one
    projection) as `base.record_init` does: variance mean(gain^2) * 2 / (fan_in + fan_out), the same for
    Xavier-uniform and Xavier-normal. The blocks' gains do not change with d_model, so muP's rescaling, a ratio
    of this std to the base model's, is exact for every block."""
    record_init(w, (fan_in + fan_out) / 2, sum(g * g for g in gains) / len(gains))


class MultiHeadAttention(nn.Module):
    """H = C * heads_per_branch heads of size dh in one projection; returns alpha * out_proj(heads)."""

    def __init__(self, d: int, heads: int, head_dim: int, branch_heads: int, alpha: float, head_dropout: float, cross: bool):
        super().__init__()
        self.H, self.dh, self.branch_width = heads, head_dim, branch_heads * head_dim
        self.alpha, self.p, self.cross = alpha, head_dropout, cross
        inner = heads * head_dim
        if cross:
            self.q_proj = nn.Linear(d, inner)
            self.kv_proj = nn.Linear(d, 2 * inner)
        else:
            self.qkv_proj = nn.Linear(d, 3 * inner)
        self.out_proj = nn.Linear(inner, d)
        self.logits_tap = Tap()  # the probes' view of the attention logits: tap(q, k, mask, causal, scale)
        # the logits' multiplier: None is 1/sqrt(dh) (SP); muP sets sqrt(dh0) / dh (parametrization.apply)
        self.scale: float | None = None

    def reset_parameters(self, beta: float = 1.0, normal: bool = False, zero_out: bool = False,
                         per_branch: bool = False) -> None:
        """Xavier on the whole projections (fairseq; DeepNet's gains with `normal`),
        or with one branch's fans and gain 1 (`per_branch`: init xavier_branch)."""
        d, inner, bw = self.out_proj.out_features, self.H * self.dh, self.branch_width
        width = bw if per_branch else inner
        qk = 1.0 if (normal or per_branch) else QKV_GAIN
        vg = beta if normal else qk
        biases: tuple[nn.Parameter, ...]
        if self.cross:
            q, (k, v) = self.q_proj.weight, self.kv_proj.weight.view(2, inner, d)
            biases = (self.q_proj.bias, self.kv_proj.bias)
            _record_xavier(self.q_proj.weight, d, width, (qk,))
            _record_xavier(self.kv_proj.weight, d, width, (qk, vg))
        else:
            q, k, v = self.qkv_proj.weight.view(3, inner, d)
            biases = (self.qkv_proj.bias,)
            _record_xavier(self.qkv_proj.weight, d, width, (qk, qk, vg))
        for w, gain in ((q, qk), (k, qk), (v, vg)):
            _xavier_(w, d, width, gain, normal)
        _xavier_(self.out_proj.weight, width, d, beta, normal)
        _record_xavier(self.out_proj.weight, width, d, (beta,))
        with torch.no_grad():
            for b in biases + (self.out_proj.bias,):
                b.zero_()
            if zero_out:
                self.out_proj.weight.zero_()

    def _split(self, t: torch.Tensor) -> torch.Tensor:
        B, T, _ = t.shape
        return t.view(B, T, self.H, self.dh).transpose(1, 2)

    def forward(self, x, *, memory=None, mask=None, causal=False, cache=None):
        B, T, _ = x.shape
        if self.cross:
            q = self._split(self.q_proj(x))
            if cache is not None and "k" in cache:
                k, v = cache["k"], cache["v"]
            else:
                k, v = (self._split(t) for t in self.kv_proj(memory).chunk(2, dim=-1))
                if cache is not None:
                    cache["k"], cache["v"] = k, v
        else:
            q, k, v = (self._split(t) for t in self.qkv_proj(x).chunk(3, dim=-1))
            if cache is not None:  # incremental decoding: the new position attends to every past one
                if "k" in cache:
                    k = torch.cat([cache["k"], k], dim=2)
                    v = torch.cat([cache["v"], v], dim=2)
                cache["k"], cache["v"] = k, v
                causal = False
        self.logits_tap(q, k, mask, causal, self.scale)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal, scale=self.scale)
        if self.training and self.p > 0:
            # one Bernoulli draw per head per forward call, shared by tokens and batch
            keep = (torch.rand(1, self.H, 1, 1, device=o.device) >= self.p).to(o.dtype) / (1.0 - self.p)
            o = o * keep
        o = o.transpose(1, 2).reshape(B, T, self.H * self.dh)
        return self.out_proj(o) * self.alpha


class FeedForward(nn.Module):
    """C FFN branches as slices of one FFN of width C * f; fc2 sums them; times alpha."""

    def __init__(self, d: int, branches: int, f: int, alpha: float):
        super().__init__()
        self.f, self.alpha = f, alpha
        self.fc1 = nn.Linear(d, branches * f)
        self.fc2 = nn.Linear(branches * f, d)

    def reset_parameters(self, beta: float = 1.0, normal: bool = False, zero_out: bool = False,
                         per_branch: bool = False) -> None:
        d = self.fc1.in_features
        width = self.f if per_branch else self.fc1.out_features
        _xavier_(self.fc1.weight, d, width, beta, normal)
        _xavier_(self.fc2.weight, width, d, beta, normal)
        _record_xavier(self.fc1.weight, d, width, (beta,))
        _record_xavier(self.fc2.weight, width, d, (beta,))
        with torch.no_grad():
            self.fc1.bias.zero_()
            self.fc2.bias.zero_()
            if zero_out:
                self.fc2.weight.zero_()

    def forward(self, x, **_):
        return self.fc2(F.relu(self.fc1(x))) * self.alpha


class Sublayer(nn.Module):
    """One residual sublayer: skip, tau, norm and dropout around a branch `fn`."""

    def __init__(self, fn: nn.Module, d: int, cfg, tau: Tau, dn_alpha: float = 1.0):
        super().__init__()
        self.fn, self.tau = fn, tau
        self.skip, self.lam = cfg.skip, float(cfg.skip_lambda)
        self.dn_alpha = dn_alpha
        self.drop = nn.Dropout(cfg.dropout)
        ln = cfg.norm == "ln"
        self.pre_norm = nn.LayerNorm(d) if ln and cfg.norm_position == "pre" else None
        n_skip_norms = {"xskip_ln": 1, "rskip_ln": int(cfg.skip_lambda), "deepnorm": 1}.get(cfg.skip, 0)
        if n_skip_norms == 0 and ln and cfg.norm_position == "post":
            n_skip_norms = 1  # the post-LN after the combination
        self.norms = nn.ModuleList(nn.LayerNorm(d) for _ in range(n_skip_norms))
        # probe taps (no-ops): the scaled branch output f, and the stream before the last Norm
        self.branch_tap, self.stream_tap = Tap(), Tap()

    def forward(self, x, **kw):
        h = self.pre_norm(x) if self.pre_norm is not None else x
        f = self.branch_tap(self.drop(self.fn(h, **kw)) * self.tau())
        s = self.skip
        if s == "plain":
            y = x + f
        elif s == "none":
            y = f
        elif s in ("xskip", "xskip_ln"):
            y = self.lam * x + f if self.lam != 1 else x + f
        elif s == "deepnorm":
            y = self.dn_alpha * x + f
        else:  # rskip_ln
            y = x + f
            for i, norm in enumerate(self.norms):
                y = norm(self.stream_tap(y) if i == len(self.norms) - 1 else y)
                if i < len(self.norms) - 1:
                    y = x + y
            return y
        y = self.stream_tap(y)
        return self.norms[0](y) if len(self.norms) else y


def sinusoids(n: int, d: int) -> torch.Tensor:
    pos = torch.arange(n, dtype=torch.float32)[:, None]
    inv = torch.exp(torch.arange(0, d, 2, dtype=torch.float32) * (-math.log(10000.0) / d))
    pe = torch.zeros(n, d)
    pe[:, 0::2] = torch.sin(pos * inv)
    pe[:, 1::2] = torch.cos(pos * inv)[:, : d // 2]
    return pe
