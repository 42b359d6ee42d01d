"""`search.sampler: bracket`: each learning-rate optimum found, bracketed and resolved, nothing more.

A *sweep* is one configuration of the searched keys other than the learning rate
(one row x size of an lr-transfer leaderboard). Each sweep starts at the
learning rates of `space:` (the coarse start) and proceeds in rounds; a round
is a set of learning rates, each trained with every seed, and the next round is
decided only when every run of the current one is recorded:

1. **extend**: while the optimum lies at an edge of the learning rates tried,
   add one point `search.bracket.step_octaves` beyond that edge (both edges when
   only one lr was tried). While no lr trains, downwards (from diverged and from
   stuck points alike: a too-large lr can leave a model stuck at chance) and,
   unless the highest lr diverged, upwards too. A side stops at `lr_limits`.
2. **resolve**: then, on each side of the optimum whose nearest tried lr is
   farther than `resolution_octaves`, add the point at that distance (within
   the limits), until both neighbours of the optimum are that close; the
   leaderboard's quadratic fit in log2(lr) then has both of its neighbours.
3. **plateau**: then, while the farthest lr tried on a side is within the noise
   of the optimum (its seed-mean below the best by at most twice the standard
   error of the difference), add one step beyond it: a plateau is followed to
   its ends instead of stopping at its first local maximum.

"Optimum" is exactly the leaderboard's (`nas_stab.analysis.table.analyze` on
the sweep's runs: the seed-mean per learning rate, failed and diverged runs
counted with the no-learning value, the best lr, its censoring and whether it
trains), so the search stops where the table would call the optimum bracketed.
A failed or diverged seed is not trained again: it counts in its lr's mean as
it counts in the table (a failed seed pulls that lr's mean down to the
no-learning value; it can move the optimum but never stalls the sweep).

Each sweep ends with one reason, for the table (`BracketSource.report`):
``bracketed`` (trained neighbours on both sides), ``divergence wall`` (a
neighbour of the optimum diverged with every seed: the side cannot be extended
usefully), ``limit`` (the optimum is still at an edge and the next step would
leave `lr_limits`, or the sweep reached MAX_POINTS learning rates), ``no lr
trains`` (no learning rate beats the no-learning value and no extension is left).

The state is a pure function of the recorded runs (trials.csv rows, matched by
their `key`): a resumed search replays the rounds from the records alone and
trains nothing twice. Every job is one Optuna trial (enqueue-then-ask, as a grid
point; `suggest` gives the lr the distribution of `lr_limits`).

Example (what a driver does; `records` are trials.csv row dicts)::

    src = BracketSource(spec)
    while (jobs := src.pending(records, running_keys)) is not None:
        start(jobs)             # [] means: wait for a run in flight, then ask again
    src.report(records)         # one SweepEnd per sweep
"""
from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd

from nas_stab.analysis.settings import dataset_classes
from nas_stab.analysis.table import analyze
from nas_stab.config import config_key
from nas_stab.config.schema import Spec
from nas_stab.search.plan import Job, base_lookup, try_resolve
from nas_stab.search.sources.registry import JOB_SOURCES
from nas_stab.store.decisions import sweep_event

if TYPE_CHECKING:
    import optuna

MAX_POINTS = 1000  # learning rates per sweep at most; Job.trial = sweep index * MAX_POINTS + point index
# octaves: two learning rates this close are the same point. Not tighter: `log_grid` rounds its values to
# 6 significant digits (up to ~1e-6 octaves from the exact lattice point the resolution step computes), and
# a tighter tolerance trained such a grid point a second time. search.bracket's step and resolution are
# at least config.rules_spec.BRACKET_MIN_OCTAVES, far above it.
_TOL = 1e-3


@dataclass(frozen=True)
class SweepEnd:
    """How one sweep stands (or ended): for the table."""

    params: dict  # the non-lr keys of the sweep
    end: str  # "running" | "bracketed" | "divergence wall" | "limit" | "no lr trains"
    lrs: tuple[float, ...]  # learning rates tried (or being tried), ascending
    best_lr: float | None  # the leaderboard's best lr of the sweep (None while running or when no lr trains)
    rounds: int


