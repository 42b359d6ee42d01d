"""`transformer`: shapes, gradients and determinism over the knob grid; what each knob does."""
from __future__ import annotations

import itertools
import math

import pytest
import torch
import torch.nn.functional as F

from nas_stab.config import loads_spec
from nas_stab.errors import SpecError
from nas_stab.models.base import deepnorm_constants
from nas_stab.models.transformer import Transformer
from nas_stab.models.transformer_decode import beam_search, greedy

V = 40


def model_cfg(**kw):
    base = dict(arch="transformer", d_model=16, heads_per_branch=2, ffn_per_branch=8, enc_layers=1, dec_layers=1)
    base.update(kw)
    return make_spec(base).model


def make_spec(model: dict, **task):
    import yaml

    data = {"name": "t", "task": {"kind": "translation", "dataset": {"name": "synthetic"}, **task},
            "model": model, "search": {"objective": "bleu"}}
    return loads_spec(yaml.safe_dump(data))


def batch(seed=0, B=3, S=7, T=6):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (B, S), generator=g)
    src[0, S - 2 :] = 0  # padding in one sentence
    src[0, S - 3] = 3
    tgt = torch.randint(4, V, (B, T), generator=g)
    tgt[:, 0] = 2
    return src, tgt


TAUS = [1, "1/sqrt(L)", {"init": 0.5, "learnable": True}]
GRID = [
    dict(branches=c, aggregation=a, skip=s, norm_position=p, tau=t, norm=("ln", "none")[i % 2])
    for i, (c, a, s, p, t) in enumerate(itertools.product(
        [1, 3], ["sum", "avg", "stam"], ["plain", "none", "xskip", "xskip_ln", "rskip_ln", "deepnorm"], ["post", "pre"], TAUS))
    if not (s == "deepnorm" and p == "pre")
]


def _lam(kw):
    return {"skip_lambda": 2} if kw["skip"] in ("xskip", "xskip_ln", "rskip_ln") else {}


@pytest.mark.parametrize("kw", GRID, ids=lambda kw: "-".join(str(v) if not isinstance(v, dict) else "learn" for v in kw.values()))
def test_knob_grid_shapes_gradients_determinism(kw):
    cfg = model_cfg(**kw, **_lam(kw), head_dim=4, dropout=0.1, head_dropout=0.2)
    src, tgt = batch()
    outs = []
    for _ in range(2):
        torch.manual_seed(0)
        m = Transformer(cfg, V)
        m.train()
        torch.manual_seed(1)  # same dropout masks
        out = m(src, tgt)
        outs.append(out)
    assert outs[0].shape == (3, 6, V)
    assert torch.isfinite(outs[0]).all()
    assert torch.equal(outs[0], outs[1]), "same seed must give the same output"
    torch.manual_seed(0)
    m = Transformer(cfg, V).eval()  # no dropped head: every weight must get a gradient
    F.cross_entropy(m(src, tgt).reshape(-1, V), tgt.reshape(-1)).backward()
    missing = [n for n, p in m.named_parameters() if p.grad is None or not torch.isfinite(p.grad).all()]
    assert not missing, f"no (finite) gradient for {missing}"
    zero = [n for n, p in m.named_parameters() if float(p.grad.abs().sum()) == 0]
    assert not zero, f"zero gradient for {zero}"
    L = 2 * 1 + 3 * 1
    assert len(m.blocks) == L
    assert len(m.branch_weights()) == 2 + 2 + 2 + 3 + 2  # enc attn, ffn; dec self-attn, cross-attn, ffn


def test_branch_weights_are_attention_and_ffn():
    m = Transformer(model_cfg(enc_layers=2, dec_layers=1), V)
    names = [n for n, _ in m.branch_weights()]
    assert all(any(k in n for k in ("qkv_proj", "q_proj", "kv_proj", "out_proj", "fc1", "fc2")) for n in names)
    assert sum("fc1" in n for n in names) == 3 and sum(".kv_proj" in n for n in names) == 1


