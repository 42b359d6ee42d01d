"""Optuna pieces named in the YAML: samplers, pruners, storage, direction.

The grid sampler is nas_stab's own enumeration (conditions and duplicates
handled by `Space.grid`): each grid point is enqueued into the study, so the
Optuna study still records every trial with its parameters and states.
"""
from __future__ import annotations

import inspect
import warnings
from typing import TYPE_CHECKING, Any

from nas_stab import metrics
from nas_stab.config import hooks
from nas_stab.config.schema import Spec
from nas_stab.registry import Registry
from nas_stab.textfmt import did_you_mean

if TYPE_CHECKING:
    import optuna
    from sqlalchemy.engine import Engine
    from sqlalchemy.engine.interfaces import DBAPIConnection
    from sqlalchemy.pool import ConnectionPoolEntry

    from nas_stab.search.sweep_pruner import SweepPruner

PRUNERS = Registry("pruner")
SAMPLERS = Registry("sampler")

for _name, _cls, _doc in [
    ("none", "NopPruner", "never prunes (the divergence rule still runs)"),
    ("median", "MedianPruner", "prune below the median of earlier trials at the same step"),
    ("percentile", "PercentilePruner", "prune below a percentile (option: percentile, default 25)"),
    ("asha", "SuccessiveHalvingPruner", "asynchronous successive halving"),
    ("hyperband", "HyperbandPruner", "Hyperband over successive-halving brackets"),
    ("threshold", "ThresholdPruner", "prune outside [lower, upper]"),
]:
    PRUNERS.register(_name, optuna_class=_cls, doc=_doc)(_cls)


@PRUNERS.register("sweep", optuna_class="nas_stab SweepPruner",
                  doc="within a learning-rate sweep only: prune when >= 3 other lrs of the same configuration are better "
                      "by a margin, never the best lr or its neighbours (options: min_better, margin, n_warmup_steps, lr_key)")
def _sweep_pruner() -> type[SweepPruner]:
    from nas_stab.search.sweep_pruner import SweepPruner  # deferred: loads Optuna, NumPy only when this runs

    return SweepPruner

for _name, _cls, _doc in [
    ("grid", "RandomSampler", "every combination of the space, times the seeds"),
    ("bracket", "RandomSampler", "per configuration of the other keys, learning rates added until the optimum is bracketed, then resolved (search.bracket)"),
    ("random", "RandomSampler", "independent random sampling"),
    ("tpe", "TPESampler", "tree-structured Parzen estimator"),
    ("cmaes", "CmaEsSampler", "CMA-ES on the continuous and integer dimensions"),
    ("qmc", "QMCSampler", "scrambled Sobol quasi-random sampling"),
    ("nsga2", "NSGAIISampler", "NSGA-II, a genetic algorithm for one or several objectives (search.transfer.objectives)"),
]:
    SAMPLERS.register(_name, optuna_class=_cls, doc=_doc)(_cls)

_PRUNER_DEFAULTS = {"percentile": {"percentile": 25.0}}


def _pruner_kwargs(name: str, options: dict) -> dict:
    return {**_PRUNER_DEFAULTS.get(name, {}), **(options or {})}


def check_pruner(name: str, options: dict) -> str | None:
    """A message if the pruner name or its options are wrong, else None."""
    if name not in PRUNERS:
        return PRUNERS.unknown(name)
    cls = _pruner_class(name)
    allowed = [p for p in inspect.signature(cls).parameters]
    for k in options or {}:
        if k not in allowed:
            return f"{name} pruner has no option {k!r}" + (did_you_mean(k, allowed) if allowed else "; it takes none")
    try:
        make_pruner(name, options)
    except (TypeError, ValueError) as e:
        return f"{name} pruner: {e}"
    return None


@hooks.register("search", "pruner")
def _check_spec_pruner(spec: Spec) -> tuple[tuple, str] | None:
    msg = check_pruner(spec.search.pruner.name, spec.search.pruner.options or {})
    return (("search", "pruner"), msg) if msg else None


def _pruner_class(name: str) -> type[optuna.pruners.BasePruner]:
    import optuna  # deferred: loads Optuna only when this runs

    obj = PRUNERS.get(name)
    return getattr(optuna.pruners, obj) if isinstance(obj, str) else obj()


def make_pruner(name: str, options: dict | None = None, *, lr_key: str | None = None) -> optuna.pruners.BasePruner:
    """The pruner `name` with its options; `lr_key` (leaderboard.lr) is the sweep pruner's default learning rate."""
    kwargs = _pruner_kwargs(name, options or {})
    if name == "sweep" and lr_key is not None:
        kwargs.setdefault("lr_key", lr_key)
    return _pruner_class(name)(**kwargs)


NSGA2_DEFAULT_POPULATION = 50  # Optuna's NSGAIISampler default, also what a transfer study made before search.population_size used


