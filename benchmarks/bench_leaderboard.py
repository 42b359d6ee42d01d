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

At scale (issue "a million records"), `--scale 10000,100000,1000000`: for each count, a sampled search of
count/500 configurations (5 sizes x 10 lrs x 10 seeds each, no history files) timed through
``nas-stab leaderboard DIR --out OUT`` and ``nas-stab status DIR``, and a finished grid search of count/1000
configurations (5 sizes x 4 lrs x 50 seeds, the grid's own run keys) through ``nas-stab run FILE`` (the resume's
start-up: reading the records, opening the study, planning the grid; it finds nothing to train and ends with the
leaderboard it prints): wall time and peak memory (the process's own, `os.wait4`). `--write` stores them in
docs/performance/scale.csv and renders the table of docs/performance.md and the README from it.

    python benchmarks/bench_leaderboard.py --scale 10000,100000,1000000 --write

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
    ap.add_argument("--scale", help="comma-separated record counts: leaderboard, status and resume at each")
    ap.add_argument("--write", action="store_true", help="with --scale: store docs/performance/scale.csv, render the pages")
    ap.add_argument("--build", help=argparse.SUPPRESS)  # N_CFG,grid|'',ROOT: --scale's run directories, in a child
    a = ap.parse_args(argv)
    if a.build:
        n_cfg, grid, root = a.build.split(",", 2)
        scale_run_dir(Path(root), int(n_cfg), grid=grid == "grid")
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="nas-bench-lb-"))
    try:
        if a.scale:
            rows = scale([int(x) for x in a.scale.split(",")], tmp)
            if a.write:
                write_scale(rows)
                print(render_scale())
            return 0
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


# ---------------------------------------------------------------------------------------------------- at scale

ROOT = Path(__file__).resolve().parent.parent
SCALE_CSV = ROOT / "docs" / "performance" / "scale.csv"
SCALE_PAGES = (ROOT / "docs" / "performance.md", ROOT / "README.md")
BEGIN, END = "<!-- bench_leaderboard --scale: begin -->", "<!-- bench_leaderboard --scale: end -->"
SIZES = (1, 2, 4, 8, 16)


def scale_spec(n_cfg: int, grid: bool) -> tuple[str, str]:
    """(name, experiment text): `n_cfg` configurations (model.depth 1..n_cfg, the leaderboard's rows) x 5 sizes x
    10 lrs x 10 seeds sampled, or x 4 lrs x 50 seeds as a grid."""
    name = f"scale-{n_cfg}{'-grid' if grid else ''}"
    n_lr, seeds = (4, 50) if grid else (10, 10)
    search = "" if grid else f"search: {{sampler: random, trials: {n_cfg * len(SIZES) * n_lr}}}\n"
    return name, (f"name: {name}\nseeds: {seeds}\ntask: {{dataset: {{name: digits}}}}\n"
                  "model: {arch: mlp_resnet, depth: 4, width: 64, branches: 1, aggregation: stam}\n"
                  f"train: {{lr: 0.1, steps: 300}}\n{search}"
                  f"space:\n  model.branches: {list(SIZES)}\n  model.depth: {list(range(1, n_cfg + 1))}\n"
                  f"  train.lr: {{log_grid: [0.001, 1.0, {n_lr}]}}\n"
                  "leaderboard: {lr: train.lr, transfer: model.branches, compare: [model.depth]}\n")


