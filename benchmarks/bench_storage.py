"""Optuna's sampler and storage cost per trial, up to 1,000 trials: which storage should be the default?

One TPE search (multivariate, seed 0; median pruner) per storage, all run
side by side in one process, trial by trial in turn (trial i of every storage,
then trial i+1, ...), so a change of machine load hits them alike. Each trial
suggests three parameters (log-float, categorical, int), reports `--reports`
intermediate values with `should_prune()` after each (as a training loop
does) and is told a value computed from its parameters: no training, so all
that is timed is Optuna's work. Every call into the storage object is timed
(outermost calls only), and so are the sampler's and the pruner's methods,
less the storage time inside them: per trial, `sampler` (TPE's own
computation), `pruner`, `storage` (every storage round trip, whoever made it)
and `total` (ask, suggest, report / should_prune, tell).

Storages (`--storages`):
  memory        optuna's InMemoryStorage (a reference: no persistence)
  sqlite        plain `optuna.storages.RDBStorage("sqlite:///...")` (SQLite's defaults: rollback journal, synchronous=FULL)
  sqlite-nas    what nas_stab's `make_storage` builds for a sqlite URL (the run directory's study.db)
  journal       `journal:///...` through nas_stab's `make_storage` (Optuna's JournalFileBackend)

    python benchmarks/bench_storage.py [--trials 300] [--reports 10] [--storages memory,sqlite,sqlite-nas,journal]

Prints per-trial milliseconds for the first and the last 100 trials (TPE's
own cost grows with the number of trials; the storages' costs too), the
totals, and the machine's load average.
"""
from __future__ import annotations

import argparse
import functools
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path


class Timer:
    """Accumulates seconds per category; nested timed calls count only in the outermost one."""

    def __init__(self):
        self.acc: dict[str, float] = {}
        self.depth = 0
        self.storage_in_call = 0.0

    def wrap_storage(self, obj) -> None:
        names = [n for n in dir(type(obj)) if not n.startswith("__") and callable(getattr(obj, n, None))]
        for name in names:
            fn = getattr(obj, name)

            @functools.wraps(fn)
            def timed(*a, _fn=fn, **k):
                if self.depth:
                    return _fn(*a, **k)
                self.depth += 1
                t0 = time.perf_counter()
                try:
                    return _fn(*a, **k)
                finally:
                    dt = time.perf_counter() - t0
                    self.depth -= 1
                    self.acc["storage"] = self.acc.get("storage", 0.0) + dt
                    self.storage_in_call += dt

            setattr(obj, name, timed)

    def wrap_methods(self, obj, names, category: str) -> None:
        """Time `obj`'s methods as `category`, less the storage time spent inside them."""
        for name in names:
            fn = getattr(obj, name)

            def timed(*a, _fn=fn, **k):
                before = self.storage_in_call
                t0 = time.perf_counter()
                try:
                    return _fn(*a, **k)
                finally:
                    dt = time.perf_counter() - t0 - (self.storage_in_call - before)
                    self.acc[category] = self.acc.get(category, 0.0) + dt

            setattr(obj, name, timed)


def make_study(kind: str, tmp: Path):
    import optuna

    from nas_stab.search.optuna_study import make_storage

    if kind == "memory":
        storage = None
    elif kind == "sqlite":
        storage = optuna.storages.RDBStorage(f"sqlite:///{tmp / 'plain.db'}")
    elif kind == "sqlite-nas":
        storage = make_storage(f"sqlite:///{tmp / 'study.db'}")
    elif kind == "journal":
        storage = make_storage(f"journal://{tmp / 'journal.log'}")
    else:
        raise SystemExit(f"unknown storage {kind!r}")
    sampler = optuna.samplers.TPESampler(seed=0, multivariate=True)
    pruner = optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=1)
    study = optuna.create_study(study_name="bench", storage=storage, sampler=sampler, pruner=pruner, direction="maximize")
    timer = Timer()
    timer.wrap_storage(study._storage)
    timer.wrap_methods(sampler, ["infer_relative_search_space", "sample_relative", "sample_independent",
                                 "before_trial", "after_trial"], "sampler")
    timer.wrap_methods(pruner, ["prune"], "pruner")
    return study, timer


