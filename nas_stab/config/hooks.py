"""Rules that need a component's own knowledge, registered by that component: `config` imports nothing
above it.

A dataset knows its options, an architecture its sizes, Optuna its pruners, the transfer search its
objectives, a tracking backend its package. Each registers a check here when its module is imported::

    @hooks.register("config", "model")
    def check_model(spec) -> tuple[tuple, str] | None:  # (key path, reason) or None
        ...

A component kind whose entries own options (a dataset's, `schema.DatasetConfig.COMPONENT`) registers how to find the
options class of the entry a section names, the way `build` composes that section::

    hooks.register_options("dataset", dataset_options, dataset_option_classes)
    # dataset_options(section, parent) -> type | None  (KeyError: no such entry)
    # dataset_option_classes(plugins) -> [(name, its task kind, type | None), ...]  (every entry: schema, docs)

`config.rules` runs the checks of a group in the order of its providers. The modules that register are named in
`PROVIDERS`, per group, and imported by name the first time that group is asked for, the way a plugin host loads
its plugins: config names them, it does not import them, and they import config (never the reverse).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

Check = Callable[[Any], "tuple[tuple, str] | None"]  # spec -> (key path, reason) or None

# each group's providers, in the order their checks run: a group's modules are loaded the first time that group is
# asked for, so validating an experiment loads only what its sections need (no Optuna without a pruner, no tracking
# backend's module without logging.tracking, no transfer objectives without search.transfer)
PROVIDERS: dict[str, tuple[str, ...]] = {
    "config": ("nas_stab.data", "nas_stab.models"),  # one configuration: its dataset and model
    "search": ("nas_stab.search.optuna_study",),  # the pruner and its options
    "transfer": ("nas_stab.search.sources.transfer_objectives",),  # search.transfer's objectives
    "tracking": ("nas_stab.trackers.tracking",),  # logging.tracking's packages
    "options": ("nas_stab.data", "nas_stab.models"),  # the classes of the components' own options (a dataset's, an arch's)
}
GROUPS = tuple(PROVIDERS)

_CHECKS: dict[str, dict[str, Check]] = {g: {} for g in GROUPS}
_loaded: set[str] = set()
OptionsLookup = Callable[[Mapping[str, Any], Mapping[str, Any]], "type | None"]  # (section, its parent) -> class
OptionsListing = Callable[[bool], "list[tuple[str, str, type | None]]"]  # plugins too? -> (name, task, class)
_OPTIONS: dict[str, tuple[OptionsLookup, OptionsListing]] = {}


def register(group: str, name: str) -> Callable[[Check], Check]:
    """Register `fn(spec)` as the check `name` of `group` (re-registering a name replaces it: a reload)."""
    if group not in GROUPS:
        raise ValueError(f"unknown check group {group!r}; one of {', '.join(GROUPS)}")

    def deco(fn: Check) -> Check:
        _CHECKS[group][name] = fn
        return fn

    return deco


def register_options(kind: str, lookup: OptionsLookup, listing: OptionsListing) -> None:
    """Register how `build` finds the options class of the `kind` entry a section names: `lookup(section, parent)`
    (`parent` the mapping holding it; None when the entry has no options, KeyError when none is named), and
    `listing(plugins)`, every entry's (name, task kind, options class) for the JSON Schema and the reference."""
    _OPTIONS[kind] = (lookup, listing)


def options_class(kind: str, section: Mapping[str, Any], parent: Mapping[str, Any]) -> type | None:
    """The options class of the `kind` entry `section` names (providers of "options" loaded the first time);
    KeyError when the name is not registered."""
    _load("options")
    if kind not in _OPTIONS:
        raise KeyError(kind)
    return _OPTIONS[kind][0](section, parent)


def option_classes(kind: str, plugins: bool = True) -> list[tuple[str, str, type | None]]:
    """Every `kind` entry's (name, task kind, options class), installed plugins' too unless `plugins` is False."""
    _load("options")
    return _OPTIONS[kind][1](plugins) if kind in _OPTIONS else []


def _load(group: str) -> None:
    if group not in _loaded:
        for module in PROVIDERS[group]:
            importlib.import_module(module)
        _loaded.add(group)


def checks(group: str) -> list[Check]:
    """The checks of `group`, its providers loaded, in the order of `PROVIDERS[group]` (not the order the modules
    happened to be imported in: which problem is reported first must not depend on it)."""
    providers = PROVIDERS[group]
    _load(group)

    def provider(fn: Check) -> int:
        module = getattr(fn, "__module__", "")
        return next((i for i, p in enumerate(providers) if module == p or module.startswith(p + ".")), len(providers))

    return sorted(_CHECKS[group].values(), key=provider)


def first_problem(group: str, spec: Any) -> tuple[tuple, str] | None:
    """The first (key path, reason) a check of `group` finds in `spec`, or None."""
    for check in checks(group):
        problem = check(spec)
        if problem:
            return problem
    return None