@dataclass(frozen=True)
class _Decision:
    new: tuple[float, ...]  # the next round's learning rates; () = the sweep is over
    end: str
    best: float | None


def _lr(x: float) -> float:
    """2**x to 12 significant digits: the same float on every replay, and short in tables."""
    return float(f"{2.0 ** x:.12g}")


def _sig(v: Any) -> Any:
    return tuple(_sig(x) for x in v) if isinstance(v, (list, tuple)) else v


def points_range(start: Sequence[float], step: float, res: float, limits: Sequence[float]) -> tuple[int, int, int]:
    """(fewest, expected, most) learning rates one sweep trains, before any run, from the rules above.

    fewest: its start lrs (the optimum bracketed and resolved by them). expected: the start lrs; the
    extension steps averaged over an optimum equally likely at every lattice point within `lr_limits`
    (the extensions walk to it, then one step beyond to bracket it unless it lies at a limit); the two
    resolution points around the optimum (when `resolution_octaves` is finer than the lattice's spacing);
    and one plateau step (a neighbour within the noise of the optimum, as on small data with few seeds;
    when there is room). Measured on the quickstart's bracket example: 6.7 expected, 7.2 trained on
    average per sweep. most: every point `step_octaves` apart from the start out to both limits (extension
    and plateau steps stay on that lattice) and, between the optimum and each neighbour, the resolution
    points that can fill the widest gap (`ceil(gap / res) - 1` per side); capped by MAX_POINTS. A bound
    of the rules, not of chance: a sweep can end anywhere between fewest and most."""
    xs = sorted(math.log2(float(v)) for v in start)
    lo, hi = (math.log2(float(v)) for v in limits)
    below = max(0, math.floor((xs[0] - lo) / step + _TOL))
    above = max(0, math.floor((hi - xs[-1]) / step + _TOL))
    gap = max([step] + [b - a for a, b in zip(xs, xs[1:])])
    per_side = max(0, math.ceil(gap / res - _TOL) - 1)
    fewest = len(xs)
    most = min(MAX_POINTS, fewest + below + above + 2 * per_side)
    ext = [k + (k < below) for k in range(1, below + 1)] + [k + (k < above) for k in range(1, above + 1)]
    if len(xs) == 1:
        ext.append((below > 0) + (above > 0))
    else:
        ext += [int(below > 0)] + [0] * (len(xs) - 2) + [int(above > 0)]
    extend = sum(ext) / len(ext)
    expected = min(most, round(fewest + extend + 2 * min(1, per_side) + min(1, below + above)))
    return fewest, expected, most


