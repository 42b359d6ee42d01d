"""Stability probes (SPEC 4): correctness of every metric, and that probing never changes training."""
import copy
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from nas_stab.config import loads_spec
from nas_stab.models import build_model
from nas_stab.stability import DivergenceRule, Prober, explain_nonfinite, probe_mode
from nas_stab.tasks import load_task
from nas_stab.training.loop import train_run
from nas_stab.training.optim import build_optimizer

DIGITS = """\
name: st
task: {dataset: {name: digits}}
model: {arch: mlp_resnet, depth: 3, width: 16, branches: 2, branch_depth: 2, aggregation: stam}
train: {lr: 0.05, momentum: 0.9, batch_size: 32, steps: 12}
stability: {every: 5, probe_batch: 64, hessian: true}
"""


class Task:
    """A minimal task around one fixed batch (the Prober needs probe_batch, forward, loss)."""

    def __init__(self, x, y):
        self.probe_batch = (x, y)

    def forward(self, model, batch):
        return model(batch[0])

    def loss(self, model, batch):
        return F.cross_entropy(model(batch[0]), batch[1])


class Net(nn.Module):
    """Blocks of Linear [+ BatchNorm] + activation [+ dropout], then a head."""

    def __init__(self, dims=(5, 8, 8), classes=3, bn=False, dropout=0.0, act=nn.Tanh):
        super().__init__()
        layers = []
        for i, o in zip(dims[:-1], dims[1:]):
            mods = [nn.Linear(i, o)] + ([nn.BatchNorm1d(o)] if bn else []) + [act()]
            if dropout:
                mods.append(nn.Dropout(dropout))
            layers.append(nn.Sequential(*mods))
        self.blocks = nn.ModuleList(layers)
        self.head = nn.Linear(dims[-1], classes)

    def branch_weights(self):
        return [(f"blocks.{i}.0.weight", b[0].weight) for i, b in enumerate(self.blocks)]

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def exact_top_eigenvalue(model, task):
    """Largest algebraic eigenvalue of the full Hessian, by autograd and eigvalsh."""
    names = [n for n, _ in model.named_parameters()]
    params = [p.detach() for p in model.parameters()]
    shapes, sizes = [p.shape for p in params], [p.numel() for p in params]
    buffers = {n: b.clone() for n, b in model.named_buffers()}

    def f(w):
        d = {n: t.view(s) for n, t, s in zip(names, torch.split(w, sizes), shapes)}
        d.update({n: b.clone() for n, b in buffers.items()})
        return task.loss(lambda x: torch.func.functional_call(model, d, (x,)), task.probe_batch)

    with probe_mode(model):
        H = torch.autograd.functional.hessian(f, torch.cat([p.reshape(-1) for p in params]))
    e = torch.linalg.eigvalsh(H.double())
    return float(e.max())


def tiny(seed, **kw):
    torch.manual_seed(seed)
    model = Net(**kw)
    task = Task(torch.randn(32, 5), torch.randint(0, 3, (32,)))
    return model, task


def state_of(model, optimizer):
    """Everything a probe must leave alone."""
    return {
        "params": [p.detach().clone() for p in model.parameters()],
        "grads": [None if p.grad is None else p.grad.clone() for p in model.parameters()],
        "buffers": [b.clone() for b in model.buffers()],
        "opt": copy.deepcopy(optimizer.state_dict()),
        "modes": [m.training for m in model.modules()],
        "rng": torch.get_rng_state(),
    }


def assert_same(a, b):
    for x, y in zip(a["params"], b["params"]):
        assert torch.equal(x, y)
    for x, y in zip(a["grads"], b["grads"]):
        assert (x is None and y is None) or torch.equal(x, y)
    for x, y in zip(a["buffers"], b["buffers"]):
        assert torch.equal(x, y)
    assert a["modes"] == b["modes"]
    assert torch.equal(a["rng"], b["rng"])
    sa, sb = a["opt"]["state"], b["opt"]["state"]
    assert sa.keys() == sb.keys()
    for k in sa:
        for n in sa[k]:
            va, vb = sa[k][n], sb[k][n]
            assert torch.equal(va, vb) if torch.is_tensor(va) else va == vb


# ----------------------------------------------------------------- sharpness


