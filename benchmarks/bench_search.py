"""Search overhead: `nas-stab run` against a hand-written Optuna script doing the same search.

Both run the same TPE search (same space, trials, sampler seed and median
pruner) over small trials, so that what the runner adds per trial is visible:

- `nas-stab run SPEC`, end to end, as a user runs it (a subprocess: imports,
  data check, run directory, Optuna study in the configured storage, trials,
  trials.csv and histories, the final leaderboard);
- the script a user would write instead (`hand_written` below, also a
  subprocess): load the data once, a plain PyTorch training function with
  `trial.report` / `trial.should_prune`, `study.optimize`. It builds the same
  model (nas_stab's `mlp`, written out in plain PyTorch with the same
  initialization) on the same tensors (the digits split nas_stab makes) with
  the same batch order, so both sample the same configurations and prune the
  same trials (the script checks and prints whether they did).

The variants are interleaved `--reps` times and the medians compared.
Printed: total wall times and ratios; per trial, the steady time per trial
(between the first and the last finished trial, which leaves out start-up and
the final leaderboard), the part of it spent in the training function and the
rest (the runner's or script's own per-trial overhead, in ms).

    python benchmarks/bench_search.py [--trials 40] [--steps 40] [--reps 3]
        [--variants nas,nas-journal,hand-sqlite,hand-journal,hand-memory] [--before-tree DIR] [--profile FILE]

The ratio the target is about (at most 1.05x) compares like with like: the
runner and the script on the same storage (`nas-journal` / `hand-journal`).
The runner's default storage (SQLite, WAL mode) is also compared with the
script on Optuna's default SQLite and with an in-memory study (no
persistence: a reference, not the same search).

`--profile FILE` runs `nas-stab run` once under cProfile and writes the stats.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
VENV_BIN = Path(sys.executable).parent

SPEC = """\
name: bench-search
seeds: 1
task: {{dataset: {{name: digits}}}}
model: {{arch: mlp, depth: 2, width: 32}}
train: {{optimizer: sgd, lr: 0.1, momentum: 0.9, batch_size: 64, steps: {steps}, eval_every: {eval_every}, threads: 1}}
stability: {{every: 0, hessian: false, probe_batch: 64}}
space:
  train.lr: {{loguniform: [0.001, 0.2]}}
  model.width: [16, 32, 64]
  model.depth: {{int: [1, 3]}}
