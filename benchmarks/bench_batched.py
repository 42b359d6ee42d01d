"""Batched sweeps (issue 34, point 5): the runs of one configuration that differ only in seed and lr
trained as ONE stacked model, against today's one-run-per-trial path. Measured first; not adopted
(docs/batched-sweeps.md says why, with the figures and the design).

    python benchmarks/bench_batched.py [--case quickstart|mnist512] [--threads 1,2] [--rounds 3]
        [--variants loop,stacked,loop-bare,stacked-bare,nas] [--root DATA_DIR] [--steps N] [--lrs K]
    python benchmarks/bench_batched.py --check [--case ...]      # equality only, one process
    python benchmarks/bench_batched.py --breakdown [--case ...]  # CPU time per configuration, one process

The members of a configuration are every (seed, lr) of its sweep: the quickstart's 6 configurations
(branches 1, 4, 16 x sum, stam) have 3 seeds x 6 lrs = 18 members each (108 runs in all);
`--lrs 11` takes the half-octave grid over the same range (33 members). `mnist512` is the
`mlp_resnet` of benchmarks/bench_trial.py (width 512, depth 8, MNIST, batch 128, SGD), one
configuration, `--seeds` x `--lrs` members of `--steps` steps (defaults 2 x 3, 200 steps: the
one-run path takes about a minute per process).

Variants, each a whole new process (`--worker VARIANT`), rotated in rounds (the order reverses every
other round; one warm-up round not counted):

- `loop`: today's per-run training path: `train_run` (nas_stab/training/loop.py) once per member,
  the data loaded once (as `nas-stab run` does): divergence rule, mid-run validations, stability
  snapshots at init, every `stability.every` steps and at the end, val and test at the end.
- `stacked`: the members of each configuration as one model: `torch.func.stack_module_state`-style
  stacked parameters (a leading member axis), `functional_call` + `vmap` for the forward (each member
  its own batch: one data stream per seed, as nas_stab draws it), one backward for all, the
  optimizer (SGD with momentum, Adam, AdamW, as torch.optim computes them) over the stacked tensors
  with a per-member lr; per member the divergence rule, spike counter and history; a member that
  stops is dropped from the stack, the others go on. Validations vmapped over the members; the
  stability snapshots per member, exactly as today (the member's parameters and optimizer state
  copied into one shadow model and `Prober.snapshot`): the same records as `loop`.
- `loop-bare`, `stacked-bare`: the arithmetic alone: the same steps with nothing else (no
  validations, snapshots or divergence checks; every member trains every step).
- `nas`: `nas-stab run` of the case's spec with `runner.concurrency: 1` (quickstart: the whole
  108-run experiment; mnist512: its members as a grid): the end-to-end path, Optuna study, run
  directory and leaderboard included. What it costs beyond `loop` is per-trial harness a batched
  trainer would still pay per member (each member stays its own trial and trials.csv row).

Prints per variant wall and CPU time (min / median / max) and each round's ratio to `loop`.
`--check` (also run before timing unless `--no-check`) trains every configuration both ways in one
process and prints, per configuration, the largest difference of the final parameters and of the
final metrics between each member and its separate run, and any member whose status or divergence
step differs. tests/test_bench_batched.py runs the check on 3 members.
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.func import functional_call, vmap

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from nas_stab.config import load_spec  # noqa: E402
from nas_stab.config.load import get_key, resolve  # noqa: E402
from nas_stab.data import reuse_loaded  # noqa: E402
from nas_stab.metrics import STABILITY_METRICS  # noqa: E402
from nas_stab.models import build_model  # noqa: E402
from nas_stab.stability import DivergenceRule, Prober, diverged_why, explain_nonfinite, reference_loss  # noqa: E402
from nas_stab.tasks import load_task  # noqa: E402
from nas_stab.training import loop as loop_mod  # noqa: E402
from nas_stab.training.loop import RunResult, SpikeCounter, _max, _snapshot, _tail, cadences, seed_everything  # noqa: E402
from nas_stab.training.malloc import keep_freed_memory  # noqa: E402
from nas_stab.training.optim import build_optimizer, lr_factor, set_lr, total_steps  # noqa: E402
from nas_stab.training.step import train_step  # noqa: E402

LR_KEY = "train.lr"

MNIST_SPEC = """\
name: batched-mnist512
seeds: {seeds}
task: {{dataset: {{name: mnist, root: {root}}}}}
model: {{arch: mlp_resnet, depth: 8, width: 512, tau: 1/L}}
train: {{lr: 0.003, steps: {steps}, batch_size: 128, threads: 1}}
space:
  train.lr: {{log_grid: [{lo}, {hi}, {n}]}}
