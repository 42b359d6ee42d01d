"""`search.transfer`: search for architectures whose learning rate transfers.

Two levels. An **outer trial** is one architecture: the values of the searched keys other
than the learning rate (`leaderboard.lr`) and the size axis (`leaderboard.transfer`),
sampled by `search.sampler` (tpe, random, cmaes, qmc, nsga2) in an Optuna study of its own,
`<name>/transfer`, in the run's storage, with one direction per objective. Its **inner
runs** are every size x learning rate of `space:` x seed with those values: ordinary jobs
of the driver (each one Optuna trial of the run's study, enqueued then asked, as a grid
point; pruners, the sweep pruner included, work as in a grid), ordinary rows of trials.csv
with the outer trial's number in `outer_trial`. When every inner run of an outer trial is
recorded, the outer trial is told the objectives `transfer_objectives.evaluate` computes
from exactly those records (the leaderboard's `analyze`), and the row's columns and a
stability summary become its user attributes.

Resume. An inner run's key is its configuration's (`config.config_key`), so a resumed
search skips what trials.csv holds; the outer trials' values live in the study, so an outer
trial found RUNNING is continued with its stored values (never sampled again), told as
soon as its runs are all recorded (also when a kill fell between the last record and the
tell). A killed search loses nothing and trains nothing twice.

Keeping the backend busy: a new outer trial is asked only when no inner run of the open
ones can start, so at most about `runner.concurrency` outer trials are open at once; the
sampler sees every earlier one that finished.

nsga2 breeds a generation from the previous one once `search.population_size` outer trials of it
have completed (default: `search.trials // 4` in [2, 50], `optuna_study.default_population`);
the outer study keeps the size it was made with (`outer_population`), so a resumed search
evolves as an uninterrupted one.

`trial` numbers of the inner runs are `outer * MAX_POINTS + point` (point: the index of
(size, lr) in the inner grid), so run ids stay unique and sort by outer trial.

`search.transfer.inner: bracket`. Each outer trial brackets each size's learning-rate optimum
instead of training the whole lr grid: one `BracketSource` per outer trial whose sweeps are
its sizes (the architecture's values and one size each), started at the lr values of
`space:` and extended and resolved round by round with `search.bracket`, exactly as
`search.sampler: bracket` does for a grid's configurations. The outer trial is told when
every sweep has ended, from all the runs its sweeps trained. The rounds are a pure function
of the records, so resume is the same as the grid's. Point indexes are then `size index *
(MAX_POINTS // sizes) + the lr's order in its sweep`.
"""
from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from nas_stab.config import config_key
from nas_stab.config.mode import search_mode
from nas_stab.config.schema import Spec
from nas_stab.search.optuna_study import NSGA2_DEFAULT_POPULATION, default_population, make_sampler, make_storage, resume_seed
from nas_stab.search.plan import Job, base_lookup, try_resolve

if TYPE_CHECKING:
    import optuna  # deferred: loads Optuna only when this runs

    from nas_stab.search.sources.bracket import BracketSource
    from nas_stab.space import Dimension

MAX_POINTS = 1000  # inner grid points (sizes x lrs) at most


def inner_points(spec: Spec) -> list[dict]:
    """The inner grid of every outer trial: each {size, learning rate} of `space:` (sizes x lrs)."""
    lb = spec.leaderboard
    dims = [spec.space.get(lb.transfer), spec.space.get(lb.lr)]
    return [{lb.transfer: s, lb.lr: lr} for s, lr in itertools.product(*(spec.space.values_of(d) for d in dims))]


def inner_sweeps(spec: Spec, arch: dict) -> list[tuple[dict, list[float]]]:
    """inner: bracket: the sweeps of an outer trial whose architecture is `arch` (its searched values
    other than the lr and the size): one per size of `space:`, each started at the lr values of `space:`.
    The search's `BracketSource` and the leaderboard's replay of how each sweep ended use this one rule."""
    lb = spec.leaderboard
    rest = {k: v for k, v in arch.items() if k not in (lb.lr, lb.transfer)}
    start = [float(v) for v in spec.space.values_of(spec.space.get(lb.lr))]
    return [({**rest, lb.transfer: s}, start) for s in spec.space.values_of(spec.space.get(lb.transfer))]


