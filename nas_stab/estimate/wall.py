"""The wall-time model of a search: its start-up, its runs and their bookkeeping at the concurrency, its end."""
from __future__ import annotations

import math
from dataclasses import dataclass


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