def scale_run_dir(root: Path, n_cfg: int, grid: bool, seed: int = 0) -> tuple[Path, Path]:
    """(experiment file, run directory) of a finished synthetic search, as the runner leaves it (no histories).
    A grid's records carry its own jobs' keys and run ids, so that a resume finds every run recorded."""
    import pandas as pd

    from nas_stab.config import loads_spec
    from nas_stab.metrics import STABILITY_METRICS, TASK_METRICS
    from nas_stab.search.plan import grid_jobs
    from nas_stab.store.rundir import RunDir, columns
    from nas_stab.store.rundir_meta import meta_for

    name, text = scale_spec(n_cfg, grid)
    spec = loads_spec(text)
    d = root / name
    (d / "history").mkdir(parents=True)
    (root / f"{name}.yaml").write_text(text)
    data = RunDir.spec_plain(spec)
    data["meta"] = meta_for(spec)
    (d / "spec.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    if grid:
        jobs = grid_jobs(spec)
        rec = {"trial": [j.trial for j in jobs], "seed": [j.seed for j in jobs], "run_id": [j.run_id for j in jobs],
               "key": [j.key for j in jobs], "model.branches": [j.params["model.branches"] for j in jobs],
               "model.depth": [j.params["model.depth"] for j in jobs], "train.lr": [j.params["train.lr"] for j in jobs]}
    else:
        n_lr, seeds = 10, 10
        size, depth, lr, sd = (a.ravel() for a in np.meshgrid(SIZES, np.arange(1, n_cfg + 1), np.logspace(-3, 0, n_lr),
                                                             np.arange(seeds), indexing="ij"))
        trial = np.arange(size.size) // seeds
        rec = {"trial": trial, "seed": sd, "run_id": [f"t{t:05d}-s{x}" for t, x in zip(trial, sd)],
               "key": [f"{i:016x}" for i in range(size.size)], "model.branches": size, "model.depth": depth, "train.lr": lr}
    df = pd.DataFrame(rec)
    n = len(df)
    rng = np.random.default_rng(seed)
    opt = np.log10(0.03) + 0.1 * rng.normal(size=n_cfg + 1)  # each configuration's optimum (log10 lr)
    acc = np.clip(0.9 - 0.1 * (np.log10(df["train.lr"]) - opt[df["model.depth"]]) ** 2 + 0.01 * rng.normal(size=n), 0, 1)
    status = rng.choice(["complete", "diverged", "pruned", "failed"], n, p=[0.85, 0.10, 0.03, 0.02])
    df["status"], df["optuna_trial"] = status, df["trial"]
    df["steps"] = np.where(status == "complete", 300, rng.integers(1, 300, n))
    df["wall_s"] = rng.random(n) * 10
    df["diverged_step"] = np.where(status == "diverged", rng.integers(1, 300, n).astype(float), np.nan)
    df["error"] = np.where(status == "failed", "RuntimeError: synthetic", "")
    for m in TASK_METRICS["classification"]:
        df[m] = rng.random(n)
    df["val_acc"] = acc
    for p in ("init_", "final_"):
        for m in STABILITY_METRICS:
            df[p + m] = rng.random(n) * 3
    df["max_update_ratio"] = rng.random(n)
    df["objective"] = np.where(status == "complete", acc, np.nan)
    df.reindex(columns=columns(spec.space.keys, "classification")).to_csv(d / "trials.csv", index=False, float_format="%.6g")
    return root / f"{name}.yaml", d


def timed(cmd: list[str]) -> tuple[float, float, int]:
    """(wall seconds, peak resident memory in GiB, exit code) of one command, a process of its own."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    rc = os.waitstatus_to_exitcode(status)
    err = p.stderr.read().decode(errors="replace") if p.stderr else ""
    p.returncode = rc
    if rc not in (0, 1):  # 1: the synthetic records hold failed runs
        sys.exit(f"{' '.join(cmd)} exited {rc}:\n{err[-3000:]}")
    return wall, usage.ru_maxrss / (1 << 20), rc


def scale(counts: list[int], tmp: Path) -> list[dict]:
    exe = str(Path(sys.executable).parent / "nas-stab")
    out = []
    for n in counts:
        t0 = time.perf_counter()
        # written by a child process: a process forked from a large one starts with its peak memory (Linux keeps the
        # high-water mark across exec), so this one stays small and each measured command's peak is its own
        for n_cfg, grid in ((n // 500, ""), (max(1, n // 1000), "grid")):
            subprocess.run([sys.executable, __file__, "--build", f"{n_cfg},{grid},{tmp}"], check=True)
        d, gdir = tmp / scale_spec(n // 500, False)[0], tmp / scale_spec(max(1, n // 1000), True)[0]
        gfile = tmp / f"{gdir.name}.yaml"
        print(f"{n:,} records: run directories written in {time.perf_counter() - t0:.0f} s "
              f"(trials.csv {(d / 'trials.csv').stat().st_size >> 20} MiB)", flush=True)
        for what, cmd, configs in (
                ("leaderboard", [exe, "leaderboard", str(d), "--out", str(tmp / f"out-{n}")], n // 500),
                ("status", [exe, "status", str(d)], n // 500),
                ("resume", [exe, "run", str(gfile), "--out", str(tmp)], max(1, n // 1000))):
            wall, gib, _ = timed(cmd)
            load = os.getloadavg()[0]
            out.append({"command": what, "records": n, "configurations": configs, "wall_s": f"{wall:.1f}",
                        "peak_gib": f"{gib:.2f}", "load": f"{load:.1f}"})
            print(f"  {what:<12} {wall:7.1f} s  peak {gib:5.2f} GiB  (load {load:.1f})", flush=True)
        shutil.rmtree(d)
        shutil.rmtree(gdir)
    return out


def render_scale() -> str:
    """The table of docs/performance/scale.csv, as the pages show it."""
    import csv

    with open(SCALE_CSV) as f:
        rows = list(csv.DictReader(f))
    counts = sorted({int(r["records"]) for r in rows})
    cell = {(r["command"], int(r["records"])): r for r in rows}
    head = "| command | " + " | ".join(f"{c:,} records" for c in counts) + " |"
    lines = [head, "|---" * (len(counts) + 1) + "|"]
    for what, label in (("leaderboard", "`nas-stab leaderboard DIR --out OUT` (sampled search, records / 500 "
                                        "configurations)"),
                        ("status", "`nas-stab status DIR` (the same directory)"),
                        ("resume", "`nas-stab run FILE` on a finished grid (records / 1,000 configurations: "
                                   "the resume's start-up and the closing leaderboard)")):
        lines.append(f"| {label} | " + " | ".join(
            f"{cell[what, c]['wall_s']} s, {cell[what, c]['peak_gib']} GiB" if (what, c) in cell else "—"
            for c in counts) + " |")
    loads = sorted(float(r["load"]) for r in rows)
    lines += ["", f"Wall time and the process's peak memory, load average {loads[0]:.1f}-{loads[-1]:.1f} while measured; "
              "`python benchmarks/bench_leaderboard.py --scale 10000,100000,1000000 --write` (docs/performance/scale.csv)."]
    return "\n".join(lines) + "\n"


def write_scale(rows: list[dict]) -> None:
    import csv

    SCALE_CSV.parent.mkdir(exist_ok=True)
    with open(SCALE_CSV, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    block = render_scale()
    for page in SCALE_PAGES:
        text = page.read_text(encoding="utf-8")
        if BEGIN not in text or END not in text:
            raise SystemExit(f"{page}: no {BEGIN} ... {END} markers")
        head, rest = text.split(BEGIN, 1)
        page.write_text(head + BEGIN + "\n" + block + END + rest.split(END, 1)[1], encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
