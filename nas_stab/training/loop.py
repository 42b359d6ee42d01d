"""One trained run: a pure function of (resolved configuration, seed).

Reads top to bottom: build data, model, optimizer; measure stability at init;
train, watching for divergence, evaluating and reporting to the pruner;
measure again at the end; return a `RunResult`. Divergence is data, not an
error: the run stops and says when and why.
"""
from __future__ import annotations

import math
import random
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol, cast

import torch

from nas_stab.config.schema import Spec
from nas_stab.metrics import STABILITY_METRICS, tail_loss
from nas_stab.models import build_model
from nas_stab.stability import DivergenceRule, Prober, diverged_why, explain_nonfinite, reference_loss
from nas_stab.tasks import load_task
from nas_stab.training import budget
from nas_stab.training.malloc import keep_freed_memory
from nas_stab.training.optim import build_optimizer, total_steps
from nas_stab.training.step import schedule_lr, train_step

SPIKE_WINDOW, SPIKE_SIGMAS = 128, 6.0


def _tail(history: dict[int, dict], step: int) -> float:
    """train_loss_tail at `step` from the logged losses (docs/run-directory.md)."""
    return tail_loss({s: h["train_loss"] for s, h in history.items() if "train_loss" in h}, step)


def _mean_plus_sigmas(w, k: float) -> float:
    """mean + k population standard deviations (plain floats: statistics.pstdev is ~50x slower)."""
    n = len(w)
    m = math.fsum(w) / n
    return m + k * math.sqrt(math.fsum((x - m) ** 2 for x in w) / n)


class SpikeCounter:
    """Training steps whose loss exceeds the mean + 6 standard deviations of the previous 128 steps'
    losses (counted once the window is full); `first` is the step of the first one."""

    def __init__(self):
        self.window: deque = deque(maxlen=SPIKE_WINDOW)
        self.count = 0
        self.first: int | None = None

    def add(self, loss: float, step: int) -> None:
        if not math.isfinite(loss):
            return
        w = self.window
        if len(w) == SPIKE_WINDOW and loss > _mean_plus_sigmas(w, SPIKE_SIGMAS):
            self.count += 1
            if self.first is None:
                self.first = step
        w.append(loss)

    def state_dict(self) -> dict:
        return {"window": list(self.window), "count": self.count, "first": self.first}

    def load_state_dict(self, d: dict) -> None:
        self.window = deque(d["window"], maxlen=SPIKE_WINDOW)
        self.count, self.first = d["count"], d["first"]


class Pruned(Exception):
    """Raised by a reporter to stop a run that the pruner gave up on."""


class Checkpointer(Protocol):
    """Where a run saves and restores its state (used by the Ray runner)."""

    every: int

    def load(self) -> dict | None: ...

    def save(self, state: dict) -> None: ...


@dataclass
class RunResult:
    status: str  # complete | pruned | diverged | failed
    metrics: dict[str, float | str] = field(default_factory=dict)  # task metrics, init_*/final_* stability; diverged_why: a label
    history: list[dict[str, float]] = field(default_factory=list)
    steps: int = 0
    wall_s: float = 0.0
    train_s: float = 0.0  # of wall_s: the training loop (steps, batches, bookkeeping), measurements not counted
    measure_s: float = 0.0  # of wall_s: the stability snapshots (Hessian included) and the mid-run validations
    diverged_step: int | None = None
    error: str = ""


Reporter = Callable[[int, dict], None]


def pick_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def cadences(spec: Spec, total: int, costs: budget.MeasureCosts = budget.FALLBACK) -> tuple[int, int]:
    """(steps between validations, steps between stability snapshots; 0: none during training) of a
    `total`-step run whose measurements cost `costs` (training/budget.py).

    The spec's cadences when it sets them; else chosen within `stability.budget` (at most 10 per run
    each), or, with budget null, 10 per run each (docs/experiment-file.md). With a pruner the
    validations stay at 10 per run: they are its reports (and Optuna's intermediate values)."""
    c = budget.for_spec(spec, total, costs)
    return c.eval_every, c.snap_every