search: {{sampler: grid, objective: val_acc}}
runner: {{kind: local, concurrency: 1}}
"""


# ----------------------------------------------------------------------------------------- the cases
def case_spec(a) -> tuple[object, str]:
    """(the case's spec, its file) with `--lrs`, `--steps` and `--set` applied."""
    work = Path(a.work)
    if a.case == "quickstart":
        text = (ROOT / "spaces" / "quickstart.yaml").read_text()
        old = "train.lr: {log_grid: [0.003125, 0.1, 6]}"
        assert old in text, "spaces/quickstart.yaml's lr grid changed: update bench_batched.py"
        if a.lrs:
            text = text.replace(old, f"train.lr: {{log_grid: [0.003125, 0.1, {a.lrs}]}}")
        path = work / "quickstart.yaml"
        path.write_text(text)
        sets = list(a.set) + ([f"train.steps={a.steps}"] if a.steps else [])
        return load_spec(path, sets), str(path)
    root = str(Path(a.root).expanduser().resolve())
    n = a.lrs or 3
    # lrs around bench_trial.py's 0.003, half an octave apart at 3 (0.0015 .. 0.006 at 5)
    lo, hi = 0.003 / 2 ** (0.5 * (n - 1) / 2), 0.003 * 2 ** (0.5 * (n - 1) / 2)
    text = MNIST_SPEC.format(seeds=a.seeds or 2, root=root, steps=a.steps or 200, lo=f"{lo:.6g}", hi=f"{hi:.6g}", n=n)
    path = work / "mnist512.yaml"
    path.write_text(text)
    return load_spec(path, list(a.set)), str(path)


def configurations(spec) -> list[tuple[object, list[float]]]:
    """[(the configuration's spec at its first lr, its lrs)]: the grid grouped by everything but the lr."""
    grid = spec.space.grid(lambda k: get_key(spec, k))
    groups: dict[tuple, list[float]] = {}
    params: dict[tuple, dict] = {}
    for point in grid:
        rest = {k: v for k, v in point.items() if k != LR_KEY}
        key = tuple(sorted((k, repr(v)) for k, v in rest.items()))
        params.setdefault(key, rest)
        groups.setdefault(key, []).append(point.get(LR_KEY, spec.train.lr))
    return [(resolve(spec, {**params[k], LR_KEY: lrs[0]}), lrs) for k, lrs in groups.items()]


def exact_reason(spec, model: torch.nn.Module) -> str | None:
    """None when stacking is exact for this configuration (up to float rounding), else why not."""
    if spec.task.kind != "classification":
        return f"task {spec.task.kind}: only classification is stacked here"
    if spec.train.optimizer not in ("sgd", "adam", "adamw"):
        return f"optimizer {spec.train.optimizer}"
    if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in model.modules()):
        return "BatchNorm: running statistics are per-member state updated in place"
    if any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules()) or \
            getattr(spec.model, "dropout", 0):
        return "dropout: vmap draws each member's mask from one RNG stream, not the member's own"
    return None


