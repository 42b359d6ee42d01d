"""`estimate_cost`: the cost estimate `nas-stab validate` prints (the package docstring says how it is made)."""
from __future__ import annotations

import dataclasses
import math
import time

import torch

from nas_stab.config.mode import search_mode
from nas_stab.config.schema import Spec
from nas_stab.estimate.measure import (
    ROUNDS,
    STEPS_PER_ROUND,
    Timed,
    measure_costs,
    pool_rounds,
    run_threads,
    time_steps,
    whole_run,
)
from nas_stab.estimate.shape import Shape, config_label, cost_proxy, run_steps, search_shape
from nas_stab.estimate.wall import Costs, parallel, wall_model
from nas_stab.tasks import load_task
from nas_stab.textfmt import duration
from nas_stab.training.loop import pick_device
from nas_stab.training.malloc import keep_freed_memory


def estimate_cost(spec: Spec, runs: int, *, timed: bool = True, startup_s: float | None = None,
                  costs: Costs | None = None) -> str:
    """Total optimizer steps and, when `timed`, the wall time of `nas-stab run` (see the package
    docstring). `startup_s`: this process's age (the CLI gives it); `costs`: given instead of measured."""
    t = spec.train
    if t.steps is not None and not timed:
        return f"cost: {runs} runs x {t.steps} steps = {runs * t.steps:,} optimizer steps"
    device, task, load_s = _load(spec)
    shape = search_shape(spec, runs)
    configs = shape.configs
    steps_of = [run_steps(c, task) for c, _ in configs]
    total_steps = round(sum(s * n for s, (_, n) in zip(steps_of, configs)) * shape.scale)
    line = f"cost: {shape.runs} runs, {total_steps:,} optimizer steps"
    if not timed:
        return line
    proxies = [cost_proxy(c, task.info) for c, _ in configs]
    timings, runs_of, cold_s = _time_extremes(spec, task, device, configs, steps_of, proxies, cold=costs is None)
    lo, hi = timings[0], timings[-1]
    if costs is None:
        costs = _measure(spec, shape, startup_s if startup_s is not None else load_s, max(0.0, cold_s - lo.run_s), runs_of[0])

    train_s = [sum(_at(lo, hi, p, pick) * s * n for p, s, (_, n) in zip(proxies, steps_of, configs)) / 1000 * shape.scale
               for pick in (lambda x: min(x.ms), lambda x: x.median, lambda x: max(x.ms))]
    run_s = sum(_at(lo, hi, p, lambda x: x.run_s) * n for p, (_, n) in zip(proxies, configs)) * shape.scale
    threads = run_threads(spec)
    c = min(spec.runner.concurrency, shape.runs)
    out = [line + f"; timed on {device.type}, {threads} torch thread(s) per run, {ROUNDS} rounds of {STEPS_PER_ROUND} steps "
           f"and one whole run of each:"]
    out += _timing_lines(timings, train_s, run_s)
    out += _overhead_lines(costs, c, threads)
    out += _wall_lines(spec, shape, costs, run_s / max(1, shape.runs), threads)
    return "\n".join(out)


def _load(spec: Spec):
    """(device, task, seconds its data took to load), with each run's torch threads, as the runner sets them."""
    torch.set_num_threads(run_threads(spec))  # each run's threads, as the runner will set them
    keep_freed_memory()  # as train_run does: timing without it overstates CNN steps by 15-30%
    device = pick_device(spec.train.device)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    task = load_task(spec, 0, device)
    return device, task, time.perf_counter() - t0


def _time_extremes(spec: Spec, task, device, configs, steps_of, proxies, *, cold: bool):
    """The cheapest and the dearest configuration by the proxy (one if they cost the same): their steps
    timed, then (with `cold`) a fresh first run of the cheapest, then one warm whole run of each.
    Returns (their `Timed`, cheapest first; `whole_run`'s answers; the cold run's seconds, nan without)."""
    lo_i = min(range(len(configs)), key=lambda i: proxies[i])
    hi_i = max(range(len(configs)), key=lambda i: proxies[i])
    picks = [lo_i] if proxies[lo_i] == proxies[hi_i] else [lo_i, hi_i]
    timings = [time_steps(configs[i][0], task, device, config_label(spec, configs[i][0]), proxies[i]) for i in picks]
    cold_s = math.nan
    if cold:
        cold_s = whole_run(configs[lo_i][0], steps_of[lo_i], timings[0].median, reuse=False)[0]  # a fresh first run
    runs_of = [whole_run(configs[i][0], steps_of[i], x.median) for i, x in zip(picks, timings)]
    timings = [dataclasses.replace(x, run_s=r[0]) for x, r in zip(timings, runs_of)]
    return timings, runs_of, cold_s


def _measure(spec: Spec, shape: Shape, startup_s: float, warmup_s: float, cheapest_run) -> Costs:
    """The overheads measured (`measure_costs`) and, with `runner.concurrency` > 1 on the local runner,
    its worker pool's start and speed at once (else modelled: `wall_model`)."""
    costs = measure_costs(spec, startup_s, warmup_s, lo_result=cheapest_run[1])
    c = min(spec.runner.concurrency, shape.runs)
    if spec.runner.kind == "local" and c > 1:
        try:
            pool_s, round_s = pool_rounds(spec, cheapest_run[3], c)
            costs = dataclasses.replace(costs, pool_s=pool_s, parallel=c * cheapest_run[2] / round_s)
        except Exception:  # modelled instead (wall_model)
            pass
    return costs


