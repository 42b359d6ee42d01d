"""The cost estimate printed by `nas-stab validate`: the wall time of `nas-stab run`.

A search's wall time is more than its training steps. On small runs (the
quickstart's 108 runs of 100 steps) the steps are a fraction of it; the rest is
(`wall_model`, each piece measured here, in this process, on this machine):

- **start-up**: the interpreter, the imports, the spec and the data (this
  process's age when the estimate starts: `nas-stab validate` does what `run`
  does before its first run); one at a time, a first run's extra (a *cold*
  run, which loads the data again, minus a warm one); with
  `runner.concurrency` > 1 the worker processes' start and their first runs
  (the local runner's own worker pool, started here: `_pool_rounds`);
- **each run**, whole: model build, the training steps, the evaluations, the
  stability snapshots and probes (one real run of the cheapest and one of the
  dearest configuration through the run path, `plan.run_job`; a long run is
  timed shortened and its steps and snapshots extrapolated, see `_whole_run`);
- **each run's bookkeeping** in the driver: its records (history file,
  trials.csv, TensorBoard), Optuna's enqueue, ask and tell (a real driver in a
  temporary run directory records a few runs, `_bookkeeping`);
- **the end**: the leaderboard (and per outer trial of a transfer search its
  objectives, the same analysis).

Runs at once (`runner.concurrency`) divide the runs and their bookkeeping by
how much faster they go at once than one by one, measured on that pool (a
round of the cheapest run on every worker at once against the same run
alone): on a 2-core machine shared with other work two runs at once were
measured from 1.0x to 1.5x as fast, never the 2x the concurrency suggests.
Where it cannot be measured (the Ray runner) it is modelled from the cores
busy with other work (`speedup`).

A grid's configurations can differ in cost by orders of magnitude (depth,
width, branches, batch size), so timing the base configuration alone misleads.
The distinct configurations are ranked by a cost proxy (parameters x examples
per batch); a few training steps of the cheapest and the most expensive are
timed in several rounds (the spread across rounds is printed: a busy machine
shows up there), one whole run of each, and every run's time is interpolated
linearly in the proxy between the two.

A bracket search trains its start grid and then adds learning rates as results
come in: the estimate gives its start grid (fewest), the expected count and
a bound of its rules (`bracket.points_range`). A transfer search trains, for
each outer trial, its inner grid (sizes x learning rates x seeds): outer x inner.
"""
from __future__ import annotations

import dataclasses
import io
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass

from nas_stab.config.mode import search_mode
from nas_stab.textfmt import duration

PLANNED = ("grid", "bracket")  # samplers whose configurations are known before the run (bracket: its start grid)
MAX_CONFIGS = 256  # distinct model configurations sized (a larger grid: evenly spaced sample)
ROUNDS = 3
STEPS_PER_ROUND = 4
RUN_BUDGET_S = 1.5  # a whole run predicted longer than this is timed shortened (validate stays quick)
BOOK_RUNS = 8  # runs the bookkeeping is measured on


