"""Generic builder: plain YAML data -> frozen dataclasses, with checks.

Reads each field's annotation and metadata (see `schema.py`) and reports the
first problem as a `SpecError` naming file, line and dotted key; misspelt keys
and choices name the nearest valid one.
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union

from nas_stab.config import hooks
from nas_stab.config.yamlio import Lines, line_of
from nas_stab.errors import SpecError
from nas_stab.textfmt import did_you_mean


class Ctx:
    """Where we are: the file, the line table and how to name a path."""

    def __init__(self, file: str, lines: Lines, overrides: dict[tuple, str] | None = None, files: dict[tuple, str] | None = None):
        self.file = file
        self.lines = lines
        self.overrides = overrides or {}
        self.files = files or {}  # path -> file, for values inherited through `extends:`
        self.collected: list[SpecError] | None = None  # a list: `build` gathers every key's error there

    def report(self, err: SpecError) -> None:
        """Raise `err`, or keep it and go on when errors are being collected."""
        if self.collected is None:
            raise err
        self.collected.append(err)

    def error(self, path: tuple, message: str) -> SpecError:
        key = ".".join(str(p) for p in path) or None
        for opath, text in self.overrides.items():
            if tuple(path[: len(opath)]) == opath:
                return SpecError(message, file=f"--set {text}", key=key)
        p = tuple(path)
        while p and p not in self.lines:
            p = p[:-1]
        return SpecError(message, file=self.files.get(p, self.file), line=line_of(self.lines, path), key=key)


def is_union(tp: Any) -> bool:
    """`Optional[X]`, `Union[X, Y]` and `X | None` alike (the schema's hints use both spellings)."""
    return typing.get_origin(tp) in (Union, types.UnionType)


@functools.cache
def _type_hints(cls) -> dict[str, Any]:
    """`typing.get_type_hints`, once per class: it evaluates every string annotation
    on each call, which was 80% of resolving a trial's configuration."""
    return typing.get_type_hints(cls)


def public_fields(cls) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


def type_name(tp: Any) -> str:
    origin = typing.get_origin(tp)
    if tp is Any:
        return "any value"
    if origin is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(tp)))
    if is_union(tp):
        return " or ".join(type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if origin is tuple:
        return f"a list of {type_name(typing.get_args(tp)[0])}"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(tp, str(tp))


def build(cls, data: Any, ctx: Ctx, path: tuple = (), parent: Mapping[str, Any] | None = None) -> Any:
    """Build dataclass `cls` from a mapping (None = all defaults); `parent` is the mapping holding it (a
    component section's options class may depend on it: `task.kind` for a dataset)."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ctx.error(path, f"expected a mapping, got {type(data).__name__} {data!r}")
    fields = {f.name: f for f in public_fields(cls)}
    component = getattr(cls, "COMPONENT", None)
    own: dict[str, Any] = {}
    if component:  # the keys beyond the common ones are the named entry's own options
        own = {k: v for k, v in data.items() if k not in fields}
        data = {k: v for k, v in data.items() if k in fields}
    for key in data:
        if key not in fields:
            ctx.report(ctx.error(path + (key,), "unknown key" + did_you_mean(key, fields)))
    hints = _type_hints(cls)
    kwargs = {}
    for name, f in fields.items():
        p = path + (name,)
        if name in data:
            try:
                kwargs[name] = convert(hints[name], data[name], ctx, p, f.metadata, parent=data)
            except SpecError as e:
                ctx.report(e)  # collecting: the default stands in, so the other keys are still checked
                if dataclasses.is_dataclass(hints[name]):
                    kwargs[name] = build(hints[name], None, ctx, p, parent=data)
        elif dataclasses.is_dataclass(hints[name]):
            kwargs[name] = build(hints[name], None, ctx, p, parent=data)
    if component:
        kwargs.update(_own_options(cls, component, own, data, parent or {}, ctx, path))
    return cls(**kwargs)


def _own_options(cls, component: str, own: dict[str, Any], data: dict[str, Any], parent: Mapping[str, Any],
                 ctx: Ctx, path: tuple) -> dict[str, Any]:
    """`options` and `ignored` of a component section: its entry's own options built from `own`, the retired keys
    it does not read set aside (kept in the hashes), the other keys refused naming the entry's keys."""
    try:
        options_cls = hooks.options_class(component, data, parent)
    except KeyError:  # no such entry: the check of the name says so; its keys cannot be judged
        return {"ignored": tuple(sorted(own.items()))}
    names = [f.name for f in public_fields(options_cls)] if options_cls else []
    retired = getattr(cls, "RETIRED", {})
    mine, ignored = {}, []
    for key, value in own.items():
        if key in names:
            mine[key] = value
        elif key in retired:
            if value != retired[key]:  # at its old default it says nothing (a stored spec.yaml of then lists them all)
                ignored.append((key, value))
        else:
            known = [f.name for f in public_fields(cls)] + names
            theirs = f"{component} {data.get(cls.COMPONENT_KEY, _default(cls, cls.COMPONENT_KEY))!r}"
            ctx.report(ctx.error(path + (key,), f"unknown key for {theirs}" + did_you_mean(key, known)))
    out: dict[str, Any] = {"ignored": tuple(sorted(ignored))}
    if options_cls is not None:
        out["options"] = build(options_cls, mine, ctx, path, parent=data)
    return out


def _default(cls, key: str) -> Any:
    return next((f.default for f in dataclasses.fields(cls) if f.name == key), None)


def convert(tp: Any, value: Any, ctx: Ctx, path: tuple, meta: Mapping[str, Any] | None = None,
            parent: Mapping[str, Any] | None = None) -> Any:
    """Check `value` against type `tp` and the field metadata; return it normalized (`parent`: the mapping
    holding a section, for `build`)."""
    meta = meta or {}
    origin = typing.get_origin(tp)
    if dataclasses.is_dataclass(tp):
        return build(tp, value, ctx, path, parent=parent)
    if is_union(tp):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            if type(None) in typing.get_args(tp):
                return None
            raise ctx.error(path, f"must be {type_name(tp)}, not null")
        errors = []
        for a in args:
            try:
                return convert(a, value, ctx, path, meta)
            except SpecError as e:
                errors.append(e)
        if len(args) == 1 or any("must be" not in e.message for e in errors):
            raise next((e for e in errors if "must be" not in e.message), errors[0])
        raise ctx.error(path, f"must be {type_name(tp)}, got {value!r}")
    if tp is Any:
        out = value
    elif origin is Literal:
        choices = typing.get_args(tp)
        if value not in choices or isinstance(value, bool):
            raise ctx.error(path, f"invalid value {value!r}" + did_you_mean(value, choices))
        out = value
    elif origin is tuple:
        (item_tp, *_rest) = typing.get_args(tp)
        if not isinstance(value, (list, tuple)):
            raise ctx.error(path, f"must be {type_name(tp)}, got {value!r}")
        out = tuple(convert(item_tp, v, ctx, path + (i,)) for i, v in enumerate(value))
    elif tp is bool:
        if not isinstance(value, bool):
            raise ctx.error(path, f"must be true or false, got {value!r}")
        out = value
    elif tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
                value = int(value)
            else:
                raise ctx.error(path, f"must be an integer, got {value!r}")
        out = value
    elif tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ctx.error(path, f"must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ctx.error(path, f"must be a finite number, got {value!r}")
        out = float(value)
    elif tp is str:
        if not isinstance(value, str):
            raise ctx.error(path, f"must be a string, got {value!r}")
        out = value
    else:  # pragma: no cover - schema bug
        raise TypeError(f"unsupported schema type {tp}")
    _check_range(out, meta, ctx, path)
    return out


MAX_NUMBER = 10**9  # bound of every number the schema does not bound itself: no overflow, no endless loop


def _check_range(value: Any, meta: Mapping[str, Any], ctx: Ctx, path: tuple) -> None:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "le" not in meta and "lt" not in meta and value > MAX_NUMBER:
            raise ctx.error(path, f"must be <= {MAX_NUMBER:g}, got {value!r}")
        if "ge" not in meta and "gt" not in meta and value < -MAX_NUMBER:
            raise ctx.error(path, f"must be >= {-MAX_NUMBER:g}, got {value!r}")
        for op, test, word in (
            ("ge", lambda v, b: v >= b, ">="),
            ("gt", lambda v, b: v > b, ">"),
            ("le", lambda v, b: v <= b, "<="),
            ("lt", lambda v, b: v < b, "<"),
        ):
            if op in meta and not test(value, meta[op]):
                raise ctx.error(path, f"must be {word} {meta[op]}, got {value!r}")
    if "pattern" in meta and isinstance(value, str) and not re.fullmatch(meta["pattern"], value):
        raise ctx.error(path, f"{value!r} must match {meta['pattern']}")
