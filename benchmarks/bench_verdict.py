"""Time to verdict: the full half-octave lr grid vs `bracket` (+ the `sweep` pruner, + adaptive seeds).

Issue 34's comparison (the default variants): ``grid5``, the full grid with a fixed 5 seeds; ``bracket5``,
`bracket` (below) with 5 seeds; ``bracket+adaptive``, `bracket` with adaptive seeds ``seeds: {min: 3, max:
12}`` (docs/leaderboard.md, Adaptive seeds). Printed per space: runs, training steps, wall time, steps as a
fraction of grid5's and how many rows end decided (yes or no); target: at least grid5's decided rows with at
most 30% of its steps. Issue 19's variants (``--variants grid,bracket,bracket+sweep``, the spaces' own seed
counts) compare as described next.

For each LR-transfer space below, runs the same experiment three times with
`nas-stab run`, as a user would, and compares the leaderboards the library
builds from them (`nas_stab.results.leaderboard.load_analysis`, the same
analysis as every table):

1. ``grid``: the full half-octave learning-rate grid over [lo, hi];
2. ``bracket``: `search.sampler: bracket` started from a coarse subset of that
   grid (two lrs one octave apart, inside it), ``step_octaves: 1``,
   ``resolution_octaves: 0.5``, ``lr_limits: [lo, hi]`` (the grid's own ends, so
   "censored" means the same in both);
3. ``bracket+sweep``: the same with ``search.pruner: sweep``.

Every variant evaluates every `eval_every` steps (the same in all three, so the
pruner has points to act on and wall times are comparable) and trains one run
at a time (``runner.concurrency=1``: one CPU). Printed per space and variant:
runs, training steps (the ``steps`` column of trials.csv summed: what each run
actually trained, pruned and diverged runs included), wall time of `nas-stab
run`, steps as a fraction of the grid's, and against the grid: whether every
row's verdict is the same, whether every size's fitted optimum x*(s) is within
0.5 octave, whether the rows' lr_drift intervals overlap, and any size whose
optimum the bracket left censored where the grid bracketed it. Targets (issue
19): same verdicts and optima within 0.5 octave with at most 40% of the grid's
steps; no optimum left censored where the grid's limits bracketed it.

Reductions from the shipped spaces (so the three spaces, three variants each,
take about 20 minutes of one CPU here), all by ``--set``:

- quickstart (spaces/quickstart.yaml, branches): as shipped (2 aggregations x
  C = 1, 4, 16, 3 seeds, 100 steps), lr 0.003125-0.1 (5 octaves, 11 points);
  evaluated every 20 steps.
- stam-branches (spaces/published/stam-branches.yaml, branches): sum vs stam
  (avg dropped), 3 seeds (the published run has 2, too few for a verdict), 4000
  training images, 150 steps, no Hessian probe, lr 0.001-0.256 (8 octaves, 17
  points; at 0.0005-0.128 stam's C = 1 optimum sat at the top); evaluated every
  30 steps.
- tau-depth (spaces/published/tau-depth.yaml, depth): tau 1/L vs 1/sqrt(L) at
  depth 3, 10, 30 (L^-1/4 and depth 100 dropped), 3 seeds, 4000 training
  images, 100 steps (no momentum: the optima sit far above the published grid's
  0.001-0.064; at 0.001-0.256 every size but one was still improving at the top),
  lr 0.032-2.048 (6 octaves, 13 points); evaluated every 20 steps.

    python benchmarks/bench_verdict.py [--spaces quickstart,stam-branches,tau-depth] [--out DIR]
        [--variants grid5,bracket5,bracket+adaptive | grid,bracket,bracket+sweep] [--boot 1000]

`--out DIR` keeps the run directories (default: a temporary directory); run
again with the same DIR and nothing is trained again (every run resumes as
done): the comparison is rebuilt from the stored runs with the current
analysis, and the wall times are the ones stored when the runs trained
(``DIR/walltimes.json``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Space:
    name: str
    path: str
    sets: tuple[str, ...]
    lo: float  # the grid's ends, half an octave apart in between
    octaves: int
    start: tuple[float, ...]  # the bracket's coarse start (grid points)

    @property
    def points(self) -> int:
        return 2 * self.octaves + 1

    @property
    def hi(self) -> float:
        return self.lo * 2.0 ** self.octaves


SPACES = {
    "quickstart": Space(
        "quickstart", "spaces/quickstart.yaml",
        ("train.eval_every=20",),
        0.003125, 5, (0.0125, 0.025),
    ),
    "stam-branches": Space(
        "stam-branches", "spaces/published/stam-branches.yaml",
        ("seeds=3", "space.model.aggregation=[sum, stam]", "task.dataset.train=4000", "train.steps=150",
         "train.eval_every=30", "stability.hessian=false"),
        0.001, 8, (0.008, 0.016),
    ),
    "tau-depth": Space(
        "tau-depth", "spaces/published/tau-depth.yaml",
        ("seeds=3", "space.model.depth=[3, 10, 30]", "space.model.tau=[1/L, 1/sqrt(L)]", "task.dataset.train=4000",
         "train.steps=100", "train.eval_every=20"),
        0.032, 6, (0.128, 0.256),
    ),
}
VARIANTS = ("grid", "bracket", "bracket+sweep", "grid5", "bracket5", "bracket+adaptive")
# issue 34: seeds where the verdict is still open, against a fixed 5-seed grid
SEEDS = {"grid5": "seeds=5", "bracket5": "seeds=5", "bracket+adaptive": "seeds={min: 3, max: 12}"}
ADAPTIVE_REF = "grid5"
OCT_TOL = 0.5  # octaves: two fitted optima "agree" within this


def variant_sets(sp: Space, variant: str) -> list[str]:
    common = ["runner.concurrency=1", "logging.tensorboard=false", *sp.sets]
    if variant in SEEDS:
        common.append(SEEDS[variant])
        variant = {"grid5": "grid", "bracket5": "bracket", "bracket+adaptive": "bracket"}[variant]
    if variant == "grid":
        # search.bracket=null: a space published as a bracket search (tau-depth) keeps its bracket
        # settings, which validation refuses beside sampler grid
        return common + ["search.sampler=grid", "search.pruner=none", "search.bracket=null",
                         f"space.train.lr={{log_grid: [{sp.lo!r}, {sp.hi!r}, {sp.points}]}}"]
    br = ["search.sampler=bracket", f"space.train.lr=[{', '.join(repr(x) for x in sp.start)}]",
          f"search.bracket={{step_octaves: 1, resolution_octaves: 0.5, lr_limits: [{sp.lo!r}, {sp.hi!r}]}}"]
    return common + br + (["search.pruner=sweep"] if variant == "bracket+sweep" else ["search.pruner=none"])


def train(sp: Space, variant: str, out: Path) -> tuple[Path, float]:
    """`nas-stab run` of one variant into out/<space>/<variant>/; (run directory, wall seconds)."""
    dest = out / sp.name / variant.replace("+", "_")
    cmd = [sys.executable, "-m", "nas_stab.cli", "run", str(ROOT / sp.path), "--out", str(dest)]
    cmd += [x for s in variant_sets(sp, variant) for x in ("--set", s)]
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    if p.returncode not in (0, 1):
        sys.exit(f"{' '.join(cmd)} exited {p.returncode}:\n{p.stderr[-3000:]}")
    dirs = [d for d in dest.iterdir() if (d / "trials.csv").exists()]
    if len(dirs) != 1:
        sys.exit(f"{dest}: expected one run directory, found {[str(d) for d in dirs]}")
    return dirs[0], wall


@dataclass
class Result:
    variant: str
    run_dir: Path
    wall: float
    runs: int
    steps: int
    status: dict
    rows: dict  # label -> {transfers, why, lo, hi}
    sizes: dict  # (label, size) -> {x, censored, trains, end}


def measure(variant: str, run_dir: Path, wall: float, boot: int) -> Result:
    import pandas as pd

    from nas_stab.results.leaderboard import load_analysis

    a, _, runs = load_analysis([run_dir], n_boot=boot)
    t = runs[0].trials
    steps = int(pd.to_numeric(t["steps"], errors="coerce").fillna(0).sum())
    status = t["status"].astype(str).value_counts().to_dict()
    rows = {r["label"]: {"transfers": r["transfers"], "why": r["why"], "lo": r["lr_drift_lo"], "hi": r["lr_drift_hi"],
                         "drift": r["lr_drift"], "min_seeds": r["min_seeds"]}
            for r in a.rows.to_dict("records")}
    sizes = {}
    for s in a.sizes.to_dict("records"):
        sizes[(s["label"], s["size"])] = {"x": s["x_star"], "lo": s["x_lo"], "hi": s["x_hi"], "censored": s["censored"],
                                          "trains": bool(s["trains"]), "end": s.get("bracket_end", "") or ""}
    return Result(variant, run_dir, wall, len(t), steps, status, rows, sizes)


def _fin(x) -> bool:
    try:
        return math.isfinite(float(x))
    except (TypeError, ValueError):
        return False


def compare(g: Result, b: Result) -> dict:
    """Against the grid: verdicts, optima (0.5 octave), lr_drift intervals, censored by bracket only."""
    verdicts = [(lab, g.rows[lab]["transfers"], b.rows.get(lab, {}).get("transfers")) for lab in g.rows]
    same_verdicts = all(x == y for _, x, y in verdicts)
    optima, far, cens_only = [], [], []
    for key, gs in g.sizes.items():
        bs = b.sizes.get(key)
        if bs is None:
            far.append((key, "missing"))
            continue
        if gs["trains"] != bs["trains"]:
            far.append((key, "trains" if gs["trains"] else "does not train"))
            continue
        if not gs["trains"]:
            continue
        d = abs(float(gs["x"]) - float(bs["x"]))
        optima.append(d)
        if d > OCT_TOL + 1e-9:
            inside = _fin(gs["lo"]) and gs["lo"] - 1e-9 <= float(bs["x"]) <= gs["hi"] + 1e-9
            far.append((key, f"{d:.2f} oct ({'inside' if inside else 'outside'} the grid's 90% interval "
                             f"{float(gs['lo']):+.2f}..{float(gs['hi']):+.2f})"))
        if bs["censored"] and not gs["censored"]:
            cens_only.append((key, bs["censored"], bs["end"]))
    overlap = []
    for lab, gr in g.rows.items():
        br = b.rows.get(lab)
        if br is None or not all(_fin(v) for v in (gr["lo"], gr["hi"], br["lo"], br["hi"])):
            overlap.append((lab, None))
        else:
            overlap.append((lab, gr["lo"] <= br["hi"] + 1e-9 and br["lo"] <= gr["hi"] + 1e-9))
    return {"verdicts": verdicts, "same_verdicts": same_verdicts, "optima": optima, "far": far,
            "censored_only": cens_only, "overlap": overlap}


def _lab(key) -> str:
    lab, size = key
    return f"{lab}@{size}"


def decided(r: Result) -> int:
    return sum(row["transfers"] in ("yes", "no") for row in r.rows.values())


def report_seeds(sp: Space, results: dict[str, Result]) -> list[str]:
    """Issue 34: rows decided and training steps, the fixed 5-seed grid against bracket (5 seeds) and bracket +
    adaptive seeds (3 to 12). Target: at least the grid's decided rows with at most 30% of its steps."""
    g = results[ADAPTIVE_REF]
    lines = [f"== {sp.name}: time to a decided verdict ({', '.join(f'{v}: {SEEDS[v]}' for v in SEEDS if v in results)})",
             f"{'variant':18s} {'runs':>5s} {'steps':>8s} {'wall s':>7s} {'steps/grid5':>11s} {'decided':>8s}  verdicts"]
    for v, r in results.items():
        if v not in SEEDS:
            continue
        ratio = r.steps / g.steps if g.steps else math.nan
        vd = "; ".join(f"{lab}: {row['transfers']}" for lab, row in r.rows.items())
        lines.append(f"{v:18s} {r.runs:5d} {r.steps:8d} {r.wall:7.1f} {ratio:11.1%} {decided(r):4d}/{len(r.rows):<3d}  {vd}")
    if "bracket+adaptive" in results:
        r = results["bracket+adaptive"]
        ratio = r.steps / g.steps if g.steps else math.nan
        met = decided(r) >= decided(g) and ratio <= 0.30 + 1e-9
        lines.append(f"    target (decided rows >= grid5's, <= 30% of its steps): {'met' if met else 'NOT met'} "
                     f"({decided(r)} vs {decided(g)} decided, {ratio:.1%} of the steps)")
        lines.append("    seeds where each row's optima rest (min over its sizes): "
                     + "; ".join(f"{lab}: {row['min_seeds']}" for lab, row in r.rows.items()))
    lines.append("  verdict why: " + " || ".join(f"{v}: " + "; ".join(f"{lab}: {row['transfers']} ({row['why']})"
                                                                     for lab, row in r.rows.items())
                                                  for v, r in results.items() if v in SEEDS))
    return lines


