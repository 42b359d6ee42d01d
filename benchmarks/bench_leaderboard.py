"""`nas-stab leaderboard` over 10,000 trial records, end to end as a user runs it.

Builds a run directory the way the runner leaves it -- spec.yaml (resolved spec
and provenance), trials.csv with every column of docs/run-directory.md, and one history file per
run -- holding `n` synthetic runs of a 5-size x 8-lr x 3-aggregation x
4-depth search, 85% complete, 10% diverged, 3% pruned, 2% failed. Then times:

1. the command itself, ``nas-stab leaderboard DIR --format md,csv,tex,html
   --out OUT``, in a fresh process (Python start-up, imports, reading,
   analysis with the 1,000-replicate bootstrap, all four formats and the three
   plots), `--reps` times: the figure the target is about (under 5 s);
2. the same in-process, split into reading + analysis, plots and formats, for
   one and for two `compare` keys (the second has 4x the rows and panels).

    python benchmarks/bench_leaderboard.py [n_records] [--reps 3]

Prints figures; not a test.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

SPEC = """\
name: bench-leaderboard
description: synthetic records for the leaderboard benchmark
seeds: 3
task: {dataset: {name: digits}}
model: {arch: mlp_resnet, depth: 4, width: 64, branches: 1, aggregation: stam}
train: {lr: 0.1, steps: 300}
space:
  model.branches: [1, 2, 4, 8, 16]
  model.aggregation: [sum, avg, stam]
  model.depth: [2, 4, 8, 16]
  train.lr: {log_grid: [0.001, 1.0, 8]}
