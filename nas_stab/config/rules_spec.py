"""Rules of the whole experiment (search, runner, leaderboard, storage, tracking, the searched values), checked
once at load: `check_spec` runs every group and returns all their problems together. The rules of one
configuration are `rules.check_config`; the space's and the leaderboard's live in `rules_space` and
`rules_leaderboard`."""
from __future__ import annotations

import math
from pathlib import Path

from nas_stab import metrics
from nas_stab.config import hooks
from nas_stab.config.build import Ctx
from nas_stab.config.mode import search_mode
from nas_stab.config.rules import check_config
from nas_stab.config.rules_leaderboard import check_leaderboard, n_values
from nas_stab.config.rules_space import check_space_values
from nas_stab.config.schema import BracketConfig, Spec
from nas_stab.errors import SpecError, SpecErrors
from nas_stab.textfmt import did_you_mean

# search.bracket's step and resolution at least this (octaves): finer points are indistinguishable from their
# neighbours in seed noise, a sweep of them grows to its point cap, and below the bracket's own tolerance
# (search/sources/bracket.py _TOL, 1e-3) a new lr is one already tried
BRACKET_MIN_OCTAVES = 0.05


def check_spec(spec: Spec, ctx: Ctx, *, stored: bool = False, probe: bool = False) -> list[SpecError]:
    """Rules of the whole experiment; also checks every grid point's configuration. Each group of rules
    (search, runner, leaderboard, storage, tracking, the model's configuration, the searched values) reports
    its first problem, and every group runs: the problems of all groups are returned together (`nas-stab
    validate` lists them all), none raised. `stored`: the spec.yaml of an existing run directory, which opens
    even if it predates a leaderboard rule, without resolving each grid point again. `probe`: for `nas-stab probe` (nothing is trained: the searched
    sizes' and lrs' rules of a table do not apply)."""
    errors: list[SpecError] = []
    for group in (lambda: _check_search(spec, ctx), lambda: _check_runner(spec, ctx),
                  lambda: check_leaderboard(spec, ctx, stored=stored, axes=not probe),
                  lambda: _check_storage(spec.search.storage, ctx),
                  lambda: None if stored else _check_tracking(spec, ctx),  # a run directory opens without the package
                  lambda: check_config(spec, ctx),
                  lambda: _check_components(spec, ctx),  # each component's own rules, even where check_config stopped
                  # every searched value must make a valid configuration; a stored spec was checked when its search
                  # started, and reading it back (status, leaderboard, tensorboard) resolving each of 10^4 points cost 17 s
                  lambda: None if stored else check_space_values(spec, ctx)):
        try:
            group()
        except SpecErrors as e:
            errors += e.errors
        except SpecError as e:
            errors.append(e)
    unique = {str(e): e for e in errors}  # a component's problem check_config reached too, once
    return list(unique.values())


def _check_components(spec: Spec, ctx: Ctx) -> None:
    """The dataset's and the model's own rules (`hooks` group "config"), each reporting its first problem: a wrong
    dataset name does not hide the model's."""
    problems = [p for p in (check(spec) for check in hooks.checks("config")) if p]
    if problems:
        raise SpecErrors([ctx.error(where, msg) for where, msg in problems])


def _check_search(spec: Spec, ctx: Ctx) -> None:
    s = spec.search
    if s.objective not in metrics.OBJECTIVES:
        raise ctx.error(("search", "objective"), f"unknown metric {s.objective!r}" + did_you_mean(s.objective, metrics.OBJECTIVES))
    _check_transfer(spec, ctx)
    if search_mode(spec).job_source:
        for d in spec.space:
            if not d.discrete:
                raise ctx.error(("space", d.key), f"the {s.sampler} sampler needs discrete dimensions; "
                                                  f"{d.kind} is continuous (use values, grid, log_grid or int)")
    elif s.trials is None:
        raise ctx.error(("search", "trials"), f"the {s.sampler} sampler needs search.trials")
    if s.sampler != "grid" and not spec.space.dims and not (spec.raw or {}).get("space"):  # (a written dimension that is
        # wrong is reported as such, and left out of the space the other rules see)
        raise ctx.error(("search", "sampler"), "a sampler other than grid needs a non-empty space")
    _check_bracket(spec, ctx)
    _check_adaptive_seeds(spec, ctx)
    no_pruner = s.pruner.name == "none" and not s.pruner.options
    problem = None if no_pruner else hooks.first_problem("search", spec)  # the pruner (nas_stab.search.optuna_study)
    if problem:
        key, msg = problem
        raise ctx.error(key, msg)