@pytest.mark.parametrize("seed", range(6))
def test_sharpness_matches_exact_top_eigenvalue(seed):
    """Default settings (20 products at most, tolerance 1e-3): within 1% of eigvalsh."""
    model, task = tiny(seed)
    exact = exact_top_eigenvalue(model, task)
    snap = Prober(model, task, hessian=True).snapshot(None, hessian=True)
    assert snap["sharpness_converged"] == 1.0
    assert snap["sharpness_iters"] <= 20
    assert abs(snap["sharpness"] - exact) <= 0.01 * abs(exact), (snap["sharpness"], exact)


@pytest.mark.parametrize("bn", [False, True])
def test_sharpness_on_a_sub_batch_is_that_sub_batch_loss_top_eigenvalue(bn):
    """hessian_batch k < probe batch: the Hessian is that of the loss on the probe
    batch's first k examples (with BatchNorm: that sub-batch's statistics); the
    reference is eigvalsh of exactly that loss's full Hessian, not the whole batch's."""
    model, task = tiny(5, bn=bn)
    k = 12
    sub = Task(*(t[:k] for t in task.probe_batch))
    exact_sub, exact_all = exact_top_eigenvalue(model, sub), exact_top_eigenvalue(model, task)
    assert abs(exact_sub - exact_all) > 0.02 * abs(exact_all)  # the two really differ, so the test tells them apart
    pr = Prober(model, task, hessian=True, hessian_batch=k, hessian_iters=200, hessian_tol=1e-6)
    assert pr.hessian_sub_batch is not None and len(pr.hessian_sub_batch[0]) == k
    snap = pr.snapshot(torch.optim.SGD(model.parameters(), lr=0.1), 0, hessian=True)
    assert abs(snap["sharpness"] - exact_sub) <= 0.01 * abs(exact_sub), (snap["sharpness"], exact_sub, exact_all)
    # the other metrics still use the whole probe batch
    whole = Prober(model, task, hessian=False).snapshot(torch.optim.SGD(model.parameters(), lr=0.1), 0)
    for key in ("probe_loss", "fwd_ratio", "grad_ratio", "update_ratio"):
        assert snap[key] == whole[key], key


def test_hessian_batch_zero_or_at_least_the_probe_batch_means_the_whole_batch():
    model, task = tiny(2)
    vals = []
    for hb in (0, 32, 1000):
        pr = Prober(model, task, hessian=True, hessian_batch=hb)
        assert pr.hessian_sub_batch is None
        vals.append(pr.snapshot(None, hessian=True)["sharpness"])
    assert vals[0] == vals[1] == vals[2]
    # the schema's default when a spec gives none; a spec's value otherwise
    assert Prober(model, task).hessian_batch == 64
    spec = loads_spec(DIGITS.replace("hessian: true", "hessian: true, hessian_batch: 16"))
    task = load_task(spec, 0, torch.device("cpu"))
    pr = Prober(build_model(spec, task.info), task, spec)
    assert pr.hessian_batch == 16 and [len(t) for t in pr.hessian_sub_batch] == [16, 16]


def test_sharpness_small_gap_needs_more_products_and_says_so():
    """Seed 10 has a small eigengap (power iteration needed more than 20 products): Lanczos
    converges within the default 20 and matches to 0.1%; cut to 3 products it says it did not
    converge (sharpness_converged = 0)."""
    model, task = tiny(10)
    exact = exact_top_eigenvalue(model, task)
    snap = Prober(model, task, hessian=True, hessian_iters=3).snapshot(None, hessian=True)
    assert snap["sharpness_converged"] == 0.0 and snap["sharpness_iters"] == 3
    snap = Prober(model, task, hessian=True).snapshot(None, hessian=True)
    assert snap["sharpness_converged"] == 1.0 and snap["sharpness_iters"] <= 20
    assert abs(snap["sharpness"] - exact) <= 1e-3 * abs(exact), (snap["sharpness"], exact)


def test_sharpness_with_batchnorm_is_the_training_mode_hessian():
    model, task = tiny(3, bn=True, dropout=0.3)
    model.eval()  # the probe must switch BatchNorm to training mode itself (and dropout off)
    exact = exact_top_eigenvalue(model, task)  # computed under probe_mode: BN batch statistics
    snap = Prober(model, task, hessian=True, hessian_iters=200, hessian_tol=1e-6).snapshot(None, hessian=True)
    assert abs(snap["sharpness"] - exact) <= 0.01 * abs(exact)
    # and it differs from the eval-mode Hessian (running statistics), which is not what SPEC 4 asks
    ev = copy.deepcopy(model).eval()
    assert not torch.isclose(torch.tensor(exact), torch.tensor(exact_top_eigenvalue_eval(ev, task)), rtol=0.05)


