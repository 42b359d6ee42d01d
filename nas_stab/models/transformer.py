"""`transformer`: an encoder-decoder Transformer with the stability knobs (docs/experiment-file.md).

Multi-branch as in the STAM authors' Transformer code: `branches: C` builds C
copies of a mini block, i.e. attention with ``H = C * heads_per_branch`` heads
of size `head_dim` (heads are the attention branches) and an FFN of width
``C * ffn_per_branch``, or ``C * round(ffn_ratio * d_model / C)`` with
`ffn_ratio` (growing with d_model, as muP needs) (hidden slices are the FFN
branches). Everything is one
batched op: the heads live in one projection, the FFN branches are slices of
one wide FFN, so ``fc2`` already sums the branches. The aggregation weight
alpha (relative to `aggregation_base`) multiplies ``out_proj(attention)`` and
``fc2(...)`` before dropout and the residual add. Head dropout is one
Bernoulli draw per head per forward call (shared across tokens and batch),
before ``out_proj``, scaled by 1/(1-p).

Every residual sublayer (encoder: self-attention, FFN; decoder:
self-attention, cross-attention, FFN) is one `Sublayer` in `blocks`, in
order, and computes, with ``f = tau * dropout(F(h))`` and ``h = Norm(x)``
for ``norm_position: pre`` else ``h = x``::

    plain     y = x + f                      (post + norm ln: y = LN(x + f))
    none      y = f                          (post + norm ln: y = LN(f))
    xskip     y = lambda x + f               (post + norm ln: y = LN(lambda x + f))
    xskip_ln  y = LN(lambda x + f)
    rskip_ln  y_1 = LN(x + f), y_k = LN(x + y_(k-1)), k = 2..lambda
    deepnorm  y = LN(alpha_dn x + f), with DeepNet's alpha and init beta

`tau` is one module shared by all sublayers; L = 2 enc_layers + 3 dec_layers.
With ``norm_position: pre`` and ``norm: ln`` the encoder and decoder stacks
end with a final LN (as pre-LN Transformers do).

Init (`init: kaiming`, the default, the stock model): fairseq's, Xavier-
uniform on each WHOLE projection (the fans of the full layer, however many
branches it holds): q, k and v with gain 1/sqrt(2) (fairseq's
MultiheadAttention), ``out_proj``, ``fc1`` and ``fc2`` with gain 1; biases
zero. So the per-weight variance falls as branches are added (by about 1/C
for ``fc2``: the STAM paper's "stock Xavier ... scales down"). `init:
xavier_branch` instead uses the fans of one mini block (``d`` and one
branch's width) with gain 1 everywhere, so each branch is initialized like a
C = 1 model whatever C. Embeddings N(0, d^-1/2), scaled by sqrt(d),
sinusoidal positions; one embedding matrix shared by the encoder, the
decoder and the output projection (the vocabulary is joint). `init:
deepnorm` (implied by `skip: deepnorm`) uses Xavier-normal on the whole
projections with DeepNet's beta as the gain of the value, output and FFN
projections (gain 1 on queries and keys); `init: zero_last` is the stock
init with ``out_proj`` and ``fc2`` zeroed. Every init is recorded on its
tensor (`base.record_init`) for muP.

`parametrization: mup` (`parametrization.apply`, width d_model) sets three
multipliers whose defaults are SP's, bit for bit: `Transformer.embed_scale`
(sqrt(d); muP: the base's sqrt(d0)), `Transformer.readout_mult` (1; muP:
d0 / d, on the tied readout's input) and `MultiHeadAttention.scale` (None,
SDPA's 1/sqrt(dh); muP: sqrt(dh0) / dh).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from nas_stab.config.schema import ModelConfig
from nas_stab.models import ARCHS
from nas_stab.models.base import StableModel, Tap, Tau, branch_alpha, deepnorm_constants, model_tau, record_init

__all__ = ["Transformer", "check_transformer", "ffn_width"]

SUPPORTED_INIT = ("kaiming", "zero_last", "deepnorm", "xavier_branch")
QKV_GAIN = 2 ** -0.5  # fairseq's MultiheadAttention: "the scaled initialization" of q, k, v
VISION_KEYS = {
    "depth": "use enc_layers and dec_layers",
    "width": "use d_model and ffn_per_branch (or ffn_ratio)",
    "branch_depth": "the transformer's branches are heads and FFN slices",
    "stages": "stages applies to plainnet",
    "ln_mode": "its LayerNorm normalizes over d_model",
    "scalar_bias": "its projections have ordinary biases",
    "layer_skip": "its sublayers have their residual connections (model.skip)",
}
_DEFAULTS = ModelConfig()


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


def ffn_width(cfg) -> int:
    """Units of one FFN branch: round(ffn_ratio * d_model / branches) with `model.ffn_ratio` (it grows with
    d_model, as muP needs), else the fixed `ffn_per_branch`."""
    if cfg.ffn_ratio is not None:
        return round(cfg.ffn_ratio * cfg.d_model / cfg.branches)
    return cfg.ffn_per_branch


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


class DecodeState:
    """Encoder output and per-sublayer key/value caches for incremental decoding."""

    def __init__(self, memory, mask, n_caches):
        self.memory, self.mask, self.t = memory, mask, 0
        self.caches = [dict() for _ in range(n_caches)]

    def select(self, idx: torch.Tensor) -> DecodeState:
        """Keep (and reorder) the rows `idx` of the batch."""
        self.memory = self.memory.index_select(0, idx)
        if self.mask is not None:
            self.mask = self.mask.index_select(0, idx)
        for c in self.caches:
            for k in c:
                c[k] = c[k].index_select(0, idx)
        return self


class Transformer(StableModel):
    """Encoder-decoder; `forward(src, tgt_in)` -> logits [B, T, V]."""

    def __init__(self, cfg, vocab: int, pad: int = 0, bos: int = 2, eos: int = 3):
        super().__init__()
        d, C = cfg.d_model, cfg.branches
        H = C * cfg.heads_per_branch
        dh = cfg.head_dim or d // H
        self.d, self.V, self.pad, self.bos, self.eos = d, vocab, pad, bos, eos
        self.n_enc, self.n_dec = cfg.enc_layers, cfg.dec_layers
        L = 2 * self.n_enc + 3 * self.n_dec
        self.tau = Tau(model_tau(cfg), L, learnable=bool(getattr(cfg, "tau_learnable", False)))
        a = branch_alpha(cfg)
        deep = cfg.skip == "deepnorm" or cfg.init == "deepnorm"
        dn = deepnorm_constants(self.n_enc, self.n_dec)
        self.embed = nn.Embedding(vocab, d, padding_idx=pad)
        # the embedding's multiplier and the tied readout's input multiplier: SP's sqrt(d) and 1; muP sets
        # sqrt(d0) and d0 / d (d0 the base d_model; parametrization.apply)
        self.embed_scale, self.readout_mult = math.sqrt(d), 1.0
        self.register_buffer("pe", sinusoids(256, d), persistent=False)
        self.drop = nn.Dropout(cfg.dropout)

        def attn(cross):
            return MultiHeadAttention(d, H, dh, cfg.heads_per_branch, a, cfg.head_dropout, cross)

        def ffn():
            return FeedForward(d, C, ffn_width(cfg), a)

        blocks, betas = [], []
        for side, n, kinds in (("enc", self.n_enc, (False, None)), ("dec", self.n_dec, (False, True, None))):
            alpha_dn, beta = dn[side] if deep else (1.0, 1.0)
            if cfg.skip != "deepnorm":
                alpha_dn = 1.0
            for _ in range(n):
                for cross in kinds:
                    fn = ffn() if cross is None else attn(cross)
                    blocks.append(Sublayer(fn, d, cfg, self.tau, alpha_dn))
                    betas.append(beta)
        self.blocks = nn.ModuleList(blocks)
        final = cfg.norm == "ln" and cfg.norm_position == "pre" and cfg.skip in ("plain", "none", "xskip")
        self.enc_norm = nn.LayerNorm(d) if final else None
        self.dec_norm = nn.LayerNorm(d) if final else None
        with torch.no_grad():
            self.embed.weight.normal_(0.0, d**-0.5)
            self.embed.weight[pad].zero_()
        record_init(self.embed.weight, d, 1.0)
        for b, beta in zip(self.blocks, betas):
            b.fn.reset_parameters(beta=beta, normal=deep, zero_out=cfg.init == "zero_last",
                                  per_branch=cfg.init == "xavier_branch")

    # ------------------------------------------------------------ pieces

    @property
    def enc_blocks(self):
        return self.blocks[: 2 * self.n_enc]

    @property
    def dec_blocks(self):
        return self.blocks[2 * self.n_enc :]

    def _embed(self, tokens: torch.Tensor, start: int = 0) -> torch.Tensor:
        T = tokens.shape[1]
        if start + T > self.pe.shape[0]:
            self.pe = sinusoids(2 * (start + T), self.d).to(self.pe.device)
        x = self.embed(tokens) * self.embed_scale + self.pe[start : start + T].to(self.embed.weight.dtype)
        return self.drop(x)

    def encode(self, src: torch.Tensor):
        """src [B, S] -> (memory [B, S, d], key mask [B, 1, 1, S] or None)."""
        pad = src.eq(self.pad)
        mask = (~pad)[:, None, None, :] if bool(pad.any()) else None
        x = self._embed(src)
        for blk in self.enc_blocks:
            x = blk(x, mask=mask)
        if self.enc_norm is not None:
            x = self.enc_norm(x)
        return x, mask

    def _decode(self, x, memory, mask, caches=None):
        for i, blk in enumerate(self.dec_blocks):
            kind = i % 3
            c = caches[i] if caches is not None else None
            if kind == 0:
                x = blk(x, causal=caches is None, cache=c)
            elif kind == 1:
                x = blk(x, memory=memory, mask=mask, cache=c)
            else:
                x = blk(x)
        if self.dec_norm is not None:
            x = self.dec_norm(x)
        if self.readout_mult != 1.0:
            x = x * self.readout_mult  # muP's tied readout (the mup package's MuSharedReadout) reads x / r
        return F.linear(x, self.embed.weight)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        memory, mask = self.encode(src)
        return self._decode(self._embed(tgt_in), memory, mask)

    # ------------------------------------------------------------ incremental decoding

    def start(self, src: torch.Tensor) -> DecodeState:
        memory, mask = self.encode(src)
        return DecodeState(memory, mask, len(self.dec_blocks))

    def step(self, tokens: torch.Tensor, state: DecodeState) -> torch.Tensor:
        """Log-probabilities [B, V] of the next token given the last one `tokens` [B]."""
        x = self._embed(tokens[:, None], start=state.t)
        logits = self._decode(x, state.memory, state.mask, state.caches)
        state.t += 1
        logp = F.log_softmax(logits[:, 0].float(), dim=-1)
        logp[:, [self.pad, self.bos]] = float("-inf")  # never generated
        return logp


def check_transformer(spec) -> tuple[tuple, str] | None:
    m = spec.model
    unsupported = {
        "norm": (("none", "ln"), "the transformer normalizes with LayerNorm or not at all"),
        "skip_norm": (("ln",), "batch norm over padded token batches is not supported"),
        "parametrization": (("weight", "sp", "mup", "depth_mup"),
                            "the path-space parametrization needs ReLU chains, not attention"),
        "init": (SUPPORTED_INIT, "fixup/stam_* inits are defined for ReLU branches"),
        "block": (("post",), "the pre-activation block is resnet's and resnext's; use norm_position"),
    }
    for key, (ok, why) in unsupported.items():
        v = getattr(m, key)
        if v not in ok:
            return ("model", key), f"{v!r} is not supported on transformer (supported: {', '.join(ok)}; {why})"
    for key, use in VISION_KEYS.items():  # keys of other archs: refuse rather than silently ignore
        if hasattr(m, key) and getattr(m, key) != getattr(_DEFAULTS, key):
            return ("model", key), f"{key} does not apply to arch transformer; {use}"
    if m.skip == "deepnorm" and m.norm_position == "pre":
        return ("model", "norm_position"), "deepnorm is a post-LN form; use norm_position: post"
    H = m.branches * m.heads_per_branch
    if m.head_dim is None and (m.d_model % H or m.d_model < H):
        return ("model", "head_dim"), (
            f"d_model {m.d_model} is not divisible by branches x heads_per_branch = {H}; set model.head_dim"
        )
    return _check_ffn_ratio(m)


def _check_ffn_ratio(m) -> tuple[tuple, str] | None:
    """`ffn_ratio` replaces `ffn_per_branch` (refused together rather than one silently ignored) and must give
    each branch at least one unit."""
    if m.ffn_ratio is None:
        return None
    if m.ffn_per_branch != _DEFAULTS.ffn_per_branch:
        return ("model", "ffn_per_branch"), (
            f"ffn_ratio {m.ffn_ratio} sets the FFN width (round(ffn_ratio * d_model / branches) per branch) in place of "
            f"ffn_per_branch {m.ffn_per_branch}: give one of them")
    if ffn_width(m) < 1:
        return ("model", "ffn_ratio"), (
            f"ffn_ratio {m.ffn_ratio} x d_model {m.d_model} / branches {m.branches} rounds to an FFN branch of 0 units")
    return None


@ARCHS.register("transformer", task="translation", check=check_transformer,
                doc="encoder-decoder Transformer; heads and FFN slices are the branches (STAM)")
def build_transformer(spec, info):
    e = info.extra
    return Transformer(spec.model, e["vocab"], pad=e["pad"], bos=e["bos"], eos=e["eos"])