def outer_dims(spec: Spec, lr_key: str | None = None) -> list[Dimension]:
    """The dimensions of an outer trial: the searched keys other than the lr (`leaderboard.lr`, or
    `lr_key`) and the size (`leaderboard.transfer`), in the space's order."""
    skip = (lr_key or spec.leaderboard.lr, spec.leaderboard.transfer)
    return [d for d in spec.space if d.key not in skip]


def architecture(dims: list[Dimension], base: Callable[[str], Any], value: Callable[[Dimension], Any]) -> dict:
    """An outer trial's values: `value(d)` for each dimension that is active given the values before
    it (and `base(key)`, the base spec, for the keys not searched). The one rule both the search
    (`value` suggests) and the leaderboard (`value` reads a run's record) apply."""
    out: dict = {}
    for d in dims:
        if d.active(lambda k: out[k] if k in out else base(k)):
            out[d.key] = value(d)
    return out


def study_name(spec: Spec) -> str:
    return f"{spec.name}/transfer"


def open_outer_study(spec: Spec, storage_url: str) -> optuna.Study:
    """The outer study (created on first use): the sampler of `search.sampler`, one direction per objective."""
    import optuna  # deferred: loads Optuna only when this runs

    from nas_stab.search.sources.transfer_objectives import directions  # deferred: loads pandas, NumPy only when this runs

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    study = optuna.create_study(study_name=study_name(spec), storage=make_storage(storage_url),
                                sampler=make_sampler(spec.search.sampler, spec.search.seed),
                                directions=directions(spec), load_if_exists=True)
    if spec.search.sampler == "nsga2":
        study.sampler = make_sampler("nsga2", spec.search.seed, population_size=outer_population(spec, study))
    return study


POPULATION_ATTR = "nsga2_population_size"  # a user attribute of the outer study: the population it was made with


def outer_population(spec: Spec, study: optuna.Study) -> int:
    """nsga2's individuals per generation in the outer study: `search.population_size`; unset, the
    one the study was made with (its user attribute `POPULATION_ATTR`), so a resumed search keeps
    it. A new study records it (the default rule `optuna_study.default_population` of
    `search.trials`, never of `--trials`); a study made before the key existed (trials, no
    record) keeps Optuna's default 50, which it was made with."""
    stored = study.user_attrs.get(POPULATION_ATTR)
    if spec.search.population_size is not None:
        size = int(spec.search.population_size)
    elif stored is not None:
        return int(stored)
    elif study.get_trials(deepcopy=False):
        return NSGA2_DEFAULT_POPULATION
    else:
        size = default_population(spec.search.trials)
    if stored is None and not study.get_trials(deepcopy=False):
        study.set_user_attr(POPULATION_ATTR, size)
    return size