def test_heads_and_ffn_width_follow_branches():
    m = Transformer(model_cfg(branches=4, heads_per_branch=2, head_dim=8, ffn_per_branch=8), V)
    attn, ffn = m.blocks[0].fn, m.blocks[1].fn
    assert attn.H == 8 and attn.qkv_proj.weight.shape == (3 * 64, 16) and attn.out_proj.weight.shape == (16, 64)
    assert ffn.fc1.weight.shape == (32, 16) and ffn.fc2.weight.shape == (16, 32)
    m = Transformer(model_cfg(branches=4, heads_per_branch=1, d_model=16), V)  # default head_dim = 16 / 4
    assert m.blocks[0].fn.dh == 4


@pytest.mark.parametrize("agg,base,C,expect", [("sum", 1, 4, 1.0), ("avg", 1, 4, 0.25), ("stam", 1, 4, 0.5),
                                                ("stam", 4, 4, 1.0), ("stam", 2, 8, 0.5), (0.3, 1, 4, 0.3)])
def test_alpha_scales_attention_and_ffn_outputs(agg, base, C, expect):
    torch.manual_seed(0)
    ref = Transformer(model_cfg(branches=C, aggregation="sum", head_dim=4), V)
    torch.manual_seed(0)
    m = Transformer(model_cfg(branches=C, aggregation=agg, aggregation_base=base, head_dim=4), V)
    x = torch.randn(2, 5, 16)
    for i in (0, 1):  # attention, FFN
        a, b = m.blocks[i].fn(x), ref.blocks[i].fn(x)
        assert m.blocks[i].fn.alpha == pytest.approx(expect)
        torch.testing.assert_close(a, expect * b)


def test_ffn_branches_are_independent_mini_ffns():
    """The wide FFN is alpha * the sum of C mini FFNs, one per hidden slice."""
    torch.manual_seed(0)
    m = Transformer(model_cfg(branches=3, aggregation="stam", ffn_per_branch=5, head_dim=4), V)
    ffn = m.blocks[1].fn
    x = torch.randn(2, 4, 16)
    parts = []
    for k in range(3):
        sl = slice(5 * k, 5 * (k + 1))
        h = F.relu(F.linear(x, ffn.fc1.weight[sl], ffn.fc1.bias[sl]))
        parts.append(F.linear(h, ffn.fc2.weight[:, sl]))
    expect = (sum(parts) + ffn.fc2.bias) / math.sqrt(3)
    torch.testing.assert_close(ffn(x), expect)


def _fairseq_xavier_var(fan_in: int, fan_out: int, gain: float = 1.0) -> float:
    """Variance of torch/fairseq xavier_uniform_: U(-a, a), a = gain sqrt(6 / (fan_in + fan_out))."""
    return gain ** 2 * 2.0 / (fan_in + fan_out)


@pytest.mark.parametrize("C", [1, 8])
def test_stock_init_is_fairseq_xavier_on_the_whole_layer(C):
    """The stock model (init kaiming) is fairseq's: xavier_uniform_ on each whole projection,
    q/k/v with gain 1/sqrt(2) (fairseq's MultiheadAttention), out_proj, fc1, fc2 gain 1;
    the fans are the full layer's (d and C * branch width), not one branch's."""
    d, dh, f = 64, 16, 64
    torch.manual_seed(0)
    m = Transformer(model_cfg(branches=C, heads_per_branch=1, head_dim=dh, ffn_per_branch=f, d_model=d), V)
    inner, hidden = C * dh, C * f
    self_attn, ffn, cross = m.blocks[0].fn, m.blocks[1].fn, m.blocks[3].fn
    q, k, v = self_attn.qkv_proj.weight.view(3, inner, d)
    cq, (ck, cv) = cross.q_proj.weight, cross.kv_proj.weight.view(2, inner, d)
    g = 2 ** -0.5
    cases = [(w, d, inner, g) for w in (q, k, v, cq, ck, cv)] + [
        (self_attn.out_proj.weight, inner, d, 1.0), (cross.out_proj.weight, inner, d, 1.0),
        (ffn.fc1.weight, d, hidden, 1.0), (ffn.fc2.weight, hidden, d, 1.0)]
    for w, fan_in, fan_out, gain in cases:
        var = _fairseq_xavier_var(fan_in, fan_out, gain)
        bound = math.sqrt(3 * var)
        assert w.var().item() == pytest.approx(var, rel=0.1), (tuple(w.shape), w.var().item(), var)
        assert w.abs().max().item() <= bound * (1 + 1e-6) and w.abs().max().item() > 0.95 * bound
    for p in (self_attn.qkv_proj.bias, self_attn.out_proj.bias, ffn.fc1.bias, ffn.fc2.bias):
        assert p.abs().sum() == 0