def one_trial(study, reports: int) -> None:
    import optuna

    trial = study.ask()
    lr = trial.suggest_float("train.lr", 1e-4, 1.0, log=True)
    width = trial.suggest_categorical("model.width", [16, 32, 64, 128])
    depth = trial.suggest_int("model.depth", 1, 8)
    # a learning curve that peaks at lr 0.03, better with width, worse with depth
    final = math.exp(-(math.log10(lr) + 1.5) ** 2) * (1 - 1 / width) * (1 - 0.02 * depth)
    for step in range(1, reports + 1):
        trial.report(final * (1 - 0.5 ** step), step)
        if trial.should_prune():
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            return
    study.tell(trial, final)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=300, help="trials per storage (the target figure: 1000)")
    ap.add_argument("--reports", type=int, default=10, help="intermediate values (report + should_prune) per trial")
    ap.add_argument("--storages", default="memory,sqlite,sqlite-nas,journal")
    ap.add_argument("--window", type=int, default=100, help="trials in the first/last window")
    a = ap.parse_args(argv)

    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    import warnings

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    kinds = [k.strip() for k in a.storages.split(",") if k.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="nas-bench-storage-"))
    try:
        return _bench(a, kinds, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _bench(a, kinds, tmp: Path) -> int:
    import optuna

    studies = {}
    for k in kinds:
        d = tmp / k
        d.mkdir()
        studies[k] = make_study(k, d)

    print(f"TPE (multivariate, seed 0) + median pruner, {a.trials} trials x {a.reports} reports, storages side by side "
          f"trial by trial; optuna {optuna.__version__}; load average {os.getloadavg()[0]:.2f} at start")
    cats = ("total", "sampler", "pruner", "storage")
    per_trial = {k: {c: [] for c in cats} for k in kinds}
    t_start = time.perf_counter()
    for i in range(a.trials):
        order = kinds[i % len(kinds):] + kinds[:i % len(kinds)]
        for k in order:
            study, timer = studies[k]
            before = dict(timer.acc)
            t0 = time.perf_counter()
            one_trial(study, a.reports)
            per_trial[k]["total"].append(time.perf_counter() - t0)
            for c in cats[1:]:
                per_trial[k][c].append(timer.acc.get(c, 0.0) - before.get(c, 0.0))
        if (i + 1) % 100 == 0:
            print(f"  ... {i + 1} trials, {time.perf_counter() - t_start:.0f} s", file=sys.stderr, flush=True)

    w = min(a.window, a.trials)

    def ms(xs):
        return 1000 * statistics.mean(xs)

    print()
    print(f"per trial, ms: mean over the first {w} trials | over the last {w} trials (trials {a.trials - w + 1}-{a.trials})")
    print(f"{'storage':<12}" + "".join(f"{c:>20}" for c in cats) + f"{'all trials, s':>16}")
    for k in kinds:
        cells = []
        for c in cats:
            xs = per_trial[k][c]
            cells.append(f"{ms(xs[:w]):8.1f} | {ms(xs[-w:]):7.1f}")
        print(f"{k:<12}" + "".join(f"{x:>20}" for x in cells) + f"{sum(per_trial[k]['total']):16.1f}")
    other = {k: [t - s - p - st for t, s, p, st in zip(*(per_trial[k][c] for c in cats))] for k in kinds}
    print("  total = ask + suggest + reports/should_prune + tell; the rest of total is Optuna's own bookkeeping: "
          + ", ".join(f"{k} {ms(other[k][-w:]):.1f}" for k in kinds) + " ms (last window)")
    if "memory" in kinds:
        mem = per_trial["memory"]["total"]
        for k in kinds:
            if k != "memory":
                d = [x - y for x, y in zip(per_trial[k]["total"], mem)]
                print(f"  {k}: {ms(d):+.1f} ms per trial over in-memory on average ({ms(d[:w]):+.1f} first, {ms(d[-w:]):+.1f} last window)")
    states = {}
    for k in kinds:
        from optuna.trial import TrialState

        st = studies[k][0].get_trials(deepcopy=False)
        states[k] = f"{sum(t.state == TrialState.COMPLETE for t in st)} complete / {sum(t.state == TrialState.PRUNED for t in st)} pruned"
    print("  trial states: " + "; ".join(f"{k} {v}" for k, v in states.items()))
    print(f"load average at the end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
