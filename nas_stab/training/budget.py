"""The measurements' budget (`stability.budget`): the default cadences of a run's stability snapshots and
mid-run validations, chosen so that measuring takes at most that share of its training time.

The cadence is decided before training, from a cost model of the measurements that depends on the
spec and the task's sizes only (`measure_costs`): never on this machine's timings, so a run stays a
pure function of (configuration, seed), its history included, and a resumed or rerun run measures at
the same steps (docs/run-directory.md, "The measurements' budget", says why). Each run records what
measuring really took (`measure_s`, `train_s` in trials.csv), so the model can be checked; the
constants below were fitted on this project's machine (benchmarks/bench_trial.py, docs/performance.md).

Costs are in training steps. Work is counted in examples (tokens for translation), a forward pass 1
per example and a backward pass 2, so a training step on a batch of B examples is 3 B:

- a snapshot: forward and backward on the probe batch (3 P), the same on the update batch (a training
  batch, 3 B), one forward on the probe batch after the step (P): (4 P + 3 B) / 3 B, times SNAPSHOT_K
  (hooks, norms, the step undone: measured 0.7-1.45x the plain count, MLPs to CNNs and Transformers);
- a Hessian estimate: the Hessian batch's gradient graph (4 H) and up to `hessian_iters` Hessian-vector
  products of 3.5 H each (every product counted: Lanczos may stop earlier), times HESSIAN_K;
- a validation: a forward pass over the validation split (V), what the task counts (`measure_work`).
"""
from __future__ import annotations

import math
from typing import NamedTuple

from nas_stab.config.schema import Spec

SNAPSHOT_K = 1.25
HESSIAN_K = 1.2
HVP_WORK = 3.5  # one Hessian-vector product, per example of the Hessian batch
GRAPH_WORK = 4.0  # the Hessian batch's forward and its backward that keeps the graph
MAX_POINTS = 9  # mid-run measurements of each kind at most: with the one at the end, 10 per run (the earlier default)


class MeasureCosts(NamedTuple):
    """What one measurement costs, in training steps."""

    snapshot: float  # a stability snapshot without the Hessian
    hessian: float  # what the Hessian estimate adds to a snapshot
    validation: float  # a validation (mid-run)


FALLBACK = MeasureCosts(snapshot=5.0, hessian=15.0, validation=5.0)  # a task that does not say its sizes


def measure_costs(spec: Spec, task) -> MeasureCosts:
    """The cost model above for `spec`'s stability settings and `task`'s sizes (`task.measure_work()`)."""
    work = getattr(task, "measure_work", None)
    if work is None:
        return FALLBACK
    w = work()
    step = 3.0 * max(w["train"], 1.0)
    probe, rows = w["probe"], max(w.get("probe_rows", w["probe"]), 1.0)
    st = spec.stability
    hb = st.hessian_batch
    h = probe * (min(hb, rows) / rows if hb else 1.0)
    return MeasureCosts(
        snapshot=SNAPSHOT_K * (4.0 * probe + 3.0 * w["train"]) / step,
        hessian=HESSIAN_K * (GRAPH_WORK + HVP_WORK * st.hessian_iters) * h / step,
        validation=w["val"] / step,
    )


class Cadence(NamedTuple):
    eval_every: int  # steps between mid-run validations (0: none)
    snap_every: int  # steps between stability snapshots (0: only at init and at the end)
    planned: float  # the measurements' planned cost, in training steps (nan without a budget)


def points(every: int, total: int) -> int:
    """Mid-run measurements of a `total`-step run every `every` steps (the one at step `total` is the end's)."""
    return (total - 1) // every if every and total > 1 else 0


def every_for(n: int, total: int) -> int:
    """The cadence that spreads `n` mid-run measurements over `total` steps: at most `n` of them (0: none)."""
    return 0 if n <= 0 else max(1, math.ceil(total / (n + 1)))


def plan(total: int, budget: float | None, costs: MeasureCosts, *, eval_every: int | None = None,
         snap_every: int | None = None, hessian: bool = True, hessian_every: int = 0,
         pruner: bool = False) -> Cadence:
    """The cadences of a `total`-step run: the ones given (`eval_every`, `snap_every`: the spec's, None when
    unset) are kept; the others are chosen within `budget` x `total` training steps of measuring.

    Spent first, always: the snapshots at init and at the end with their Hessian estimates, the
    Hessian estimates during training (`hessian_every`), the cadences given, and with a `pruner` the
    validations at 10 per run (its reports). What is left goes to the unset cadences in equal shares,
    each taking as many measurements as its share pays for, at most `MAX_POINTS` (what a kind at that
    cap leaves goes to the other), so that neither kind ever gets fewer with a larger budget. Without a
    budget (None): 10 per run each, the defaults before the budget."""
    default = max(1, total // 10)
    if budget is None:
        return Cadence(eval_every or default, default if snap_every is None else snap_every, math.nan)
    fixed_eval = eval_every if eval_every is not None else (default if pruner else None)
    spent = 2 * costs.snapshot + (2 * costs.hessian if hessian else 0.0)
    if hessian and hessian_every:
        spent += points(hessian_every, total) * costs.hessian
    if fixed_eval is not None:
        spent += points(fixed_eval, total) * costs.validation
    if snap_every is not None:
        spent += points(snap_every, total) * costs.snapshot
    left = max(0.0, budget * total - spent)
    cap = min(MAX_POINTS, max(total - 1, 0))
    cost = {"snap": costs.snapshot, "eval": costs.validation}
    free = [k for k, given in (("snap", snap_every), ("eval", fixed_eval)) if given is None]

    def afford(k: str, room: float) -> int:
        return cap if cost[k] <= 0 else min(cap, int(room / cost[k] + 1e-9))

    n = {k: afford(k, left / len(free)) for k in free}  # an equal share each
    if len(free) == 2:  # what a kind at its cap leaves goes to the other
        for k, other in (("snap", "eval"), ("eval", "snap")):
            if n[k] == cap:
                n[other] = afford(other, left - n[k] * cost[k])
    n.setdefault("snap", 0), n.setdefault("eval", 0)
    snap = snap_every if snap_every is not None else every_for(n["snap"], total)
    ev = fixed_eval if fixed_eval is not None else every_for(n["eval"], total)
    planned = (spent + points(snap, total) * costs.snapshot * (snap_every is None)
               + points(ev, total) * costs.validation * (fixed_eval is None))
    return Cadence(ev, snap, planned)


def for_spec(spec: Spec, total: int, costs: MeasureCosts) -> Cadence:
    """`plan` with `spec`'s settings: stability.budget, the cadences it sets, its Hessian and its pruner."""
    t, st = spec.train, spec.stability
    pruner = getattr(getattr(spec.search, "pruner", None), "name", "none") not in (None, "none")
    return plan(total, st.budget, costs, eval_every=t.eval_every, snap_every=st.every, hessian=st.hessian,
                hessian_every=st.hessian_every, pruner=pruner)