def test_stock_init_scales_down_with_C_and_xavier_branch_does_not():
    """STAM section 3.2: stock Xavier on the full layer "scales down by about 1/sqrt(C)" (fc2's
    std at C = 8 is 3x smaller than at C = 1 here); init xavier_branch keeps one branch's fans."""
    d, f = 64, 64
    std = {}
    for init in ("kaiming", "xavier_branch"):
        for C in (1, 8):
            torch.manual_seed(0)
            m = Transformer(model_cfg(branches=C, heads_per_branch=1, head_dim=16, ffn_per_branch=f, d_model=d, init=init), V)
            std[init, C] = m.blocks[1].fn.fc2.weight.std().item()
    assert std["kaiming", 1] / std["kaiming", 8] == pytest.approx(math.sqrt((8 * f + d) / (f + d)), rel=0.05)
    assert std["xavier_branch", 8] == pytest.approx(math.sqrt(2 / (f + d)), rel=0.05)
    assert std["xavier_branch", 8] / std["kaiming", 8] == pytest.approx(math.sqrt(4.5), rel=0.05)


def test_per_branch_init_fans():
    """init xavier_branch: each branch is initialized like the mini block, whatever C (so sum grows as sqrt(C))."""
    torch.manual_seed(0)
    stds = []
    for C in (1, 16):
        m = Transformer(model_cfg(branches=C, heads_per_branch=1, head_dim=8, ffn_per_branch=32, d_model=32,
                                  init="xavier_branch"), V)
        attn, ffn = m.blocks[0].fn, m.blocks[1].fn
        stds.append((attn.qkv_proj.weight.std().item(), attn.out_proj.weight.std().item(),
                     ffn.fc1.weight.std().item(), ffn.fc2.weight.std().item()))
    for a, b in zip(*stds):
        assert a == pytest.approx(b, rel=0.1)


def test_head_dropout_drops_whole_heads_once_per_call():
    torch.manual_seed(0)
    m = Transformer(model_cfg(branches=8, heads_per_branch=1, d_model=16, head_dim=2, head_dropout=0.5), V)
    attn = m.blocks[0].fn
    with torch.no_grad():  # out_proj = identity: the output is the concatenated heads
        attn.out_proj.weight.copy_(torch.eye(16))
        attn.out_proj.bias.zero_()
    x = torch.randn(3, 5, 16)
    attn.eval()
    full = attn(x)
    attn.train()
    torch.manual_seed(3)
    drop = attn(x)
    dropped = 0
    for h in range(8):
        a, b = full[..., 2 * h : 2 * h + 2], drop[..., 2 * h : 2 * h + 2]
        if float(b.detach().abs().sum()) == 0:
            dropped += 1
        else:
            torch.testing.assert_close(b, a / 0.5)  # kept heads scaled by 1/(1-p), for every token and sentence
    assert 0 < dropped < 8


def test_tau_forms_and_shared_learnable_tau():
    m = Transformer(model_cfg(tau="1/L", enc_layers=2, dec_layers=3), V)
    L = 2 * 2 + 3 * 3
    assert len(m.blocks) == L and float(m.tau()) == pytest.approx(1 / L)
    for cfg in (model_cfg(tau={"init": "1/sqrt(L)", "learnable": True}), model_cfg(tau="1/sqrt(L)", tau_learnable=True)):
        m = Transformer(cfg, V)
        taus = {id(b.tau.value) for b in m.blocks}
        assert len(taus) == 1 and sum(p.ndim == 0 for p in m.parameters()) == 1
        assert float(m.tau().detach()) == pytest.approx(1 / math.sqrt(5))


def test_tau_scales_the_residual_branch():
    torch.manual_seed(0)
    m = Transformer(model_cfg(tau=0.25, norm="none", skip="plain"), V)
    x = torch.randn(2, 3, 16)
    blk = m.blocks[1].eval()
    torch.testing.assert_close(blk(x), x + 0.25 * blk.fn(x))


