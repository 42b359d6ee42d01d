"""Greedy and beam-search decoding for `transformer`, batched over sentences.

Both use the model's incremental interface (`start(src)` -> state,
`step(last_tokens, state)` -> log-probs, `state.select(rows)`), drop finished
sentences from the batch as they finish, and return token-id lists without
BOS/EOS. Sentence i may produce at most ``limits[i]`` tokens; then EOS is
forced.

Beam search keeps `beam` live hypotheses per sentence. At every step the
`beam` best extensions (of all candidates) that end in EOS are finished with
the length-normalized score ``logp / len ** length_penalty`` (len counts the
EOS); the `beam` best non-EOS extensions stay live. A sentence is done once
it holds `beam` finished hypotheses (fairseq's stopping rule) or reaches its
limit; the best finished one is returned. With ``beam=1`` this is exactly
greedy decoding.
"""
from __future__ import annotations

import torch

__all__ = ["greedy", "beam_search", "decode"]


def _strip(row: list[int], eos: int, pad: int) -> list[int]:
    out = []
    for t in row:
        if t in (eos, pad):
            break
        out.append(t)
    return out


@torch.no_grad()
def greedy(model, src: torch.Tensor, limits: torch.Tensor) -> list[list[int]]:
    """Greedy decoding of `src` [B, S]; `limits` [B] = longest outputs."""
    B, dev = src.shape[0], src.device
    limits = limits.to(dev)
    state = model.start(src)
    out = torch.full((B, int(limits.max()) + 1), model.pad, dtype=torch.long, device=dev)
    rows = torch.arange(B, device=dev)  # original sentence of each live row
    last = torch.full((B,), model.bos, dtype=torch.long, device=dev)
    t = 0
    while rows.numel():
        logp = model.step(last, state)
        nxt = logp.argmax(-1)
        nxt = torch.where(limits[rows] <= t, torch.full_like(nxt, model.eos), nxt)
        out[rows, t] = nxt
        live = nxt.ne(model.eos)
        t += 1
        if not bool(live.all()):
            keep = live.nonzero().squeeze(1)
            rows, nxt = rows[keep], nxt[keep]
            state.select(keep)
        last = nxt
    return [_strip(r, model.eos, model.pad) for r in out.tolist()]


@torch.no_grad()
def beam_search(model, src: torch.Tensor, limits: torch.Tensor, beam: int, length_penalty: float = 1.0) -> list[list[int]]:
    """Beam search over `src` [B, S], `beam` hypotheses per sentence, length-normalized."""
    B, dev, k = src.shape[0], src.device, beam
    eos, pad = model.eos, model.pad
    limits = limits.to(dev)
    Tmax = int(limits.max()) + 1
    state = model.start(src)
    state.select(torch.arange(B, device=dev).repeat_interleave(k))  # row b*k + j = beam j of sentence b
    neg = float("-inf")
    scores = torch.full((B, k), neg, device=dev)
    scores[:, 0] = 0.0  # only one real hypothesis at the start
    toks = torch.full((B, k, Tmax), pad, dtype=torch.long, device=dev)
    fin_scores = torch.full((B, k), neg, device=dev)
    fin_toks = torch.full((B, k, Tmax), pad, dtype=torch.long, device=dev)
    best_scores = torch.full((B,), neg, device=dev)
    best_toks = torch.full((B, Tmax), pad, dtype=torch.long, device=dev)
    sent = torch.arange(B, device=dev)  # original index of each live sentence
    last = torch.full((B * k,), model.bos, dtype=torch.long, device=dev)
    t = 0
    while sent.numel():
        n = sent.numel()
        logp = model.step(last, state).view(n, k, -1)
        V = logp.shape[-1]
        at_limit = limits[sent] <= t  # [n]
        if bool(at_limit.any()):  # only EOS, with its own log-probability (as fairseq does)
            only_eos = torch.arange(V, device=dev).ne(eos)
            logp = logp.masked_fill(at_limit[:, None, None] & only_eos, neg)
        cand = (scores[:, :, None] + logp).view(n, k * V)
        # finished: EOS extensions among the k best candidates
        top_s, top_i = cand.topk(k, dim=1)
        top_beam, top_tok = top_i // V, top_i % V
        is_eos = top_tok.eq(eos) & torch.isfinite(top_s)
        if bool(is_eos.any()):
            new = torch.where(is_eos, top_s / float(t + 1) ** length_penalty, torch.full_like(top_s, neg))
            new_toks = toks.gather(1, top_beam[:, :, None].expand(n, k, Tmax)).clone()
            new_toks[:, :, t] = eos
            all_s = torch.cat([fin_scores, new], 1)
            all_t = torch.cat([fin_toks, new_toks], 1)
            fin_scores, keep = all_s.topk(k, dim=1)
            fin_toks = all_t.gather(1, keep[:, :, None].expand(n, k, Tmax))
        # live: the k best non-EOS extensions
        cand = cand.view(n, k, V).clone()
        cand[:, :, eos] = neg
        scores, live_i = cand.view(n, k * V).topk(k, dim=1)
        live_beam, live_tok = live_i // V, live_i % V
        toks = toks.gather(1, live_beam[:, :, None].expand(n, k, Tmax)).clone()
        toks[:, :, t] = live_tok
        t += 1
        done = torch.isfinite(fin_scores).all(1) | at_limit
        src_rows = (torch.arange(n, device=dev)[:, None] * k + live_beam).view(-1)
        if bool(done.any()):
            d = done.nonzero().squeeze(1)
            best = fin_scores[d].argmax(1)
            best_scores[sent[d]] = fin_scores[d, best]
            best_toks[sent[d]] = fin_toks[d, best]
            keep = (~done).nonzero().squeeze(1)
            sent, scores, toks = sent[keep], scores[keep], toks[keep]
            fin_scores, fin_toks, live_tok = fin_scores[keep], fin_toks[keep], live_tok[keep]
            src_rows = src_rows.view(n, k)[keep].view(-1)
        state.select(src_rows)
        last = live_tok.reshape(-1)
    return [_strip(r, eos, pad) for r in best_toks.tolist()]


def decode(model, src: torch.Tensor, limits: torch.Tensor, beam: int = 1, length_penalty: float = 1.0) -> list[list[int]]:
    """Greedy (`beam` 1) or beam search; token-id lists without BOS/EOS."""
    if beam <= 1:
        return greedy(model, src, limits)
    return beam_search(model, src, limits, beam, length_penalty)