def report(sp: Space, results: dict[str, Result]) -> list[str]:
    results = {v: r for v, r in results.items() if v not in SEEDS}
    if "grid" not in results:
        return []
    g = results["grid"]
    lines = [f"== {sp.name} ({sp.path}; grid lr {sp.lo:g}-{sp.hi:g}, {sp.points} points; bracket start "
             f"{', '.join(f'{x:g}' for x in sp.start)}; --set {' '.join(sp.sets)})"]
    lines.append(f"{'variant':14s} {'runs':>5s} {'steps':>8s} {'wall s':>7s} {'steps/grid':>10s}  verdicts  "
                 f"optima<=0.5oct (max)  lr_drift CIs overlap  censored by bracket only")
    ok_all = True
    for v, r in results.items():
        ratio = r.steps / g.steps if g.steps else math.nan
        if v == "grid":
            vd = ", ".join(f"{lab}: {row['transfers']}" for lab, row in r.rows.items())
            lines.append(f"{v:14s} {r.runs:5d} {r.steps:8d} {r.wall:7.1f} {ratio:10.1%}  {vd}")
            continue
        c = compare(g, r)
        n_opt = len(c["optima"])
        within = sum(d <= OCT_TOL + 1e-9 for d in c["optima"])
        mx = max(c["optima"]) if c["optima"] else math.nan
        ov = [o for _, o in c["overlap"] if o is not None]
        na = len(c["overlap"]) - len(ov)
        cen = ", ".join(f"{_lab(k)} ({cc}, {e or '?'})" for k, cc, e in c["censored_only"]) or "none"
        lines.append(f"{v:14s} {r.runs:5d} {r.steps:8d} {r.wall:7.1f} {ratio:10.1%}  "
                     f"{'same' if c['same_verdicts'] else 'DIFFER'} ({sum(x == y for _, x, y in c['verdicts'])}/"
                     f"{len(c['verdicts'])})  {within}/{n_opt} ({mx:.2f})  {sum(ov)}/{len(ov)}"
                     f"{f' (+{na} n/a)' if na else ''}"
                     f"  {cen}")
        met = c["same_verdicts"] and not c["far"] and ratio <= 0.40 + 1e-9 and not c["censored_only"]
        ok_all &= met
        if not c["same_verdicts"]:
            lines.append("    verdicts: " + "; ".join(f"{lab}: grid {x} / {v} {y}" for lab, x, y in c["verdicts"] if x != y))
        if c["far"]:
            lines.append("    optima apart: " + "; ".join(f"{_lab(k)} {why}" for k, why in c["far"]))
        ends: dict[str, int] = {}
        for sz in r.sizes.values():
            ends[sz["end"] or "?"] = ends.get(sz["end"] or "?", 0) + 1
        lines.append(f"    sweeps ended: {', '.join(f'{n} {e}' for e, n in sorted(ends.items()))}; runs by status: "
                     f"{', '.join(f'{n} {st}' for st, n in sorted(r.status.items()))}")
        lines.append(f"    targets (same verdicts, optima within 0.5 oct, <= 40% steps, none censored by bracket only): "
                     f"{'met' if met else 'NOT met'}")
    lines.append("  per size: x*(s) = log2 fitted optimum (censoring; bracket's end)")
    for key, gs in g.sizes.items():
        parts = [f"grid {_x(gs)}"]
        for v, r in results.items():
            if v != "grid" and key in r.sizes:
                parts.append(f"{v} {_x(r.sizes[key])}")
        lines.append(f"    {_lab(key):22s} " + " | ".join(parts))
    lines.append("  verdict why: " + " || ".join(f"{v}: " + "; ".join(f"{lab}: {row['transfers']} ({row['why']})"
                                                                     for lab, row in r.rows.items())
                                                  for v, r in results.items()))
    return lines


