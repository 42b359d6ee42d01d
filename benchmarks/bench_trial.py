"""One trial as a whole process: `nas-stab run` against a hand-written PyTorch script.

    python benchmarks/bench_trial.py [--hand my_loop.py] [--threads 1,2] [--pairs 3]
        [--root DATA_DIR] [--dataset mnist] [--steps 1500] [--width 512] [--depth 8] [--set KEY=VALUE ...]

Writes a one-run experiment file (an `mlp_resnet` of the given width and depth on
the dataset, `train.steps` SGD steps, everything else nas_stab's defaults, one per
thread count with `train.threads` set), then times, as whole new processes and in
rounds of three (the order rotates every round: defaults, harness, hand; hand,
defaults, harness; harness, hand, defaults; ...):

- defaults: `nas-stab run SPEC --out TMP` (a fresh run directory each time: trains,
  measures at nas_stab's default cadence within `stability.budget`, writes the run
  directory, the Optuna study, the history, TensorBoard logs and the leaderboard);
- harness: the same with the measurements as few as they go (`--set stability.budget=0
  --set stability.hessian=false`: no snapshot or validation during training, the
  snapshots at init and at the end without the Hessian);
- the hand-written script `python HAND SPEC` (default `benchmarks/hand_loop.py`: the same
  model and tensors, plain PyTorch SGD, the same steps, val and test evaluated at the end).

Every process gets OMP_NUM_THREADS and MKL_NUM_THREADS set to the thread count. Prints, per
thread count, each variant's wall time (min / median / max) and the ratios defaults / hand
and harness / hand of each round (min / median / max): the figures of docs/performance.md's
table, against their targets (harness <= 1.05x, defaults <= 1.05x + the
budget); the same for CPU time (user + system, from the kernel's accounting of each
process), which a busy or virtualized machine disturbs less than wall time (time the
process waits for a core counts in wall time only); and what the default run recorded
itself (trials.csv `measure_s` / `train_s`: its measured share against `stability.budget`).
One warm-up round per thread count is not counted (page cache, Python's bytecode cache).
A hand script of your own takes the spec's path as its only argument.
"""
from __future__ import annotations

import argparse
import csv
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from nas_stab.config.schema import DEFAULT_BUDGET

HERE = Path(__file__).resolve().parent

SPEC = """\
name: trial
task: {{dataset: {{name: {dataset}, root: {root}}}}}
model: {{arch: mlp_resnet, depth: {depth}, width: {width}, tau: 1/L}}
train: {{lr: {lr}, steps: {steps}, batch_size: 128, threads: {threads}}}
"""