@JOB_SOURCES.register("bracket")
class BracketSource:
    """The job source of `search.sampler: bracket` (see the module docstring).

    `limit` (`nas-stab run --trials N`) is the number of runs in all, as for a grid (its first N
    runs) and a sampler (N trials): once N runs are recorded or running it says nothing more will
    come, so a rerun with the same N trains nothing and one with a larger N carries on.

    Inside a transfer search (`search.transfer.inner: bracket`, `search/sources/transfer.py`) one source
    brackets the sweeps of one outer trial: `sweeps` [(the sweep's non-lr values, its start lrs)]
    replaces the grid of `space:`, job `trial` numbers start at `trial_base` with `sweep_points`
    learning rates per sweep at most, and every job carries `outer`.
    """

    def __init__(self, spec: Spec, limit: int | None = None, *, sweeps: Sequence[tuple[dict, Sequence[float]]] | None = None,
                 trial_base: int = 0, sweep_points: int = MAX_POINTS, outer: int | None = None):
        b = spec.search.bracket
        self.spec = spec
        self.lr_key = spec.leaderboard.lr
        self.step = float(b.step_octaves)
        self.res = float(b.resolution_octaves)
        self.lo, self.hi = (math.log2(float(v)) for v in b.lr_limits)
        self.seeds = tuple(spec.seeds)
        self.more = tuple(getattr(spec, "seeds_more", ()))  # adaptive seeds: their records count where recorded
        self.metric = spec.leaderboard.metric or spec.search.objective
        self.classes = dataset_classes(spec)
        if sweeps is None:
            by_sig: dict[tuple, tuple[dict, list[float]]] = {}
            for point in spec.space.grid(base_lookup(spec)):
                rest = {k: v for k, v in point.items() if k != self.lr_key}
                sig = tuple(sorted((k, _sig(v)) for k, v in rest.items()))
                by_sig.setdefault(sig, (rest, []))[1].append(float(point[self.lr_key]))
            sweeps = list(by_sig.values())
        self.sweeps = [(dict(rest), tuple(sorted({float(v) for v in lrs}))) for rest, lrs in sweeps]
        self.trial_base, self.max_points, self.outer = trial_base, sweep_points, outer
        self.limit = limit
        self._jobs: dict[tuple[int, float], list[Job]] = {}
        self._decisions: dict[tuple, _Decision] = {}

    # ------------------------------------------------------------ the interface

    def pending(self, records: Sequence[dict], running: Collection[str]) -> list[Job] | None:
        recs = {str(r.get("key")): r for r in records}
        out: list[Job] = []
        busy = False
        for i in range(len(self.sweeps)):
            todo, _ = self.replay(i, recs)
            busy |= bool(todo)
            out += [j for j in todo if j.key not in running]
        if self.limit is not None:
            room = self.limit - len(set(recs) | set(running))
            if room <= 0:
                return None
            out = out[:room]
        return out if busy else None

    def report(self, records: Sequence[dict]) -> list[SweepEnd]:
        """One SweepEnd per sweep, in the order of `space:`."""
        recs = {str(r.get("key")): r for r in records}
        return [self.replay(i, recs)[1] for i in range(len(self.sweeps))]

    @property
    def decision_facts(self) -> dict[str, Any]:
        """The start event's facts (`store/decisions.py`): its decisions are a function of every record."""
        return {"source": "bracket", "sweeps": len(self.sweeps), "complete": True}

    def decisions(self, records: Sequence[dict]) -> list[dict[str, Any]]:
        """Each sweep's state as a ``sweep`` event (`store/decisions.py`); an ended sweep with the keys of its
        recorded runs (every seed's, further seeds of adaptive seeds included where recorded)."""
        recs = {str(r.get("key")): r for r in records}
        out = []
        for i, end in enumerate(self.report(records)):
            runs = None
            if end.end != "running":
                runs = [j.key for k, lr in enumerate(end.lrs) for j in self.all_jobs(i, lr, k) if j.key in recs]
            out.append(sweep_event(self.outer, i, end.params, end.end, end.lrs, end.best_lr, end.rounds, runs))
        return out

    def expected(self, records: Sequence[dict]) -> tuple[int, str, str]:
        """(runs expected in all, "~", why), for the progress display: an ended sweep's runs, and for a
        running one its lrs so far or `points_range`'s expected count, whichever is more."""
        return self.expected_runs(records), "~", "estimated: the sweeps add lrs as they go"

    def expected_runs(self, records: Sequence[dict]) -> int:
        n = 0
        for (_, start), end in zip(self.sweeps, self.report(records)):
            pts = len(end.lrs)
            if end.end == "running":
                pts = max(pts, points_range(start, self.step, self.res, (2.0 ** self.lo, 2.0 ** self.hi))[1])
            n += pts * len(self.seeds)
        return n if self.limit is None else min(n, self.limit)

    def suggest(self, trial: optuna.Trial, base: Callable[[str], Any]) -> dict:
        """Record a bracket job's enqueued values in its Optuna trial (the `grid=True` suggest of the
        space, the learning rate with a log-scaled distribution over `lr_limits`)."""
        params: dict[str, Any] = {}
        for d in self.spec.space:
            if not d.active(lambda k: params[k] if k in params else base(k)):
                continue
            if d.key == self.lr_key:
                params[d.key] = trial.suggest_float(d.key, 2.0 ** self.lo, 2.0 ** self.hi, log=True)
            else:
                params[d.key] = d.suggest(trial, grid=True)
        return params

    # ------------------------------------------------------------ rounds

    def replay(self, i: int, recs: dict) -> tuple[list[Job], SweepEnd]:
        """The jobs of sweep i's current round not yet recorded, and how the sweep stands."""
        rest, start = self.sweeps[i]
        tried: list[float] = []
        round_lrs = list(start)
        rounds = 0
        while True:  # ends: every round adds a learning rate not tried (`_decide_rows`), at most max_points
            rounds += 1
            tried += round_lrs
            missing = [j for lr in round_lrs for j in self.jobs(i, lr, tried.index(lr)) if j.key not in recs]
            if missing:
                return missing, SweepEnd(rest, "running", tuple(sorted(tried)), None, rounds)
            d = self._decide(i, tried, recs)
            if not d.new:
                return [], SweepEnd(rest, d.end, tuple(sorted(tried)), d.best, rounds)
            round_lrs = list(d.new)

    def sweep_jobs(self, i: int, end: SweepEnd) -> list[Job]:
        """Every run of sweep i up to where it stands (`end`, from `report` or the replay): each lr tried, each seed."""
        return [j for k, lr in enumerate(end.lrs) for j in self.jobs(i, lr, k)]

    def jobs(self, i: int, lr: float, order: int) -> list[Job]:
        """The runs (one per seed) of learning rate `lr` in sweep i, its `order`-th point (start first,
        then round by round, ascending in each); their keys are their configurations'."""
        return self.all_jobs(i, lr, order)[:len(self.seeds)]

    def all_jobs(self, i: int, lr: float, order: int) -> list[Job]:
        """`jobs` and those of the further seeds of adaptive seeds (`seeds: {min, max}`), which the sweep
        trains only where the table asks for them (`search/sources/adaptive.py`) and counts where they are recorded."""
        got = self._jobs.get((i, lr))
        if got is None:
            rest, _ = self.sweeps[i]
            params = {**rest, self.lr_key: lr}
            r = try_resolve(self.spec, params)
            got = []
            where = f"o{self.outer}-" if self.outer is not None else ""
            for seed in self.seeds + self.more:
                key = config_key(r, seed) if r is not None else f"invalid-{where}{i}-{lr!r}-{seed}"
                trial = self.trial_base + i * self.max_points + order
                got.append(Job(trial, seed, params, key, f"t{trial:05d}-s{seed}", r, outer=self.outer))
            self._jobs[(i, lr)] = got
        return got

    # ------------------------------------------------------------ the decision

    def _decide(self, i: int, tried: list[float], recs: dict) -> _Decision:
        n = len(self.seeds)  # every first seed is recorded here; a further one counts where it is
        rows = [(lr, j.seed, recs[j.key]) for k, lr in enumerate(tried) for m, j in enumerate(self.all_jobs(i, lr, k))
                if m < n or j.key in recs]
        memo = (i, tuple((lr, s, r.get("status"), r.get(self.metric)) for lr, s, r in rows))
        d = self._decisions.get(memo)
        if d is None:
            d = self._decisions[memo] = self._decide_rows(rows, len(tried))
        return d

    def _decide_rows(self, rows: list, n_tried: int) -> _Decision:
        cells, best, trains, censored = self.optimum(rows)
        xs = sorted(cells)  # log2 lr
        hi_room = lambda x: x + self.step <= self.hi + _TOL  # noqa: E731
        lo_room = lambda x: x - self.step >= self.lo - _TOL  # noqa: E731
        room = n_tried < self.max_points
        tried = [math.log2(float(lr)) for lr, _, _ in rows]
        # a point within _TOL of one tried is that point (a step below the tolerance, or one that rounds
        # onto a tried lr): never proposed again, so every round adds a new lr and the replay ends
        fresh = lambda v: all(abs(math.log2(v) - x) > _TOL for x in tried)  # noqa: E731
        if not trains:
            # nothing trains yet: smaller lrs (a diverged or stuck point can be too large: a model can sit at chance
            # above its divergence threshold, as below its useful range) and, unless the highest diverged, larger
            # ones; "no lr trains" only once both directions have reached their limits
            new = []
            if lo_room(xs[0]) and fresh(_lr(xs[0] - self.step)):
                new.append(_lr(xs[0] - self.step))
            if not cells[xs[-1]]["all_diverged"] and hi_room(xs[-1]) and fresh(_lr(xs[-1] + self.step)):
                new.append(_lr(xs[-1] + self.step))
            if new and room and n_tried + len(new) <= self.max_points:
                return _Decision(tuple(sorted(new)), "", None)
            return _Decision((), "no lr trains", None)
        new = []
        if censored in (">=", "=") and hi_room(best):
            new.append(_lr(best + self.step))
        if censored in ("<=", "=") and lo_room(best):
            new.append(_lr(best - self.step))
        new = [v for v in new if fresh(v)]
        if not new:  # bracketed, or stopped at a limit: the resolution around the optimum
            below = [x for x in xs if x < best - _TOL]
            above = [x for x in xs if x > best + _TOL]
            if (not below or best - below[-1] > self.res + _TOL) and best - self.res >= self.lo - _TOL:
                new.append(_lr(best - self.res))
            if (not above or above[0] - best > self.res + _TOL) and best + self.res <= self.hi + _TOL:
                new.append(_lr(best + self.res))
            new = [v for v in new if fresh(v)]
        if not new:  # a plateau: keep extending on a side whose farthest point is still within noise of the best
            for side, room_ok, step in ((xs[0], lo_room, -self.step), (xs[-1], hi_room, self.step)):
                if abs(side - best) > _TOL and self._level(cells, side, best) and room_ok(side) and fresh(_lr(side + step)):
                    new.append(_lr(side + step))
        if new and room and n_tried + len(new) <= self.max_points:
            return _Decision(tuple(sorted(new)), "", None)
        below = [x for x in xs if x < best - _TOL]
        above = [x for x in xs if x > best + _TOL]
        if censored or not (below and above):
            end = "limit"
        elif cells[below[-1]]["all_diverged"] or cells[above[0]]["all_diverged"]:
            end = "divergence wall"
        else:
            end = "bracketed"
        return _Decision((), end, _lr(best))

    @staticmethod
    def _level(cells: dict, x: float, best: float) -> bool:
        """Whether the cell at x is within the noise of the best cell: its seed-mean below the best's by at most
        twice the standard error of their difference (with one seed on either side, never: no noise is known)."""
        a, b = cells[x], cells[best]
        if a["all_diverged"] or a["n"] < 2 or b["n"] < 2:
            return False
        se = math.sqrt(a["std"] ** 2 / a["n"] + b["std"] ** 2 / b["n"])
        return bool(math.isfinite(se) and abs(b["mean"] - a["mean"]) <= 2 * se)

    def optimum(self, rows: list) -> tuple[dict, float, bool, str]:
        """The leaderboard's view of one sweep's runs [(lr, seed, record)]: per log2 lr its cell
        ({mean, all_diverged}), the best log2 lr, whether it trains, and its censoring
        ("<=", ">=", "=" or "")."""
        df = pd.DataFrame({
            "lr": [lr for lr, _, _ in rows],
            "seed": [s for _, s, _ in rows],
            "status": [str(r.get("status") or "failed") for _, _, r in rows],
            self.metric: [r.get(self.metric) for _, _, r in rows],
        })
        a = analyze(df, lr="lr", metric=self.metric, classes=self.classes, n_boot=0)
        size = a.sizes.iloc[0]
        cells = {math.log2(float(c["lr"])): {"mean": float(c["mean"]), "all_diverged": bool(c["n_diverged"] == c["n_runs"]),
                                             "std": float(c["std"]) if c["std"] == c["std"] else 0.0, "n": int(c["n"])}
                 for c in a.cells.to_dict("records")}
        best = math.log2(float(size["grid_lr"]))
        trains = bool(size["trains"])
        return cells, best, trains, str(size["censored"]) if trains else ""
