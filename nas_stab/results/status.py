"""`nas-stab status RUN_DIR`: trials by status, best so far, time used and left."""
from __future__ import annotations

import fcntl
import math
import re
from pathlib import Path

from nas_stab import metrics
from nas_stab.config.mode import search_mode
from nas_stab.config.schema import Spec
from nas_stab.errors import RunError
from nas_stab.results.bracket_ends import run_decisions
from nas_stab.search.plan import base_lookup
from nas_stab.store.decisions import DECISIONS, Decisions
from nas_stab.store.reader import Run, iter_rows, read_run

# adaptive seeds with no run left: never "decided" (a row can stay inconclusive at seeds.max)
ADAPTIVE_DONE = ("nothing left to train: each row's verdict is decided, or more seeds up to seeds.max would not decide it "
                 "(an undecided row stays inconclusive: nas-stab leaderboard says which and why)")


def status_text(run_dir: Path) -> str:
    run = read_run(run_dir)
    spec = run.spec
    mode = search_mode(spec)
    counts, used, best, keys = _tally(run, keep_keys=mode.adaptive)
    done = sum(counts.values())
    trials = spec.search.trials  # required (validated) unless the sampler is grid or bracket
    if mode.brackets or mode.adaptive:  # the total is decided as results come in
        planned = None
    elif mode.transfer:  # outer trials x sizes x lrs x seeds
        assert trials is not None, "a transfer search has search.trials"
        lb = spec.leaderboard
        inner = len(spec.space.values_of(spec.space.get(lb.transfer))) * len(spec.space.values_of(spec.space.get(lb.lr)))
        planned = trials * inner * len(spec.seeds)
    elif mode.kind == "grid":
        planned = (len(spec.space.grid(base_lookup(spec))) if spec.space.dims else 1) * len(spec.seeds)
    else:
        assert trials is not None, "a sampled search has search.trials"
        planned = trials * len(spec.seeds)
    decided, why = _decisions(run, done) if (mode.inner_bracket or mode.adaptive or planned is None) else (None, "")
    if mode.inner_bracket:
        scored = len(decided.outers) if decided is not None else None
        assert trials is not None, "a transfer search has search.trials"
        open_sweeps = trials - scored if scored is not None else 0  # outer trials not scored yet
        lines = [f"{spec.name}: {done} runs finished; transfer search with bracket inside: "
                 f"{'?' if scored is None else scored} of {spec.search.trials} outer trials scored"]
    elif mode.adaptive:
        todo = decided.stage_todo(keys) if decided is not None else None
        open_sweeps = todo or 0
        lines = [f"{spec.name}: {done} runs finished; adaptive seeds: " + _adaptive_text(todo, decided)]
    elif planned is None:
        left_open = decided.open_sweeps() if decided is not None else None
        open_sweeps = left_open or 0
        lines = [f"{spec.name}: {done} runs finished; bracket: {'?' if left_open is None else left_open} "
                 "learning-rate sweep(s) not ended yet"]
    else:
        lines = [f"{spec.name}: {done}/{planned} runs finished"]
    lines.append("  " + "  ".join(f"{k} {v}" for k, v in counts.items()))
    if best:
        v, r = best
        params = ", ".join(f"{d.key}={r.get(d.key)}" for d in spec.space)
        lines.append(f"  best single run {spec.search.objective} {v:.4g}: trial {r['trial']} seed {r['seed']} ({params}); "
                     "the leaderboard ranks seed means")
    left = (used / done) * max(0, planned - done) if done and planned is not None else float("nan")
    alive = driver_alive(run_dir)
    if alive:
        lines.append(f"  running now (a nas-stab driver holds the run directory); time used {used:.1f} s"
                     + (f", ~{left:.0f} s left" if done and planned is not None and planned > done else ""))
    else:
        if mode.inner_bracket:
            rest = (f"; {open_sweeps} outer trial(s) not scored: rerun `nas-stab run` with the same file to finish"
                    if open_sweeps else "")
        elif mode.adaptive:
            rest = (f"; {open_sweeps} run(s) of the current batch not trained: rerun `nas-stab run` with the same file "
                    "to go on" if open_sweeps else "")
        elif planned is None:
            rest = (f"; {open_sweeps} sweep(s) not ended: rerun `nas-stab run` with the same file to finish"
                    if open_sweeps else "")
        else:
            rest = f"; {planned - done} runs not trained yet: rerun `nas-stab run` with the same file to finish" if planned > done else ""
        lines.append(f"  not running (no driver holds the run directory); time used {used:.1f} s{rest}")
    if why:
        lines.append(f"  {why}")
    lines += [f"  watch: {c}" for c in watch_commands(spec, run_dir)]
    return "\n".join(lines)


def _tally(run: Run, *, keep_keys: bool) -> tuple[dict[str, int], float, tuple[float, dict] | None, list[str]]:
    """One pass over trials.csv as it is read, keeping only what the page shows (a million records: no copy of them):
    runs by status, wall time used, the best single complete run (value, record), and with `keep_keys` every key."""
    spec = run.spec
    counts = {s: 0 for s in metrics.STATUSES}
    used = 0.0
    best: tuple[float, dict] | None = None
    keys: list[str] = []  # adaptive seeds: which runs of the current batch are recorded
    maximize = metrics.direction(spec.search.objective) == "maximize"
    for r in iter_rows(run.path, columns=("wall_s", "objective", "trial", "seed", *spec.space.keys)):
        counts[r["status"]] += 1
        if keep_keys:
            keys.append(r["key"])
        try:
            used += float(r.get("wall_s") or 0)
            v = float(r.get("objective", ""))
        except (TypeError, ValueError):
            continue
        if r["status"] == "complete" and math.isfinite(v) and (best is None or (v > best[0] if maximize else v < best[0])):
            best = (v, r)
    return counts, used, best, keys


def _adaptive_text(todo: int | None, decided: Decisions | None) -> str:
    """Where adaptive seeds stand; once over, why each row still undecided got no more seeds (one line each)."""
    if todo is None:
        return "? runs of the current batch to train"
    if todo:
        return f"{todo} run(s) of the current batch to train"
    notes = decided.seeds_notes() if decided is not None else {}
    return ADAPTIVE_DONE + "".join(f"\n  {label}: {note}" for label, note in notes.items())


def watch_commands(spec: Spec, run_dir: Path) -> list[str]:
    """How to watch a search live: TensorBoard on the run's logs (when `logging.tensorboard`) and
    optuna-dashboard on its study (the run directory's study.db, or `search.storage` with any password
    masked)."""
    d = Path(run_dir).resolve()
    out = []
    if getattr(getattr(spec, "logging", None), "tensorboard", False):
        out.append(f"tensorboard --logdir {d / 'tensorboard'}")
    url = spec.search.storage or f"sqlite:///{d / 'study.db'}"
    out.append("optuna-dashboard " + re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url))
    return out


def _decisions(run: Run, done: int) -> tuple[Decisions | None, str]:
    """The search's recorded decisions (`store/decisions.py`), or None and why not (`done`: runs recorded)."""
    if not done and not (run.path / DECISIONS).is_file():
        return None, ""  # nothing run yet
    try:
        return run_decisions(run), ""
    except RunError as e:
        return None, str(e)


def driver_alive(run_dir: Path) -> bool:
    """Whether a `nas-stab run` driver holds this run directory (its exclusive lock on log.txt)."""
    p = Path(run_dir) / "log.txt"
    if not p.exists():
        return False
    with open(p, "a", encoding="utf-8") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        return False
