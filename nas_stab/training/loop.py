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
from typing import Any, Protocol

import torch

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
    metrics: dict[str, float] = field(default_factory=dict)  # task metrics, init_*/final_* stability
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


def cadences(spec, total: int, costs: budget.MeasureCosts = budget.FALLBACK) -> tuple[int, int]:
    """(steps between validations, steps between stability snapshots; 0: none during training) of a
    `total`-step run whose measurements cost `costs` (training/budget.py).

    The spec's cadences when it sets them; else chosen within `stability.budget` (at most 10 per run
    each), or, with budget null, 10 per run each (docs/experiment-file.md). With a pruner the
    validations stay at 10 per run: they are its reports (and Optuna's intermediate values)."""
    c = budget.for_spec(spec, total, costs)
    return c.eval_every, c.snap_every


def train_run(spec, seed: int, reporter: Reporter | None = None, checkpoint: Checkpointer | None = None) -> RunResult:
    """Train `spec` (already resolved: no search dimensions left) with `seed`."""
    t0 = time.perf_counter()
    keep_freed_memory()  # no page faults on every step's activation buffers (see training/malloc.py)
    t, st = spec.train, spec.stability
    device = pick_device(t.device)
    seed_everything(seed)

    task = load_task(spec, seed, device)
    model = build_model(spec, task.info).to(device)
    optimizer = build_optimizer(model, t)
    total = total_steps(t, task.steps_per_epoch)
    budgeted = st.budget is not None and (st.every is None or t.eval_every is None)
    eval_every, snap_every = cadences(spec, total, budget.measure_costs(spec, task) if budgeted else budget.FALLBACK)
    log_every = max(1, total // 1000)
    prober = Prober(model, task, spec)
    rule = DivergenceRule(st.divergence.loss_factor, reference_loss(task))
    spikes = SpikeCounter()
    gen = torch.Generator().manual_seed(seed)

    result = RunResult(status="complete")
    history: dict[int, dict] = {}
    metrics: dict[str, float] = {}
    max_update = 0.0
    start = 0

    state = checkpoint.load() if checkpoint else None
    if state is not None:  # resume a run whose worker died
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["torch_rng"])
        rule.load_state_dict(state["rule"])
        if "prober" in state:  # the Lanczos warm start: the next sharpness as if never interrupted
            prober.load_state_dict(state["prober"])
        if "spikes" in state:
            spikes.load_state_dict(state["spikes"])
        history, metrics, max_update, start = state["history"], state["metrics"], state["max_update"], state["step"]
    else:
        schedule_lr(optimizer, t, 0, total)
        m0 = time.perf_counter()
        snap = _snapshot(prober, optimizer, spec, 0, rule)
        result.measure_s += time.perf_counter() - m0
        metrics.update({f"init_{k}": v for k, v in snap.items() if k in STABILITY_METRICS})
        if "probe_loss" in snap:
            metrics["init_loss"] = snap["probe_loss"]
        max_update = _max(max_update, snap.get("update_ratio"))
        history[0] = {"step": 0, "lr": optimizer.param_groups[0]["lr"], **snap}

    batches = task.train_batches(gen)
    for _ in range(start):  # replay the batch order (and its RNG draws) from the seed up to the checkpoint
        next(batches)
    step = start

    def stop(what: str, value: float) -> bool:
        """The divergence rule on this step's loss (then counted for spikes) and gradient norm."""
        if what != "loss":
            return rule.check_finite(value, step, what)
        if rule.check(value, step, explain=lambda: explain_nonfinite(model, task, batch)):
            return True
        spikes.add(value, step)
        return False

    loop_t0, measured = time.perf_counter(), 0.0  # measured: the mid-run measurements' share of the loop
    try:
        for step in range(start + 1, total + 1):
            batch = next(batches)
            done = train_step(model, task, optimizer, t, batch, step, total, stop)
            if done.stopped:
                break
            lr, loss_value = done.lr, done.loss

            if step % log_every == 0 or step == total:
                history.setdefault(step, {"step": step})["train_loss"] = loss_value
                history[step]["lr"] = lr
            if snap_every and step % snap_every == 0 and step != total:
                m0 = time.perf_counter()
                snap = _snapshot(prober, optimizer, spec, step, rule)
                max_update = _max(max_update, snap.get("update_ratio"))
                history.setdefault(step, {"step": step}).update(snap, loss_spikes=spikes.count)
                measured += time.perf_counter() - m0
            if eval_every and step % eval_every == 0 and step != total:
                m0 = time.perf_counter()
                try:
                    ev = task.evaluate(model, "val")
                    if any(not math.isfinite(v) for v in ev.values()):
                        rule.check_finite(math.nan, step, "validation metric",
                                          explain=lambda: explain_nonfinite(model, task, task.probe_batch, offset=0))
                        break
                    metrics.update(ev)
                    metrics["train_loss"] = loss_value
                    metrics["train_loss_tail"] = _tail(history, step)
                    history.setdefault(step, {"step": step}).update(ev)
                    if reporter:
                        reporter(step, {**ev, "train_loss": loss_value, "train_loss_tail": metrics["train_loss_tail"]})
                finally:
                    measured += time.perf_counter() - m0
            if checkpoint and checkpoint.every and step % checkpoint.every == 0:
                checkpoint.save(
                    {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "torch_rng": torch.get_rng_state(), "rule": rule.state_dict(), "history": history,
                     "metrics": metrics, "max_update": max_update, "step": step, "prober": prober.state_dict(),
                     "spikes": spikes.state_dict()}
                )
        else:
            step = total
    except Pruned:
        result.status = "pruned"
    result.train_s = time.perf_counter() - loop_t0 - measured
    result.measure_s += measured

    if rule.reason is not None:
        result.status = "diverged"
        result.diverged_step = rule.step
        result.error = rule.reason
        step = rule.step
    if result.status == "complete":
        final_val = task.evaluate(model, "val")
        if any(not math.isfinite(v) for v in final_val.values()):  # as a mid-run validation: divergence, data
            rule.check_finite(math.nan, total, "validation metric",
                              explain=lambda: explain_nonfinite(model, task, task.probe_batch, offset=0))
            result.status, result.diverged_step, result.error = "diverged", rule.step, rule.reason
            step = rule.step
        else:
            metrics.update(final_val)
            history.setdefault(total, {"step": total}).update(final_val)  # the last validation point is in the history too
            metrics.update(task.evaluate(model, "test"))
            metrics["train_loss"] = history.get(total, {}).get("train_loss", metrics.get("train_loss", math.nan))
            metrics["train_loss_tail"] = _tail(history, total)
    if result.status in ("complete", "pruned"):
        m0 = time.perf_counter()
        snap = _snapshot(prober, optimizer, spec, step, rule, final=True)
        result.measure_s += time.perf_counter() - m0
        metrics.update({f"final_{k}": v for k, v in snap.items() if k in STABILITY_METRICS})
        max_update = _max(max_update, snap.get("update_ratio"))
        history.setdefault(step, {"step": step}).update(snap, loss_spikes=spikes.count)
        if rule.reason is not None and result.status == "complete":
            result.status, result.diverged_step, result.error = "diverged", rule.step, rule.reason
    metrics["max_update_ratio"] = max_update
    metrics["loss_spikes"] = spikes.count
    if result.status == "diverged":
        ordered = [history[k] for k in sorted(history)]
        metrics["diverged_why"] = diverged_why(ordered, result.error, spikes.first, result.diverged_step,
                                               metrics.get("init_loss"), rule.threshold)
    result.metrics = metrics
    result.history = [history[k] for k in sorted(history)]
    result.steps = step
    result.wall_s = time.perf_counter() - t0
    return result


def _snapshot(prober: Prober, optimizer, spec, step: int, rule: DivergenceRule, final: bool = False) -> dict[str, float]:
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