class TransferSource:
    """The job source of `search.transfer` (see the module docstring).

    `limit` (`nas-stab run --trials N`) is the number of outer trials in all (as for a sampler),
    default `search.trials`.
    """

    def __init__(self, spec: Spec, limit: int | None = None, *, storage: str, log: Callable[[str], None] | None = None):
        from optuna.trial import TrialState  # deferred: loads Optuna only when this runs

        self.spec, self.log = spec, log or (lambda msg: None)
        lb = spec.leaderboard
        self.lr_key, self.size_key = lb.lr, lb.transfer
        self.points = inner_points(spec)
        if len(self.points) > MAX_POINTS:
            raise ValueError(f"search.transfer: {len(self.points)} sizes x learning rates; at most {MAX_POINTS}")
        self.bracket = search_mode(spec).inner_bracket  # each size's lr bracketed (search.transfer.inner: bracket)
        self.sizes = list(spec.space.values_of(spec.space.get(self.size_key)))
        self._brackets: dict[int, BracketSource] = {}  # outer number -> its BracketSource (inner: bracket)
        self.outer_dims = outer_dims(spec)
        self._base = base_lookup(spec)
        target = limit if limit is not None else spec.search.trials
        assert target is not None, "a transfer search has search.trials (validated)"
        self.target = target
        self.url = storage
        self.study = open_outer_study(spec, storage)
        self.active: dict[int, dict] = {}  # outer trial number -> its architecture values
        self._trials: dict[int, optuna.Trial] = {}  # outer number -> optuna Trial, for those asked by this process
        self._jobs: dict[int, list[Job]] = {}
        self._events: list[dict[str, Any]] = []  # what this source decided of the outer trials it scored (`decisions`)
        done = 0
        for t in self.study.get_trials(deepcopy=False):
            if t.state == TrialState.RUNNING:
                if all(d.key in t.params for d in self.outer_dims if d.active(self._lookup(t.params))):
                    self.active[t.number] = dict(t.params)
                    self.log(f"outer trial {t.number} was open: continued with its values {t.params}")
                else:  # killed between ask and suggest: nothing of it was trained
                    self._tell_number(t.number, None, {"status": "interrupted"})
            elif t.state in (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED):
                done += t.user_attrs.get("status") != "interrupted"
            elif t.state == TrialState.WAITING:
                pass
        self.done = done
        # runs in all; with inner bracket decided as results come in (unknown)
        self.total = None if self.bracket else self.target * len(self.points) * len(spec.seeds)

    def expected(self, records: Sequence[dict]) -> tuple[int, str, str] | None:
        """inner: bracket: (runs expected in all, "~", why) for the progress display: each outer trial's sweeps
        (one per size) at `bracket.points_range`'s expected count; None with an inner grid (`total` is known)."""
        if not self.bracket:
            return None
        from nas_stab.search.sources.bracket import points_range  # deferred: loads pandas, NumPy only when this runs

        b = self.spec.search.bracket
        per = sum(points_range(start, float(b.step_octaves), float(b.resolution_octaves), tuple(b.lr_limits))[1]
                  for _, start in inner_sweeps(self.spec, {}))
        return self.target * per * len(self.spec.seeds), "~", "estimated: each size's sweep adds lrs as it goes"

    # ------------------------------------------------------------ the job source interface

    def pending(self, records: Sequence[dict], running: Collection[str]) -> list[Job] | None:
        recs = {str(r.get("key")): r for r in records}
        out: list[Job] = []
        for n in sorted(self.active):
            out += self._open_jobs(n, recs, running)
        while not out and self.done + len(self.active) < self.target:
            n = self._ask()
            out += self._open_jobs(n, recs, running)
        if not out and not self.active:
            return None
        return out

    @property
    def decision_facts(self) -> dict[str, Any]:
        """The start event's facts (`store/decisions.py`): the sweeps of each outer trial (one per size), the
        outer trials planned. Its decisions cover the outer trials scored by this process and the open ones, so
        a run directory's are complete only when its first driver started it."""
        return {"source": "transfer", "sweeps": len(self.sizes) if self.bracket else None, "outer_planned": self.target}

    def decisions(self, records: Sequence[dict]) -> list[dict[str, Any]]:
        """The outer trials this source scored (``outer`` events) and, with inner: bracket, the last state of the
        sweeps of those and the state of every sweep of the open ones (`store/decisions.py`)."""
        out = list(self._events)
        if self.bracket:
            for n in sorted(self.active):
                out += self.bracket_source(n).decisions(records)
        return out

    def suggest(self, trial: optuna.Trial, base: Callable[[str], Any]) -> dict:
        """Record an inner job's values in its trial of the run's study: the inner grid as a grid
        point's, the architecture's with its own (continuous) distribution."""
        params: dict[str, Any] = {}
        for d in self.spec.space:
            if not d.active(lambda k: params[k] if k in params else base(k)):
                continue
            if d.key == self.lr_key and self.bracket:  # may leave the grid: lr_limits' distribution, as bracket's
                lo, hi = self.spec.search.bracket.lr_limits
                params[d.key] = trial.suggest_float(d.key, float(lo), float(hi), log=True)
            else:
                params[d.key] = d.suggest(trial, grid=d.key in (self.lr_key, self.size_key))
        return params

    # ------------------------------------------------------------ outer trials

    def jobs(self, n: int) -> list[Job]:
        """The inner runs of outer trial n, point by point (sizes, then learning rates), each with every seed."""
        got = self._jobs.get(n)
        if got is None:
            arch = self.active[n]
            got = []
            for i, pt in enumerate(self.points):
                params = {d.key: (pt[d.key] if d.key in pt else arch[d.key]) for d in self.spec.space
                          if d.key in pt or d.key in arch}
                r = try_resolve(self.spec, params)
                trial = n * MAX_POINTS + i
                for seed in self.spec.seeds:
                    key = config_key(r, seed) if r is not None else f"invalid-o{n}-{i}-s{seed}"
                    got.append(Job(trial, seed, params, key, f"t{trial:05d}-s{seed}", r, outer=n))
            self._jobs[n] = got
        return got

    def bracket_source(self, n: int) -> BracketSource:
        """inner: bracket: the BracketSource of outer trial n (its sweeps: one per size)."""
        src = self._brackets.get(n)
        if src is None:
            from nas_stab.search.sources.bracket import BracketSource  # deferred: loads pandas, NumPy only when this runs

            src = self._brackets[n] = BracketSource(self.spec, sweeps=inner_sweeps(self.spec, self.active[n]),
                                                    trial_base=n * MAX_POINTS,
                                                    sweep_points=MAX_POINTS // len(self.sizes), outer=n)
        return src

    def _open_jobs(self, n: int, recs: dict, running: Collection[str]) -> list[Job]:
        if self.bracket:
            src = self.bracket_source(n)
            todo: list[Job] = []
            done: list[Job] = []
            for i in range(len(src.sweeps)):
                missing, end = src.replay(i, recs)
                todo += missing
                done += src.sweep_jobs(i, end) if not missing else []
            if not todo:
                self._events += src.decisions(list(recs.values()))
                self._finish(n, [recs[j.key] for j in done])
                self._brackets.pop(n, None)
                return []
            return [j for j in todo if j.key not in running]
        jobs = self.jobs(n)
        missing = [j for j in jobs if j.key not in recs]
        if not missing:
            self._finish(n, [recs[j.key] for j in jobs])
            return []
        return [j for j in missing if j.key not in running]

    def _lookup(self, params: dict) -> Callable[[str], Any]:
        return lambda k: params[k] if k in params else self._base(k)

    def _ask(self) -> int:
        # reseeded before every ask (not only on resume): a resumed search then asks what an
        # uninterrupted one asks (the samplers keep no other state than the study)
        resume_seed(self.study, self.spec.search.sampler, self.spec.search.seed)
        n_so_far = len(self.study.get_trials(deepcopy=False))
        assert self.spec.search.transfer is not None, "a transfer search"
        start = self.spec.search.transfer.start or []
        if n_so_far < len(start):  # the architectures to evaluate first, in order
            self.study.enqueue_trial(dict(start[n_so_far]), skip_if_exists=False)
        ot = self.study.ask()
        params = architecture(self.outer_dims, self._base, lambda d: d.suggest(ot))
        self._trials[ot.number] = ot
        self.active[ot.number] = params
        return ot.number

    def _finish(self, n: int, rows: list[dict]) -> None:
        """Every inner run of outer trial n is recorded: tell the study its objectives."""
        from nas_stab.search.sources.transfer_objectives import evaluate  # deferred: loads pandas, NumPy only when this runs

        try:
            values, attrs, why = evaluate(self.spec, rows)
        except Exception as e:  # a bug or an unusable table must not stop the search: the trial fails, with why
            values, attrs, why = None, {}, f"{type(e).__name__}: {e}"
        attrs["status"] = "complete" if values is not None else "failed"
        self._events.append({"event": "outer", "outer": n, "status": attrs["status"]})
        if why:
            attrs["error"] = why[:2000]
        self._tell_number(n, values, attrs)
        self.active.pop(n, None)
        self.done += 1
        assert self.spec.search.transfer is not None, "a transfer search"
        shown = ", ".join(f"{o} {v:.4g}" for o, v in zip(self.spec.search.transfer.objectives, values or ()))
        self.log(f"outer trial {n} {self._arch_text(n, rows)}: {shown or 'failed: ' + why}")

    def _arch_text(self, n: int, rows: list[dict]) -> str:
        return " ".join(f"{d.key.split('.')[-1]}={rows[0].get(d.key)!s:.6}" for d in self.outer_dims if rows)

    def _tell_number(self, n: int, values: Sequence[float] | None, attrs: dict) -> None:
        from optuna.trial import TrialState  # deferred: loads Optuna only when this runs

        ot = self._trials.pop(n, None)
        if ot is not None:
            for k, v in attrs.items():
                ot.set_user_attr(k, v)
        else:  # continued after a restart: no Trial object, the storage by number
            storage = make_storage(self.url)  # a handle of our own on the same database (public API)
            sid = storage.get_study_id_from_name(self.study.study_name)
            tid = storage.get_trial_id_from_study_id_trial_number(sid, n)
            for k, v in attrs.items():
                storage.set_trial_user_attr(tid, k, v)
        if values is None:
            self.study.tell(n, state=TrialState.FAIL)
        else:
            self.study.tell(n, values if len(values) > 1 else values[0])
