"""The loader: YAML text -> a validated, frozen `Spec`, and the helpers that work on dotted keys.

Everything is checked once, here: unknown keys (with the nearest valid key),
types, ranges, and the cross-field rules of `rules.py`. Errors are
`SpecError`s naming the file, line and dotted key.
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from nas_stab.config import schema
from nas_stab.config.advice import advice
from nas_stab.config.build import Ctx, build, public_fields
from nas_stab.config.compose import compose
from nas_stab.config.keys import SEARCHABLE, check_key, get_key, set_path
from nas_stab.config.mode import search_mode
from nas_stab.config.resolve import resolve
from nas_stab.config.rules_spec import check_spec
from nas_stab.config.yamlio import load_yaml, read_text
from nas_stab.errors import RunError, SpecError, SpecErrors
from nas_stab.space import Space, parse_space
from nas_stab.textfmt import did_you_mean

Spec = schema.Spec
__all__ = ["SEARCHABLE", "Spec", "check_key", "config_key", "config_keys", "from_data", "get_key", "load_run_spec", "load_spec",
           "loads_spec", "resolve", "spec_hash", "to_plain", "with_earlier_defaults"]  # the dotted-key helpers and the
# resolver live in keys.py and resolve.py (below the rules that use them); they are re-exported here


def load_spec(path: str | Path, overrides: Iterable[str] = (), *, probe: bool = False) -> Spec:
    """Load and validate an experiment file, applying `--set key=value` overrides. `probe`: for `nas-stab probe`,
    which trains nothing, so the leaderboard's rules about searched sizes and learning rates do not apply."""
    return loads_spec(read_text(path), file=str(path), overrides=overrides, probe=probe)


def loads_spec(text: str, file: str = "<string>", overrides: Iterable[str] = (), *, run_file: bool = False,
               probe: bool = False) -> Spec:
    data, lines = load_yaml(text, file)
    files: dict[tuple, str] = {}
    if run_file and isinstance(data, dict):
        data.pop("meta", None)  # provenance that the run directory's spec.yaml carries
    else:
        data, lines, files = compose(data, lines, file, read_text)
    if data is None:
        raise SpecError("empty file; an experiment needs at least name, task and model", file=file, line=1)
    if not isinstance(data, dict):
        raise SpecError(f"the top level must be a mapping of sections, got {type(data).__name__}", file=file, line=1)
    override_paths: dict[tuple, str] = {}
    for text_ in overrides:
        path, value = _parse_override(text_)
        if path == ("task", "dataset", "root") and isinstance(value, str) and value:
            value = str(Path.cwd() / Path(value).expanduser())  # typed on the command line: from where it was typed
        set_path(data, path, value, text_)
        if path[0] == "space" and len(path) > 2:
            path = ("space", ".".join(path[1:]))
        override_paths[path] = text_
    return from_data(data, Ctx(file, lines, override_paths, files), stored=run_file, probe=probe)


def from_data(data: dict, ctx: Ctx, *, stored: bool = False, probe: bool = False) -> Spec:
    """Validate plain data (already parsed) into a `Spec`."""
    data = copy.deepcopy(data)
    for key in schema.REQUIRED_TOP:
        if key not in data:
            raise ctx.error((), f"missing required key {key!r}")
    # every key's problem at once (the shorthand forms, unknown keys, types, ranges), then the cross-field rules, each
    # group of them reporting its first problem (a wrong key stands at its default for them)
    ctx.collected = []
    seeds_more = _normalize(data, ctx)
    spec = build(schema.Spec, {k: v for k, v in data.items() if k != "space"}, ctx)
    errors, ctx.collected = ctx.collected, None
    standins: set[str] = set()
    space = _parse_space(data.get("space"), ctx, spec, errors, standins)
    if space is not None:
        # the cross-field rules too, even where a key above was wrong (it stands at its default there, a wrong
        # dimension at its base value): every problem of the file in one report, each once, none that only the
        # stand-in of a wrong dimension causes
        seen = {str(e) for e in errors}
        errors += [e for e in check_spec(dataclasses.replace(spec, space=space, source=ctx.file, raw=data, seeds_more=seeds_more), ctx,
                                          stored=stored, probe=probe)
                   if str(e) not in seen and not any(f"'{k}'" in e.message or e.key == f"space.{k}" for k in standins)]
    if errors:
        errors.sort(key=lambda e: (e.line is None, e.line or 0))  # in the file's order (--set's after it), stable
        raise errors[0] if len(errors) == 1 else SpecErrors(errors)
    spec = dataclasses.replace(spec, space=space, source=ctx.file, raw=data, seeds_more=seeds_more)

    return dataclasses.replace(spec, notes=advice(spec, ctx))