def test_skip_forms():
    torch.manual_seed(0)
    x = torch.randn(2, 3, 16)
    m = Transformer(model_cfg(skip="rskip_ln", skip_lambda=3, norm="none"), V).eval()
    blk = m.blocks[1]
    f = blk.fn(x)
    y = blk.norms[0](x + f)
    y = blk.norms[2](x + blk.norms[1](x + y))
    torch.testing.assert_close(blk(x), y)
    assert len(blk.norms) == 3
    m = Transformer(model_cfg(skip="xskip", skip_lambda=2, norm="none"), V).eval()
    torch.testing.assert_close(m.blocks[1](x), 2 * x + m.blocks[1].fn(x))
    m = Transformer(model_cfg(skip="xskip_ln", skip_lambda=2, norm="none"), V).eval()
    torch.testing.assert_close(m.blocks[1](x), m.blocks[1].norms[0](2 * x + m.blocks[1].fn(x)))
    m = Transformer(model_cfg(skip="plain", norm="ln", norm_position="pre"), V).eval()
    b = m.blocks[1]
    torch.testing.assert_close(b(x), x + b.fn(b.pre_norm(x)))
    assert m.enc_norm is not None and m.dec_norm is not None
    m = Transformer(model_cfg(skip="none", norm="none"), V).eval()
    torch.testing.assert_close(m.blocks[1](x), m.blocks[1].fn(x))


def test_deepnorm_alpha_beta():
    (ea, eb), (da, db) = deepnorm_constants(6, 6).values()
    assert ea == pytest.approx(0.81 * (6**5) ** (1 / 16)) and eb == pytest.approx(0.87 * (6**5) ** (-1 / 16))
    assert da == pytest.approx(18**0.25) and db == pytest.approx(72**-0.25)
    torch.manual_seed(0)
    m = Transformer(model_cfg(skip="deepnorm", enc_layers=6, dec_layers=6, d_model=64, ffn_per_branch=256, heads_per_branch=4), V)
    assert m.blocks[0].dn_alpha == pytest.approx(ea) and m.blocks[-1].dn_alpha == pytest.approx(da)
    x = torch.randn(2, 3, 64)
    blk = m.blocks[1].eval()
    torch.testing.assert_close(blk(x), blk.norms[0](ea * x + blk.fn(x)))
    # beta: Xavier-normal gain on v/out/FFN (queries and keys keep gain 1)
    attn = m.blocks[0].fn
    q, k, v = attn.qkv_proj.weight.view(3, 64, 64)
    xavier = math.sqrt(2 / (64 + 64))
    assert q.std().item() == pytest.approx(xavier, rel=0.1) and v.std().item() == pytest.approx(eb * xavier, rel=0.1)
    fc2 = m.blocks[-1].fn.fc2.weight
    assert fc2.std().item() == pytest.approx(db * math.sqrt(2 / (256 + 64)), rel=0.1)


def test_zero_last_init_makes_sublayers_identity():
    m = Transformer(model_cfg(init="zero_last", norm="none"), V).eval()
    x = torch.randn(2, 3, 16)
    for blk in m.blocks[:2]:
        torch.testing.assert_close(blk(x), x)


@pytest.mark.parametrize("kw", [dict(norm="ln"), dict(norm="ln", norm_position="pre", branches=2),
                                dict(skip="rskip_ln", skip_lambda=2), dict(skip="deepnorm"), dict(tau="1/sqrt(L)")])
def test_incremental_decoding_matches_full_forward(kw):
    torch.manual_seed(0)
    m = Transformer(model_cfg(**kw, enc_layers=2, dec_layers=2), V).eval()
    src, tgt = batch()
    full = torch.log_softmax(m(src, tgt), -1)
    state = m.start(src)
    inc = torch.stack([m.step(tgt[:, t], state) for t in range(tgt.shape[1])], 1)
    keep = torch.ones(V, dtype=torch.bool)
    keep[[0, 2]] = False  # pad and bos are never generated
    torch.testing.assert_close(inc[..., keep], full[..., keep], atol=1e-5, rtol=1e-5)