def timed(cmd: list[str], env: dict, log: Path) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system of the process and its children) of one command."""
    w0 = time.perf_counter()
    with open(log, "ab") as f:
        p = subprocess.Popen(cmd, env=env, stdout=f, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
    dt = time.perf_counter() - w0
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed with exit code {p.returncode}; output in {log}")
    return dt, usage.ru_utime + usage.ru_stime


def spread(xs: list[float], fmt: str = "{:.2f}") -> str:
    return " / ".join(fmt.format(v) for v in (min(xs), statistics.median(xs), max(xs)))


LEAN = ["--set", "stability.budget=0", "--set", "stability.hessian=false"]
VARIANTS = ("defaults", "harness", "hand")


def recorded(out: Path) -> tuple[float, float]:
    """(measure_s, train_s) of the one run in a run directory's trials.csv."""
    [path] = list(out.glob("*/trials.csv"))
    with open(path) as f:
        [row] = list(csv.DictReader(f))
    return float(row["measure_s"]), float(row["train_s"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hand", default=str(HERE / "hand_loop.py"), help="the hand-written script (a spec path as its argument)")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--pairs", type=int, default=3, help="counted rounds (defaults, harness, hand) per thread count")
    ap.add_argument("--warmup", type=int, default=1, help="rounds not counted, first")
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--root", default=os.environ.get("NAS_STAB_DATA", "data"), help="the dataset's directory")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to both nas-stab run variants")
    ap.add_argument("--keep", help="keep the specs, outputs and logs in this directory")
    a = ap.parse_args()

    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench_trial_"))
    work.mkdir(parents=True, exist_ok=True)
    root = str(Path(a.root).expanduser().resolve())
    nas = [sys.executable, "-m", "nas_stab.cli", "run"]
    print(f"{a.dataset} mlp_resnet width {a.width} depth {a.depth}, {a.steps} steps; hand: {a.hand}; "
          f"{a.pairs} rounds after {a.warmup} warm-up; load average {os.getloadavg()[0]:.2f}")
    try:
        for threads in [int(t) for t in a.threads.split(",") if t.strip()]:
            spec = work / f"trial-{threads}.yaml"
            spec.write_text(SPEC.format(dataset=a.dataset, root=root, depth=a.depth, width=a.width,
                                        steps=a.steps, lr=a.lr, threads=threads))
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
            sets = [x for s in a.set for x in ("--set", s)]
            budget = [float(s.split("=", 1)[1]) for s in a.set if s.startswith("stability.budget=")]
            BUDGET = budget[-1] if budget else DEFAULT_BUDGET  # the defaults' target is 1.05x + the budget
            wall = {v: [] for v in VARIANTS}
            cpu = {v: [] for v in VARIANTS}
            shares = []
            for i in range(a.warmup + a.pairs):
                out = {v: work / f"out-{v}-{threads}-{i}" for v in VARIANTS[:2]}
                for o in out.values():
                    shutil.rmtree(o, ignore_errors=True)
                commands = {
                    "defaults": ([*nas, str(spec), "--out", str(out["defaults"]), *sets], work / f"nas-{threads}.log"),
                    "harness": ([*nas, str(spec), "--out", str(out["harness"]), *LEAN, *sets], work / f"lean-{threads}.log"),
                    "hand": ([sys.executable, a.hand, str(spec)], work / f"hand-{threads}.log"),
                }
                cmds = {v: (lambda cmd=cmd, log=log, env=env: timed(cmd, env, log)) for v, (cmd, log) in commands.items()}
                order = VARIANTS[i % 3:] + VARIANTS[:i % 3]
                got = {v: cmds[v]() for v in order}
                m, tr = recorded(out["defaults"])
                if not a.keep:
                    for o in out.values():
                        shutil.rmtree(o, ignore_errors=True)
                if i < a.warmup:
                    continue
                for v in VARIANTS:
                    wall[v].append(got[v][0]), cpu[v].append(got[v][1])
                shares.append(m / tr)
                h, ch = got["hand"]
                print(f"  {threads} thread(s) round {i - a.warmup + 1} ({', '.join(order)}): defaults {got['defaults'][0]:.2f} s, "
                      f"harness {got['harness'][0]:.2f} s, hand {h:.2f} s; ratios {got['defaults'][0] / h:.3f}, "
                      f"{got['harness'][0] / h:.3f} (CPU {got['defaults'][1] / ch:.3f}, {got['harness'][1] / ch:.3f}); "
                      f"defaults measured {m:.2f} s beside {tr:.2f} s of training ({m / tr:.1%})", flush=True)
            for label, t in (("wall", wall), ("CPU time (user + system)", cpu)):
                r_def = [d / h for d, h in zip(t["defaults"], t["hand"])]
                r_lean = [d / h for d, h in zip(t["harness"], t["hand"])]
                print(f"{threads} thread(s), {label}: defaults {spread(t['defaults'])} s, harness {spread(t['harness'])} s, "
                      f"hand {spread(t['hand'])} s (min / median / max)", flush=True)
                print(f"{threads} thread(s), {label} ratios (min / median / max): harness/hand {spread(r_lean, '{:.3f}')} "
                      f"(target <= 1.05), defaults/hand {spread(r_def, '{:.3f}')} (target <= {1.05 + BUDGET:.2f}); "
                      f"load average {os.getloadavg()[0]:.2f}", flush=True)
            print(f"{threads} thread(s): the default runs' own record, measure_s / train_s {spread(shares, '{:.2%}')} "
                  f"(stability.budget {BUDGET:.0%})", flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
