"""Rules that need a component's own knowledge, registered by that component: `config` imports nothing
above it.

A dataset knows its options, an architecture its sizes, Optuna its pruners, the transfer search its
objectives, a tracking backend its package. Each registers a check here when its module is imported::

    @hooks.register("config", "model")
    def check_model(spec) -> tuple[tuple, str] | None:  # (key path, reason) or None
        ...

`config.rules` runs the checks of a group in the order of its providers. The modules that register are named in
`PROVIDERS`, per group, and imported by name the first time that group is asked for, the way a plugin host loads
its plugins: config names them, it does not import them, and they import config (never the reverse).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
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
}
GROUPS = tuple(PROVIDERS)

_CHECKS: dict[str, dict[str, Check]] = {g: {} for g in GROUPS}
_loaded: set[str] = set()


def register(group: str, name: str) -> Callable[[Check], Check]:
    """Register `fn(spec)` as the check `name` of `group` (re-registering a name replaces it: a reload)."""
    if group not in GROUPS:
        raise ValueError(f"unknown check group {group!r}; one of {', '.join(GROUPS)}")

    def deco(fn: Check) -> Check:
        _CHECKS[group][name] = fn
        return fn

    return deco


def checks(group: str) -> list[Check]:
    """The checks of `group`, its providers loaded, in the order of `PROVIDERS[group]` (not the order the modules
    happened to be imported in: which problem is reported first must not depend on it)."""
    providers = PROVIDERS[group]
    if group not in _loaded:
        for module in providers:
            importlib.import_module(module)
        _loaded.add(group)

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