search:
  sampler: tpe
  trials: {trials}
  seed: 0
  objective: val_acc
  pruner: {{median: {{n_startup_trials: 5, n_warmup_steps: {eval_every}}}}}
{storage}"""


# ----------------------------------------------------------------- the hand-written script


def hand_written(out: Path, trials: int, steps: int, eval_every: int, storage: str) -> None:
    """What a user writes instead of nas_stab: data once, a PyTorch training function, study.optimize."""
    import math

    import optuna
    import torch
    import torch.nn.functional as F
    from sklearn.datasets import load_digits
    from torch import nn

    torch.set_num_threads(1)
    optuna.logging.set_verbosity(optuna.logging.WARNING)

    # the digits split nas_stab makes (test 20%, val 20%, rest train; split seed 0)
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = (x - x.mean()) / x.std()
    y = torch.tensor(d.target, dtype=torch.long)
    perm = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
    n_te = n_va = round(0.2 * len(x))
    te, va, tr = perm[:n_te], perm[n_te:n_te + n_va], perm[n_te + n_va:]
    x_tr, y_tr, x_va, y_va, x_te, y_te = x[tr], y[tr], x[va], y[va], x[te], y[te]

    class MLP(nn.Module):
        def __init__(self, d_in, width, depth, classes=10):
            super().__init__()
            self.w = nn.ParameterList()
            self.b = nn.ParameterList()
            for i in range(depth):
                w = nn.Parameter(torch.empty(width, d_in if i == 0 else width))
                with torch.no_grad():
                    w.normal_(0.0, math.sqrt(2.0 / width))
                self.w.append(w)
                self.b.append(nn.Parameter(torch.zeros(width)))
            self.head = nn.Linear(width, classes)
            nn.init.normal_(self.head.weight, 0.0, 1.0 / math.sqrt(width))
            nn.init.zeros_(self.head.bias)

        def forward(self, h):
            h = h.flatten(1)
            for w, b in zip(self.w, self.b):
                h = F.relu(F.linear(h, w) + b.view(1, -1))
            return self.head(h)

    @torch.no_grad()
    def accuracy(model, xs, ys):
        model.eval()
        acc = (model(xs).argmax(1) == ys).float().mean().item()
        model.train()
        return acc

    train_s = {}

    def train(trial, lr, width, depth, seed=0):
        t0 = time.perf_counter()
        torch.manual_seed(seed)
        model = MLP(x_tr[0].numel(), width, depth)
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        gen = torch.Generator().manual_seed(seed)
        bs, n, step = 64, len(x_tr), 0
        try:
            while True:
                p = torch.randperm(n, generator=gen)
                for i in range(0, n - bs + 1, bs):
                    idx = p[i:i + bs]
                    loss = F.cross_entropy(model(x_tr[idx]), y_tr[idx])
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                    step += 1
                    if step == steps:
                        val = accuracy(model, x_va, y_va)
                        trial.set_user_attr("test_acc", accuracy(model, x_te, y_te))
                        return val
                    if step % eval_every == 0:
                        trial.report(accuracy(model, x_va, y_va), step)
                        if trial.should_prune():
                            raise optuna.TrialPruned()
        finally:
            train_s[trial.number] = time.perf_counter() - t0

    def objective(trial):
        lr = trial.suggest_float("train.lr", 0.001, 0.2, log=True)
        width = trial.suggest_categorical("model.width", [16, 32, 64])
        depth = trial.suggest_int("model.depth", 1, 3)
        return train(trial, lr, width, depth)

    def done(study, trial):
        print(f"[{trial.number + 1}/{trials}] {trial.state.name}", file=sys.stderr, flush=True)

    if storage == "sqlite":
        storage_obj = f"sqlite:///{out / 'study.db'}"
    elif storage == "journal":
        from optuna.storages.journal import JournalFileBackend

        storage_obj = optuna.storages.JournalStorage(JournalFileBackend(str(out / "journal.log")))
    else:
        storage_obj = None
    study = optuna.create_study(
        study_name="bench-search", storage=storage_obj, direction="maximize",
        sampler=optuna.samplers.TPESampler(seed=0, multivariate=True),
        pruner=optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=eval_every),
    )
    study.optimize(objective, n_trials=trials, callbacks=[done])
    res = [{"n": t.number, "state": t.state.name, "value": t.value, "train_s": train_s.get(t.number, 0.0),
            "params": t.params} for t in study.trials]
    print(json.dumps(res))


# ----------------------------------------------------------------- the driver


def run_timed(cmd: list[str], env=None) -> tuple[float, list[float], str]:
    """(wall seconds, times at which each trial finished, stdout) of a subprocess."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    done = []
    err_lines = []
    for line in p.stderr:  # one line per finished trial, flushed as it happens
        if line.startswith("["):
            done.append(time.perf_counter() - t0)
        else:
            err_lines.append(line)
    out = p.stdout.read()
    rc = p.wait()
    wall = time.perf_counter() - t0
    if rc != 0:
        sys.exit(f"{' '.join(cmd)} exited {rc}:\n{''.join(err_lines)[-3000:]}")
    return wall, done, out