def default_population(trials: int | None) -> int:
    """nsga2's individuals per generation when `search.population_size` is unset: trials // 4 in [2, 50].

    Optuna's default of 50 leaves a search of up to 50 trials in its first generation, random
    sampling that never evolves. A quarter of the budget gives about four generations (the first
    random, three bred from selected parents) up to 200 trials, and Optuna's 50 beyond; at least
    2, NSGAIISampler's minimum (its uniform crossover takes two distinct parents).
    """
    if trials is None:
        return NSGA2_DEFAULT_POPULATION
    return max(2, min(NSGA2_DEFAULT_POPULATION, int(trials) // 4))


def make_sampler(name: str, seed: int, *, population_size: int | None = None) -> optuna.samplers.BaseSampler:
    """The Optuna sampler `name` seeded with `seed`; `population_size`: nsga2's (None: Optuna's default)."""
    import optuna  # deferred: loads Optuna only when this runs

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    cls = getattr(optuna.samplers, SAMPLERS.get(name))
    if name == "cmaes":
        return cls(seed=seed, warn_independent_sampling=False)
    if name == "qmc":
        return cls(seed=seed, scramble=True, warn_independent_sampling=False, warn_asynchronous_seeding=False)
    if name == "tpe":
        return cls(seed=seed, multivariate=True)
    if name == "nsga2" and population_size is not None:
        return cls(seed=seed, population_size=int(population_size))
    return cls(seed=seed)


def objective_direction(spec: Spec) -> metrics.Direction:
    d = spec.search.direction
    return metrics.direction(spec.search.objective) if d == "auto" else d


def create_study(spec: Spec, storage: str, study_name: str | None = None, *,
                 load_if_exists: bool = True) -> optuna.Study:
    """The experiment's study: its sampler, pruner and storage."""
    import optuna  # deferred: loads Optuna only when this runs

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(
        study_name=study_name or spec.name,
        storage=make_storage(storage),
        sampler=make_sampler(spec.search.sampler, spec.search.seed),
        pruner=make_pruner(spec.search.pruner.name, spec.search.pruner.options, lr_key=spec.leaderboard.lr),
        direction=objective_direction(spec),
        load_if_exists=load_if_exists,
    )
    resume_seed(study, spec.search.sampler, spec.search.seed)
    return study


def resume_seed(study: optuna.Study, name: str, seed: int) -> None:
    """Reseed a resumed study's sampler with `seed` + its trial count.

    A sampler rebuilt with the experiment's seed draws its first values again: a random search
    stopped after n trials would train its first configurations a second time (TPE's random
    start-up trials likewise). The offset keeps a resumed search reproducible: the same
    interruption point gives the same draws. QMC is left alone: its scramble is the seed and it
    continues its sequence from the trial count in the storage. A transfer search calls it before
    every outer ask, so its resumed search asks exactly what an uninterrupted one asks. nsga2
    keeps the population size of the sampler it replaces.
    """
    if name in ("qmc", "grid", "bracket"):
        return
    n = len(study.get_trials(deepcopy=False))
    if n:
        study.sampler = make_sampler(name, seed + n, population_size=getattr(study.sampler, "population_size", None))


def make_storage(url: str) -> Any:
    """An Optuna storage from a URL; `journal:///path` selects the journal file backend."""
    import optuna  # deferred: loads Optuna only when this runs

    if url.startswith("journal://"):
        from optuna.storages.journal import JournalFileBackend  # deferred: loads Optuna only when this runs

        return optuna.storages.JournalStorage(JournalFileBackend(url[len("journal://"):]))
    if url.startswith("sqlite"):
        storage = optuna.storages.RDBStorage(url, engine_kwargs={"connect_args": {"timeout": 60}})
        _fast_sqlite(storage.engine)
        return storage
    # no heartbeat: only the driver asks and tells, and it closes what it opened
    return optuna.storages.RDBStorage(url)


def _fast_sqlite(engine: Engine) -> None:
    """SQLite in WAL mode with synchronous=NORMAL: a commit appends to the
    write-ahead log without an fsync. SQLite's defaults (a rollback journal,
    synchronous=FULL) cost several fsyncs per commit, and Optuna commits ~20
    times per trial: 250-280 ms per trial of ten reports here, against 70-100 ms
    in WAL mode (the rest is SQLAlchemy's own work; the storage benchmark in benchmarks/ measures it).
    A killed process loses nothing and the database is never corrupt; only a
    power cut or an OS crash can lose the last commits. The journal mode is
    stored in the file, so any reader (optuna.load_study, optuna-dashboard)
    works as before; a reader needs study.db-wal too while it exists.
    """
    if engine.dialect.name != "sqlite" or engine.url.database in (None, "", ":memory:"):
        return
    from sqlalchemy import event  # deferred: loads SQLAlchemy only when this runs

    def on_connect(dbapi_conn: DBAPIConnection, _record: ConnectionPoolEntry) -> None:
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    event.listen(engine, "connect", on_connect)
    engine.dispose()  # connections RDBStorage already opened get the pragmas when reopened