# ----------------------------------------------------------------------------------------- stacked
class Stacked:
    """The members (seed, lr) of one configuration trained as one stacked model.

    Each member is initialized as `train_run` initializes its run (global seed, task, model) and
    draws its batches from its seed's stream; members with the same seed share init and batches.
    `measure=False` is the bare arithmetic: no divergence checks, validations or snapshots.
    """

    def __init__(self, spec, seeds: list[int], lrs: list[float], device: torch.device | None = None, measure: bool = True):
        device = device or torch.device("cpu")
        keep_freed_memory()  # as train_run
        self.spec, self.measure = spec, measure
        t, st = spec.train, spec.stability
        self.t = t
        self.members = [(s, lr) for s in seeds for lr in lrs]
        self.seeds = list(dict.fromkeys(seeds))
        models, self.tasks = {}, {}
        for s in self.seeds:  # exactly as train_run: global seed, task, model
            seed_everything(s)
            self.tasks[s] = load_task(spec, s, device)
            models[s] = build_model(spec, self.tasks[s].info).to(device)
        base = models[self.seeds[0]]
        why = exact_reason(spec, base)
        if why:
            raise ValueError(f"not stackable: {why}")
        self.base, self.task = base, self.tasks[self.seeds[0]]
        opt = build_optimizer(base, t)  # its param groups: lr multipliers and weight decays
        group = {id(p): g for g in opt.param_groups for p in g["params"]}
        self.names = [n for n, p in base.named_parameters() if p.requires_grad]
        self.mult = {n: group[id(base.get_parameter(n))]["lr_mult"] for n in self.names}
        self.wd = {n: group[id(base.get_parameter(n))]["weight_decay"] for n in self.names}
        self.P = {n: torch.stack([models[s].get_parameter(n).detach() for s, _ in self.members]).requires_grad_()
                  for n in self.names}
        self.buffers = dict(base.named_buffers())
        self.base_lr = torch.tensor([lr for _, lr in self.members], dtype=torch.float64)
        self.seed_pos = torch.tensor([self.seeds.index(s) for s, _ in self.members])
        self.alive = list(range(len(self.members)))  # member index of each row of the stack
        self.state: dict[str, dict[str, torch.Tensor]] = {}
        self.adam_step = 0
        self.total = total_steps(t, self.task.steps_per_epoch)
        self.eval_every, self.snap_every = cadences(spec, self.total)
        self.log_every = max(1, self.total // 1000)
        ref = reference_loss(self.task)
        N = len(self.members)
        self.rules = [DivergenceRule(st.divergence.loss_factor, ref) for _ in range(N)]
        self.spikes = [SpikeCounter() for _ in range(N)]
        self.history: list[dict[int, dict]] = [{} for _ in range(N)]
        self.metrics: list[dict] = [{} for _ in range(N)]
        self.max_update = [0.0] * N
        self.status = ["complete"] * N
        self.final: list[dict | None] = [None] * N  # each member's parameters when it left the stack
        self.steps = [self.total] * N
        self.last_loss = [math.nan] * N
        self.probers = [Prober(base, self.tasks[s], spec) for s, _ in self.members] if measure else []
        self.shadow_opt = build_optimizer(base, t) if measure else None
        task, bufs = self.task, self.buffers

        def member_loss(p, x, y):
            return task.loss(lambda inp: functional_call(base, (p, bufs), (inp,)), (x, y))

        def member_out(p, x):
            return functional_call(base, (p, bufs), (x,))

        self.f_loss = vmap(member_loss)
        self.f_out = vmap(member_out, in_dims=(0, None))
        self.streams = {s: self.tasks[s].train_batches(torch.Generator().manual_seed(s)) for s in self.seeds}

    # -- the stack
    def _lr(self, factor: float, n: str, p: torch.Tensor) -> torch.Tensor:
        lr = (self.base_lr[self.alive] * factor * self.mult[n]).to(p.dtype)
        return lr.view(-1, *([1] * (p.ndim - 1)))

    def _drop(self, rows: list[int]) -> None:
        """Remove these rows (members) from the stack; keep their parameters."""
        if not rows:
            return
        for j in rows:
            self.final[self.alive[j]] = {n: self.P[n][j].detach().clone() for n in self.names}
        keep = torch.tensor([j for j in range(len(self.alive)) if j not in set(rows)], dtype=torch.long)
        for n in self.names:
            g = self.P[n].grad
            self.P[n] = self.P[n].detach().index_select(0, keep).requires_grad_()
            if g is not None:
                self.P[n].grad = g.index_select(0, keep)
            for k, v in self.state.get(n, {}).items():
                self.state[n][k] = v.index_select(0, keep)
        self.alive = [self.alive[j] for j in keep.tolist()]

    def _batch(self):
        bs = [next(self.streams[s]) for s in self.seeds]
        idx = self.seed_pos[self.alive]
        if len(bs) == 1:
            return bs[0][0].expand(len(idx), *bs[0][0].shape), bs[0][1].expand(len(idx), *bs[0][1].shape)
        return torch.stack([b[0] for b in bs]).index_select(0, idx), torch.stack([b[1] for b in bs]).index_select(0, idx)

    def _update(self, factor: float) -> None:
        """torch.optim's SGD / Adam / AdamW step (single-tensor form), each member at its own lr."""
        t = self.t
        with torch.no_grad():
            if t.optimizer != "sgd":
                self.adam_step += 1
            for n in self.names:
                p = self.P[n]
                g = p.grad
                p.grad = None
                lr = self._lr(factor, n, p)
                wd = self.wd[n]
                s = self.state.setdefault(n, {})
                if t.optimizer == "sgd":
                    if wd:
                        g = g.add(p, alpha=wd)
                    if t.momentum:
                        buf = s.get("momentum_buffer")
                        if buf is None:
                            buf = s["momentum_buffer"] = g.clone()
                        else:
                            buf.mul_(t.momentum).add_(g)
                        g = g.add(buf, alpha=t.momentum) if t.nesterov else buf
                    p.addcmul_(g, lr, value=-1.0)
                else:
                    b1, b2 = t.betas
                    if wd and t.optimizer == "adamw":
                        p.mul_(1 - lr * wd)
                    elif wd:
                        g = g.add(p, alpha=wd)
                    if "exp_avg" not in s:
                        s["exp_avg"], s["exp_avg_sq"] = torch.zeros_like(p), torch.zeros_like(p)
                    m, v = s["exp_avg"], s["exp_avg_sq"]
                    m.lerp_(g, 1 - b1)
                    v.mul_(b2).addcmul_(g, g, value=1 - b2)
                    bc1, bc2 = 1 - b1 ** self.adam_step, 1 - b2 ** self.adam_step
                    denom = (v.sqrt() / math.sqrt(bc2)).add_(t.eps)
                    p.addcdiv_(m * (lr / bc1), denom, value=-1.0)

    def _grad_clip(self, step: int) -> list[int]:
        """Per member: clip its global gradient norm to train.grad_clip; rows whose norm is not finite."""
        norms = torch.stack([self.P[n].grad.flatten(1).norm(dim=1) for n in self.names]).norm(dim=0)
        coef = (self.t.grad_clip / (norms + 1e-6)).clamp(max=1.0)
        for n in self.names:
            g = self.P[n].grad
            g.mul_(coef.view(-1, *([1] * (g.ndim - 1))))
        stop = []
        if self.measure:
            for j, v in enumerate(norms.tolist()):
                if self.rules[self.alive[j]].check_finite(v, step, "gradient norm"):
                    stop.append(j)
        return stop

    # -- per member, as train_run does it
    def _load(self, j: int) -> torch.nn.Module:
        """The shadow model (the base module's own parameters) holding row j's parameters."""
        with torch.no_grad():
            for n in self.names:
                self.base.get_parameter(n).copy_(self.P[n][j])
        return self.base

    def _shadow(self, j: int, factor: float):
        """Row j's parameters and optimizer state in the shadow model and optimizer (for the prober)."""
        i = self.alive[j]
        opt, base = self.shadow_opt, self._load(j)
        set_lr(opt, self.members[i][1], factor)
        opt.state.clear()
        for n in self.names:
            s = self.state.get(n)
            if s:
                p = base.get_parameter(n)
                st = {k: v[j] for k, v in s.items()}
                if "exp_avg" in st:
                    st["step"] = torch.tensor(float(self.adam_step))
                opt.state[p] = st
        return opt

    def _snapshot(self, j: int, step: int, factor: float, final: bool = False) -> dict:
        i = self.alive[j]
        snap = _snapshot(self.probers[i], self._shadow(j, factor), self.spec, step, self.rules[i], final=final)
        self.max_update[i] = _max(self.max_update[i], snap.get("update_ratio"))
        return snap

    @torch.no_grad()
    def evaluate(self, split: str) -> list[dict]:
        """task.evaluate of every row, vmapped over the members."""
        d = self.task.data
        x, y = (d.x_val, d.y_val) if split == "val" else (d.x_test, d.y_test)
        if x is None:
            return [{} for _ in self.alive]
        self.base.eval()
        P = {n: p.detach() for n, p in self.P.items()}
        n_rows = len(self.alive)
        loss = torch.zeros(n_rows, dtype=torch.float64)
        correct = torch.zeros(n_rows, dtype=torch.long)
        bs = self.t.eval_batch
        for k in range(0, len(x), bs):
            out = self.f_out(P, d.prepare(x[k:k + bs])).float()  # [rows, n, classes]
            yy = y[k:k + bs]
            ce = F.cross_entropy(out.flatten(0, 1), yy.repeat(n_rows), reduction="none").view(n_rows, -1)
            loss += ce.sum(1).double()
            correct += (out.argmax(2) == yy).sum(1)
        self.base.train()
        prefix = "val" if split == "val" else "test"
        out = []
        for lv, c in zip(loss.tolist(), correct.tolist()):
            lv = lv / len(x)
            out.append({f"{prefix}_acc": c / len(x), f"{prefix}_loss": lv if math.isfinite(lv) else math.nan})
        return out

    # -- the run
    def run(self) -> list[RunResult]:
        t0 = time.perf_counter()
        total, t = self.total, self.t
        if self.measure:
            f0 = lr_factor(t, 0, total)
            for j, i in enumerate(self.alive):
                snap = self._snapshot(j, 0, f0)
                self.metrics[i].update({f"init_{k}": v for k, v in snap.items() if k in STABILITY_METRICS})
                if "probe_loss" in snap:
                    self.metrics[i]["init_loss"] = snap["probe_loss"]
                self.history[i][0] = {"step": 0, "lr": self.members[i][1] * f0, **snap}
            self._drop([j for j, i in enumerate(self.alive) if self.rules[i].reason is not None])
        for step in range(1, total + 1):
            if not self.alive:
                break
            factor = lr_factor(t, step - 1, total)
            x, y = self._batch()
            losses = self.f_loss(self.P, x, y)
            stop = []
            if self.measure:
                vals = losses.detach().tolist()
                for j, (i, v) in enumerate(zip(self.alive, vals)):
                    if self.rules[i].check(v, step, explain=lambda j=j, x=x, y=y: explain_nonfinite(self._load(j), self.task, (x[j], y[j]))):
                        stop.append(j)
                        continue
                    self.spikes[i].add(v, step)
                    self.last_loss[i] = v
                    if step % self.log_every == 0 or step == total:
                        h = self.history[i].setdefault(step, {"step": step})
                        h["train_loss"], h["lr"] = v, self.members[i][1] * factor
            losses.sum().backward()
            if t.grad_clip:
                stop += self._grad_clip(step)
            for j in stop:
                self.steps[self.alive[j]] = step
            self._drop(sorted(set(stop)))
            if not self.alive:
                break
            self._update(factor)
            if not self.measure:
                continue
            stop = []
            if self.snap_every and step % self.snap_every == 0 and step != total:
                for j, i in enumerate(self.alive):
                    snap = self._snapshot(j, step, factor)
                    self.history[i].setdefault(step, {"step": step}).update(snap, loss_spikes=self.spikes[i].count)
                    if self.rules[i].reason is not None:
                        stop.append(j)  # train_run stops at its next step's check, before any update
            if step % self.eval_every == 0 and step != total:
                for j, (i, ev) in enumerate(zip(self.alive, self.evaluate("val"))):
                    if any(not math.isfinite(v) for v in ev.values()):
                        self.rules[i].check_finite(math.nan, step, "validation metric",
                                                   explain=lambda j=j: explain_nonfinite(self._load(j), self.task,
                                                                                     self.task.probe_batch, offset=0))
                        stop.append(j)
                        continue
                    m = self.metrics[i]
                    m.update(ev)
                    m["train_loss"] = self.last_loss[i]
                    m["train_loss_tail"] = _tail(self.history[i], step)
                    self.history[i].setdefault(step, {"step": step}).update(ev)
            for j in stop:
                self.steps[self.alive[j]] = self.rules[self.alive[j]].step
            self._drop(sorted(set(stop)))
        if self.measure:
            self._finish(total)
        else:
            self._drop(list(range(len(self.alive))))
        wall = time.perf_counter() - t0
        return [self._result(i, wall / len(self.members)) for i in range(len(self.members))]

    def _finish(self, total: int) -> None:
        """The end of train_run for every member still in the stack: val, test, the final snapshot."""
        factor = lr_factor(self.t, total - 1, total)
        val = self.evaluate("val")
        test = self.evaluate("test")
        for j, i in enumerate(self.alive):
            m, h = self.metrics[i], self.history[i]
            if any(not math.isfinite(v) for v in val[j].values()):
                self.rules[i].check_finite(math.nan, total, "validation metric")
                continue
            m.update(val[j])
            h.setdefault(total, {"step": total}).update(val[j])
            m.update(test[j])
            m["train_loss"] = h.get(total, {}).get("train_loss", m.get("train_loss", math.nan))
            m["train_loss_tail"] = _tail(h, total)
            snap = self._snapshot(j, total, factor, final=True)
            m.update({f"final_{k}": v for k, v in snap.items() if k in STABILITY_METRICS})
            h.setdefault(total, {"step": total}).update(snap, loss_spikes=self.spikes[i].count)
        self._drop(list(range(len(self.alive))))

    def _result(self, i: int, wall: float) -> RunResult:
        rule, m = self.rules[i], self.metrics[i]
        r = RunResult(status="complete", wall_s=wall, steps=self.steps[i])
        if rule.reason is not None:
            r.status, r.diverged_step, r.error, r.steps = "diverged", rule.step, rule.reason, rule.step
        m["max_update_ratio"] = self.max_update[i]
        m["loss_spikes"] = self.spikes[i].count
        hist = [self.history[i][k] for k in sorted(self.history[i])]
        if r.status == "diverged":
            m["diverged_why"] = diverged_why(hist, r.error, self.spikes[i].first, r.diverged_step,
                                             m.get("init_loss"), rule.threshold)
        r.metrics, r.history = m, hist
        return r


# ----------------------------------------------------------------------------------------- one run
def separate_runs(cfg, seeds, lrs, *, bare: bool = False, capture: bool = False, perturb: bool = False):
    """Today's path, one run per member: [(RunResult or None, final parameters or None)].
    `perturb`: every initial parameter times 1 + 2^-23 (see `compare`)."""
    out = []
    for s, lr in itertools.product(seeds, lrs):
        spec = resolve(cfg, {LR_KEY: lr})
        if bare:
            seed_everything(s)
            task = load_task(spec, s, torch.device("cpu"))
            model = build_model(spec, task.info)
            opt = build_optimizer(model, spec.train)
            batches = task.train_batches(torch.Generator().manual_seed(s))
            total = total_steps(spec.train, task.steps_per_epoch)
            for step in range(1, total + 1):
                train_step(model, task, opt, spec.train, next(batches), step, total)
            out.append((None, None))
            continue
        built = []
        orig = loop_mod.build_model

        def build(*a, orig=orig, built=built, **k):  # the model train_run builds: to read its final parameters, or to perturb it
            m = orig(*a, **k)
            if perturb:
                with torch.no_grad():
                    for p in m.parameters():
                        p.mul_(1 + 2.0 ** -23)
            built.append(m)
            return m

        if capture or perturb:
            loop_mod.build_model = build
        try:
            r = loop_mod.train_run(spec, s)
        finally:
            loop_mod.build_model = orig
        params = {n: p.detach().clone() for n, p in built[0].named_parameters()} if built else None
        out.append((r, params))
    return out


def stacked_runs(cfg, seeds, lrs, *, bare: bool = False):
    st = Stacked(cfg, seeds, lrs, measure=not bare)
    results = st.run()
    return [(r, st.final[i]) for i, r in enumerate(results)]


# ----------------------------------------------------------------------------------------- equality
def compare(cfg, seeds, lrs, *, floor: bool = True, verbose: bool = True) -> list[dict]:
    """Every member of one configuration trained both ways, plus (`floor`) its separate run again with
    every initial parameter multiplied by 1 + 2^-23 (one float32 ulp): the noise floor, how far the
    separate run itself moves when its rounding changes (a different matmul blocking, thread count or
    summation order changes it by as much). One row per member: the status and divergence step both
    ways, the largest |difference| of the final parameters and of the final task metrics, the largest
    relative difference of the stability metrics, and `floor`, the |difference| of val_loss between the
    separate run and its perturbed twin."""
    sep = separate_runs(cfg, seeds, lrs, capture=True)
    stk = stacked_runs(cfg, seeds, lrs)
    sep2 = separate_runs(cfg, seeds, lrs, perturb=True) if floor else None
    rows = []
    for k, ((s, lr), (ra, pa), (rb, pb)) in enumerate(zip(itertools.product(seeds, lrs), sep, stk)):
        same = ra.status == rb.status and ra.diverged_step == rb.diverged_step
        dp = max(float((pa[n] - pb[n]).abs().max()) for n in pa) if same and ra.status == "complete" else math.nan
        keys = [k2 for k2 in ("val_loss", "val_acc", "test_loss", "test_acc", "train_loss") if k2 in ra.metrics]
        dm = {k2: abs(ra.metrics[k2] - rb.metrics.get(k2, math.nan)) for k2 in keys}
        fk = [k2 for k2 in ra.metrics if k2.startswith(("final_", "init_")) and isinstance(ra.metrics[k2], float)]
        rel = [abs(ra.metrics[k2] - rb.metrics[k2]) / max(abs(ra.metrics[k2]), 1e-12) for k2 in fk if k2 in rb.metrics]
        fl = math.nan
        if floor:
            r2 = sep2[k][0]
            fl = abs(ra.metrics.get("val_loss", math.nan) - r2.metrics.get("val_loss", math.nan)) \
                if r2.status == ra.status == "complete" else (0.0 if r2.status == ra.status else math.inf)
        rows.append(dict(seed=s, lr=lr, status=(ra.status, rb.status), step=(ra.diverged_step, rb.diverged_step),
                         same=same, dparam=dp, dmetric=dm, stab_rel=max(rel) if rel else 0.0, floor=fl,
                         missing=sorted(set(fk) - set(rb.metrics))))
    if verbose:
        name = ", ".join(f"{k2}={cfg.raw['model'][k2]}" for k2 in ("branches", "aggregation") if k2 in cfg.raw.get("model", {}))
        for r in rows:
            flag = "" if r["same"] else "   <-- STATUS DIFFERS"
            dm = ", ".join(f"{k2} {v:.1e}" for k2, v in r["dmetric"].items())
            print(f"  {name} seed {r['seed']} lr {r['lr']:.6g}: {r['status'][0]}/{r['status'][1]} "
                  f"step {r['step'][0]}/{r['step'][1]}; max |dparam| {r['dparam']:.1e}; {dm}; "
                  f"stability max rel {r['stab_rel']:.1e}; val_loss moved by 1 ulp of init {r['floor']:.1e}{flag}", flush=True)
    return rows


# ----------------------------------------------------------------------------------------- worker
def worker(a) -> None:
    spec, path = case_spec(a)
    torch.set_num_threads(a.threads_now)
    seeds = list(spec.seeds)
    confs = configurations(spec)
    if a.worker == "nas":
        out = Path(a.work) / f"nas-out-{os.getpid()}"
        cmd = [sys.executable, "-m", "nas_stab.cli", "run", path, "--out", str(out), "--set", "runner.concurrency=1",
               "--set", f"train.threads={a.threads_now}", *[x for s in a.set for x in ("--set", s)]]
        if a.steps:
            cmd += ["--set", f"train.steps={a.steps}"]
        try:
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, cwd=ROOT)
        finally:
            shutil.rmtree(out, ignore_errors=True)
        return
    n = 0
    with reuse_loaded():
        for cfg, lrs in confs:
            if a.worker in ("loop", "loop-bare"):
                res = separate_runs(cfg, seeds, lrs, bare=a.worker == "loop-bare")
            else:
                res = stacked_runs(cfg, seeds, lrs, bare=a.worker == "stacked-bare")
            n += len(res)
    print(f"{a.worker}: {n} runs", file=sys.stderr)


