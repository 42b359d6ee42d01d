"""One registry per kind of component, keyed by the YAML name (timm's pattern).

    ARCHS = Registry("arch")

    @ARCHS.register("mlp", task="classification")
    def build_mlp(cfg, info): ...

An unknown name fails with the nearest valid one; nothing named in YAML is
ever imported.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from nas_stab.textfmt import did_you_mean


@dataclass(frozen=True)
class Entry:
    name: str
    obj: Any
    info: dict = field(default_factory=dict)


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

    def __contains__(self, name: str) -> bool:
        return name in self._entries

    def names(self) -> list[str]:
        return sorted(self._entries)

    def entry(self, name: str) -> Entry:
        if name not in self._entries:
            raise KeyError(self.unknown(name))
        return self._entries[name]

    def get(self, name: str) -> Any:
        return self.entry(name).obj

    def unknown(self, name: str) -> str:
        return f"unknown {self.kind} {name!r}" + did_you_mean(name, self.names())

    def items(self):
        return [(n, self._entries[n]) for n in self.names()]
