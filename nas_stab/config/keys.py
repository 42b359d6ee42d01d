"""Dotted keys (`model.width`, `train.lr`): naming a searchable leaf, reading it from a `Spec`, setting it in the raw
mapping. A leaf of `config`: the loader, the rules and the resolver all use these, none of them is imported here."""
from __future__ import annotations

import dataclasses
from typing import Any

from nas_stab.config import schema
from nas_stab.config.build import public_fields
from nas_stab.errors import SpecError
from nas_stab.textfmt import did_you_mean

SEARCHABLE = ("task", "model", "train", "stability")


def check_key(spec: schema.Spec, dotted: str) -> str | None:
    """None if `dotted` names a searchable leaf of the configuration, else a message."""
    if not isinstance(dotted, str):
        return f"keys are dotted strings, got {dotted!r}"
    parts = dotted.split(".")
    if parts[0] not in SEARCHABLE:
        return f"unknown key {dotted!r}: searchable keys start with one of {', '.join(SEARCHABLE)}" + (
            did_you_mean(parts[0], SEARCHABLE) if parts[0] not in ("name", "seeds", "search", "runner", "leaderboard", "space") else ""
        )
    obj: Any = spec
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(obj):
            return f"unknown key {dotted!r}: {'.'.join(parts[:i])} has no sub-keys"
        names = [f.name for f in public_fields(type(obj))] + _own_names(obj)
        if part not in names:
            return f"unknown key {dotted!r}" + did_you_mean(part, names)
        obj = _child(obj, part)
    if dataclasses.is_dataclass(obj):
        return f"{dotted!r} is a section; name one of its keys"
    return None


def get_key(spec: schema.Spec, dotted: str) -> Any:
    obj: Any = spec
    for part in dotted.split("."):
        obj = _child(obj, part)
    return obj


def _own_names(section: Any) -> list[str]:
    """The own options of a component section (a dataset's: `task.dataset.size`), beside its common keys."""
    options = getattr(section, "options", None) if getattr(section, "COMPONENT", None) else None
    return [f.name for f in public_fields(type(options))] if options is not None else []


def _child(section: Any, key: str) -> Any:
    """`section.key`, or the component's own option `key` (`task.dataset.size` is `spec.task.dataset.options.size`)."""
    if key in _own_names(section):
        return getattr(section.options, key)
    return getattr(section, key)


def set_path(data: dict, path: tuple, value: Any, text: str) -> None:
    if path[0] == "space" and len(path) > 2:
        # space keys are dotted themselves: --set space.train.lr=[0.1,0.2]
        node = data.setdefault("space", {}) or {}
        if not isinstance(node, dict):
            raise SpecError(f"space is not a mapping (it is a {type(node).__name__}): it cannot take a dimension",
                            file=f"--set {text}")
        data["space"] = node
        if value is None:  # --set space.train.lr=null removes the dimension, as null does under extends:
            node.pop(".".join(path[1:]), None)
            return
        node[".".join(path[1:])] = value
        return
    node = data
    for i, part in enumerate(path[:-1]):
        nxt = node.get(part)
        if nxt is None:
            nxt = node[part] = {}
        if not isinstance(nxt, dict):
            raise SpecError(f"{'.'.join(path[: i + 1])} is not a mapping", file=f"--set {text}")
        node = nxt
    node[path[-1]] = value