@dataclass
class _Run:
    """One run's pieces and its state as it trains: what the steps of `train_run` share."""

    spec: Any
    task: Any
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    total: int  # optimizer steps of the whole run
    eval_every: int  # steps between validations (0: none during training)
    snap_every: int  # steps between stability snapshots (0: none during training)
    log_every: int  # steps between logged training losses
    prober: Prober
    rule: DivergenceRule
    gen: torch.Generator  # the batch order's generator
    spikes: SpikeCounter = field(default_factory=SpikeCounter)
    result: RunResult = field(default_factory=lambda: RunResult(status="complete"))
    history: dict[int, dict] = field(default_factory=dict)
    metrics: dict[str, float | str] = field(default_factory=dict)  # diverged_why: a label
    max_update: float = 0.0
    start: int = 0  # the step the training starts after (a checkpoint's, else 0)
    step: int = 0  # the last step taken (or the one the run diverged at)
    measured: float = 0.0  # the step loop's mid-run measurements, in seconds

    @property
    def t(self):
        return self.spec.train


def train_run(spec: Spec, seed: int, reporter: Reporter | None = None, checkpoint: Checkpointer | None = None) -> RunResult:
    """Train `spec` (already resolved: no search dimensions left) with `seed`."""
    t0 = time.perf_counter()
    keep_freed_memory()  # no page faults on every step's activation buffers (see training/malloc.py)
    run = _setup(spec, seed)

    state = checkpoint.load() if checkpoint else None
    if state is not None:  # resume a run whose worker died
        _resume(run, state)
    else:
        _measure_at_init(run)

    _train_steps(run, reporter, checkpoint)

    if run.rule.reason is not None:
        _diverged(run, run.rule.reason)
    if run.result.status == "complete":
        _final_evaluation(run)
    if run.result.status in ("complete", "pruned"):
        _measure_at_end(run)
    return _result(run, t0)


def _setup(spec: Spec, seed: int) -> _Run:
    """Data, model, optimizer, the cadences, the probes and the divergence rule, all from `seed`."""
    t, st = spec.train, spec.stability
    device = pick_device(t.device)
    seed_everything(seed)

    task = load_task(spec, seed, device)
    model = build_model(spec, task.info).to(device)
    optimizer = build_optimizer(model, t)
    total = total_steps(t, task.steps_per_epoch)
    budgeted = st.budget is not None and (st.every is None or t.eval_every is None)
    eval_every, snap_every = cadences(spec, total, budget.measure_costs(spec, task) if budgeted else budget.FALLBACK)
    return _Run(spec=spec, task=task, model=model, optimizer=optimizer, total=total, eval_every=eval_every,
                snap_every=snap_every, log_every=max(1, total // 1000), prober=Prober(model, task, spec),
                rule=DivergenceRule(st.divergence.loss_factor, reference_loss(task)), gen=torch.Generator().manual_seed(seed))


def _resume(run: _Run, state: dict) -> None:
    """The state a checkpoint saved (`_checkpoint_state`): the run goes on from its step."""
    run.model.load_state_dict(state["model"])
    run.optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["torch_rng"])
    run.rule.load_state_dict(state["rule"])
    if "prober" in state:  # the Lanczos warm start: the next sharpness as if never interrupted
        run.prober.load_state_dict(state["prober"])
    if "spikes" in state:
        run.spikes.load_state_dict(state["spikes"])
    run.history, run.metrics, run.max_update, run.start = state["history"], state["metrics"], state["max_update"], state["step"]


def _checkpoint_state(run: _Run, step: int) -> dict:
    return {"model": run.model.state_dict(), "optimizer": run.optimizer.state_dict(),
            "torch_rng": torch.get_rng_state(), "rule": run.rule.state_dict(), "history": run.history,
            "metrics": run.metrics, "max_update": run.max_update, "step": step, "prober": run.prober.state_dict(),
            "spikes": run.spikes.state_dict()}