def exact_top_eigenvalue_eval(model, task):
    params = list(model.parameters())
    loss = task.loss(model, task.probe_batch)
    g = torch.autograd.grad(loss, params, create_graph=True)
    n = sum(p.numel() for p in params)
    rows = []
    for i in range(n):
        e = torch.zeros(n)
        e[i] = 1
        v = [t.view_as(p) for t, p in zip(torch.split(e, [p.numel() for p in params]), params)]
        rows.append(torch.cat([h.reshape(-1) for h in torch.autograd.grad(g, params, v, retain_graph=True)]))
    ev = torch.linalg.eigvalsh(torch.stack(rows).double())
    return float(ev.max())


class Quadratic(nn.Module):
    """loss = 0.5 w^T A w + b^T w: the Hessian is A, whatever the batch."""

    def __init__(self, eigs, seed=0):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        q, _ = torch.linalg.qr(torch.randn(len(eigs), len(eigs), generator=g))
        self.register_buffer("A", q @ torch.diag(torch.tensor(eigs)) @ q.T)
        self.w = nn.Parameter(torch.randn(len(eigs), generator=g))
        self.b = torch.randn(len(eigs), generator=g)

    def forward(self, x):
        return (0.5 * self.w @ self.A @ self.w + self.b @ self.w).expand(x.shape[0], 1)


class QuadTask(Task):
    def loss(self, model, batch):
        return model(batch[0])[0, 0]


def test_sharpness_is_the_top_algebraic_eigenvalue_when_the_dominant_one_is_negative():
    """Power iteration would report -5 (largest magnitude); the edge of stability needs the largest
    algebraic eigenvalue, 3; and when every eigenvalue is negative, the one nearest 0."""
    model = Quadratic([-5.0, 3.0, 2.0, 1.0, -1.0, 0.5])
    snap = Prober(model, QuadTask(torch.zeros(4, 1), None), hessian=True).snapshot(None, hessian=True)
    assert snap["sharpness"] == pytest.approx(3.0, rel=1e-3)
    model = Quadratic([-5.0, -3.0, -2.0, -1.0, -0.5])
    snap = Prober(model, QuadTask(torch.zeros(4, 1), None), hessian=True).snapshot(None, hessian=True)
    assert snap["sharpness"] == pytest.approx(-0.5, rel=1e-3)


def test_warm_start_reuses_the_previous_eigenvector():
    torch.manual_seed(0)
    spec = loads_spec(DIGITS)
    task = load_task(spec, 0, torch.device("cpu"))
    model = build_model(spec, task.info)
    pr = Prober(model, task, spec)
    first = pr.snapshot(None, 0)
    assert pr.eigvec is not None
    again = pr.snapshot(None, 5, final=True)
    assert again["sharpness"] == pytest.approx(first["sharpness"], rel=2e-3)
    assert again["sharpness_iters"] <= 3 < first["sharpness_iters"]


def test_hessian_every_must_be_a_multiple_of_every():
    from nas_stab.errors import SpecError

    ok = loads_spec(DIGITS.replace("hessian: true", "hessian: true, hessian_every: 10"))
    assert ok.stability.hessian_every == 10
    for bad, says in (("every: 5, probe_batch: 64, hessian: true, hessian_every: 12", "multiple of stability.every (5)"),
                      ("every: 0, probe_batch: 64, hessian: true, hessian_every: 10", "stability.every is 0")):
        with pytest.raises(SpecError) as e:
            loads_spec(DIGITS.replace("every: 5, probe_batch: 64, hessian: true", bad), file="x.yaml")
        assert str(e.value).startswith("x.yaml:5: stability.hessian_every: ") and says in str(e.value), str(e.value)


