"""Chaos on a loopback Ray cluster: a grid search with workers killed, a node removed and the driver killed.

Starts a Ray cluster of `--nodes` nodes on 127.0.0.1 (runners/local_cluster.sh: a head and nodes - 1 workers,
1 CPU each) and runs one grid search of `--trials` short trials (one seed each) on it twice, each time with
`nas-stab run --runner ray`, as a user runs it:

1. undisturbed: the reference, and the orchestration overhead against ideal (the recorded runs' own wall times
   summed, divided by the trials that run at once, against the search's wall time);
2. disturbed: while it runs, SIGKILL to a random trial worker (`ray::ImplicitFunc` processes) for `--kill-frac`
   of the trials (10%), one worker node removed (its raylet and every process under it SIGKILLed) at 40% of the
   trials, the driver SIGKILLed once at 60% and the same command started again (the resume).

Then prints: runs lost (grid cells without a record; must be 0), runs duplicated (records beyond one per cell;
0), grid cells recorded other than exactly once (0), whether the disturbed search's trials.csv (timing columns
and Optuna's trial numbers aside) and its leaderboard.csv are identical to the undisturbed one's, and both
searches' overhead against ideal (target <= 15% for 1-s trials, undisturbed).

    python benchmarks/chaos.py --trials 1000 --nodes 3 [--steps 950] [--kill-frac 0.1] [--seed 0] [--write]

`--write` stores the figures in docs/performance/chaos.csv and renders the paragraph of docs/ray.md from it. The
slow suite runs a reduced version (tests/test_chaos.py). Not a timed test.
"""
from __future__ import annotations

import argparse
import csv
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHAOS_CSV = ROOT / "docs" / "performance" / "chaos.csv"
PAGE = ROOT / "docs" / "ray.md"
BEGIN, END = "<!-- chaos.py: begin -->", "<!-- chaos.py: end -->"
STALL_S = 300  # seconds without a finished run after which the disturbed search is declared hung
TIMING = ("wall_s", "train_s", "measure_s", "optuna_trial")  # trials.csv columns allowed to differ between runs


