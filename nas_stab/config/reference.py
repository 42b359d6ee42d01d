"""The experiment-file reference (docs/experiment-file.md), generated from the schema.

`nas-stab schema --format markdown` prints it; a test fails when the copy in
docs/ differs from what the schema generates, so the reference cannot drift.
"""
from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from typing import Any

from nas_stab.config import hooks, schema
from nas_stab.config.build import MAX_NUMBER, _type_hints, is_union, public_fields, type_name
from nas_stab.config.json_schema import _SPECIAL, SECTIONS

HEADER = """\
# Experiment file reference

Generated from `nas_stab/config/schema.py` by `nas-stab schema --format markdown`
(a test keeps this page and the schema identical). Every key is checked once,
when the file is loaded: unknown keys (with the nearest valid one), types,
ranges, and the cross-field rules of `nas_stab/config/rules.py` (which knobs an
architecture supports, tau expressions, dataset files). `nas-stab validate
FILE` reports every problem as `file:line: key: message`; `nas-stab schema`
prints the same information as a JSON Schema for editors (see docs/install.md).

Top-level keys: `name` (required), `description`, `seeds`, `extends`, `task`
(required), `model` (required), `train`, `stability`, `space`, `search`,
`runner`, `leaderboard`.

- `extends: base.yaml` starts from another experiment file (a path relative to
  this one); this file's keys override the base's key by key, mappings merged
  recursively, lists and values replaced; `space:` entries are merged by key (a
  key set to `null` removes a base dimension). Chains are allowed, cycles are
  an error. Errors name the file and line each value came from.
- `seeds`: a count n (seeds 0..n-1), a list of distinct integers >= 0, or adaptive seeds `{min: n, max: m}`:
  seeds 0..n-1 everywhere, then more (in order, up to m-1) only at the cells where a leaderboard verdict is still
  open and can still be decided (grid and bracket searches with leaderboard.transfer; docs/leaderboard.md,
  Adaptive seeds).
- `space`: dotted key -> values or a distribution (below).
"""

SPACE = """\
## space: search dimensions

| form | meaning |
| --- | --- |
| `[a, b, c]` or `{values: [...]}` | categorical (a grid dimension) |
| `{log_grid: [low, high, n]}` | n log-spaced values, endpoints included |
| `{grid: [low, high, n]}` | n evenly spaced values, endpoints included |
| `{uniform: [low, high]}`, `{loguniform: [low, high]}` | continuous (not with `search.sampler: grid`) |
| `{int: [low, high], step: 1, log: false}` | integers; in a grid every integer from low to high (step apart) is a point, \
`log` only changes how the other samplers draw |
| any of these plus `when: {key: value or [values]}` | only searched when the condition holds; otherwise the base value stands |

Keys are the dotted names of the sections below (`train.lr`,
`model.branches`, `task.dataset.train`...). In the Optuna study a grid's
numeric dimensions are recorded as integer or float distributions (log-scaled
when the values are log-spaced), the others as categorical.
"""


def _default(f: dataclasses.Field) -> str:
    d = f.default
    if d is dataclasses.MISSING or d is None:
        return "—" if d is None else ""
    if isinstance(d, tuple):
        d = list(d)
    if isinstance(d, bool):
        return "`true`" if d else "`false`"
    return f"`{d}`"


def _range(field_meta: Mapping[str, Any], numeric: bool) -> str:
    meta = dict(field_meta)
    if numeric:  # build.MAX_NUMBER bounds every number the schema leaves open
        if "le" not in meta and "lt" not in meta:
            meta["le"] = MAX_NUMBER
        if "ge" not in meta and "gt" not in meta:
            meta["ge"] = -MAX_NUMBER
    parts = []
    for k, sym in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if k in meta:
            parts.append(f"{sym} {meta[k]}")
    if "pattern" in meta:
        parts.append(f"matches `{meta['pattern']}`")
    return ", ".join(parts)


def _numeric(tp) -> bool:
    args = typing.get_args(tp) if is_union(tp) else (tp,)
    return any(a in (int, float) for a in args)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _section(cls, path: tuple[str, ...], out: list[str], plugins: bool) -> None:
    hints = _type_hints(cls)
    nested = []
    title = ".".join(path)
    out.append(f"## {title}\n")
    if path in SECTIONS:
        out.append(SECTIONS[path][0].upper() + SECTIONS[path][1:] + ".\n")
    out.append("| key | type | default | range | description |")
    out.append("| --- | --- | --- | --- | --- |")
    for f in public_fields(cls):
        tp = hints[f.name]
        p = path + (f.name,)
        opt = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)] if is_union(tp) else []
        if dataclasses.is_dataclass(tp) or opt:
            nested.append((opt[0] if opt else tp, p))
            what = "a mapping or null (default: off)" if opt else "a mapping"
            doc = f.metadata.get("doc", "") + "; " if opt else ""
            out.append(f"| `{title}.{f.name}` | {what} | | | {_cell(doc)}see the `{'.'.join(p)}` section below |")
            continue
        desc = _SPECIAL[p]["description"] if p in _SPECIAL else f.metadata.get("doc", "")
        out.append(_row(title, f, tp, desc))
    out.append("")
    component = getattr(cls, "COMPONENT", None)
    if component:
        _own_options(component, title, out, plugins)
    for tp, p in nested:
        _section(tp, p, out, plugins)


def _row(title: str, f: dataclasses.Field, tp: Any, desc: str) -> str:
    return f"| `{title}.{f.name}` | {_cell(type_name(tp))} | {_cell(_default(f))} | {_cell(_range(f.metadata, _numeric(tp)))} | {_cell(desc)} |"


def _own_options(component: str, title: str, out: list[str], plugins: bool) -> None:
    """Each entry's own options (its registry entry's class), one table per entry that has any."""
    out.append(f"The other keys of `{title}` are the named {component}'s own options:\n")
    for name, task, cls in hooks.option_classes(component, plugins=plugins):
        if cls is None:
            continue
        out.append(f"### {title}: {name} ({task})\n")
        out.append("| key | type | default | range | description |")
        out.append("| --- | --- | --- | --- | --- |")
        hints = _type_hints(cls)
        for f in public_fields(cls):
            out.append(_row(title, f, hints[f.name], f.metadata.get("doc", "")))
        out.append("")
    names = [n for n, _t, c in hooks.option_classes(component, plugins=plugins) if c is None]
    if names:
        out.append(f"{', '.join(names)}: no options of their own.\n")


def markdown_reference(plugins: bool = False) -> str:
    """The reference page (docs/experiment-file.md: nas_stab's own components; `plugins`: the installed ones' too)."""
    out = [HEADER]
    hints = _type_hints(schema.Spec)
    for f in public_fields(schema.Spec):
        tp: Any = hints[f.name]
        if dataclasses.is_dataclass(tp):
            _section(tp, (f.name,), out, plugins)
        elif typing.get_origin(tp) is None and f.name == "space":
            out.append(SPACE)
    return "\n".join(out).rstrip() + "\n"