def test_hessian_cadence():
    spec = loads_spec(DIGITS)
    task = load_task(spec, 0, torch.device("cpu"))
    model = build_model(spec, task.info)
    pr = Prober(model, task, spec)
    assert pr.hessian_due(0, False) and pr.hessian_due(37, True) and not pr.hessian_due(5, False)
    assert Prober(model, task, spec, hessian_every=10).hessian_due(20, False)
    assert not Prober(model, task, spec, hessian=False).hessian_due(0, True)


# ----------------------------------------------------------------- update, forward, gradients


@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_update_ratio_is_zero_at_learning_rate_zero(opt):
    torch.manual_seed(0)
    spec = loads_spec(DIGITS)
    task = load_task(spec, 0, torch.device("cpu"))
    model = build_model(spec, task.info)
    params = list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=0.0, momentum=0.9) if opt == "sgd" else torch.optim.Adam(params, lr=0.0)
    snap = Prober(model, task, spec, hessian=False).snapshot(optimizer, 0)
    assert snap["update_ratio"] == 0.0
    dws = [v for k, v in snap.items() if k.startswith("dw_ratio.")]
    assert dws and all(v == 0.0 for v in dws)
    # and a positive learning rate moves the output
    for g in optimizer.param_groups:
        g["lr"] = 0.05
    snap = Prober(model, task, spec, hessian=False).snapshot(optimizer, 0)
    assert snap["update_ratio"] > 0 and all(snap[k] > 0 for k in snap if k.startswith("dw_ratio."))


def test_update_ratio_and_dw_ratio_match_a_manual_sgd_step():
    model, task = tiny(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    snap = Prober(model, task).snapshot(opt, 1)
    ref = copy.deepcopy(model)
    before = ref(task.probe_batch[0]).detach()
    loss = task.loss(ref, task.probe_batch)
    grads = torch.autograd.grad(loss, list(ref.parameters()))
    w0 = ref.blocks[0][0].weight.detach().clone()
    with torch.no_grad():
        for p, g in zip(ref.parameters(), grads):
            p -= 0.1 * g
        after = ref(task.probe_batch[0])
    assert snap["update_ratio"] == pytest.approx(float((after - before).norm() / before.norm()), rel=1e-5)
    dw = float((ref.blocks[0][0].weight.detach() - w0).norm() / w0.norm())
    assert snap["dw_ratio.blocks.0.0.weight"] == pytest.approx(dw, rel=1e-5)
    assert snap["grad_norm.blocks.0.0.weight"] == pytest.approx(float(grads[0].norm()), rel=1e-5)
    # grad_ratio: largest / smallest norm of the gradient with respect to each block's output
    ref = copy.deepcopy(model)
    h, outs = task.probe_batch[0], []
    for b in ref.blocks:
        h = b(h)
        h.retain_grad()
        outs.append(h)
    task.loss(lambda x: ref.head(outs[-1]), task.probe_batch).backward()
    gs = [float(o.grad.norm()) for o in outs]
    assert [snap[f"grad_stream.{i}"] for i in range(2)] == pytest.approx(gs, rel=1e-5)
    assert snap["grad_ratio"] == pytest.approx(max(gs) / min(gs), rel=1e-5)
    assert snap["grad_norm"] == pytest.approx(math.sqrt(sum(float(g.norm()) ** 2 for g in grads)), rel=1e-5)


class IdentityNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(nn.Identity() for _ in range(5))
        self.head = nn.Linear(4, 3)

    def branch_weights(self):
        return []

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def test_fwd_ratio_of_an_identity_network_is_one():
    torch.manual_seed(0)
    snap = Prober(IdentityNet(), Task(torch.randn(16, 4), torch.randint(0, 3, (16,)))).snapshot(None)
    assert snap["fwd_ratio"] == pytest.approx(1.0, abs=1e-6)
    assert all(snap[f"fwd_norm.{i}"] == pytest.approx(snap["fwd_norm.0"]) for i in range(5))
    # mlp_resnet with tau = 0: relu(h + 0) = h on the post-ReLU stream, an identity across blocks
    spec = loads_spec(DIGITS.replace("aggregation: stam}", "aggregation: stam, tau: 0}"))
    task = load_task(spec, 0, torch.device("cpu"))
    snap = Prober(build_model(spec, task.info), task, spec, hessian=False).snapshot(None)
    assert snap["fwd_ratio"] == pytest.approx(1.0, abs=1e-6)


def test_fwd_norms_are_block_output_rms():
    model, task = tiny(2)
    snap = Prober(model, task).snapshot(None)
    x = task.probe_batch[0]
    with torch.no_grad():
        h1 = model.blocks[0](x)
        h2 = model.blocks[1](h1)
    assert snap["fwd_norm.0"] == pytest.approx(float(h1.pow(2).mean().sqrt()), rel=1e-6)
    assert snap["fwd_ratio"] == pytest.approx(float(h2.pow(2).mean().sqrt() / x.pow(2).mean().sqrt()), rel=1e-6)


# ----------------------------------------------------------------- probes change nothing


def _trained_bn_model(opt_name):
    model, task = tiny(4, bn=True, dropout=0.2)
    opt = (torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9) if opt_name == "sgd"
           else torch.optim.AdamW(model.parameters(), lr=1e-2))
    for _ in range(3):
        opt.zero_grad()
        task.loss(model, task.probe_batch).backward()
        opt.step()
    task.loss(model, task.probe_batch).backward()  # leave a .grad behind
    return model, task, opt


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
def test_probe_leaves_model_grads_optimizer_bn_stats_and_rng_unchanged(opt_name):
    model, task, opt = _trained_bn_model(opt_name)
    model.eval()  # whatever mode the model is in, it stays in
    before = state_of(model, opt)
    pr = Prober(model, task, hessian=True)
    snap = pr.snapshot(opt, 0)
    snap = pr.snapshot(opt, 5, final=True)
    assert math.isfinite(snap["sharpness"]) and snap["update_ratio"] > 0
    assert_same(before, state_of(model, opt))