def _check_adaptive_seeds(spec: Spec, ctx: Ctx) -> None:
    """`seeds: {min, max}` adds seeds where a leaderboard verdict is still open: it needs a job source (grid or
    bracket: an Optuna sampler's trial trains every seed of its configuration) and a size axis (the verdicts)."""
    mode = search_mode(spec)
    if not mode.adaptive:
        return
    if mode.transfer:
        raise ctx.error(("seeds",), "adaptive seeds ({min, max}) are not supported inside search.transfer (each outer "
                        "trial is judged once, on its own runs): give a seed count")
    if not mode.job_source:
        raise ctx.error(("seeds",), f"adaptive seeds ({{min, max}}) need search.sampler grid or bracket (the sampler is "
                        f"{mode.sampler}: it trains every seed of a configuration it samples); give a seed count")
    if spec.leaderboard.transfer is None:
        raise ctx.error(("seeds",), "adaptive seeds ({min, max}) add seeds where a transfer verdict is still open: "
                        "they need leaderboard.transfer (the size axis); give a seed count")


def _check_runner(spec: Spec, ctx: Ctx) -> None:
    r = spec.runner
    res = r.resources if r.resources is not None else {}
    if not isinstance(res, dict):
        raise ctx.error(("runner", "resources"), f"must be a mapping like {{cpu: 1, gpu: 0}}, got {res!r}")
    for k, v in res.items():
        if k not in ("cpu", "gpu"):
            raise ctx.error(("runner", "resources", k), "unknown resource" + did_you_mean(k, ("cpu", "gpu")))
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0 or not math.isfinite(v):
            raise ctx.error(("runner", "resources", k), f"must be a number >= 0, got {v!r}")
    if r.address is not None and r.kind != "ray":
        raise ctx.error(("runner", "address"), "an address only applies to runner.kind: ray")
    if r.kind == "table" and not r.table:
        raise ctx.error(("runner", "table"), "runner.kind: table serves a published table's runs: name it (nas-stab bench tables)")
    if r.table is not None and r.kind != "table":
        raise ctx.error(("runner", "table"), "only applies to runner.kind: table")


