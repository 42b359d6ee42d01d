"""`extends:` — an experiment file that starts from another one.

    # spaces/my-variant.yaml
    extends: quickstart.yaml        # relative to this file
    name: my-variant
    train: {steps: 300}             # merged into the base's train section
    space:
      model.branches: [1, 2, 4, 8]  # replaces the base's dimension
      model.aggregation: null       # removes a base dimension

Mappings merge key by key (recursively); lists and scalars replace. Under
`space:` a dimension is replaced whole (never merged with the base's form of
it) and `null` removes it. Bases may extend further bases; a cycle, or a chain
deeper than `MAX_DEPTH`, is an error. Every value keeps the file and line it
came from, so an error in an inherited value names the base file.
"""
from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypedDict

from nas_stab.config.yamlio import Lines, line_of, load_yaml
from nas_stab.errors import SpecError

MAX_DEPTH = 16
Files = dict[tuple, str]


class _Where(TypedDict):
    """Where an `extends:` error points (SpecError's keywords)."""

    file: str
    line: int | None
    key: str


def compose(data: Any, lines: Lines, file: str, read: Callable[[Path], str], _stack: tuple = ()) -> tuple[Any, Lines, Files]:
    """Resolve `extends:` in parsed data. Returns the merged data, its line table,
    and the file of every path that came from a base (others: `file`)."""
    if not isinstance(data, dict) or "extends" not in data:
        return data, lines, {}
    where = _Where(file=file, line=line_of(lines, ("extends",)), key="extends")
    ref = data.pop("extends")
    if not isinstance(ref, str) or not ref.strip():
        raise SpecError(f"must be the path of another experiment file, got {ref!r}", **where)
    if "\x00" in ref:
        raise SpecError(f"must be the path of another experiment file; {ref!r} holds a NUL byte", **where)
    here = Path(file).parent if not file.startswith("<") else Path.cwd()
    try:
        path = (here / Path(ref).expanduser()).resolve()
        me = Path(file).resolve() if not file.startswith("<") else None
    except (OSError, RuntimeError, ValueError) as e:  # a symlink loop (RuntimeError before Python 3.13)
        raise SpecError(f"{ref}: cannot resolve the path ({getattr(e, 'strerror', None) or e})", **where) from None
    if path in _stack or path == me:
        chain = " -> ".join(str(p) for p in (*_stack, me, path) if p is not None)
        raise SpecError(f"extends forms a cycle: {chain}", **where)
    if len(_stack) >= MAX_DEPTH:
        raise SpecError(f"extends chain deeper than {MAX_DEPTH} files", **where)
    try:
        text = read(path)
    except SpecError as e:
        raise SpecError(f"{ref}: {e.message} ({path})", **where) from None
    base, base_lines = load_yaml(text, str(path))
    if not isinstance(base, dict):
        raise SpecError(f"{path} must hold a mapping of sections to be extended", **where)
    base, base_lines, base_files = compose(base, base_lines, str(path), read, _stack + tuple(p for p in (me,) if p))
    files: Files = {p: base_files.get(p, str(path)) for p in base_lines}
    merged = _merge(base, data, (), base_lines, files)
    for p, ln in lines.items():
        if p == ("extends",):
            continue
        base_lines[p] = ln
        files.pop(p, None)
    return merged, base_lines, files


def _drop_under(prefix: tuple, lines: Lines, files: Files) -> None:
    for p in [p for p in lines if p[: len(prefix)] == prefix and len(p) > len(prefix)]:
        lines.pop(p, None)
        files.pop(p, None)


def _merge(base: dict, child: dict, path: tuple, lines: Lines, files: Files) -> dict:
    out = dict(base)
    for key, value in child.items():
        p = path + (key,)
        if path == ("space",):
            _drop_under(p, lines, files)
            if value is None:
                out.pop(key, None)
                lines.pop(p, None)
                files.pop(p, None)
            else:
                out[key] = value
            continue
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value, p, lines, files)
        else:
            _drop_under(p, lines, files)
            out[key] = value
    return out