def _measure_at_init(run: _Run) -> None:
    """The stability snapshot before the first step: the init_* metrics and the history's step 0."""
    schedule_lr(run.optimizer, run.t, 0, run.total)
    m0 = time.perf_counter()
    snap = _snapshot(run.prober, run.optimizer, run.spec, 0, run.rule)
    run.result.measure_s += time.perf_counter() - m0
    run.metrics.update({f"init_{k}": v for k, v in snap.items() if k in STABILITY_METRICS})
    if "probe_loss" in snap:
        run.metrics["init_loss"] = snap["probe_loss"]
    run.max_update = _max(run.max_update, snap.get("update_ratio"))
    run.history[0] = {"step": 0, "lr": run.optimizer.param_groups[0]["lr"], **snap}


def _train_steps(run: _Run, reporter: Reporter | None, checkpoint: Checkpointer | None) -> None:
    """The step loop, from the step after `run.start` to the last one, or until the divergence rule or
    the pruner (`Pruned`) stops it. Sets `run.step` and the split of the loop's time."""
    model, task, rule, total = run.model, run.task, run.rule, run.total
    batches = task.train_batches(run.gen)
    for _ in range(run.start):  # replay the batch order (and its RNG draws) from the seed up to the checkpoint
        next(batches)
    step = run.start

    def stop(what: str, value: float) -> bool:
        """The divergence rule on this step's loss (then counted for spikes) and gradient norm."""
        if what != "loss":
            return rule.check_finite(value, step, what)
        if rule.check(value, step, explain=lambda: explain_nonfinite(model, task, batch)):
            return True
        run.spikes.add(value, step)
        return False

    loop_t0 = time.perf_counter()
    try:
        for step in range(run.start + 1, total + 1):
            batch = next(batches)
            done = train_step(model, task, run.optimizer, run.t, batch, step, total, stop)
            if done.stopped:
                break
            if step % run.log_every == 0 or step == total:
                run.history.setdefault(step, {"step": step})["train_loss"] = done.loss
                run.history[step]["lr"] = done.lr
            if run.snap_every and step % run.snap_every == 0 and step != total:
                _measure_mid_run(run, step)
            if run.eval_every and step % run.eval_every == 0 and step != total and not _validate(run, step, done.loss, reporter):
                break
            if checkpoint and checkpoint.every and step % checkpoint.every == 0:
                checkpoint.save(_checkpoint_state(run, step))
        else:
            step = total
    except Pruned:
        run.result.status = "pruned"
    run.step = step
    run.result.train_s = time.perf_counter() - loop_t0 - run.measured
    run.result.measure_s += run.measured


def _measure_mid_run(run: _Run, step: int) -> None:
    """A stability snapshot during training, into the history."""
    m0 = time.perf_counter()
    snap = _snapshot(run.prober, run.optimizer, run.spec, step, run.rule)
    run.max_update = _max(run.max_update, snap.get("update_ratio"))
    run.history.setdefault(step, {"step": step}).update(snap, loss_spikes=run.spikes.count)
    run.measured += time.perf_counter() - m0


def _validate(run: _Run, step: int, loss_value: float, reporter: Reporter | None) -> bool:
    """A validation during training, reported to the pruner (which may raise `Pruned`); False if a
    metric is not finite: the run diverged (the rule says so) and stops."""
    m0 = time.perf_counter()
    model, task, metrics = run.model, run.task, run.metrics
    try:
        ev = task.evaluate(model, "val")
        if any(not math.isfinite(v) for v in ev.values()):
            run.rule.check_finite(math.nan, step, "validation metric",
                                  explain=lambda: explain_nonfinite(model, task, task.probe_batch, offset=0))
            return False
        metrics.update(ev)
        metrics["train_loss"] = loss_value
        metrics["train_loss_tail"] = _tail(run.history, step)
        run.history.setdefault(step, {"step": step}).update(ev)
        if reporter:
            reporter(step, {**ev, "train_loss": loss_value, "train_loss_tail": metrics["train_loss_tail"]})
        return True
    finally:
        run.measured += time.perf_counter() - m0