def test_probing_does_not_change_the_training_trajectory():
    a, task, opt_a = _trained_bn_model("sgd")
    b = copy.deepcopy(a)
    opt_b = torch.optim.SGD(b.parameters(), lr=0.1, momentum=0.9)
    opt_b.load_state_dict(copy.deepcopy(opt_a.state_dict()))
    pr = Prober(a, task, hessian=True)
    torch.manual_seed(7)
    for _ in range(3):
        pr.snapshot(opt_a, 1)
        opt_a.zero_grad()
        task.loss(a, task.probe_batch).backward()  # dropout draws from the global RNG
        opt_a.step()
    torch.manual_seed(7)
    for _ in range(3):
        opt_b.zero_grad()
        task.loss(b, task.probe_batch).backward()
        opt_b.step()
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
    for p, q in zip(a.buffers(), b.buffers()):
        assert torch.equal(p, q)


def test_probe_on_a_batchnorm_resnet_keeps_running_statistics():
    spec = loads_spec("""\
name: r
task: {dataset: {name: synthetic, shape: [3, 8, 8], size: 120, classes: 4}}
model: {arch: resnet, depth: 8, width: 4, norm: bn}
train: {lr: 0.1, batch_size: 32, steps: 5}
stability: {probe_batch: 32, hessian_iters: 5}
""")
    torch.manual_seed(0)
    task = load_task(spec, 0, torch.device("cpu"))
    model = build_model(spec, task.info)
    opt = build_optimizer(model, spec.train)
    assert any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())
    before = state_of(model, opt)
    snap = Prober(model, task, spec).snapshot(opt, 0)
    assert math.isfinite(snap["sharpness"]) and math.isfinite(snap["update_ratio"])
    assert_same(before, state_of(model, opt))


def test_probe_mode_turns_dropout_off_and_batchnorm_to_batch_statistics():
    model, task = tiny(0, bn=True, dropout=0.5)
    model.eval()
    with probe_mode(model):
        assert model.training and model.blocks[0].training and model.blocks[0][1].training
        assert not model.blocks[0][3].training  # dropout
        assert not model.head.training
        out1 = model(task.probe_batch[0])
        out2 = model(task.probe_batch[0])
        assert torch.equal(out1, out2)
    assert not model.training and not model.blocks[0][1].training


# ----------------------------------------------------------------- divergence