def _parse_space(raw: Any, ctx: Ctx, spec: Spec, errors: list[SpecError], standins: set[str]) -> Space | None:
    """The `space:` mapping parsed, each wrong dimension reported (into `errors`) and replaced by its key's base value
    (an unknown key: left out) so the others and the cross-field rules are still checked; None when the section
    itself is unusable."""
    raw = dict(raw) if isinstance(raw, dict) else raw
    fixed: set[str] = set()
    for _ in range(2 * len(raw) + 1 if isinstance(raw, dict) else 1):
        try:
            return parse_space(raw, ctx.error, lambda k: check_key(spec, k))
        except SpecError as e:
            errors.append(e)
            bad = next((k for k in (raw if isinstance(raw, dict) else ()) if isinstance(k, str)
                        and (e.key == f"space.{k}" or str(e.key).startswith(f"space.{k}."))), None)
            if bad is None:
                return None
            if bad in fixed or check_key(spec, bad) is not None:
                del raw[bad]
            else:  # still searched, at one value, for the rules that ask whether a key is searched
                raw[bad] = [get_key(spec, bad)]
                fixed.add(bad)
                standins.add(bad)
    return None


def _normalize(data: dict, ctx: Ctx) -> tuple[int, ...]:
    """Shorthand forms -> canonical ones, before the typed build; the further seeds of adaptive seeds
    (`seeds: {min: n, max: m}`: seeds 0..n-1 everywhere, n..m-1 where a verdict is still open). A form that is
    wrong is reported (`ctx.report`) and stands at its default, so the rest of the file is still checked."""
    try:
        more = _normalize_seeds(data, ctx)
    except SpecError as e:
        ctx.report(e)
        data["seeds"], more = [0], ()
    search = data.get("search")
    if isinstance(search, dict) and "pruner" in search:
        try:
            search["pruner"] = _pruner(search["pruner"], ctx)
        except SpecError as e:
            ctx.report(e)
            search["pruner"] = {"name": "none", "options": {}}
    return more


def _normalize_seeds(data: dict, ctx: Ctx) -> tuple[int, ...]:
    seeds = data.get("seeds", [0])
    more: tuple[int, ...] = ()
    if isinstance(seeds, dict):
        seeds, more = _seed_range(seeds, ctx)
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if not 1 <= seeds <= 10_000:
            raise ctx.error(("seeds",), f"a seed count must be between 1 and 10000, got {seeds}")
        seeds = list(range(seeds))
    if not isinstance(seeds, list) or not seeds:
        raise ctx.error(("seeds",), f"must be a count n or a non-empty list of integers, got {seeds!r}")
    bad = [s for s in seeds if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s <= 10**9]
    if bad:
        raise ctx.error(("seeds",), f"seeds must be integers from 0 to 10**9, got {', '.join(map(repr, bad))}")
    if len(set(seeds)) != len(seeds):
        raise ctx.error(("seeds",), "seeds must be distinct")
    data["seeds"] = seeds
    return more


