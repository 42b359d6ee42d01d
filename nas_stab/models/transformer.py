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
tensor (`base.record_init`) for muP. The layers are in transformer_layers.py.

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

from nas_stab.config.schema import ModelConfig, Spec
from nas_stab.models.base import StableModel, Tau, branch_alpha, deepnorm_constants, model_tau, record_init
from nas_stab.models.checks import ffn_width
from nas_stab.models.transformer_layers import FeedForward, MultiHeadAttention, Sublayer, sinusoids

__all__ = ["Transformer", "build_transformer"]

_DEFAULTS = ModelConfig()


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

    pe: torch.Tensor  # a buffer (register_buffer): the sinusoidal positions, grown on demand

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
        fns: list[FeedForward | MultiHeadAttention] = []  # each block's branch, reset below
        for side, n, kinds in (("enc", self.n_enc, (False, None)), ("dec", self.n_dec, (False, True, None))):
            alpha_dn, beta = dn[side] if deep else (1.0, 1.0)
            if cfg.skip != "deepnorm":
                alpha_dn = 1.0
            for _ in range(n):
                for cross in kinds:
                    fn = ffn() if cross is None else attn(cross)
                    blocks.append(Sublayer(fn, d, cfg, self.tau, alpha_dn))
                    fns.append(fn)
                    betas.append(beta)
        self.blocks = nn.ModuleList(blocks)
        final = cfg.norm == "ln" and cfg.norm_position == "pre" and cfg.skip in ("plain", "none", "xskip")
        self.enc_norm = nn.LayerNorm(d) if final else None
        self.dec_norm = nn.LayerNorm(d) if final else None
        with torch.no_grad():
            self.embed.weight.normal_(0.0, d**-0.5)
            self.embed.weight[pad].zero_()
        record_init(self.embed.weight, d, 1.0)
        for fn, beta in zip(fns, betas):
            fn.reset_parameters(beta=beta, normal=deep, zero_out=cfg.init == "zero_last",
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


def build_transformer(spec: Spec, info):
    e = info.extra
    return Transformer(spec.model, e["vocab"], pad=e["pad"], bos=e["bos"], eos=e["eos"])