# ----------------------------------------------------------------------------------------- driver
def timed(cmd: list[str], env: dict, log: Path) -> tuple[float, float]:
    w0 = time.perf_counter()
    with open(log, "ab") as f:
        p = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
        _, status, usage = os.wait4(p.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"{' '.join(cmd)} failed; output in {log}")
    return time.perf_counter() - w0, usage.ru_utime + usage.ru_stime


def spread(xs: list[float], fmt: str = "{:.2f}") -> str:
    return " / ".join(fmt.format(v) for v in (min(xs), statistics.median(xs), max(xs)))


def check(a) -> None:
    spec, _ = case_spec(a)
    torch.set_num_threads(1)
    seeds = list(spec.seeds)
    rows = []
    with reuse_loaded():
        for cfg, lrs in configurations(spec):
            rows += compare(cfg, seeds, lrs)
    differ = [r for r in rows if not r["same"]]
    done = [r for r in rows if r["same"] and r["status"][0] == "complete"]
    dval = sorted(r["dmetric"]["val_loss"] for r in done)
    floor = sorted(r["floor"] for r in done)
    tiny = 1e-5
    print(f"check: {len(rows)} members, {len(differ)} whose status or divergence step differs; "
          f"{len(rows) - len(done) - len(differ)} diverged both ways at the same step", flush=True)
    if done:
        print(f"check: |val_loss stacked - separate| median {statistics.median(dval):.1e}, max {dval[-1]:.1e}, "
              f"<= {tiny:g} for {sum(v <= tiny for v in dval)} of {len(done)}; the separate run vs itself with its init "
              f"moved by 1 ulp: "
              f"median {statistics.median(floor):.1e}, max {floor[-1]:.1e}, <= {tiny:g} for "
              f"{sum(v <= tiny for v in floor)} of {len(done)}; largest |dparam| "
              f"{max(r['dparam'] for r in done):.1e}", flush=True)