def spec_text(trials: int, nodes: int, steps: int, address: str) -> str:
    """A grid of `trials` cells (lr x branches x width, one seed), every run a short digits MLP on one CPU."""
    n_lr = max(1, trials // 10)
    assert n_lr * 10 == trials, "--trials must be a multiple of 10 (5 branch counts x 2 widths x lrs)"
    return (f"name: chaos\nseeds: 1\ntask: {{dataset: {{name: digits}}}}\n"
            f"model: {{arch: mlp_resnet, depth: 2, width: 16}}\n"
            f"train: {{lr: 0.05, steps: {steps}, batch_size: 32, threads: 1}}\n"
            "stability: {every: 0, probe_batch: 64, hessian: false}\n"
            f"space:\n  model.width: [8, 16]\n  model.branches: [1, 2, 4, 8, 16]\n"
            f"  train.lr: {{log_grid: [0.001, 1.0, {n_lr}]}}\n"
            "leaderboard: {lr: train.lr, transfer: model.branches, compare: [model.width]}\n"
            f"runner: {{kind: ray, address: '{address}', concurrency: {nodes}, max_failures: 20, "
            "resources: {cpu: 1}}\n"
            "logging: {tensorboard: false}\n")


# ------------------------------------------------------------------------------------------------- the cluster

@dataclass
class Cluster:
    address: str
    temp_dir: str
    env: dict = field(default_factory=dict)

    def processes(self) -> list[tuple[int, int, str]]:
        """(pid, parent pid, command line) of every process on this machine."""
        out = []
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                cmd = (p / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            out.append((int(p.name), ppid, cmd))
        return out

    def raylets(self) -> list[int]:
        """This cluster's raylets (one per node), oldest first: the head's is the first."""
        mine = [(pid, cmd) for pid, _, cmd in self.processes() if "raylet" in cmd.split(" ")[0] and self.temp_dir in cmd]
        return [pid for pid, _ in sorted(mine, key=lambda x: _started(x[0]))]

    def trial_workers(self) -> list[int]:
        """Processes running a trial now (Ray names them after the trainable: ``ray::ImplicitFunc...``)."""
        return [pid for pid, _, cmd in self.processes() if cmd.startswith("ray::ImplicitFunc")]

    def remove_node(self, raylet: int) -> int:
        """SIGKILL a node: its raylet and every process under it; how many processes."""
        procs = self.processes()
        kids = {raylet}
        grew = True
        while grew:
            more = {pid for pid, ppid, _ in procs if ppid in kids} - kids
            grew = bool(more)
            kids |= more
        for pid in kids:
            _kill(pid)
        return len(kids)


def _started(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return 1 << 62


def _kill(pid: int, sig: int = signal.SIGKILL) -> bool:
    try:
        os.kill(pid, sig)
        return True
    except ProcessLookupError:
        return False


def start_cluster(nodes: int) -> Cluster:
    env = dict(os.environ, PYTHON=sys.executable, HEAD_CPUS="1")
    p = subprocess.run(["bash", str(ROOT / "runners" / "local_cluster.sh"), str(nodes - 1), "1"], env=env,
                       capture_output=True, text=True, timeout=600)
    if p.returncode:
        sys.exit(f"could not start the Ray cluster:\n{p.stdout}\n{p.stderr}")
    address = re.search(r"^address: (\S+)", p.stdout, re.M)
    stop = re.search(r"local_cluster\.sh stop (\S+)", p.stdout)
    assert address and stop, p.stdout
    return Cluster(address.group(1), stop.group(1), {"RAY_AUTH_MODE": "token"})


def stop_cluster(c: Cluster) -> None:
    subprocess.run(["bash", str(ROOT / "runners" / "local_cluster.sh"), "stop", c.temp_dir], capture_output=True,
                   text=True, timeout=300)


# ---------------------------------------------------------------------------------------------------- the runs

def records(run_dir: Path) -> list[dict[str, str]]:
    p = run_dir / "trials.csv"
    if not p.exists():
        return []
    with open(p, newline="") as f:
        return list(csv.DictReader(f))


def n_records(run_dir: Path) -> int:
    p = run_dir / "trials.csv"
    return max(0, len(p.read_bytes().splitlines()) - 1) if p.exists() else 0


def nas_stab(*args: str, env: dict, log: Path) -> subprocess.Popen:
    """`nas-stab ARGS` in a process of its own, its stderr appended to `log` (a pipe nobody reads while it runs would
    fill and block the driver's progress lines: the first version of this script hung a search that way)."""
    with open(log, "a") as err:
        return subprocess.Popen([sys.executable, "-m", "nas_stab.cli", *args], env=dict(os.environ, **env),
                                stdout=subprocess.DEVNULL, stderr=err, text=True)


def _tail(log: Path) -> str:
    return log.read_text(errors="replace")[-2000:] if log.exists() else ""


@dataclass
class Chaos:
    """What was done to the disturbed search, as it was done."""

    workers_killed: int = 0
    node_removed: str = ""
    driver_killed_at: int = -1
    drivers: int = 0
    log: list[str] = field(default_factory=list)
    proc: subprocess.Popen | None = None  # the driver running now


def disturbed(c: Cluster, spec: Path, out: Path, trials: int, kill_frac: float, rng: random.Random) -> tuple[Chaos, float]:
    """Run the search while killing workers, a node and the driver (once each, the driver then restarted)."""
    chaos = Chaos()
    kills_at = sorted(rng.sample(range(1, trials), max(0, round(kill_frac * trials))))
    node_at, driver_at = int(0.4 * trials), int(0.6 * trials)
    log = out.parent / f"{out.name}.stderr"
    t0 = time.perf_counter()
    chaos.proc = nas_stab("run", str(spec), "--out", str(out), env=c.env, log=log)
    chaos.drivers = 1
    try:
        return _disturb(c, spec, out, log, chaos, kills_at, node_at, driver_at, rng), time.perf_counter() - t0
    finally:
        if chaos.proc.poll() is None:  # stopped from outside (a signal to this script): no driver left behind
            _kill(chaos.proc.pid)


def _disturb(c: Cluster, spec: Path, out: Path, log: Path, chaos: Chaos, kills_at: list[int], node_at: int,
             driver_at: int, rng: random.Random) -> Chaos:
    d = out / "chaos"
    last, since = -1, time.monotonic()
    while True:
        proc = chaos.proc
        assert proc is not None
        done = n_records(d)
        if done != last:
            last, since = done, time.monotonic()
        elif time.monotonic() - since > STALL_S:  # a hang is a finding, not a wait forever
            chaos.log.append(f"no run finished for {STALL_S} s at {done} records: the search hung; stderr: {_tail(log)}")
            return chaos
        while kills_at and done >= kills_at[0]:
            kills_at.pop(0)
            workers = c.trial_workers()
            if workers and _kill(rng.choice(workers)):
                chaos.workers_killed += 1
        if node_at and done >= node_at:
            node_at = 0
            raylets = c.raylets()
            if len(raylets) > 1:
                n = c.remove_node(raylets[-1])
                chaos.node_removed = f"raylet {raylets[-1]} and {n - 1} processes under it, at {done} records"
        if chaos.driver_killed_at < 0 and done >= driver_at:
            _kill(proc.pid)
            proc.wait()
            chaos.driver_killed_at = done
            proc = chaos.proc = nas_stab("run", str(spec), "--out", str(out), env=c.env, log=log)
            chaos.drivers += 1
        if proc.poll() is not None:
            if proc.returncode not in (0, 1):
                chaos.log.append(f"driver exited {proc.returncode}: {_tail(log)}")
            return chaos
        time.sleep(0.05)


def undisturbed(c: Cluster, spec: Path, out: Path) -> float:
    log = out.parent / f"{out.name}.stderr"
    t0 = time.perf_counter()
    proc = nas_stab("run", str(spec), "--out", str(out), env=c.env, log=log)
    if proc.wait() not in (0, 1):
        sys.exit(f"the undisturbed search exited {proc.returncode}:\n{_tail(log)}")
    return time.perf_counter() - t0


def leaderboard_csv(run_dir: Path, out: Path) -> bytes:
    p = subprocess.run([sys.executable, "-m", "nas_stab.cli", "leaderboard", str(run_dir), "--format", "csv",
                        "--out", str(out)], capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"nas-stab leaderboard {run_dir} exited {p.returncode}:\n{p.stderr[-3000:]}")
    return (out / "leaderboard.csv").read_bytes()


def overhead(run_dir: Path, wall: float, slots: int) -> float:
    """The search's wall time against ideal: its recorded runs' wall times summed over the slots."""
    busy = sum(float(r["wall_s"] or 0) for r in records(run_dir))
    return wall / (busy / slots) - 1


def compare(ref: Path, dis: Path, cells: int) -> dict[str, object]:
    """Lost, duplicated, cells recorded other than once; whether the records match (timing aside)."""
    a, b = records(ref), records(dis)
    per_cell: dict[str, int] = {}
    for r in b:
        per_cell[r["trial"]] = per_cell.get(r["trial"], 0) + 1
    strip = lambda rs: sorted(({k: v for k, v in r.items() if k not in TIMING} for r in rs),  # noqa: E731
                              key=lambda r: int(r["trial"]))
    return {"lost": cells - len(per_cell), "duplicated": len(b) - len(per_cell),
            "not_once": sum(1 for n in per_cell.values() if n != 1) + cells - len(per_cell),
            "records_identical": strip(a) == strip(b), "differences": differences(a, b)}


def differences(ref: list[dict[str, str]], dis: list[dict[str, str]], show: int = 5) -> str:
    """How the disturbed search's records differ from the undisturbed one's (timing aside): how many records, which
    columns, and the first few values, by run id; empty when they agree."""
    by_id = {r["run_id"]: r for r in ref}
    diff = [(r["run_id"], k, by_id[r["run_id"]].get(k), v) for r in dis if r["run_id"] in by_id
            for k, v in r.items() if k not in TIMING and by_id[r["run_id"]].get(k) != v]
    if not diff:
        return ""
    runs, cols = sorted({d[0] for d in diff}), sorted({d[1] for d in diff})
    return (f"{len(runs)} record(s) differ in {', '.join(cols)}; e.g. "
            + "; ".join(f"{rid} {k}: {a!r} -> {b!r}" for rid, k, a, b in diff[:show]))


def run(trials: int, nodes: int, steps: int, kill_frac: float, seed: int, tmp: Path) -> dict[str, object]:
    c = start_cluster(nodes)
    try:
        spec = tmp / "chaos.yaml"
        spec.write_text(spec_text(trials, nodes, steps, c.address))
        print(f"cluster: {nodes} nodes on {c.address}; {trials} trials of {steps} steps", flush=True)
        wall_ref = undisturbed(c, spec, tmp / "ref")
        print(f"undisturbed: {wall_ref:.0f} s, overhead against ideal {overhead(tmp / 'ref' / 'chaos', wall_ref, nodes):+.1%}",
              flush=True)
        chaos, wall_dis = disturbed(c, spec, tmp / "dis", trials, kill_frac, random.Random(seed))
    finally:
        stop_cluster(c)
    got = compare(tmp / "ref" / "chaos", tmp / "dis" / "chaos", trials)
    got["leaderboard_identical"] = (leaderboard_csv(tmp / "ref" / "chaos", tmp / "lb-ref")
                                    == leaderboard_csv(tmp / "dis" / "chaos", tmp / "lb-dis"))
    got.update(wall_undisturbed=wall_ref, wall_disturbed=wall_dis,
               overhead_undisturbed=overhead(tmp / "ref" / "chaos", wall_ref, nodes),
               overhead_disturbed=overhead(tmp / "dis" / "chaos", wall_dis, nodes - 1),
               workers_killed=chaos.workers_killed, node_removed=chaos.node_removed,
               driver_killed_at=chaos.driver_killed_at, drivers=chaos.drivers, problems=chaos.log)
    return got


def store(got: dict[str, object], a: argparse.Namespace) -> None:
    CHAOS_CSV.parent.mkdir(exist_ok=True)
    row = {"trials": a.trials, "nodes": a.nodes, "steps": a.steps, "kill_frac": a.kill_frac, "seed": a.seed,
           **{k: (f"{v:.4f}" if isinstance(v, float) else v) for k, v in got.items() if k != "problems"},
           "problems": " | ".join(got["problems"]) or "none"}  # type: ignore[arg-type]
    with open(CHAOS_CSV, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(row))
        w.writeheader()
        w.writerow(row)


def render() -> str:
    """The paragraph of docs/ray.md, from docs/performance/chaos.csv."""
    with open(CHAOS_CSV, newline="") as f:
        r = next(csv.DictReader(f))
    return (f"Measured (`python benchmarks/chaos.py --trials {r['trials']} --nodes {r['nodes']} --steps {r['steps']} --write`, "
            f"docs/performance/chaos.csv): {r['trials']} trials of {r['steps']} steps on {r['nodes']} nodes; "
            f"{r['workers_killed']} trial workers SIGKILLed, one node removed ({r['node_removed']}), the driver SIGKILLed "
            f"at {r['driver_killed_at']} records and resumed. **Runs lost {r['lost']}, duplicated {r['duplicated']}, "
            f"grid cells recorded other than exactly once {r['not_once']}**; trials.csv identical to the undisturbed "
            f"search's (timing aside): {r['records_identical']}"
            + (f" ({r['differences']})" if r.get("differences") else "")
            + f"; leaderboard.csv byte-identical: {r['leaderboard_identical']}. Wall time: undisturbed {float(r['wall_undisturbed']):.0f} s, "
            f"**{float(r['overhead_undisturbed']):+.1%} against ideal** (the recorded runs' wall times over the "
            f"{r['nodes']} slots; target at most +15% for 1-s trials), disturbed {float(r['wall_disturbed']):.0f} s "
            f"({float(r['overhead_disturbed']):+.1%} against the nodes left). Problems: {r['problems']}.\n")


def write_page() -> None:
    text = PAGE.read_text(encoding="utf-8")
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{PAGE}: no {BEGIN} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    PAGE.write_text(head + BEGIN + "\n" + render() + END + rest.split(END, 1)[1], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=1000, help="grid cells, one seed each (a multiple of 10)")
    ap.add_argument("--nodes", type=int, default=3, help="Ray nodes on loopback, 1 CPU each (>= 3)")
    ap.add_argument("--steps", type=int, default=950, help="training steps per trial (950: about 1 s here)")
    ap.add_argument("--kill-frac", type=float, default=0.1, help="trial workers SIGKILLed, a fraction of the trials")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--write", action="store_true", help="store docs/performance/chaos.csv, render docs/ray.md")
    ap.add_argument("--clean", action="store_true", help="remove the run directories even when the searches disagree")
    a = ap.parse_args(argv)

    def stop(*_: object) -> None:  # SIGTERM (and SIGINT, ignored in a background job): the cluster is stopped first
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    tmp = Path(tempfile.mkdtemp(prefix="nas-chaos-"))
    got: dict[str, object] = {}
    try:
        got = run(a.trials, a.nodes, a.steps, a.kill_frac, a.seed, tmp)
    finally:
        if got.get("records_identical") and got.get("leaderboard_identical") or a.clean:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept for a look: {tmp} (ref/ undisturbed, dis/ disturbed; --clean removes it)")
    print(f"workers SIGKILLed {got['workers_killed']}; node removed: {got['node_removed'] or 'none'}; driver SIGKILLed "
          f"at {got['driver_killed_at']} records, {got['drivers']} driver processes")
    print(f"runs lost {got['lost']} (must be 0); duplicated {got['duplicated']} (0); grid cells recorded other than "
          f"exactly once {got['not_once']} (0)")
    print(f"trials.csv identical to the undisturbed run (timing aside): {got['records_identical']}; "
          f"leaderboard.csv byte-identical: {got['leaderboard_identical']}")
    if got["differences"]:
        print(f"  records that differ: {got['differences']}")
    print(f"wall: undisturbed {got['wall_undisturbed']:.0f} s (overhead against ideal {got['overhead_undisturbed']:+.1%}, "
          f"target <= +15%), disturbed {got['wall_disturbed']:.0f} s ({got['overhead_disturbed']:+.1%} against the "
          "nodes left)")
    for p in got["problems"]:  # type: ignore[union-attr]
        print("problem:", p)
    if a.write:
        store(got, a)
        write_page()
        print(render())
    ok = (got["lost"] == got["duplicated"] == got["not_once"] == 0 and got["records_identical"]
          and got["leaderboard_identical"] and not got["problems"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
