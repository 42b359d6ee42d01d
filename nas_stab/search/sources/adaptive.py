"""`seeds: {min: n, max: m}`: the search's runs with n seeds, then more seeds only where a verdict is still open.

A job source (`search/sources/`) around the search's own (`grid` or `bracket`): it first yields that
source's runs with the first n seeds. When they are all recorded, it computes the table (the leaderboard's
`analyze`, with the experiment's `leaderboard:` settings and 1000 bootstrap replicates, as `nas-stab
leaderboard` computes it) and asks `analysis.more_seeds.plan` where more seeds go: the cells the verdict
of each still-open row rests on, for the rows a power estimate says can still be decided within m seeds.
It yields that batch (the next seeds in order, at those cells), waits for the whole batch, and looks again;
it stops when no row asks for more. Between batches a bracket search goes on with every seed recorded (an
optimum that moved to the edge of the lrs tried is extended and resolved again, its new lrs with n seeds).

The state is a pure function of the recorded runs, replayed stage by stage as the bracket replays its
rounds: stage 0 is the inner source's runs; each later stage is the plan computed on exactly the runs of
the stages before it. So a search killed in the middle of a batch finishes that batch on resume (not a
batch planned on the partial one), trains nothing twice, and ends where an uninterrupted search ends.
Every run is one Optuna trial, as for the inner source (same trial number as its configuration's first
seeds, `run_id` t<trial>-s<seed>).
"""
from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any

import pandas as pd

from nas_stab.analysis import more_seeds
from nas_stab.analysis.settings import settings as analysis_settings
from nas_stab.analysis.table import Analysis, analyze
from nas_stab.config import config_key
from nas_stab.config.mode import search_mode
from nas_stab.config.schema import Spec
from nas_stab.csvsafe import csv_cell
from nas_stab.search import plan
from nas_stab.search.plan import Job
from nas_stab.search.sources.bracket import BracketSource

_MAX_STAGES = 10_000