def breakdown(a) -> None:
    """Per configuration, in this process (CPU time, one torch thread): the four in-process variants,
    interleaved over `--rounds`, and the ratios loop / stacked and loop-bare / stacked-bare."""
    spec, _ = case_spec(a)
    torch.set_num_threads(1)
    seeds = list(spec.seeds)
    variants = {"loop": lambda c, lrs: separate_runs(c, seeds, lrs), "stacked": lambda c, lrs: stacked_runs(c, seeds, lrs),
                "loop-bare": lambda c, lrs: separate_runs(c, seeds, lrs, bare=True),
                "stacked-bare": lambda c, lrs: stacked_runs(c, seeds, lrs, bare=True)}
    with reuse_loaded():
        for cfg, lrs in configurations(spec):
            name = ", ".join(f"{k}={cfg.raw['model'][k]}" for k in ("branches", "aggregation", "width"))
            times: dict[str, list[float]] = {v: [] for v in variants}
            statuses = [r.status for r, _ in separate_runs(cfg, seeds, lrs)]  # also the warm-up
            stacked_runs(cfg, seeds, lrs)
            for r in range(a.rounds):
                for v in (variants if r % 2 == 0 else dict(reversed(list(variants.items())))):
                    c0 = time.process_time()
                    variants[v](cfg, lrs)
                    times[v].append(time.process_time() - c0)
            med = {v: statistics.median(t) for v, t in times.items()}
            print(f"  {name}: {len(statuses)} members ({statuses.count('diverged')} diverged); CPU s median: "
                  + ", ".join(f"{v} {m:.2f}" for v, m in med.items())
                  + f"; loop / stacked {med['loop'] / med['stacked']:.2f}, "
                  f"loop-bare / stacked-bare {med['loop-bare'] / med['stacked-bare']:.2f}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", default="quickstart", choices=["quickstart", "mnist512"])
    ap.add_argument("--variants", default="loop,stacked,loop-bare,stacked-bare")
    ap.add_argument("--threads", default="1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--root", default=os.environ.get("NAS_STAB_DATA", "data"), help="mnist512: the data directory")
    ap.add_argument("--steps", type=int, default=0, help="train.steps (default: the spec's; mnist512 200)")
    ap.add_argument("--lrs", type=int, default=0, help="lrs per configuration (default: the spec's; mnist512 3)")
    ap.add_argument("--seeds", type=int, default=0, help="mnist512: seeds (default 2)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="applied to the case's spec")
    ap.add_argument("--check", action="store_true", help="the equality check only")
    ap.add_argument("--no-check", action="store_true", help="time without the equality check first")
    ap.add_argument("--breakdown", action="store_true",
                    help="per configuration, in one process: CPU time of the four in-process variants")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--threads-now", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--work", help=argparse.SUPPRESS)
    a = ap.parse_args()
    own = a.work is None
    a.work = a.work or tempfile.mkdtemp(prefix="bench_batched_")
    try:
        if a.worker:
            return worker(a)
        spec, _ = case_spec(a)
        confs = configurations(spec)
        print(f"case {a.case}: {len(confs)} configuration(s) x {len(spec.seeds)} seeds x {len(confs[0][1])} lrs, "
              f"{spec.train.steps} steps; load average {os.getloadavg()[0]:.2f}", flush=True)
        if a.breakdown:
            return breakdown(a)
        if a.check or not a.no_check:
            check(a)
        if a.check:
            return
        variants = [v.strip() for v in a.variants.split(",") if v.strip()]
        base = [sys.executable, str(Path(__file__).resolve()), "--case", a.case, "--root", a.root, "--work", a.work,
                "--steps", str(a.steps), "--lrs", str(a.lrs), "--seeds", str(a.seeds), *[x for s in a.set for x in ("--set", s)]]
        for threads in [int(x) for x in a.threads.split(",")]:
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
            wall: dict[str, list] = {v: [] for v in variants}
            cpu: dict[str, list] = {v: [] for v in variants}
            for r in range(a.warmup + a.rounds):
                order = variants if r % 2 == 0 else variants[::-1]
                got = {v: timed([*base, "--worker", v, "--threads-now", str(threads)], env, Path(a.work) / f"{v}.log")
                       for v in order}
                if r < a.warmup:
                    continue
                line = ", ".join(f"{v} {got[v][0]:.2f} s (CPU {got[v][1]:.1f})" for v in variants)
                if "loop" in got:
                    line += "; loop / x: " + ", ".join(f"{v} {got['loop'][0] / got[v][0]:.2f}" for v in variants if v != "loop")
                if "loop-bare" in got and "stacked-bare" in got:
                    line += f"; loop-bare / stacked-bare {got['loop-bare'][0] / got['stacked-bare'][0]:.2f}"
                print(f"  {threads} thread(s) round {r - a.warmup + 1}: {line}", flush=True)
                for v in variants:
                    wall[v].append(got[v][0]), cpu[v].append(got[v][1])
            print(f"{threads} thread(s), wall s (min / median / max): "
                  + "; ".join(f"{v} {spread(wall[v])}" for v in variants), flush=True)
            print(f"{threads} thread(s), CPU s (min / median / max): "
                  + "; ".join(f"{v} {spread(cpu[v], '{:.1f}')}" for v in variants), flush=True)
            for num, den in (("loop", "stacked"), ("loop-bare", "stacked-bare"), ("nas", "loop")):
                if num in wall and den in wall:
                    rs = [x / y for x, y in zip(wall[num], wall[den])]
                    cs = [x / y for x, y in zip(cpu[num], cpu[den])]
                    print(f"{threads} thread(s): {num} / {den} wall {spread(rs)}, CPU {spread(cs)} "
                          f"(per round: min / median / max); load average {os.getloadavg()[0]:.2f}", flush=True)
    finally:
        if own:
            shutil.rmtree(a.work, ignore_errors=True)


if __name__ == "__main__":
    main()