def _check_bracket(spec: Spec, ctx: Ctx) -> None:
    """search.bracket only with sampler bracket or search.transfer.inner: bracket; the learning rate
    (leaderboard.lr) searched with positive numbers inside lr_limits, unconditionally; step >=
    resolution; limits ordered."""
    s, b, mode = spec.search, spec.search.bracket, search_mode(spec)
    if not mode.brackets:
        if b != BracketConfig():  # defaults pass: a stored spec.yaml lists every key
            if mode.transfer:
                raise ctx.error(("search", "bracket"), "only applies to search.sampler: bracket or search.transfer.inner: "
                                "bracket; this transfer search trains the whole lr grid (inner: grid): set "
                                "search.transfer.inner: bracket to bracket each size's learning rate, or remove search.bracket")
            raise ctx.error(("search", "bracket"), "only applies to search.sampler: bracket or search.transfer.inner: bracket "
                            f"(the sampler is {s.sampler})")
        return
    for name in ("step_octaves", "resolution_octaves"):
        v = getattr(b, name)
        if v < BRACKET_MIN_OCTAVES:
            raise ctx.error(("search", "bracket", name), f"must be >= {BRACKET_MIN_OCTAVES:g} octaves, got {v:g}: learning "
                            "rates closer than that cannot be told apart, and a sweep of them grows to its point cap")
    if b.resolution_octaves > b.step_octaves:
        raise ctx.error(("search", "bracket", "resolution_octaves"), f"must be <= step_octaves ({b.step_octaves:g}), "
                        f"got {b.resolution_octaves:g}: the resolution refines what the steps bracketed")
    lim = b.lr_limits
    if len(lim) != 2 or not 0 < lim[0] < lim[1] or lim[1] > 1e6:
        raise ctx.error(("search", "bracket", "lr_limits"), f"must be [lowest, highest] with 0 < lowest < highest <= 1e6, "
                        f"got {list(lim)}")
    key = spec.leaderboard.lr
    d = spec.space.get(key)
    if d is None:
        where = ("search", "transfer", "inner") if mode.transfer else ("search", "sampler")
        raise ctx.error(where, f"bracket searches the learning rate {key!r} (leaderboard.lr), which is not "
                        "a key of space: give its coarse start there, e.g. train.lr: [0.01, 0.1]")
    if d.when:
        raise ctx.error(("space", key), "bracket sweeps the learning rate of every configuration: it cannot have a when: condition")
    vals = spec.space.values_of(d) if d.discrete else ()
    bad = [v for v in vals if isinstance(v, bool) or not isinstance(v, (int, float)) or not lim[0] <= v <= lim[1]]
    if bad:
        raise ctx.error(("space", key), f"bracket starts at these learning rates, which must be numbers inside "
                        f"search.bracket.lr_limits {list(lim)}; got {bad[0]!r}")


def _check_transfer(spec: Spec, ctx: Ctx) -> None:
    """search.transfer: an Optuna sampler for the outer trials, objectives the analysis computes (cmaes:
    one), the size axis and the learning rate searched as discrete, unconditional dimensions (the inner
    grid), and at least one other searched key (the architecture)."""
    s, t = spec.search, spec.search.transfer
    if s.sampler == "nsga2" and t is None:
        raise ctx.error(("search", "sampler"), "nsga2 samples the outer trials of search.transfer; without it use tpe, random, cmaes or qmc")
    if s.population_size is not None and s.sampler != "nsga2":
        raise ctx.error(("search", "population_size"), "only applies to search.sampler: nsga2 (NSGA-II's individuals per "
                        f"generation); the sampler is {s.sampler}: remove population_size or choose nsga2")
    if t is None:
        return
    if s.sampler == "bracket":
        raise ctx.error(("search", "sampler"), "search.transfer samples its outer trials with an Optuna sampler "
                        "(tpe, random, cmaes, qmc, nsga2), not bracket: to bracket each size's learning rate inside "
                        "every outer trial, set search.transfer.inner: bracket (settings in search.bracket) and "
                        "choose the outer sampler here")
    if s.sampler == "grid":
        raise ctx.error(("search", "sampler"), "search.transfer samples its outer trials with an Optuna sampler "
                        "(tpe, random, cmaes, qmc, nsga2), not grid: the inner runs are every size x lr x seed "
                        "(search.transfer.inner: grid) or each size's bracketed lr (inner: bracket)")
    problem = hooks.first_problem("transfer", spec)  # the objectives' names (nas_stab.search.sources.transfer_objectives)
    if problem:
        where, msg = problem
        raise ctx.error(where, msg)
    if len(set(t.objectives)) < len(t.objectives):
        raise ctx.error(("search", "transfer", "objectives"), f"an objective is named twice: {list(t.objectives)}")
    if len(t.objectives) > 1 and s.sampler == "cmaes":
        raise ctx.error(("search", "sampler"), "cmaes optimizes one objective; with several use tpe, nsga2 or random")
    lb = spec.leaderboard
    if lb.transfer is None:
        raise ctx.error(("leaderboard", "transfer"), "search.transfer needs the size axis leaderboard.transfer (a key of space)")
    if spec.space.get(lb.lr) is None:
        raise ctx.error(("leaderboard", "lr"), f"{lb.lr!r} is not searched: search.transfer trains each size at the "
                        "learning rates of space: (give it at least 3 values, or 2 starts with inner: bracket)")
    for key, what in ((lb.transfer, "leaderboard.transfer"), (lb.lr, "leaderboard.lr")):
        d = spec.space.get(key)
        if d is None:
            continue  # _check_axes names it
        if not d.discrete or d.when:
            raise ctx.error(("space", key), f"{what} is the inner grid of search.transfer: give it listed values "
                            "(values, grid, log_grid or int) without a when: condition")
        if key == lb.lr and t.inner == "bracket" and n_values(d) < 2:
            raise ctx.error(("space", key), f"inner: bracket starts each size's sweep at the learning rates of "
                            f"space: give it 2 starts (e.g. [0.01, 0.02]), got {n_values(d)}")
    outer = {d.key: d for d in spec.space if d.key not in (lb.transfer, lb.lr)}
    start = t.start if t.start is not None else []
    if not isinstance(start, list):
        raise ctx.error(("search", "transfer", "start"), f"must be a list of mappings {{searched key: value}}, got {start!r}")
    for i, point in enumerate(start):
        if not isinstance(point, dict) or not point:
            raise ctx.error(("search", "transfer", "start", i), f"must be a mapping {{searched key: value}}, got {point!r}")
        for k, v in point.items():
            d = outer.get(k)
            if d is None:
                raise ctx.error(("search", "transfer", "start", i, k), "not a searched key of the architecture"
                                + did_you_mean(str(k), list(outer)) + f"; those are: {', '.join(outer) or 'none'}")
            ok = (any(v == x for x in spec.space.values_of(d)) if d.discrete and d.kind != "int" else
                  not isinstance(v, bool) and isinstance(v, (int, float)) and d.low <= v <= d.high)
            if not ok:
                raise ctx.error(("search", "transfer", "start", i, k), f"{v!r} is outside the searched values of {k}")
    if not outer:
        raise ctx.error(("space",), "search.transfer searches the keys of space other than leaderboard.lr and "
                        "leaderboard.transfer (the architecture, e.g. model.aggregation_exponent: {uniform: [0, 1]}); there are none")