class AdaptiveSeeds:
    """The job source of adaptive seeds (see the module docstring). `limit`: `--trials N`, runs in all."""

    total = None  # not known in advance

    def __init__(self, spec: Spec, limit: int | None = None, *, log: Callable[[str], None] | None = None):
        self.spec, self.limit, self.log = spec, limit, log
        self.more = tuple(spec.seeds_more)
        self.n_max = len(spec.seeds) + len(self.more)
        self._index: dict[str, Job] = {}  # every job this source knows, by key
        self.mode = search_mode(spec)
        if self.mode.kind == "bracket":
            self.inner = BracketSource(spec)
            self.suggest = self.inner.suggest
            self._stage0 = self._bracket_stage
        else:
            self._grid = plan.grid_jobs(spec)
            self._index.update((j.key, j) for j in self._grid)
            self._stage0 = self._grid_stage
        self._plans: dict[tuple, tuple[list[Job], dict]] = {}  # one plan (and one log of it) per stage's runs, its notes
        self.notes: dict = {}  # the latest plan's word on each open row (label -> text)

    # ------------------------------------------------------------ the interface

    def pending(self, records: Sequence[dict], running: Collection[str]) -> list[Job] | None:
        recs = {str(r.get("key")): r for r in records}
        todo = self.replay(recs)
        if todo is None:
            return None
        out = [j for j in todo if j.key not in running]
        if self.limit is not None:
            room = self.limit - len(set(recs) | set(running))
            if room <= 0:
                return None
            out = out[:room]
        return out

    def expected(self, records: Sequence[dict]) -> tuple[int, str, str]:
        """(runs at least, ">=", why), for the progress display: the first stage's (the grid, or the
        bracket's expected runs) with `seeds.min` seeds; further seeds depend on the verdicts."""
        n = self.inner.expected_runs(records) if self.mode.kind == "bracket" else len(self._grid)
        return (n if self.limit is None else min(n, self.limit)), ">=", "more seeds where a verdict needs them"

    # ------------------------------------------------------------ stages

    def replay(self, recs: dict) -> list[Job] | None:
        """The runs of the current stage not yet recorded ([] never: a stage with none is over), or None: done."""
        got = self.stage(recs)
        return None if got is None else [j for j in got[1] if j.key not in recs]

    def stage(self, recs: dict) -> tuple[int, list[Job]] | None:
        """The current stage (its number: 0 for the inner search's runs, counting each of its rounds, then one
        per batch of seeds) and every run of it, recorded or not; None: the search is over."""
        known: dict[str, dict] = {}
        for n in range(_MAX_STAGES):
            todo = self._stage0(known)
            if todo is None:
                todo = self._batch(known)
                if not todo:
                    return None
            if any(j.key not in recs for j in todo):
                return n, todo
            known.update((j.key, recs[j.key]) for j in todo)
        raise RuntimeError("adaptive seeds: the replay did not end")  # every stage adds runs, so it cannot happen

    @property
    def decision_facts(self) -> dict[str, Any]:
        """The start event's facts (`store/decisions.py`): its decisions are a function of every record."""
        sweeps = len(self.inner.sweeps) if self.mode.kind == "bracket" else None
        return {"source": "adaptive", "sweeps": sweeps, "complete": True}

    def decisions(self, records: Sequence[dict]) -> list[dict[str, Any]]:
        """The current stage as a ``stage`` event (``runs: []``: over) and, around a bracket search, each sweep's
        state (`store/decisions.py`)."""
        recs = {str(r.get("key")): r for r in records}
        got = self.stage(recs)
        out = self.inner.decisions(records) if self.mode.kind == "bracket" else []
        event: dict[str, Any] = {"event": "stage", "stage": got[0] if got else None,
                                 "runs": sorted(j.key for j in got[1]) if got else []}
        if got is None:  # over: why each row still undecided got no more seeds (the leaderboard and status show it)
            event["notes"] = dict(self.notes)
        out.append(event)
        return out

    def _grid_stage(self, known: dict) -> list[Job] | None:
        todo = [j for j in self._grid if j.key not in known]
        return todo or None

    def _bracket_stage(self, known: dict) -> list[Job] | None:
        got = self.inner.pending(list(known.values()), ())
        if got is not None:
            self._index.update((j.key, j) for j in got)
        return got or None

    def _batch(self, known: dict) -> list[Job]:
        """The next batch of seeds, planned on the runs `known` (memoized: one analysis per stage)."""
        memo = tuple(sorted((k, str(r.get("status")), str(r.get(self._metric))) for k, r in known.items()))
        got = self._plans.get(memo)
        if got is None:
            got = self._plans[memo] = (self._plan(known), dict(self.notes))
        self.notes = dict(got[1])  # the word of this stage's plan on each open row, memoized or not
        return got[0]

    @property
    def _metric(self) -> str:
        return self.spec.leaderboard.metric or self.spec.search.objective

    def _plan(self, known: dict) -> list[Job]:
        if not known:
            return []
        a = _analysis(self.spec, list(known.values()))
        p = more_seeds.plan(a, self.n_max)
        self.notes = p.notes
        seeds = tuple(self.spec.seeds) + self.more
        jobs: list[Job] = []
        keys = a.records.set_index(["_k", "_s", "_l"])["key"]
        for c in p.cells.to_dict("records"):
            firsts: dict[str, Job] = {}  # the cell's configurations (more than one where it averages over keys)
            for k in keys.loc[[(c["_k"], c["_s"], c["_l"])]]:
                if k in self._index:
                    first = self._reseed(self._index[k], seeds[0])
                    firsts[first.key] = first
            for _, first in sorted(firsts.items()):
                jobs += [self._reseed(first, s) for s in seeds[:c["target"]]]
        jobs = list({j.key: j for j in jobs if j.key not in known}.values())
        if self.log is not None:
            for label, note in p.notes.items():
                self.log(f"adaptive seeds: {label}: {note}")
        return jobs

    def _reseed(self, base: Job, seed: int) -> Job:
        """`base`'s configuration with `seed` (the same Optuna-trial number and values)."""
        if seed == base.seed:
            return base
        key = config_key(base.resolved, seed) if base.resolved is not None else f"{base.key}-s{seed}"
        job = self._index.get(key)
        if job is None:
            job = self._index[key] = Job(base.trial, seed, base.params, key, f"t{base.trial:05d}-s{seed}", base.resolved,
                                         outer=base.outer)
        return job


def _analysis(spec: Spec, rows: list[dict]) -> Analysis:
    """The leaderboard's analysis of `rows` (trials.csv row dicts), on the values as trials.csv stores them, with
    the experiment's `leaderboard:` settings; the records keep each run's key."""
    cfg = analysis_settings(spec)
    cols = list(dict.fromkeys(["key", "seed", "status", cfg.lr, *(k for k in (cfg.transfer,) if k),
                               *cfg.compare, *spec.space.keys, cfg.metric]))
    rows = sorted(rows, key=lambda r: str(r.get("key")))
    df = pd.DataFrame([{c: csv_cell(r.get(c)) for c in cols} for r in rows], columns=cols)
    for c in cols:
        if c not in ("status", "key"):
            num = pd.to_numeric(df[c].replace("", None), errors="coerce")
            df[c] = num if num.notna().all() or c in (cfg.lr, cfg.metric) else df[c]
    return analyze(df, cfg, n_boot=1000)
