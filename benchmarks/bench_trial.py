"""One trial as a whole process: `nas-stab run` against a hand-written PyTorch script.

    python benchmarks/bench_trial.py [--hand my_loop.py] [--threads 1,2] [--pairs 3]
        [--root DATA_DIR] [--dataset mnist] [--steps 1500] [--width 512] [--depth 8] [--set KEY=VALUE ...]

Writes a one-run experiment file (an `mlp_resnet` of the given width and depth on
the dataset, `train.steps` SGD steps, everything else nas_stab's defaults, one per
thread count with `train.threads` set), then times, as whole new processes and in
alternating pairs (nas, hand, nas, hand, ...; the order flips every other pair):

- `nas-stab run SPEC --out TMP` (a fresh run directory each time: trains, writes
  the run directory, the Optuna study, the history, TensorBoard logs and the leaderboard);
- the hand-written script `python HAND SPEC` (default `benchmarks/hand_loop.py`: the same
  model and tensors, plain PyTorch SGD, the same steps, val and test evaluated at the end).

Both get OMP_NUM_THREADS and MKL_NUM_THREADS set to the thread count. Prints, per
thread count, each side's wall time (min / median / max) and the ratio nas / hand of
each pair (min / median / max): the figure of the README's Performance table; and
the same for CPU time (user + system, from the kernel's accounting of each process),
which a busy or virtualized machine disturbs less than wall time (time the process
waits for a core counts in wall time only). One
warm-up pair per thread count is not counted (page cache, Python's bytecode cache).
A hand script of your own takes the spec's path as its only argument.
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--hand", default=str(HERE / "hand_loop.py"), help="the hand-written script (a spec path as its argument)")
    ap.add_argument("--threads", default="1,2", help="thread counts, comma-separated")
    ap.add_argument("--pairs", type=int, default=3, help="counted pairs per thread count")
    ap.add_argument("--warmup", type=int, default=1, help="pairs not counted, first")
    ap.add_argument("--dataset", default="mnist")
    ap.add_argument("--root", default=os.environ.get("NAS_STAB_DATA", "data"), help="the dataset's directory")
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--lr", type=float, default=0.003)
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="passed to nas-stab run (nas side only)")
    ap.add_argument("--keep", help="keep the specs, outputs and logs in this directory")
    a = ap.parse_args()

    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="bench_trial_"))
    work.mkdir(parents=True, exist_ok=True)
    root = str(Path(a.root).expanduser().resolve())
    nas = [sys.executable, "-m", "nas_stab.cli", "run"]
    print(f"{a.dataset} mlp_resnet width {a.width} depth {a.depth}, {a.steps} steps; hand: {a.hand}; "
          f"{a.pairs} pairs after {a.warmup} warm-up; load average {os.getloadavg()[0]:.2f}")
    try:
        for threads in [int(t) for t in a.threads.split(",") if t.strip()]:
            spec = work / f"trial-{threads}.yaml"
            spec.write_text(SPEC.format(dataset=a.dataset, root=root, depth=a.depth, width=a.width,
                                        steps=a.steps, lr=a.lr, threads=threads))
            env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
            sets = [x for s in a.set for x in ("--set", s)]
            t_nas, t_hand, ratios, c_nas, c_hand, c_ratios = [], [], [], [], [], []
            for i in range(a.warmup + a.pairs):
                out = work / f"out-{threads}-{i}"
                shutil.rmtree(out, ignore_errors=True)
                run_nas = lambda: timed([*nas, str(spec), "--out", str(out), *sets], env, work / f"nas-{threads}.log")
                run_hand = lambda: timed([sys.executable, a.hand, str(spec)], env, work / f"hand-{threads}.log")
                if i % 2 == 0:
                    (n, cn), (h, ch) = run_nas(), run_hand()
                else:
                    (h, ch), (n, cn) = run_hand(), run_nas()
                if not a.keep:
                    shutil.rmtree(out, ignore_errors=True)
                if i < a.warmup:
                    continue
                t_nas.append(n), t_hand.append(h), ratios.append(n / h)
                c_nas.append(cn), c_hand.append(ch), c_ratios.append(cn / ch)
                print(f"  {threads} thread(s) pair {i - a.warmup + 1}: nas-stab run {n:.2f} s, hand {h:.2f} s, "
                      f"ratio {n / h:.3f} (CPU {cn:.1f} s / {ch:.1f} s = {cn / ch:.3f})", flush=True)
            print(f"{threads} thread(s): nas-stab run {spread(t_nas)} s, hand {spread(t_hand)} s (min / median / max); "
                  f"ratio nas/hand {spread(ratios, '{:.3f}')}; load average {os.getloadavg()[0]:.2f}", flush=True)
            print(f"{threads} thread(s), CPU time (user + system): nas-stab run {spread(c_nas, '{:.1f}')} s, "
                  f"hand {spread(c_hand, '{:.1f}')} s; ratio {spread(c_ratios, '{:.3f}')}", flush=True)
    finally:
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