def _pruner(p: Any, ctx: Ctx) -> dict:
    """`search.pruner` in its canonical form {name, options}."""
    if p is None:
        p = "none"
    if isinstance(p, dict) and set(p) == {"name", "options"}:
        return p  # canonical form, as written into a run's spec.yaml
    if isinstance(p, dict):
        if len(p) != 1:
            raise ctx.error(("search", "pruner"), "a pruner mapping has one key, the pruner name: {median: {n_warmup_steps: 5}}")
        (name, opts), = p.items()
        if opts is not None and not isinstance(opts, dict):
            raise ctx.error(("search", "pruner", name), f"pruner options must be a mapping, got {opts!r}")
        return {"name": name, "options": opts or {}}
    if isinstance(p, str):
        return {"name": p, "options": {}}
    raise ctx.error(("search", "pruner"), f"must be a pruner name or {{name: {{options}}}}, got {p!r}")


def _parse_override(text: str) -> tuple[tuple, Any]:
    if "=" not in text:
        raise SpecError("expected key=value", file=f"--set {text}")
    key, value = text.split("=", 1)
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise SpecError(f"bad key {key!r}", file=f"--set {text}")
    parsed, _ = load_yaml(value, file=f"--set {text}") if value.strip() else (None, {})
    if value.strip() == "":
        parsed = ""
    return tuple(key.split(".")), parsed


def to_plain(obj: Any) -> Any:
    """Dataclasses -> dicts and tuples -> lists, for YAML/JSON output."""
    if isinstance(obj, Space):
        return [dataclasses.asdict(d) for d in obj.dims]
    if dataclasses.is_dataclass(obj):
        out = {f.name: to_plain(getattr(obj, f.name)) for f in public_fields(type(obj))}
        if getattr(obj, "COMPONENT", None):  # a component section: its entry's own options beside the common keys
            out.update({k: to_plain(v) for k, v in getattr(obj, "ignored", ())})
            options = getattr(obj, "options", None)
            if options is not None:
                out.update(to_plain(options))
        return out
    if isinstance(obj, (list, tuple)):
        return [to_plain(x) for x in obj]
    if isinstance(obj, dict):
        return {k: to_plain(v) for k, v in obj.items()}
    return obj


def _seed_range(seeds: dict, ctx: Ctx) -> tuple[list[int], tuple[int, ...]]:
    """`seeds: {min: n, max: m}` -> (seeds 0..n-1, the further seeds n..m-1)."""
    for k in seeds:
        if k not in ("min", "max"):
            hint = did_you_mean(str(k), ("min", "max"))
            raise ctx.error(("seeds", str(k)), f"unknown key {k!r} of adaptive seeds (keys: min, max){hint}")
    for k in ("min", "max"):
        v = seeds.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 10_000:
            raise ctx.error(("seeds", k), f"adaptive seeds need {k}: a seed count from 1 to 10000, got {v!r}")
    lo, hi = seeds["min"], seeds["max"]
    if hi <= lo:
        raise ctx.error(("seeds", "max"), f"must be larger than seeds.min ({lo}), got {hi}: with max <= min the "
                                          f"count is fixed (write seeds: {lo})")
    return list(range(lo)), tuple(range(lo, hi))


_ADDED_KEYS = (  # (section, key, when it applies)
    ("search", "bracket", lambda spec: search_mode(spec).brackets),
    ("search", "transfer", lambda spec: search_mode(spec).transfer),
    ("search.transfer", "inner", lambda spec: search_mode(spec).inner_bracket),
    ("search", "population_size", lambda spec: spec.search.population_size is not None),
    ("model", "aggregation_exponent", lambda spec: spec.model.aggregation_exponent is not None),
    ("model", "tau_exponent", lambda spec: spec.model.tau_exponent is not None),
    ("model", "stages", lambda spec: spec.model.stages != 3),
    ("model", "layer_skip", lambda spec: spec.model.layer_skip),
    ("model", "base_width", lambda spec: spec.model.base_width is not None),
    ("model", "base_depth", lambda spec: spec.model.base_depth is not None),
    ("model", "readout_zero_init", lambda spec: spec.model.readout_zero_init),
    ("model", "ffn_ratio", lambda spec: spec.model.ffn_ratio is not None),
    # at its default out of the hashes: a run directory made before it resumes, its runs not yet trained
    # taking the budgeted cadence (which changes no training and no pruning: docs/run-directory.md)
    ("stability", "budget", lambda spec: spec.stability.budget != schema.DEFAULT_BUDGET),
)