@dataclass(frozen=True)
class Timed:
    label: str
    proxy: float
    ms: tuple[float, ...]  # median ms/step of each round
    run_s: float = math.nan  # one whole warm run (evaluation, snapshots, probes included)

    @property
    def median(self) -> float:
        return sorted(self.ms)[len(self.ms) // 2]


@dataclass(frozen=True)
class Costs:
    """What a search costs on this machine besides its runs (seconds); measured by `measure_costs`,
    given by hand in tests."""

    startup_s: float  # interpreter, imports, spec, data: before the first run
    warmup_s: float  # a fresh process's first run beyond a warm one (data load, torch's first calls)
    open_s: float  # run directory and study opened, the driver started
    book_s: float  # the driver's work per run: records, history, TensorBoard, Optuna
    end_s: float  # the leaderboard at the end (and a transfer search's objectives per outer trial)
    cores: int = 1  # the machine's cores
    busy: float = 0.0  # cores busy with other work when measured
    pool_s: float = math.nan  # runner.concurrency > 1: the workers' start and first runs (measured; else modelled)
    parallel: float = math.nan  # runner.concurrency > 1: how much faster its runs go at once than one by one (measured)


def speedup(concurrency: int, threads: int, cores: int, busy: float) -> float:
    """How much faster `concurrency` runs of `threads` threads each go at once than one alone, when
    `busy` of the machine's `cores` are taken by other work (the scheduler shares the cores by thread)."""
    def share(n: int) -> float:  # the cores n runs get
        demand = n * threads
        return min(demand, cores * demand / (demand + busy)) if demand + busy > 0 else demand

    one = share(1)
    return max(1.0, share(concurrency) / one) if one > 0 else 1.0


@dataclass(frozen=True)
class Wall:
    start_s: float  # start-up, workers, the run directory
    runs_s: float  # the runs and their bookkeeping, at the concurrency
    end_s: float  # leaderboard (and outer trials' objectives)

    @property
    def total(self) -> float:
        return self.start_s + self.runs_s + self.end_s


def wall_model(costs: Costs, run_s: float, runs: int, concurrency: int, threads: int = 1, outer: int = 0) -> Wall:
    """Wall time of a search of `runs` runs taking `run_s` seconds in all (one at a time, alone), at
    `runner.concurrency`, with `outer` outer trials (a transfer search: each told its objectives)."""
    c = max(1, min(concurrency, runs))
    start = costs.startup_s + costs.open_s
    if c == 1:
        start += costs.warmup_s
    elif costs.pool_s == costs.pool_s:
        start += costs.pool_s
    else:  # not measured: the workers' fork server imports what this process imported, then each worker's
        start += 2 * costs.startup_s + costs.warmup_s  # first run imports and loads again (data, its readers)
    body = (run_s + runs * costs.book_s) / parallel(costs, c, threads)
    return Wall(start, body, costs.end_s * (1 + outer))


def parallel(costs: Costs, c: int, threads: int = 1) -> float:
    """How much faster `c` runs go at once than one by one: measured (`Costs.parallel`), else `speedup`."""
    if c <= 1:
        return 1.0
    if costs.parallel == costs.parallel:
        return min(float(c), max(0.5, costs.parallel))
    return speedup(c, threads, costs.cores, costs.busy)


def estimate_cost(spec, runs: int, *, timed: bool = True, startup_s: float | None = None,
                  costs: Costs | None = None) -> str:
    """Total optimizer steps and, when `timed`, the wall time of `nas-stab run` (see the module
    docstring). `startup_s`: this process's age (the CLI gives it); `costs`: given instead of measured."""
    t = spec.train
    if t.steps is not None and not timed:
        return f"cost: {runs} runs x {t.steps} steps = {runs * t.steps:,} optimizer steps"
    import torch

    from nas_stab.tasks import load_task
    from nas_stab.training.loop import pick_device
    from nas_stab.training.malloc import keep_freed_memory

    torch.set_num_threads(run_threads(spec))  # each run's threads, as the runner will set them
    keep_freed_memory()  # as train_run does: timing without it overstates CNN steps by 15-30%
    device = pick_device(t.device)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    task = load_task(spec, 0, device)
    load_s = time.perf_counter() - t0
    shape = search_shape(spec, runs)
    configs = shape.configs
    steps_of = [_steps(c, task) for c, _ in configs]
    total_steps = round(sum(s * n for s, (_, n) in zip(steps_of, configs)) * shape.scale)
    line = f"cost: {shape.runs} runs, {total_steps:,} optimizer steps"
    if not timed:
        return line
    proxies = [_proxy(c, task.info) for c, _ in configs]
    lo_i = min(range(len(configs)), key=lambda i: proxies[i])
    hi_i = max(range(len(configs)), key=lambda i: proxies[i])
    picks = [lo_i] if proxies[lo_i] == proxies[hi_i] else [lo_i, hi_i]
    timings = [_time_steps(configs[i][0], task, device, _label(spec, configs[i][0]), proxies[i]) for i in picks]
    cold_s = math.nan
    if costs is None:
        cold_s = _whole_run(configs[lo_i][0], steps_of[lo_i], timings[0].median, reuse=False)[0]  # a fresh first run
    runs_of = [_whole_run(configs[i][0], steps_of[i], x.median) for i, x in zip(picks, timings)]
    timings = [dataclasses.replace(x, run_s=r[0]) for x, r in zip(timings, runs_of)]
    lo, hi = timings[0], timings[-1]
    if costs is None:
        costs = measure_costs(spec, startup_s if startup_s is not None else load_s,
                              max(0.0, cold_s - lo.run_s), lo_result=runs_of[0][1])
        c = min(spec.runner.concurrency, shape.runs)
        if spec.runner.kind == "local" and c > 1:
            try:
                pool_s, round_s = _pool_rounds(spec, runs_of[0][3], c)
                costs = dataclasses.replace(costs, pool_s=pool_s, parallel=c * runs_of[0][2] / round_s)
            except Exception:  # modelled instead (wall_model)
                pass

    def at(proxy: float, pick) -> float:
        if hi.proxy == lo.proxy:
            return pick(lo)
        f = (proxy - lo.proxy) / (hi.proxy - lo.proxy)
        return pick(lo) + f * (pick(hi) - pick(lo))

    train_s = [sum(at(p, pick) * s * n for p, s, (_, n) in zip(proxies, steps_of, configs)) / 1000 * shape.scale
               for pick in (lambda x: min(x.ms), lambda x: x.median, lambda x: max(x.ms))]
    run_s = sum(at(p, lambda x: x.run_s) * n for p, (_, n) in zip(proxies, configs)) * shape.scale
    per_run = run_s / max(1, shape.runs)
    threads = run_threads(spec)
    c = min(spec.runner.concurrency, shape.runs)
    out = [line + f"; timed on {device.type}, {threads} torch thread(s) per run, {ROUNDS} rounds of {STEPS_PER_ROUND} steps "
           f"and one whole run of each:"]
    for x in timings:
        spread = f"{min(x.ms):.1f}-{max(x.ms):.1f}"
        out.append(f"  {'cheapest' if x is lo else 'dearest '} {x.label}: {x.median:.1f} ms/step (rounds {spread}); "
                   f"a whole run {duration(x.run_s)} (evaluations, snapshots and probes included)")
    out.append(f"  -> ~{duration(train_s[1])} of training steps (range {duration(train_s[0])}-{duration(train_s[2])} "
               f"over the rounds), ~{duration(run_s)} of whole runs")
    sp = parallel(costs, c, threads)
    out.append(f"  overheads: start-up {duration(costs.startup_s)} (interpreter, imports, spec, data)"
               + (f", workers {duration(wall_model(costs, 0, c, c).start_s - costs.startup_s - costs.open_s)} "
                  f"(their start and first run{'' if costs.pool_s == costs.pool_s else ', modelled'})" if c > 1
                  else f", first run +{duration(costs.warmup_s)}")
               + f", run directory and study {duration(costs.open_s)}, {1000 * costs.book_s:.0f} ms per run "
               f"(records, Optuna), leaderboard {duration(costs.end_s)}")
    if c > 1:
        how = ("measured: rounds of the cheapest run at once" if costs.parallel == costs.parallel else
               f"modelled: {costs.busy:.1f} of {costs.cores} cores busy with other work now")
        out.append(f"  {c} runs at once: {sp:.1f}x as fast as one at a time ({how})")
    outer = shape.outer

    def wall(n_runs: float) -> float:
        return wall_model(costs, per_run * n_runs, round(n_runs), spec.runner.concurrency, threads, outer).total

    if shape.bracket is not None:
        low, mid, high = shape.bracket
        out.append(f"  -> wall time: ~{duration(wall(mid))} for ~{mid} runs expected ({shape.bracket_note}); "
                   f"{duration(wall(low))} if the start grid's {low} runs bracket every optimum, "
                   f"at most ~{duration(wall(high))} ({high} runs: {shape.bound_note})")
    else:
        kind = "" if spec.search.sampler == "grid" or shape.outer else \
            " (sampled configurations: timed at the base configuration)"
        out.append(f"  -> wall time: ~{duration(wall(shape.runs))}{kind}")
    if spec.runner.kind == "ray":
        out.append("  (the Ray runner: its cluster's start-up and scheduling are not counted)")
    return "\n".join(out)


# ------------------------------------------------------------------ what is trained

@dataclass(frozen=True)
class Shape:
    configs: list  # [(resolved spec, runs of it)] of one outer trial (transfer) or of the search
    runs: int  # runs in all (bracket: its start grid)
    scale: float = 1.0  # configs' runs x scale = the runs in all (transfer: outer trials)
    outer: int = 0  # outer trials (transfer)
    bracket: tuple[int, int, int] | None = None  # runs (fewest, expected, most)
    bracket_note: str = ""
    bound_note: str = ""


def search_shape(spec, runs: int) -> Shape:
    """The configurations a search trains and how many runs: grid and bracket (its start grid, and its
    expected and most runs), a transfer search (outer trials x its inner grid), a sampler (`runs`)."""
    n_seeds = len(spec.seeds)
    if spec.search.transfer is not None:
        configs = _transfer_configs(spec)
        inner = sum(n for _, n in configs)
        outer = spec.search.trials
        shape = Shape(configs, inner * outer, float(outer), outer)
        if search_mode(spec).inner_bracket:
            from nas_stab.search.bracket import points_range
            from nas_stab.search.transfer import inner_sweeps

            b = spec.search.bracket
            sweeps = inner_sweeps(spec, {})
            rng = [sum(points_range(start, float(b.step_octaves), float(b.resolution_octaves), tuple(b.lr_limits))[k]
                       for _, start in sweeps) * n_seeds * outer for k in range(3)]
            shape = dataclasses.replace(shape, bracket=tuple(rng), bracket_note=_EXPECTED_NOTE, bound_note=_BOUND_NOTE)
        return shape
    if spec.search.sampler not in PLANNED or not spec.space.dims:
        return Shape([(spec, n_seeds)], runs, runs / n_seeds)
    configs = _configs(spec)
    if spec.search.sampler == "bracket":
        from nas_stab.search.bracket import BracketSource, points_range

        b = spec.search.bracket
        src = BracketSource(spec)
        rng = [sum(points_range(start, float(b.step_octaves), float(b.resolution_octaves), tuple(b.lr_limits))[k]
                   for _, start in src.sweeps) * n_seeds for k in range(3)]
        return Shape(configs, runs, 1.0, 0, tuple(rng), _EXPECTED_NOTE, _BOUND_NOTE)
    return Shape(configs, runs)


_EXPECTED_NOTE = "each sweep: its start lrs, the extension steps to an optimum anywhere within lr_limits, two resolution points, a plateau step"
_BOUND_NOTE = "every lr step_octaves apart within lr_limits, plus the resolution points"


def _transfer_configs(spec) -> list[tuple[object, int]]:
    """A transfer search's inner grid (sizes x learning rates) with the base architecture, runs per outer trial."""
    from nas_stab.search.plan import try_resolve
    from nas_stab.search.transfer import inner_points

    n_seeds = len(spec.seeds)
    groups: dict[str, list] = {}
    for pt in inner_points(spec):
        cost = {k: v for k, v in pt.items() if k != spec.leaderboard.lr}
        groups.setdefault(json.dumps(cost, sort_keys=True, default=str), [cost, 0])[1] += n_seeds
    out = []
    for params, n in groups.values():
        r = try_resolve(spec, params)
        out.append((r if r is not None else spec, n))
    return out


def _configs(spec) -> list[tuple[object, int]]:
    """The distinct configurations that cost differently (model, batch, steps), with their run counts."""
    from nas_stab.config import resolve
    from nas_stab.search.plan import base_lookup

    if spec.search.sampler not in PLANNED or not spec.space.dims:
        return [(spec, len(spec.seeds))]
    points = spec.space.grid(base_lookup(spec))
    groups: dict[str, list] = {}
    for params in points:
        cost_params = {k: v for k, v in params.items() if k.startswith(("model.", "task.", "train.batch_size",
                                                                         "train.max_tokens", "train.steps", "train.epochs"))}
        sig = json.dumps(cost_params, sort_keys=True, default=str)
        groups.setdefault(sig, [cost_params, 0])[1] += len(spec.seeds)
    items = list(groups.values())
    if len(items) > MAX_CONFIGS:
        step = len(items) / MAX_CONFIGS
        scale = len(points) * len(spec.seeds) / MAX_CONFIGS
        items = [[items[int(i * step)][0], scale] for i in range(MAX_CONFIGS)]
    return [(resolve(spec, params), n) for params, n in items]


def _steps(spec, task) -> int:
    from nas_stab.training.optim import total_steps

    return total_steps(spec.train, task.steps_per_epoch)


def _proxy(spec, info) -> float:
    """Parameters x examples (or tokens) per batch: a model's step cost, up to a constant."""
    import torch

    from nas_stab.models import build_model

    with torch.device("meta"):
        try:
            model = build_model(spec, info)
        except Exception:  # an init that needs real tensors: build it on the CPU
            model = None
    if model is None:
        model = build_model(spec, info)
    params = sum(p.numel() for p in model.parameters())
    per_batch = spec.train.max_tokens or spec.train.batch_size
    return float(params) * per_batch


def _label(base, spec) -> str:
    keys = [d.key for d in base.space.dims] if base.space else []
    from nas_stab.config import get_key

    shown = [f"{k.split('.')[-1]}={get_key(spec, k)}" for k in keys
             if k.startswith(("model.", "train.batch_size", "train.max_tokens"))]
    return ", ".join(shown) or "base configuration"


# ------------------------------------------------------------------ measured

def _time_steps(spec, task, device, label: str, proxy: float) -> Timed:
    import torch

    from nas_stab.models import build_model
    from nas_stab.training.optim import build_optimizer

    torch.manual_seed(0)
    model = build_model(spec, task.info).to(device)
    opt = build_optimizer(model, spec.train)
    batches = task.train_batches(torch.Generator().manual_seed(0))

    def step() -> float:
        t0 = time.perf_counter()
        loss = task.loss(model, next(batches))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    step(), step()  # warm-up: allocator, kernels, caches
    rounds = []
    for _ in range(ROUNDS):
        ts = sorted(step() for _ in range(STEPS_PER_ROUND))
        rounds.append(1000 * ts[len(ts) // 2])
    return Timed(label, proxy, tuple(rounds))


def shortened(spec, total: int, ms_step: float, budget_s: float = RUN_BUDGET_S):
    """(the spec to time, the factor its measured overhead is scaled by): the spec itself when its run is
    predicted within `budget_s`; else one of fewer steps with the same evaluation and snapshot cadence,
    whose overhead (time beyond its steps) counts per event (an evaluation or a snapshot; init, final
    snapshot and final evaluations: 3), scaled to the full run's events."""
    from nas_stab.training.loop import cadences

    if total * ms_step / 1000 <= budget_s or total <= 1:
        return spec, 1.0
    short = max(1, min(total - 1, int(budget_s * 1000 / max(ms_step, 1e-6))))
    ev, sn = cadences(spec, total)

    def events(n: int) -> int:  # ev or sn 0: none during training (stability.budget chose none)
        return 3 + ((n - 1) // ev if ev else 0) + ((n - 1) // sn if sn else 0)

    t = dataclasses.replace(spec.train, steps=short, epochs=None, eval_every=ev or short + 1)
    st = dataclasses.replace(spec.stability, every=sn)
    return dataclasses.replace(spec, train=t, stability=st), events(total) / events(short)


def _whole_run(spec, total: int, ms_step: float, *, reuse: bool = True):
    """Seconds of one whole run of `spec` (`total` steps) through the run path (`plan.run_job`), warm (data
    reused) or not (`reuse=False`: a worker's first run, which loads the data); a long run is timed
    shortened (`shortened`) and its steps and events extrapolated. Returns (seconds, its RunResult, the
    seconds measured, the spec timed)."""
    import contextlib

    from nas_stab.data import reuse_loaded
    from nas_stab.search import plan

    run_spec, factor = shortened(spec, total, ms_step)
    short = run_spec.train.steps if run_spec is not spec else total
    with reuse_loaded() if reuse else contextlib.nullcontext():
        t0 = time.perf_counter()
        result, _ = plan.run_job(run_spec, {}, spec.seeds[0] if spec.seeds else 0, resolved=run_spec)
        took = time.perf_counter() - t0
    done = max(1, min(short, result.steps or short))  # a diverged run stopped early: its remaining steps added
    if run_spec is spec and done == short:
        return took, result, took, run_spec
    over = max(0.0, took - done * ms_step / 1000)
    return total * ms_step / 1000 + over * factor, result, took, run_spec


ROUNDS_AT_ONCE = 2  # warm rounds of `runner.concurrency` runs at once


def _pool_rounds(spec, run_spec, c: int) -> tuple[float, float]:
    """runner.concurrency > 1: (the workers' start and their first, cold, runs; one warm round) in seconds:
    the local runner's own worker pool (`local_pool.WorkerPool`) starts `c` workers and trains `run_spec`
    (the cheapest configuration, as timed alone) on each at once, then `ROUNDS_AT_ONCE` more rounds (the
    fastest counts: the machine's other work comes and goes)."""
    from nas_stab.search.local_pool import WorkerPool

    class Trial:
        def report(self, value, step):
            pass

        def should_prune(self):
            return False

    def one_round(pool) -> float:
        t0 = time.perf_counter()
        for i in range(c):
            pool.submit(i, Trial(), {}, run_spec.seeds[0] if run_spec.seeds else 0, run_spec)
        left = c
        while left:
            left -= len(pool.wait())
        return time.perf_counter() - t0

    t0 = time.perf_counter()
    with WorkerPool(spec, c) as pool:
        one_round(pool)
        start_s = time.perf_counter() - t0
        rounds = [one_round(pool) for _ in range(ROUNDS_AT_ONCE)]
    return start_s, min(rounds)


def measure_costs(spec, startup_s: float, warmup_s: float, lo_result=None) -> Costs:
    """The overheads of `wall_model`, measured: a real driver records `BOOK_RUNS` runs (each the given
    result, or an empty one) in a temporary run directory; the leaderboard is built on them; the
    machine's busy cores are read over a short window."""
    cores = os.cpu_count() or 1
    busy = _busy_cores(cores)
    try:
        open_s, book_s, end_s = _bookkeeping(spec, lo_result)
    except Exception:  # an estimate must not fail validate: a typical machine's figures
        open_s, book_s, end_s = 0.5, 0.03, 0.5
    return Costs(startup_s, warmup_s, open_s, book_s, end_s, cores, busy)


def _bookkeeping(spec, result) -> tuple[float, float, float]:
    """(driver start, per run, leaderboard) seconds: a real `Driver` with the search's own job source or
    sampler (a bracket's decisions, a transfer search's outer study, Optuna's asks) on a temporary run
    directory records its first `BOOK_RUNS` runs, each with the measured result (no training)."""
    from nas_stab.results.leaderboard import build_leaderboard
    from nas_stab.results.rundir import RunDir
    from nas_stab.search.driver import Driver
    from nas_stab.training.loop import RunResult

    if result is None:
        result = RunResult("complete")
    # nothing leaves the temporary directory: no tracking, the study in its own SQLite file (never search.storage)
    fake = dataclasses.replace(spec, logging=dataclasses.replace(spec.logging, tracking="none"),
                               search=dataclasses.replace(spec.search, storage=None))

    class Executor:  # one run at a time, each done at once with `result`, `BOOK_RUNS` in all
        def __init__(self):
            self.run, self.n = None, 0

        @property
        def idle(self):
            return int(self.run is None and self.n < BOOK_RUNS)

        @property
        def busy(self):
            return [self.run] if self.run is not None else []

        def submit(self, run):
            self.run, self.n = run, self.n + 1

        def wait(self):
            run, self.run = self.run, None
            return [(run, result, "")]

    with tempfile.TemporaryDirectory(prefix="nas-stab-estimate-") as tmp:
        t0 = time.perf_counter()
        with RunDir.open(tmp, fake, data_note="estimate") as rd:
            driver = Driver(fake, rd, progress_stream=io.StringIO(), live=False)
            t1 = time.perf_counter()
            ex = Executor()
            try:
                driver.drive(ex)
            finally:
                driver.close_running()
                driver.close()
            t2 = time.perf_counter()
            try:
                build_leaderboard([rd.path], formats=("md",), plots=False, out_dir=os.path.join(tmp, "lb"))
            except Exception:  # a table of a few runs may not be analysable: the time so far counts
                pass
            t3 = time.perf_counter()
    return t1 - t0, (t2 - t1) / max(1, ex.n), t3 - t2


def _busy_cores(cores: int, window_s: float = 0.3) -> float:
    """Cores busy with other work (this process sleeps meanwhile), from /proc/stat over `window_s`; 0 elsewhere."""
    def read():
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + (v[4] if len(v) > 4 else 0)

    try:
        a = read()
        time.sleep(window_s)
        b = read()
    except (OSError, ValueError, IndexError):
        return 0.0
    total, idle = b[0] - a[0], b[1] - a[1]
    return max(0.0, min(float(cores), cores * (1 - idle / total))) if total > 0 else 0.0


def process_age() -> float | None:
    """Seconds since this process started (Linux: /proc), None where unknown."""
    try:
        with open("/proc/self/stat") as f:
            start_ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open("/proc/uptime") as f:
            up = float(f.read().split()[0])
        return max(0.0, up - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def run_threads(spec) -> int:
    """torch threads of one run, as the runner sets them: `train.threads`, else the local runner's
    cpus shared by `runner.concurrency` runs, or the Ray runner's `runner.resources.cpu` per trial."""
    if spec.runner.kind == "ray":
        from nas_stab.search.ray_runner import trial_threads

        return trial_threads(spec)
    from nas_stab.search.local_pool import worker_threads

    return worker_threads(spec, spec.runner.concurrency)