def nas_records(run_dir: Path) -> list[dict]:
    import csv

    with open(run_dir / "trials.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    state = {"complete": "COMPLETE", "pruned": "PRUNED", "diverged": "PRUNED", "failed": "FAIL"}
    return [{"n": int(r["optuna_trial"]), "state": state[r["status"]],
             "value": float(r["objective"]) if r["objective"] and r["status"] == "complete" else None,
             "train_s": float(r["wall_s"]),
             "params": {"train.lr": float(r["train.lr"]), "model.width": int(r["model.width"]),
                        "model.depth": int(r["model.depth"])}} for r in rows]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=40)
    ap.add_argument("--steps", type=int, default=40, help="training steps per trial")
    ap.add_argument("--eval-every", type=int, default=10, help="steps between reports to the pruner")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--variants", default="nas,nas-journal,hand-sqlite,hand-journal,hand-memory",
                    help="comma-separated: nas (default storage), nas-journal, nas-sqlite, hand-sqlite, hand-journal, hand-memory")
    ap.add_argument("--before-tree", metavar="DIR",
                    help="variant nas-before: nas-stab from the nas_stab package in DIR (e.g. `git archive OLD nas_stab | tar -x -C DIR`)")
    ap.add_argument("--profile", help="run `nas-stab run` once under cProfile, write the stats here, and stop")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    if a.child:  # the hand-written script, in its own process
        hand_written(Path(a.out), a.trials, a.steps, a.eval_every, a.child)
        return 0

    tmp = Path(tempfile.mkdtemp(prefix="nas-bench-search-"))
    try:
        return _bench(a, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _bench(a, tmp: Path) -> int:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}

    def spec_file(storage_line: str) -> Path:
        p = tmp / f"spec-{abs(hash(storage_line))}.yaml"
        p.write_text(SPEC.format(trials=a.trials, steps=a.steps, eval_every=a.eval_every, storage=storage_line))
        return p

    def nas(storage: str, tree: str | None = None):
        def run(out: Path):
            line = {"default": "", "journal": f"  storage: journal://{out}/journal.log\n",
                    "sqlite": f"  storage: sqlite:///{out}/study-explicit.db\n"}[storage]
            e = {**env, "PYTHONPATH": tree} if tree else env
            wall, done, _ = run_timed([str(VENV_BIN / "nas-stab"), "run", str(spec_file(line)), "--out", str(out)], e)
            return wall, done, nas_records(out / "bench-search")
        return run

    def hand(storage: str):
        def run(out: Path):
            out.mkdir(parents=True, exist_ok=True)
            wall, done, stdout = run_timed([sys.executable, str(HERE), "--child", storage, "--out", str(out),
                                            "--trials", str(a.trials), "--steps", str(a.steps),
                                            "--eval-every", str(a.eval_every)], env)
            return wall, done, json.loads(stdout.strip().splitlines()[-1])
        return run

    variants = {"nas": ("nas-stab run (default storage)", nas("default")),
                "nas-journal": ("nas-stab run, journal storage", nas("journal")),
                "nas-sqlite": ("nas-stab run, sqlite storage", nas("sqlite")),
                "nas-before": (f"nas-stab run from {a.before_tree}", nas("default", a.before_tree)),
                "hand-sqlite": ("hand-written Optuna, sqlite", hand("sqlite")),
                "hand-journal": ("hand-written Optuna, journal", hand("journal")),
                "hand-memory": ("hand-written Optuna, in-memory", hand("memory"))}
    chosen = [v.strip() for v in a.variants.split(",") if v.strip()]

    if a.profile:
        out = tmp / "profile"
        cmd = [sys.executable, "-m", "cProfile", "-o", a.profile, str(VENV_BIN / "nas-stab"), "run",
               str(spec_file("")), "--out", str(out)]
        wall, done, _ = run_timed(cmd, env)
        print(f"profiled nas-stab run: {wall:.2f} s, {len(done)} trials; stats in {a.profile}")
        return 0

    print(f"search: TPE (seed 0, multivariate), median pruner, {a.trials} trials of {a.steps} steps "
          f"(mlp on digits, batch 64, report every {a.eval_every} steps), 1 torch thread; "
          f"{a.reps} interleaved reps; load average {os.getloadavg()[0]:.2f} at start")
    res: dict[str, list] = {v: [] for v in chosen}
    for rep in range(a.reps):
        order = chosen[rep % len(chosen):] + chosen[:rep % len(chosen)]  # rotate who goes first
        for v in order:
            res[v].append(variants[v][1](tmp / f"{v}-{rep}"))

    def summary(v):
        walls = [r[0] for r in res[v]]
        steady = []
        train = []
        for _wall, done, recs in res[v]:
            n = len(done)
            steady.append((done[-1] - done[0]) / (n - 1) if n > 1 else float("nan"))
            # the trials finished after the first one: their mean time in the training function
            by_n = sorted(recs, key=lambda r: r["n"])
            train.append(statistics.mean(r["train_s"] for r in by_n[1:]) if len(by_n) > 1 else float("nan"))
        return statistics.median(walls), statistics.median(steady), statistics.median(train), walls

    def start_end(v):  # start-up (to the first trial's start) and end (after the last trial), medians
        starts, ends = [], []
        for wall, done, _ in res[v]:
            steady = (done[-1] - done[0]) / (len(done) - 1)
            starts.append(done[0] - steady)
            ends.append(wall - done[-1])
        return statistics.median(starts), statistics.median(ends)

    sums = {v: summary(v) for v in chosen}
    refs = [v for v in chosen if v.startswith("hand")]
    print()
    print(f"{'variant':<34} {'total wall':>10} {'start':>7} {'end':>6} {'per trial':>10} {'training':>9} {'rest':>8}   all totals")
    for v in chosen:
        wall, steady, train, walls = sums[v]
        st, en = start_end(v)
        print(f"{variants[v][0]:<34} {wall:9.2f}s {st:6.2f}s {en:5.2f}s {steady * 1000:8.1f}ms {train * 1000:7.1f}ms "
              f"{(steady - train) * 1000:6.1f}ms   {', '.join(f'{w:.2f}' for w in walls)}")
    print("  start: process start to the first trial's start (first finish less one trial); end: last finish to exit"
          " (nas-stab: leaderboard.md); per trial: steady time per trial (between the first and the last finished trial);"
          " training: the training function's own time (its reports to Optuna included); rest: the runner's or"
          " script's own per-trial work (ask, suggest, tell, records)")
    print()
    for v in chosen:
        if v.startswith("nas"):
            for r in refs:
                (w1, s1, t1, _), (w0, s0, t0, _) = sums[v], sums[r]
                print(f"{variants[v][0]} / {variants[r][0]}: total x{w1 / w0:.3f}, per trial x{s1 / s0:.3f} "
                      f"({(s1 - s0) * 1000:+.1f} ms/trial, of which training {(t1 - t0) * 1000:+.1f} ms, "
                      f"search bookkeeping {((s1 - t1) - (s0 - t0)) * 1000:+.1f} ms)")

    # same search? compare the trial states and parameters of the first rep
    base = next((v for v in chosen if v.startswith("nas")), chosen[0])
    b = {r["n"]: r for r in res[base][0][2]}
    for v in chosen:
        if v == base:
            continue
        o = {r["n"]: r for r in res[v][0][2]}
        same_state = sum(1 for n in b if n in o and b[n]["state"] == o[n]["state"])
        same_params = sum(1 for n in b if n in o and all(abs(float(b[n]["params"][k]) / float(o[n]["params"].get(k, 1e300)) - 1) < 1e-5
                                                           for k in b[n]["params"]))
        print(f"same search as {variants[base][0]}: {variants[v][0]}: {same_params}/{len(b)} trials with the same parameters, "
              f"{same_state}/{len(b)} with the same state")
    states = {}
    for r in res[base][0][2]:
        states[r["state"]] = states.get(r["state"], 0) + 1
    print(f"trial states ({variants[base][0]}): {states}")
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (uptime: {Path('/proc/loadavg').read_text().split()[:3]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
