"""One registry per kind of component, keyed by the YAML name (timm's pattern).

    ARCHS = Registry("arch")

    @ARCHS.register("mlp", task="classification")
    def build_mlp(cfg, info): ...

A component whose module is heavy (torch) is *declared* instead, with its metadata and where it lives; the
module is imported the first time the component is used, so validating an experiment reads the metadata
(its task, its check, its class count) without loading any implementation::

    DATASETS.declare("digits", "nas_stab.data.tabular:load_digits", task="classification", classes=10)

An unknown name fails with the nearest valid one; nothing named in YAML is ever imported (a declared
target is a constant of the code, never a value of an experiment file).
"""
from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from nas_stab.textfmt import did_you_mean


@functools.cache
def _installed_entry_points() -> Any:  # EntryPoints (3.12+) or SelectableGroups (3.10, 3.11): both `.select(group=)`
    """Every installed package's entry points, read once per process (scanning the installed packages costs tens
    of milliseconds in an environment with many: one scan serves every registry)."""
    from importlib.metadata import entry_points  # deferred: only when a registry is first filled

    return entry_points()


@dataclass(frozen=True)
class Entry:
    name: str
    obj: Any  # the component (None until a declared entry is first used)
    info: dict = field(default_factory=dict)  # its metadata: task, doc, check, ...
    target: str = ""  # a declared entry: "module:attribute", imported on first use


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self.failed: dict[str, str] = {}  # plugin entry point -> why it did not load (`load_plugins`)

    def register(self, name: str, **info: Any) -> Callable:
        def deco(obj: Any) -> Any:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._entries[name] = Entry(name, obj, info)
            return obj

        return deco

    def declare(self, name: str, target: str, **info: Any) -> None:
        """Register the component at `target` ("package.module:attribute") with its metadata, without importing it."""
        if name in self._entries:
            raise ValueError(f"{self.kind} {name!r} registered twice")
        module, sep, attr = target.partition(":")
        if not (module and sep and attr):
            raise ValueError(f"{self.kind} {name!r}: target {target!r} is not 'module:attribute'")
        self._entries[name] = Entry(name, None, info, target)

    def load_plugins(self, group: str) -> None:
        """Declare the components of every installed package that names this registry's entry-point `group`
        (``[project.entry-points."nas_stab.datasets"]``: ``name = "package.catalog"``, a module whose import
        declares them, light: its implementations load on first use). Installed packages only: an experiment file
        never names code. A plugin that fails to load is skipped, and the name a spec gives then says why."""
        for ep in _installed_entry_points().select(group=group):
            before = set(self._entries)
            try:
                ep.load()
            except Exception as e:  # a broken plugin must not stop every experiment
                self.failed[ep.name] = f"plugin {ep.value!r} ({group}) did not load: {type(e).__name__}: {e}"
                continue
            dist = getattr(getattr(ep, "dist", None), "name", None) or ep.value
            for name in set(self._entries) - before:
                self._entries[name] = replace(self._entries[name], info={**self._entries[name].info, "plugin": dist})

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entry(self, name: str) -> Entry:
        if name not in self._entries:
            raise KeyError(self.unknown(name))
        return self._entries[name]

    def get(self, name: str) -> Any:
        """The component itself (a declared one's module imported the first time)."""
        e = self.entry(name)
        if e.obj is None and e.target:
            module, _, attr = e.target.partition(":")
            e = self._entries[name] = replace(e, obj=getattr(importlib.import_module(module), attr))
        return e.obj

    def unknown(self, name: str) -> str:
        broken = "".join(f"; {why}" for why in self.failed.values())
        return f"unknown {self.kind} {name!r}" + did_you_mean(name, self.names()) + broken

    def items(self):
        return [(n, self._entries[n]) for n in self.names()]
