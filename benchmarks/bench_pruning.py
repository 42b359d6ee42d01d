"""Does pruning pay? A shipped LR-transfer grid, trained in full and with a pruner.

Runs the same experiment twice with `nas-stab run`, as a user would:

1. the full grid: ``--set search.pruner=none``;
2. the pruned search: ``--set search.pruner=PRUNER`` (default: the space's own
   pruner, or `median` when it has none).

and prints, for both, the training steps spent (the `steps` column of
trials.csv summed: what each run actually trained, pruned and diverged runs
included) and the best configuration (mean objective over its seeds, counted
only when every seed completed, as the leaderboard does). The pruned search
pays when it uses at most 50% of the full grid's steps and its best
configuration is the full grid's best, or within the seed spread of it (the
standard deviation over seeds of the full grid's best configuration; with one
seed there is no spread and only the same configuration counts).

    python benchmarks/bench_pruning.py [--space spaces/quickstart.yaml] [--pruner median]
        [--eval-every 10] [--set KEY=VALUE]... [--out DIR] [--full RUN_DIR]

A pruner can stop a run only when it evaluates: `--eval-every N` sets
`train.eval_every` in both runs (0: the space's own). The default, 10, is for
the quickstart, which evaluates every 50 of its 150 steps: too rarely for
pruning to pay (61% of the steps with the median pruner). Evaluating does not
change training, so both runs train exactly the runs they would without it.

`--out DIR` keeps both run directories (rerunning the benchmark with the same
DIR then trains nothing: both runs resume as complete); `--full RUN_DIR`
takes the full grid from an existing run directory of the same experiment
instead of training it (the benchmark checks it is the same experiment).
Published figure: `--space spaces/published/stam-branches.yaml` (MNIST, 126 runs).
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

EXE = Path(sys.executable).parent / "nas-stab"


def run(space: Path, out: Path, sets: list[str]) -> float:
    cmd = [str(EXE), "run", str(space), "--out", str(out)] + [x for s in sets for x in ("--set", s)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if p.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return time.perf_counter() - t0


def read(run_dir: Path, keys: list[str]) -> list[dict]:
    with open(run_dir / "trials.csv", newline="") as f:
        return [dict(r, _cfg=tuple(r[k] for k in keys)) for r in csv.DictReader(f)]


def configs(rows: list[dict], maximize: bool) -> dict[tuple, tuple[float, float, int]]:
    """{configuration: (mean objective over seeds, std over seeds, seeds)} for configurations whose every seed completed."""
    by: dict[tuple, list[dict]] = {}
    for r in rows:
        by.setdefault(r["_cfg"], []).append(r)
    out = {}
    for cfg, rs in by.items():
        vals = [float(r["objective"]) for r in rs if r["status"] == "complete" and r["objective"] not in ("", None)]
        if len(vals) == len(rs) and all(math.isfinite(v) for v in vals):
            out[cfg] = (statistics.mean(vals), statistics.stdev(vals) if len(vals) > 1 else math.nan, len(vals))
    return out


def same_experiment(space: Path, sets: list[str], run_dir: Path) -> str | None:
    """None if `run_dir` holds a run of `space` (search.pruner, runner and description aside), else what differs."""
    from nas_stab.config import load_run_spec, load_spec, to_plain

    def plain(spec):
        d = to_plain(spec)
        d["space"] = spec.raw.get("space")
        for k in ("description", "runner", "leaderboard", "search", "name"):
            d.pop(k, None)
        return d

    a, b = plain(load_spec(space, sets)), plain(load_run_spec(run_dir))
    diff = [k for k in a if a[k] != b.get(k)]
    return ", ".join(diff) if diff else None


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--space", default="spaces/quickstart.yaml")
    ap.add_argument("--pruner", help="a pruner name or a YAML mapping, e.g. '{median: {n_startup_trials: 5}}' "
                                     "(default: the space's pruner, or median)")
    ap.add_argument("--eval-every", type=int, default=10, help="train.eval_every in both runs (0: the space's own)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key in both runs")
    ap.add_argument("--out", help="keep the run directories here (default: a temporary directory)")
    ap.add_argument("--full", help="an existing run directory of the full grid, instead of training it")
    a = ap.parse_args(argv)

    from nas_stab import metrics
    from nas_stab.config import load_spec

    space = Path(a.space)
    if a.eval_every:
        a.set = [f"train.eval_every={a.eval_every}"] + a.set
    spec = load_spec(space, a.set)
    if spec.search.sampler != "grid":
        sys.exit(f"{space}: a grid experiment is needed (sampler {spec.search.sampler})")
    pruner = a.pruner or (spec.search.pruner.name if spec.search.pruner.name != "none" else "median")
    if spec.search.pruner.name != "none" and not a.pruner:
        import yaml

        pruner = yaml.safe_dump({spec.search.pruner.name: spec.search.pruner.options or {}}, default_flow_style=True).strip()
    keys = spec.space.keys
    maximize = (metrics.direction(spec.search.objective) if spec.search.direction == "auto" else spec.search.direction) == "maximize"
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="nas-bench-pruning-"))
    print(f"{space}: {len(keys)} searched keys ({', '.join(keys)}), {len(spec.seeds)} seed(s), objective {spec.search.objective}, "
          f"{spec.train.steps} steps, evaluated every {spec.train.eval_every or max(1, (spec.train.steps or 0) // 10)} steps"
          f"{' (--set ' + ' --set '.join(a.set) + ')' if a.set else ''}; load average {os.getloadavg()[0]:.2f} at start")

    if a.full:
        full_dir = Path(a.full)
        diff = same_experiment(space, a.set, full_dir)
        if diff:
            sys.exit(f"{full_dir} is not a run of {space}: {diff} differ")
        t_full = float("nan")
    else:
        t_full = run(space, out / "full", a.set + ["search.pruner=none"])
        full_dir = out / "full" / spec.name
    t_pruned = run(space, out / "pruned", a.set + [f"search.pruner={pruner}"])
    pruned_dir = out / "pruned" / spec.name

    full, pruned = read(full_dir, keys), read(pruned_dir, keys)
    s_full = sum(int(r["steps"]) for r in full)
    s_pruned = sum(int(r["steps"]) for r in pruned)
    cf, cp = configs(full, maximize), configs(pruned, maximize)
    pick = max if maximize else min
    bf = pick(cf, key=lambda c: cf[c][0])
    bp = pick(cp, key=lambda c: cp[c][0]) if cp else None

    def show(c):
        return ", ".join(f"{k}={v}" for k, v in zip(keys, c))

    def counts(rows):
        c = {}
        for r in rows:
            c[r["status"]] = c.get(r["status"], 0) + 1
        return ", ".join(f"{n} {s}" for s, n in sorted(c.items()))

    print()
    print(f"full grid:       {len(full):4d} runs ({counts(full)}), {s_full:7d} training steps, wall {t_full:6.1f} s")
    print(f"pruned ({pruner}): {len(pruned):4d} runs ({counts(pruned)}), {s_pruned:7d} training steps, wall {t_pruned:6.1f} s")
    print(f"steps: pruned / full = {s_pruned / s_full:.1%} (target at most 50%)")
    print(f"best of the full grid:       {show(bf)}: {cf[bf][0]:.4f} (seed std {cf[bf][1]:.4f} over {cf[bf][2]} seed(s))")
    if bp is None:
        print("best of the pruned search:   none (no configuration completed every seed)")
        return 1
    print(f"best of the pruned search:   {show(bp)}: {cp[bp][0]:.4f}")
    gap = abs(cf[bf][0] - cf[bp][0]) if bp in cf else math.inf
    spread = cf[bf][1]
    if bp == bf:
        verdict = "the same configuration"
    elif math.isfinite(spread) and gap <= spread:
        verdict = f"another configuration, {gap:.4f} from the best in the full grid: within the seed spread ({spread:.4f})"
    else:
        verdict = f"another configuration, {gap:.4f} from the best in the full grid: NOT within the seed spread ({spread:.4f})"
    met = s_pruned <= 0.5 * s_full and (bp == bf or (math.isfinite(spread) and gap <= spread))
    print(f"=> {verdict}; target {'met' if met else 'NOT met'}")
    print(f"run directories: {full_dir}, {pruned_dir}; load average at the end "
          f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
