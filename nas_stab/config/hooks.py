"""Rules that need a component's own knowledge, registered by that component: `config` imports nothing
above it.

A dataset knows its options, an architecture its sizes, Optuna its pruners, the transfer search its
objectives, a tracking backend its package. Each registers a check here when its module is imported::

    @hooks.register("config", "model")
    def check_model(spec) -> tuple[tuple, str] | None:  # (key path, reason) or None
        ...

`config.rules` runs the checks of a group in registration order. The modules that register are named in
`PROVIDERS` and imported by name the first time a group is asked for, the way a plugin host loads its
plugins: config names them, it does not import them, and they import config (never the reverse).
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

Check = Callable[[Any], "tuple[tuple, str] | None"]  # spec -> (key path, reason) or None

GROUPS = ("config", "search", "transfer", "tracking")  # one configuration; search; search.transfer; logging.tracking
PROVIDERS = ("nas_stab.data", "nas_stab.models", "nas_stab.search.optuna_study",
             "nas_stab.search.sources.transfer_objectives", "nas_stab.results.tracking")

_CHECKS: dict[str, dict[str, Check]] = {g: {} for g in GROUPS}
_loaded = False


def register(group: str, name: str) -> Callable[[Check], Check]:
    """Register `fn(spec)` as the check `name` of `group` (re-registering a name replaces it: a reload)."""
    if group not in GROUPS:
        raise ValueError(f"unknown check group {group!r}; one of {', '.join(GROUPS)}")

    def deco(fn: Check) -> Check:
        _CHECKS[group][name] = fn
        return fn

    return deco


def checks(group: str) -> list[Check]:
    """The checks of `group`, every provider loaded, in the order of `PROVIDERS` (not the order the modules
    happened to be imported in: which problem is reported first must not depend on it)."""
    global _loaded
    if not _loaded:
        for module in PROVIDERS:
            importlib.import_module(module)
        _loaded = True

    def provider(fn: Check) -> int:
        module = getattr(fn, "__module__", "")
        return next((i for i, p in enumerate(PROVIDERS) if module == p or module.startswith(p + ".")), len(PROVIDERS))

    return sorted(_CHECKS[group].values(), key=provider)


def first_problem(group: str, spec: Any) -> tuple[tuple, str] | None:
    """The first (key path, reason) a check of `group` finds in `spec`, or None."""
    for check in checks(group):
        problem = check(spec)
        if problem:
            return problem
    return None
