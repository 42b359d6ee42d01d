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

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from nas_stab.textfmt import did_you_mean


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
        return f"unknown {self.kind} {name!r}" + did_you_mean(name, self.names())

    def items(self):
        return [(n, self._entries[n]) for n in self.names()]