# ---------------------------------------------------------------- values that would only fail at run time


def _check_storage(url, ctx: Ctx) -> None:
    """search.storage parses as an Optuna storage URL and its database driver is installed;
    a SQLite or journal file's directory exists."""
    if url is None:
        return

    if url.startswith("journal://"):
        path = Path(url[len("journal://"):]).expanduser()
        if not path.parent.is_dir():
            raise ctx.error(("search", "storage"), f"the journal file's directory {path.parent} does not exist")
        return
    try:
        from sqlalchemy.engine import make_url  # deferred: loads SQLAlchemy only when this runs

        u = make_url(url)
        u.get_dialect()  # imports the driver: an unknown scheme or a missing driver fails here
    except Exception as e:  # sqlalchemy raises ArgumentError, NoSuchModuleError, ImportError...
        raise ctx.error(("search", "storage"), f"not a usable storage URL {url!r} ({type(e).__name__}: "
                        f"{str(e).splitlines()[0] if str(e) else ''}); use sqlite:///path, postgresql://..., "
                        "mysql://... or journal:///path") from None
    if u.get_backend_name() == "sqlite" and u.database not in (None, "", ":memory:"):
        parent = Path(u.database).expanduser().parent
        if not parent.is_dir():
            raise ctx.error(("search", "storage"), f"the SQLite file's directory {parent} does not exist")


def _check_tracking(spec: Spec, ctx: Ctx) -> None:
    """logging.tracking names backends whose packages are installed: a missing one is one error before
    anything trains, not a failure logged after every run."""
    if spec.logging.tracking == "none":
        return  # (no backend's module loaded)
    problem = hooks.first_problem("tracking", spec)  # nas_stab.trackers.tracking
    if problem:
        key, msg = problem
        raise ctx.error(key, msg)