def _diverged(run: _Run, reason: str) -> None:
    """The divergence rule stopped the run (`reason`, the rule's): its status, step and reason."""
    result, rule = run.result, run.rule
    assert rule.step is not None, "the rule tripped: it holds the step"
    result.status = "diverged"
    result.diverged_step = rule.step
    result.error = reason
    run.step = rule.step


def _final_evaluation(run: _Run) -> None:
    """A completed run: the last validation (a non-finite metric is divergence, data) and the test metrics."""
    model, task, rule, total, metrics, history = run.model, run.task, run.rule, run.total, run.metrics, run.history
    final_val = task.evaluate(model, "val")
    if any(not math.isfinite(v) for v in final_val.values()):  # as a mid-run validation: divergence, data
        rule.check_finite(math.nan, total, "validation metric",
                          explain=lambda: explain_nonfinite(model, task, task.probe_batch, offset=0))
        assert rule.step is not None and rule.reason is not None, "a non-finite value trips the rule"
        run.result.status, run.result.diverged_step, run.result.error = "diverged", rule.step, rule.reason
        run.step = rule.step
        return
    metrics.update(final_val)
    history.setdefault(total, {"step": total}).update(final_val)  # the last validation point is in the history too
    metrics.update(task.evaluate(model, "test"))
    metrics["train_loss"] = history.get(total, {}).get("train_loss", metrics.get("train_loss", math.nan))
    metrics["train_loss_tail"] = _tail(history, total)


def _measure_at_end(run: _Run) -> None:
    """The stability snapshot after the last step: the final_* metrics (a non-finite one: diverged)."""
    result, rule, step = run.result, run.rule, run.step
    m0 = time.perf_counter()
    snap = _snapshot(run.prober, run.optimizer, run.spec, step, rule, final=True)
    result.measure_s += time.perf_counter() - m0
    run.metrics.update({f"final_{k}": v for k, v in snap.items() if k in STABILITY_METRICS})
    run.max_update = _max(run.max_update, snap.get("update_ratio"))
    run.history.setdefault(step, {"step": step}).update(snap, loss_spikes=run.spikes.count)
    if rule.reason is not None and result.status == "complete":
        result.status, result.diverged_step, result.error = "diverged", rule.step, rule.reason


def _result(run: _Run, t0: float) -> RunResult:
    """The run's `RunResult`: its metrics (the run-wide ones added), history, steps and wall time since `t0`."""
    result, metrics, history = run.result, run.metrics, run.history
    metrics["max_update_ratio"] = run.max_update
    metrics["loss_spikes"] = run.spikes.count
    if result.status == "diverged":
        ordered = [history[k] for k in sorted(history)]
        metrics["diverged_why"] = diverged_why(ordered, result.error, run.spikes.first, result.diverged_step,
                                               cast("float | None", metrics.get("init_loss")),  # a loss, not a label
                                               run.rule.threshold)
    result.metrics = metrics
    result.history = [history[k] for k in sorted(history)]
    result.steps = run.step
    result.wall_s = time.perf_counter() - t0
    return result


def _snapshot(prober: Prober, optimizer, spec: Spec, step: int, rule: DivergenceRule, final: bool = False) -> dict[str, float]:
    """Stability metrics now; a non-finite value marks the run diverged (it is data).

    Probes return inf when a tensor overflowed (divergence) and nan when a metric is undefined
    (a 0 denominator: not divergence); neither is recorded: the value is left out, so it is an
    empty cell in trials.csv and the history."""
    snap = prober.snapshot(optimizer, step, final=final)
    if prober.nonfinite is not None:  # the first non-finite quantity, e.g. a block's output or a layer's gradient
        rule.check_finite(prober.nonfinite[1], step, prober.nonfinite[0])
    for k in ("fwd_ratio", "update_ratio", "update_norm", "sharpness"):
        v = snap.get(k)
        if v is not None and math.isinf(v):
            rule.check_finite(v, step, k)
    return {k: v for k, v in snap.items() if not isinstance(v, float) or math.isfinite(v)}


def _max(a: float, b: Any) -> float:
    if b is None or not isinstance(b, float) or math.isnan(b):
        return a
    return max(a, b)
