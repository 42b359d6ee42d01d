"""What the cost estimate measures on this machine: training steps, whole runs, the worker pool's
start and speed at once, the driver's bookkeeping, the cores other work keeps busy."""
from __future__ import annotations

import contextlib
import dataclasses
import io
import math
import os
import tempfile
import time
from dataclasses import dataclass

import torch

from nas_stab.config.schema import Spec
from nas_stab.data import reuse_loaded
from nas_stab.estimate.wall import Costs
from nas_stab.models import build_model
from nas_stab.search import plan
from nas_stab.search.local_pool import WorkerPool, worker_threads
from nas_stab.search.protocols import Executor
from nas_stab.search.ray.cluster import trial_threads
from nas_stab.store.rundir import RunDir
from nas_stab.training.loop import RunResult, cadences
from nas_stab.training.optim import build_optimizer

ROUNDS = 3
STEPS_PER_ROUND = 4
RUN_BUDGET_S = 1.5  # a whole run predicted longer than this is timed shortened (validate stays quick)
BOOK_RUNS = 8  # runs the bookkeeping is measured on


@dataclass(frozen=True)
class Timed:
    """A configuration's training steps, timed (`time_steps`), and one whole run of it (`whole_run`)."""

    label: str
    proxy: float
    ms: tuple[float, ...]  # median ms/step of each round
    run_s: float = math.nan  # one whole warm run (evaluation, snapshots, probes included)

    @property
    def median(self) -> float:
        return sorted(self.ms)[len(self.ms) // 2]


def time_steps(spec: Spec, task, device, label: str, proxy: float) -> Timed:
    """`ROUNDS` rounds of `STEPS_PER_ROUND` training steps of `spec` (after two to warm up): each round's median."""
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


def shortened(spec: Spec, total: int, ms_step: float, budget_s: float = RUN_BUDGET_S):
    """(the spec to time, the factor its measured overhead is scaled by): the spec itself when its run is
    predicted within `budget_s`; else one of fewer steps with the same evaluation and snapshot cadence,
    whose overhead (time beyond its steps) counts per event (an evaluation or a snapshot; init, final
    snapshot and final evaluations: 3), scaled to the full run's events."""
    if total * ms_step / 1000 <= budget_s or total <= 1:
        return spec, 1.0
    short = max(1, min(total - 1, int(budget_s * 1000 / max(ms_step, 1e-6))))
    ev, sn = cadences(spec, total)

    def events(n: int) -> int:  # ev or sn 0: none during training (stability.budget chose none)
        return 3 + ((n - 1) // ev if ev else 0) + ((n - 1) // sn if sn else 0)

    t = dataclasses.replace(spec.train, steps=short, epochs=None, eval_every=ev or short + 1)
    st = dataclasses.replace(spec.stability, every=sn)
    return dataclasses.replace(spec, train=t, stability=st), events(total) / events(short)


def whole_run(spec: Spec, total: int, ms_step: float, *, reuse: bool = True):
    """Seconds of one whole run of `spec` (`total` steps) through the run path (`plan.run_job`), warm (data
    reused) or not (`reuse=False`: a worker's first run, which loads the data); a long run is timed
    shortened (`shortened`) and its steps and events extrapolated. Returns (seconds, its RunResult, the
    seconds measured, the spec timed)."""
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


def pool_rounds(spec: Spec, run_spec, c: int) -> tuple[float, float]:
    """runner.concurrency > 1: (the workers' start and their first, cold, runs; one warm round) in seconds:
    the local runner's own worker pool (`local_pool.WorkerPool`) starts `c` workers and trains `run_spec`
    (the cheapest configuration, as timed alone) on each at once, then `ROUNDS_AT_ONCE` more rounds (the
    fastest counts: the machine's other work comes and goes)."""
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


def measure_costs(spec: Spec, startup_s: float, warmup_s: float, lo_result=None) -> Costs:
    """The overheads of `wall_model`, measured: a real driver records `BOOK_RUNS` runs (each the given
    result, or an empty one) in a temporary run directory; the leaderboard is built on them; the
    machine's busy cores are read over a short window."""
    cores = os.cpu_count() or 1
    busy = _busy_cores(cores)
    try:
        open_s, book_s, end_s = bookkeeping(spec, lo_result)
    except Exception:  # an estimate must not fail validate: a typical machine's figures
        open_s, book_s, end_s = 0.5, 0.03, 0.5
    return Costs(startup_s, warmup_s, open_s, book_s, end_s, cores, busy)


def bookkeeping(spec: Spec, result) -> tuple[float, float, float]:
    """(driver start, per run, leaderboard) seconds: a real `Driver` with the search's own job source or
    sampler (a bracket's decisions, a transfer search's outer study, Optuna's asks) on a temporary run
    directory records its first `BOOK_RUNS` runs, each with the measured result (no training)."""
    from nas_stab.results.leaderboard import build_leaderboard  # deferred with the driver: pandas (~0.5 s), only
    from nas_stab.search.driver import Driver  # when timing (`nas-stab validate --no-timing` stays quick)

    if result is None:
        result = RunResult("complete")
    # nothing leaves the temporary directory: no tracking, the study in its own SQLite file (never search.storage)
    fake = dataclasses.replace(spec, logging=dataclasses.replace(spec.logging, tracking="none"),
                               search=dataclasses.replace(spec.search, storage=None))

    with tempfile.TemporaryDirectory(prefix="nas-stab-estimate-") as tmp:
        t0 = time.perf_counter()
        with RunDir.open(tmp, fake, data_note="estimate") as rd:
            driver = Driver(fake, rd, progress_stream=io.StringIO(), live=False)
            t1 = time.perf_counter()
            ex = _Untrained(result, BOOK_RUNS)
            try:
                driver.drive(ex)
            finally:
                driver.close_running()
                driver.close()
            t2 = time.perf_counter()
            with contextlib.suppress(Exception):  # a table of a few runs may not be analysable: the time so far counts
                build_leaderboard([rd.path], formats=("md",), plots=False, out_dir=os.path.join(tmp, "lb"))
            t3 = time.perf_counter()
    return t1 - t0, (t2 - t1) / max(1, ex.n), t3 - t2


class _Untrained(Executor):
    """The bookkeeping's executor: one run at a time, each done at once with `result` (no training), `limit` in all."""

    def __init__(self, result: RunResult, limit: int):
        self.result, self.limit = result, limit
        self.run, self.n = None, 0

    @property
    def idle(self) -> int:
        return int(self.run is None and self.n < self.limit)

    @property
    def busy(self) -> list:
        return [self.run] if self.run is not None else []

    def submit(self, run) -> None:
        self.run, self.n = run, self.n + 1

    def wait(self) -> list[tuple]:
        run, self.run = self.run, None
        return [(run, self.result, "")]


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


def run_threads(spec: Spec) -> int:
    """torch threads of one run, as the runner sets them: `train.threads`, else the local runner's
    cpus shared by `runner.concurrency` runs, or the Ray runner's `runner.resources.cpu` per trial."""
    if spec.runner.kind == "ray":
        return trial_threads(spec)
    return worker_threads(spec, spec.runner.concurrency)