CHANGED_DEFAULTS = (  # (section, key, the earlier default): a run directory made with it keeps it
    ("stability", "every", 50),  # now 10 snapshots per run (null)
)


def with_earlier_defaults(spec: Spec) -> Spec | None:
    """`spec` with the earlier default of each changed default (`CHANGED_DEFAULTS`) that the
    experiment leaves unset; None when it sets them all. A rerun of an experiment whose run
    directory was made before a default changed resumes with that directory's value
    (`store.rundir.adopt_earlier_defaults`), its spec hash and run keys unchanged."""
    raw = spec.raw or {}
    data = copy.deepcopy(raw)
    changed = False
    for section, key, old in CHANGED_DEFAULTS:
        sec = raw.get(section)
        if isinstance(sec, dict) and key in sec:
            continue
        data.setdefault(section, {})
        if not isinstance(data[section], dict):
            continue
        data[section][key] = old
        changed = True
    if not changed:
        return None
    return from_data(data, Ctx(spec.source, {}, {}))


def _drop_added(plain: dict, spec: Spec) -> None:
    """Keys added later, out of the hashes while they cannot apply: run directories made before them
    keep their spec hash and their runs' keys (and resume). A section may be nested ("search.transfer").
    And the retired keys of `task.dataset` (`schema.DatasetConfig.RETIRED`) in them at their old defaults where the
    dataset does not own them: the hashes of the flat section every dataset's options once shared."""
    task = plain.get("task")
    dataset = task.get("dataset") if isinstance(task, dict) else None
    if isinstance(dataset, dict):
        for key, old in schema.DatasetConfig.RETIRED.items():
            dataset.setdefault(key, old)
    for section, key, applies in _ADDED_KEYS:
        node: Any = plain  # a nested mapping, or None past a missing section
        for part in section.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and not applies(spec):
            node.pop(key, None)


def spec_hash(spec: Spec) -> str:
    """Hash of everything that decides results (not the description)."""
    plain = to_plain(spec)
    plain.pop("description", None)
    plain.pop("runner", None)  # where trials run does not change their results
    plain.pop("leaderboard", None)  # nor how the table is drawn
    plain.pop("logging", None)  # nor which logs are written
    _drop_added(plain, spec)
    plain["space"] = spec.raw.get("space") if spec.raw else None
    blob = json.dumps(plain, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def config_key(spec: Spec, seed: int) -> str:
    """Identity of one trained run: hash of its resolved configuration and seed."""
    return config_keys(spec, [seed])[0]


def config_keys(spec: Spec, seeds: Iterable[int]) -> list[str]:
    """`config_key` of one resolved configuration with each seed, the configuration made plain once (a grid of
    10^4 points x 50 seeds spent 28 s of a resume's start-up making it plain per seed)."""
    plain = {k: to_plain(getattr(spec, k)) for k in SEARCHABLE}
    _drop_added(plain, spec)
    config = json.dumps(plain, sort_keys=True, default=str)
    # the text json.dumps({"config": plain, "seed": seed}, sort_keys=True, default=str) writes
    return [hashlib.sha256(f'{{"config": {config}, "seed": {json.dumps(seed, default=str)}}}'.encode()).hexdigest()[:16]
            for seed in seeds]


def load_run_spec(run_dir: str | Path) -> Spec:
    """The spec stored in a run directory's spec.yaml."""
    p = Path(run_dir) / "spec.yaml"
    if not p.exists():
        raise RunError(f"{run_dir} is not a run directory: {p} not found")
    return loads_spec(read_text(p), file=str(p), run_file=True)