def test_explain_nonfinite_names_the_first_quantity():
    model, task = tiny(0)
    x = task.probe_batch
    assert explain_nonfinite(model, task, x) is None
    model.blocks[1][0].weight.grad = torch.full_like(model.blocks[1][0].weight, math.inf)
    model.blocks[0][0].weight.grad = torch.full_like(model.blocks[0][0].weight, math.nan)
    what, value, off = explain_nonfinite(model, task, x)
    assert what == "gradient norm of blocks.1.0.weight" and off == -1 and math.isinf(value)  # nearest the output
    model.zero_grad(set_to_none=True)
    with torch.no_grad():
        model.blocks[0][0].bias[0] = math.nan
    assert explain_nonfinite(model, task, x)[0] == "parameter blocks.0.0.bias"
    model, task = tiny(0, act=nn.ReLU)
    with torch.no_grad():
        model.blocks[1][0].weight.mul_(1e38)
        model.blocks[1][0].bias.fill_(1e38)
    what, value, off = explain_nonfinite(model, task, task.probe_batch)
    assert what == "forward output of blocks.1" and off == 0


def test_rule_message_carries_the_first_nonfinite_quantity_and_its_step():
    rule = DivergenceRule(10)
    assert not rule.check(2.0, 1)
    assert rule.check(math.nan, 42, explain=lambda: ("gradient norm of blocks.3.branch.first", math.inf, -1))
    assert rule.step == 42
    assert rule.reason == "non-finite gradient norm of blocks.3.branch.first (inf) at step 41; then non-finite loss (nan) at step 42"
    rule = DivergenceRule(10)
    assert rule.check(math.inf, 3, explain=lambda: None) and rule.reason == "non-finite loss (inf)"


def test_snapshot_flags_a_nonfinite_block():
    model, task = tiny(0, act=nn.ReLU)
    with torch.no_grad():
        model.blocks[0][0].weight.mul_(1e38)
        model.blocks[0][0].bias.fill_(1e38)
    pr = Prober(model, task, hessian=True)
    snap = pr.snapshot(torch.optim.SGD(model.parameters(), lr=0.1), 0)
    assert pr.nonfinite[0] == "forward output of blocks.0"
    assert math.isinf(snap["fwd_ratio"]) and math.isinf(snap["sharpness"])


def test_a_diverging_run_says_what_went_nonfinite_first():
    """Sum of 32 branches at lr 100: a block's output overflows in training; only
    non-finite values trip the rule here (loss_factor 1e30). (8 branches did,
    before mlp_resnet's input layer was calibrated to standardized inputs.)"""
    text = (DIGITS.replace("lr: 0.05", "lr: 100.0").replace("aggregation: stam", "aggregation: sum")
            .replace("branches: 2", "branches: 32").replace("every: 5", "every: 0").replace("steps: 12", "steps: 40")
            .replace("hessian: true", "hessian: false, divergence: {loss_factor: 1.0e+30}"))
    r = train_run(loads_spec(text), 0)
    assert r.status == "diverged" and r.diverged_step == 3, (r.diverged_step, r.error)
    assert r.error == "non-finite forward output of blocks.0 (inf) at step 3, then non-finite loss (nan)", r.error


def test_probe_step_that_overflows_marks_the_run_diverged_at_init():
    text = (DIGITS.replace("lr: 0.05", "lr: 1.0e+5").replace("aggregation: stam", "aggregation: sum")  # sum of 8: overflows
            .replace("branches: 2", "branches: 8").replace("hessian: true", "hessian: false, divergence: {loss_factor: 1.0e+30}"))
    r = train_run(loads_spec(text), 0)
    assert r.status == "diverged" and r.diverged_step == 0
    assert r.error.startswith("non-finite model output after one update step"), r.error


# ----------------------------------------------------------------- the loop records everything


def test_history_and_metrics_hold_every_spec4_metric():
    spec = loads_spec(DIGITS)
    r = train_run(spec, 0)
    assert r.status == "complete"
    steps = [h["step"] for h in r.history if "fwd_ratio" in h]
    assert steps == [0, 5, 10, 12]
    for h in r.history:
        if "fwd_ratio" not in h:
            continue
        keys = set(h)
        for k in ("fwd_ratio", "grad_ratio", "update_ratio", "fwd_norm.0", "fwd_norm.2"):
            assert k in keys, k
        assert any(k.startswith("grad_norm.blocks.2.") for k in keys)
        assert any(k.startswith("dw_ratio.blocks.0.") for k in keys)
        assert ("sharpness" in keys) == (h["step"] in (0, 12))
        assert ("lr_sharpness" in keys) == (h["step"] in (0, 12))
    m = r.metrics
    for p in ("init_", "final_"):
        for k in ("fwd_ratio", "grad_ratio", "update_ratio", "sharpness", "lr_sharpness"):
            assert math.isfinite(m[p + k]), p + k
    assert m["init_lr_sharpness"] == pytest.approx(0.05 * m["init_sharpness"])
    assert m["max_update_ratio"] >= m["init_update_ratio"]