def _x(s: dict) -> str:
    if not s["trains"]:
        return "no optimum"
    t = f"{float(s['x']):+.2f}"
    if s["censored"]:
        t += f" ({s['censored']})"
    if s["end"]:
        t += f" [{s['end']}]"
    return t


def _rows(dest: Path) -> int:
    """Runs recorded under a variant's --out directory (0 before its first run)."""
    n = 0
    for f in dest.glob("*/trials.csv") if dest.exists() else ():
        n += max(0, len(f.read_text().splitlines()) - 1)
    return n


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--spaces", default=",".join(SPACES), help=f"comma-separated, from {', '.join(SPACES)}")
    ap.add_argument("--variants", default="grid5,bracket5,bracket+adaptive",
                    help=f"from {', '.join(VARIANTS)} (default: issue 34's three; grid, bracket, bracket+sweep: issue 19's)")
    ap.add_argument("--out", help="keep the run directories here (default: a temporary directory)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="one more override, every space and variant")
    ap.add_argument("--boot", type=int, default=1000, help="bootstrap replicates of the intervals")
    a = ap.parse_args(argv)
    names = [s.strip() for s in a.spaces.split(",") if s.strip()]
    variants = [v.strip() for v in a.variants.split(",") if v.strip()]
    bad = [n for n in names if n not in SPACES] + [v for v in variants if v not in VARIANTS]
    if bad or not ("grid" in variants or not set(variants) - set(SEEDS)) or (set(variants) & set(SEEDS) and ADAPTIVE_REF not in variants):
        sys.exit(f"unknown space or variant: {bad}" if bad else "the grid variants are the references: keep grid (issue 19's "
                 "variants) and grid5 (issue 34's)")
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="nas-bench-verdict-"))
    out.mkdir(parents=True, exist_ok=True)
    walls_file = out / "walltimes.json"
    walls = json.loads(walls_file.read_text()) if walls_file.exists() else {}
    print(f"bench_verdict: spaces {', '.join(names)}; variants {', '.join(variants)}; out {out}; "
          f"load average {os.getloadavg()[0]:.2f} at start", flush=True)
    t_all = time.perf_counter()
    ok = True
    for n in names:
        sp = SPACES[n]
        if a.set:
            sp = Space(sp.name, sp.path, (*sp.sets, *a.set), sp.lo, sp.octaves, sp.start)
        results = {}
        for v in variants:
            key = f"{n}/{v}"
            before = _rows(out / sp.name / v.replace("+", "_"))
            run_dir, wall = train(sp, v, out)
            if _rows(run_dir.parent) > before or key not in walls:  # runs trained now: their time counts
                walls[key] = walls.get(key, 0.0) + wall
                walls_file.write_text(json.dumps(walls, indent=1))
            results[v] = measure(v, run_dir, walls[key], a.boot)
            print(f"  {n} {v}: {results[v].runs} runs, {results[v].steps} steps, {walls[key]:.1f} s", flush=True)
        lines = report(sp, results) + (report_seeds(sp, results) if ADAPTIVE_REF in results else [])
        ok &= all("NOT met" not in x for x in lines)
        print("\n".join(lines), flush=True)
        print(flush=True)
    print(f"total {time.perf_counter() - t_all:.0f} s; load average at the end "
          f"{' '.join(Path('/proc/loadavg').read_text().split()[:3])}; run directories under {out}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