leaderboard: {lr: train.lr, transfer: model.branches, compare: [model.aggregation]}
"""


def make_run_dir(root: Path, n: int, seed: int = 0) -> Path:
    """A run directory with `n` synthetic runs, written as the runner writes it."""
    from nas_stab.config import loads_spec
    from nas_stab.metrics import STABILITY_METRICS, TASK_METRICS
    from nas_stab.store.rundir import RunDir, trials_csv
    from nas_stab.store.rundir_meta import meta_for

    spec = loads_spec(SPEC)
    d = root / spec.name
    (d / "history").mkdir(parents=True)
    data = RunDir.spec_plain(spec)
    data["meta"] = meta_for(spec)
    (d / "spec.yaml").write_text(yaml.safe_dump(data, sort_keys=False))

    rng = np.random.default_rng(seed)
    lrs = np.logspace(-3, 0, 8)
    status = rng.choice(["complete", "diverged", "pruned", "failed"], n, p=[0.85, 0.10, 0.03, 0.02])
    rows = []
    for i in range(n):
        r = {"trial": i // 3, "seed": i % 3, "status": status[i],
             "model.branches": int(rng.choice([1, 2, 4, 8, 16])), "model.aggregation": str(rng.choice(["sum", "avg", "stam"])),
             "model.depth": int(rng.choice([2, 4, 8, 16])), "train.lr": float(rng.choice(lrs)),
             "steps": 300 if status[i] == "complete" else int(rng.integers(1, 300)), "wall_s": float(rng.random() * 10),
             "diverged_step": int(rng.integers(1, 300)) if status[i] == "diverged" else None,
             "error": "RuntimeError: synthetic" if status[i] == "failed" else "",
             "run_id": f"t{i // 3:05d}-s{i % 3}", "key": f"{i:016x}", "optuna_trial": i}
        for m in TASK_METRICS["classification"]:
            r[m] = float(rng.random())
        for p in ("init_", "final_"):
            for m in STABILITY_METRICS:
                r[p + m] = float(rng.random() * 3)
        r["max_update_ratio"] = float(rng.random())
        r["objective"] = r["val_acc"] if status[i] == "complete" else None
        rows.append(r)
        depth = 4
        hist = "step,train_loss,lr," + ",".join(f"fwd_norm.{b}" for b in range(depth)) + ",fwd_ratio\n"
        for step in (0, 150, 300):
            hist += f"{step},{rng.random():.6g},{r['train.lr']:.6g}," + ",".join(f"{rng.random() * 2:.6g}" for _ in range(depth))
            hist += f",{rng.random():.6g}\n"
        (d / "history" / f"{r['run_id']}.csv").write_text(hist)
    (d / "trials.csv").write_text(trials_csv(rows, spec.space.keys, "classification"))
    return d


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("n", nargs="?", type=int, default=10_000, help="trial records (default 10,000)")
    ap.add_argument("--reps", type=int, default=3, help="runs of the command (the median is reported)")
    a = ap.parse_args(argv)

    tmp = Path(tempfile.mkdtemp(prefix="nas-bench-lb-"))
    try:
        return _bench(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _bench(a, tmp: Path) -> int:
    t0 = time.perf_counter()
    d = make_run_dir(tmp, a.n)
    print(f"run directory with {a.n} records and {a.n} history files written in {time.perf_counter() - t0:.1f} s "
          f"(trials.csv {(d / 'trials.csv').stat().st_size // 1024} KiB); load average {os.getloadavg()[0]:.2f}")

    exe = Path(sys.executable).parent / "nas-stab"
    cmd = [str(exe), "leaderboard", str(d), "--format", "md,csv,tex,html", "--out", str(tmp / "out")]
    walls = []
    for _ in range(a.reps):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, capture_output=True, text=True)
        walls.append(time.perf_counter() - t0)
        if p.returncode != 0:
            sys.exit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    written = sorted(x.name for x in (tmp / "out").iterdir() if x.is_file())
    print(f"1. `nas-stab leaderboard DIR --format md,csv,tex,html --out OUT`, end to end in a new process: "
          f"median {statistics.median(walls):.2f} s (all: {', '.join(f'{w:.2f}' for w in walls)}); target < 5 s")
    print(f"   wrote {', '.join(written)}, plots/{', plots/'.join(sorted(x.name for x in (tmp / 'out' / 'plots').iterdir()))}")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import nas_stab.cli, nas_stab.results.leaderboard, matplotlib.pyplot"], check=True)
    print(f"   of which starting Python and importing nas_stab, pandas and matplotlib: {time.perf_counter() - t0:.2f} s")

    # 2. in-process breakdown
    import pandas as pd

    from nas_stab.analysis.table import analyze
    from nas_stab.results import formats, plots
    from nas_stab.results.leaderboard import load_analysis

    t0 = time.perf_counter()
    an, prov, runs = load_analysis([d])
    t1 = time.perf_counter()
    hist = {"0": d / "history"}
    pngs = {"t": plots.transfer_plot(an), "f": plots.fwd_norm_plot(an, plots.init_fwd_norms(an, hist)), "d": plots.divergence_plot(an)}
    t2 = time.perf_counter()
    for fmt in ("md", "csv", "tex", "html"):
        formats.render(fmt, an, prov, plots_png={k: v for k, v in pngs.items() if v}, plots_paths={})
    t3 = time.perf_counter()
    print(f"2. in-process, compare=[model.aggregation] ({len(an.rows)} rows, {len(an.cells)} cells): read + analysis "
          f"(1000-replicate bootstrap) {t1 - t0:.2f} s, three plots {t2 - t1:.2f} s, md+csv+tex+html {t3 - t2:.2f} s")
    trials = pd.read_csv(d / "trials.csv")
    t0 = time.perf_counter()
    a2 = analyze(trials, lr="train.lr", transfer="model.branches", compare=["model.aggregation", "model.depth"], metric="val_acc")
    t1 = time.perf_counter()
    p2 = plots.transfer_plot(a2)
    t2 = time.perf_counter()
    print(f"   compare=[model.aggregation, model.depth] ({len(a2.rows)} rows, {len(a2.cells)} cells): analysis {t1 - t0:.2f} s, "
          f"lr-transfer plot ({len(a2.rows)} panels) {t2 - t1:.2f} s ({len(p2) // 1024} KiB)")
    t0 = time.perf_counter()
    analyze(trials, lr="train.lr", transfer="model.branches", compare=["model.aggregation"], metric="val_acc", n_boot=0)
    print(f"   analysis without bootstrap: {time.perf_counter() - t0:.2f} s")
    print(f"load average at the end: {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