@pytest.mark.parametrize("hessian_batch", [0, 6])
def test_translation_transformer_sharpness_under_math_attention(hessian_batch):
    """On the whole probe batch, and on its first 6 sentence pairs (padded to the batch's lengths)."""
    spec = loads_spec(f"""\
name: t
task: {{kind: translation, dataset: {{name: synthetic, size: 200}}}}
model: {{arch: transformer, d_model: 16, enc_layers: 1, dec_layers: 1, dropout: 0.1, head_dropout: 0.2}}
train: {{lr: 0.001, batch_size: 16, steps: 10, optimizer: adam}}
stability: {{probe_batch: 16, hessian_iters: 8, hessian_batch: {hessian_batch}}}
search: {{objective: bleu}}
""")
    torch.manual_seed(0)
    task = load_task(spec, 0, torch.device("cpu"))
    model = build_model(spec, task.info)
    opt = build_optimizer(model, spec.train)
    before = state_of(model, opt)
    a = Prober(model, task, spec).snapshot(opt, 0)
    b = Prober(model, task, spec).snapshot(opt, 0)
    assert math.isfinite(a["sharpness"]) and a["update_ratio"] > 0
    assert a == b  # dropout and head dropout are off: deterministic
    assert_same(before, state_of(model, opt))


# ----------------------------------------------------------------- checkpoints


class Crash(Exception):
    pass


class MemoryCheckpointer:
    """The Checkpointer protocol in memory, through torch.save / torch.load(weights_only=True)
    as a real checkpoint goes through a file; crashes right after saving at `crash_at`."""

    def __init__(self, every: int, crash_at: int | None = None, drop: tuple = ()):
        self.every, self.crash_at, self.drop = every, crash_at, drop
        self.blob: bytes | None = None

    def load(self):
        import io

        if self.blob is None:
            return None
        state = torch.load(io.BytesIO(self.blob), weights_only=True)
        return {k: v for k, v in state.items() if k not in self.drop}

    def save(self, state):
        import io

        buf = io.BytesIO()
        torch.save(state, buf)
        self.blob = buf.getvalue()
        if state["step"] == self.crash_at:
            self.crash_at = None
            raise Crash


def test_resumed_run_gives_the_same_probe_values_as_an_uninterrupted_one():
    """The power iteration's warm start is in the checkpoint: the sharpness estimates after a
    resume (steps 15 and 20 here, warm-started from step 10's eigenvector) are bit-identical to an
    uninterrupted run's; without it (an old checkpoint) they start cold and differ."""
    text = DIGITS.replace("steps: 12", "steps: 20").replace("hessian: true", "hessian: true, hessian_every: 5, hessian_batch: 32")
    spec = loads_spec(text)
    whole = train_run(spec, 0)
    assert whole.status == "complete"
    sharp = [h["step"] for h in whole.history if "sharpness" in h]
    assert sharp == [0, 5, 10, 15, 20]

    ck = MemoryCheckpointer(every=10, crash_at=10)
    with pytest.raises(Crash):
        train_run(spec, 0, checkpoint=ck)
    resumed = train_run(spec, 0, checkpoint=ck)
    assert resumed.status == "complete"
    assert [h["step"] for h in resumed.history] == [h["step"] for h in whole.history]
    for a, b in zip(whole.history, resumed.history):
        assert a == b, (a["step"], {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)})
    assert resumed.metrics == whole.metrics

    # the same resume without the prober's state starts the power iteration cold: different estimates
    ck = MemoryCheckpointer(every=10, crash_at=10, drop=("prober",))
    with pytest.raises(Crash):
        train_run(spec, 0, checkpoint=ck)
    cold = train_run(spec, 0, checkpoint=ck)
    a, b = (next(h for h in r.history if h["step"] == 15) for r in (whole, cold))
    assert (a["sharpness"], a["sharpness_iters"]) != (b["sharpness"], b["sharpness_iters"]), (a, b)