def _trained_like(seed=0):
    """A random model whose outputs are peaked enough to make decoding non-trivial."""
    torch.manual_seed(seed)
    m = Transformer(model_cfg(d_model=32, enc_layers=2, dec_layers=2, heads_per_branch=4, ffn_per_branch=32), V)
    with torch.no_grad():
        m.embed.weight.mul_(3.0)
    return m.eval()


def test_beam_one_equals_greedy():
    for seed in range(3):
        m = _trained_like(seed)
        src, _ = batch(seed, B=6, S=9)
        limits = torch.tensor([3, 5, 8, 12, 4, 6])
        g = greedy(m, src, limits)
        assert g == beam_search(m, src, limits, beam=1)
        assert all(len(h) <= lim for h, lim in zip(g, limits.tolist()))


def _score(m, src, hyp, lp):
    tgt = torch.tensor([[2] + hyp])
    logp = torch.log_softmax(m(src, tgt), -1)[0]
    seq = hyp + [3]
    return float(sum(logp[t, s].item() for t, s in enumerate(seq))) / len(seq) ** lp


def test_wide_beam_finds_the_exhaustive_best():
    """With a tiny vocabulary and a beam wider than all hypotheses, beam search is exhaustive."""
    torch.manual_seed(0)
    small = 6  # pad, unk, bos, eos + 2 words
    m = Transformer(model_cfg(d_model=16), small).eval()
    src = torch.tensor([[4, 5, 4, 3]])
    limit = 3
    for lp in (0.0, 1.0):
        got = beam_search(m, src, torch.tensor([limit]), beam=200, length_penalty=lp)[0]
        best, best_s = None, -math.inf
        for n in range(limit + 1):
            for hyp in itertools.product([1, 4, 5], repeat=n):
                s = _score(m, src[:, :], list(hyp), lp)
                if s > best_s:
                    best, best_s = list(hyp), s
        assert got == best, (lp, got, best)


def test_beam_search_is_batched_consistently():
    m = _trained_like(1)
    src, _ = batch(1, B=5, S=8)
    limits = torch.tensor([6, 6, 6, 6, 6])
    together = beam_search(m, src, limits, beam=4)
    alone = [beam_search(m, src[i : i + 1, : int(src[i].ne(0).sum())], limits[i : i + 1], beam=4)[0] for i in range(5)]
    assert together == alone


def test_hessian_vector_product_under_math_kernel():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    torch.manual_seed(0)
    m = Transformer(model_cfg(), V)
    src, tgt = batch()
    params = [p for p in m.parameters()]
    with sdpa_kernel(SDPBackend.MATH):
        loss = F.cross_entropy(m(src, tgt).reshape(-1, V), tgt.reshape(-1))
        grads = torch.autograd.grad(loss, params, create_graph=True)
        vec = [torch.randn_like(p) for p in params]
        hv = torch.autograd.grad(sum((g * v).sum() for g, v in zip(grads, vec)), params)
    assert all(torch.isfinite(h).all() for h in hv)
    assert sum(float(h.abs().sum()) for h in hv) > 0


@pytest.mark.parametrize("model,key", [
    ({"norm": "bn"}, "model.norm"),
    ({"norm": "path_bn"}, "model.norm"),
    ({"parametrization": "path"}, "model.parametrization"),
    ({"skip": "xskip_ln", "skip_norm": "bn"}, "model.skip_norm"),
    ({"init": "fixup"}, "model.init"),
    ({"init": "stam_forward"}, "model.init"),
    ({"block": "preact"}, "model.block"),
    ({"skip": "deepnorm", "norm_position": "pre"}, "model.norm_position"),
    ({"d_model": 30, "branches": 4}, "model.head_dim"),
    ({"branch_depth": 2}, "model.branch_depth"),
    ({"depth": 6}, "model.depth"),
    ({"width": 64}, "model.width"),
])
def test_unsupported_knobs_are_spec_errors(model, key):
    with pytest.raises(SpecError) as e:
        make_spec({"arch": "transformer", **model})
    assert e.value.key == key


def test_transformer_needs_translation_task():
    import yaml

    with pytest.raises(SpecError, match="translation"):
        loads_spec(yaml.safe_dump({"name": "t", "task": {"dataset": {"name": "digits"}}, "model": {"arch": "transformer"}}))