def _at(lo: Timed, hi: Timed, proxy: float, pick) -> float:
    """`pick` of a timing, interpolated linearly in the proxy between the cheapest and the dearest."""
    if hi.proxy == lo.proxy:
        return pick(lo)
    f = (proxy - lo.proxy) / (hi.proxy - lo.proxy)
    return pick(lo) + f * (pick(hi) - pick(lo))


def _timing_lines(timings: list[Timed], train_s: list[float], run_s: float) -> list[str]:
    """The configurations timed, and the training steps and whole runs they give in all."""
    out = []
    for x in timings:
        spread = f"{min(x.ms):.1f}-{max(x.ms):.1f}"
        out.append(f"  {'cheapest' if x is timings[0] else 'dearest '} {x.label}: {x.median:.1f} ms/step (rounds {spread}); "
                   f"a whole run {duration(x.run_s)} (evaluations, snapshots and probes included)")
    out.append(f"  -> ~{duration(train_s[1])} of training steps (range {duration(train_s[0])}-{duration(train_s[2])} "
               f"over the rounds), ~{duration(run_s)} of whole runs")
    return out


def _overhead_lines(costs: Costs, c: int, threads: int) -> list[str]:
    """Start-up, workers or first run, run directory and study, bookkeeping, leaderboard; runs at once."""
    out = [f"  overheads: start-up {duration(costs.startup_s)} (interpreter, imports, spec, data)"
           + (f", workers {duration(wall_model(costs, 0, c, c).start_s - costs.startup_s - costs.open_s)} "
              f"(their start and first run{'' if costs.pool_s == costs.pool_s else ', modelled'})" if c > 1
              else f", first run +{duration(costs.warmup_s)}")
           + f", run directory and study {duration(costs.open_s)}, {1000 * costs.book_s:.0f} ms per run "
           f"(records, Optuna), leaderboard {duration(costs.end_s)}"]
    if c > 1:
        how = ("measured: rounds of the cheapest run at once" if costs.parallel == costs.parallel else
               f"modelled: {costs.busy:.1f} of {costs.cores} cores busy with other work now")
        out.append(f"  {c} runs at once: {parallel(costs, c, threads):.1f}x as fast as one at a time ({how})")
    return out


def _wall_lines(spec: Spec, shape: Shape, costs: Costs, per_run: float, threads: int) -> list[str]:
    """The wall time: a bracket's expected runs with its range, else the runs in all."""
    def wall(n_runs: float) -> float:
        return wall_model(costs, per_run * n_runs, round(n_runs), spec.runner.concurrency, threads, shape.outer).total

    out = []
    if shape.bracket is not None:
        low, mid, high = shape.bracket
        out.append(f"  -> wall time: ~{duration(wall(mid))} for ~{mid} runs expected ({shape.bracket_note}); "
                   f"{duration(wall(low))} if the start grid's {low} runs bracket every optimum, "
                   f"at most ~{duration(wall(high))} ({high} runs: {shape.bound_note})")
    else:
        kind = "" if search_mode(spec).kind == "grid" or shape.outer else \
            " (sampled configurations: timed at the base configuration)"
        out.append(f"  -> wall time: ~{duration(wall(shape.runs))}{kind}")
    extra = adaptive_extra_runs(spec)
    if extra:
        base = shape.bracket[1] if shape.bracket is not None else shape.runs
        n_min, n_max = len(spec.seeds), len(spec.seeds) + len(spec.seeds_more)
        out.append(f"  -> adaptive seeds ({n_min} to {n_max}): the search decides its own size: ~{duration(wall(base))} "
                   f"({base} runs) if {n_min} seeds decide every row, up to ~{duration(wall(base + extra))} "
                   f"({base + extra} runs) if every row stays open to seeds.max (at most {VERDICT_CELLS} cells per row and "
                   f"size get more seeds: the optimum, its neighbours and the carried lr's)")
    if spec.runner.kind == "ray":
        out.append("  (the Ray runner: its cluster's start-up and scheduling are not counted)")
    return out


VERDICT_CELLS = 5  # cells a verdict rests on per row and size (analysis/more_seeds.py: best lr, its two neighbours,
# the two tried lrs around the carried lr)


def adaptive_extra_runs(spec: Spec) -> int:
    """Adaptive seeds: the most runs the seeds beyond seeds.min can add (every row open to seeds.max, at every cell
    its verdict rests on); 0 for a fixed seed count."""
    more = len(getattr(spec, "seeds_more", ()))
    if not more or not search_mode(spec).adaptive:
        return 0
    lb = spec.leaderboard
    count = lambda key: len(spec.space.values_of(d)) if (d := spec.space.get(key)) is not None else 1  # noqa: E731
    rows = math.prod(count(k) for k in lb.compare) if lb.compare else 1
    sizes = count(lb.transfer) if lb.transfer else 1
    cells = VERDICT_CELLS if search_mode(spec).kind == "bracket" else min(VERDICT_CELLS, count(lb.lr))  # a bracket extends its lrs
    return rows * sizes * cells * more
