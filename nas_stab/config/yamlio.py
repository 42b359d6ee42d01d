"""Safe YAML loading that remembers the line of every key.

Only PyYAML's composer and SafeConstructor run: no tag can import or execute
code. Aliases are expanded with a node budget (no "billion laughs"), nesting is
bounded, duplicate keys are refused, and every error names the file and line.
"""
from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from nas_stab.errors import SpecError

MAX_BYTES = 1_000_000
MAX_NODES = 100_000
MAX_DEPTH = 32

_SAFE_TAGS = {
    "tag:yaml.org,2002:" + t
    for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp")
}

Lines = dict[tuple, int]


def read_text(path: str | Path) -> str:
    """Read a spec file as UTF-8, refusing huge or binary files with a clear error."""
    p = Path(path)
    try:
        # non-blocking open: a FIFO nobody writes to does not hang; then only a regular file is read,
        # and at most MAX_BYTES + 1 bytes of it (/dev/zero, a FIFO, a device: refused at once)
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                kind = "a directory" if stat.S_ISDIR(os.fstat(fd).st_mode) else "not a regular file"
                raise SpecError(f"is {kind}, expected a YAML file", file=str(path))
            with os.fdopen(os.dup(fd), "rb") as f:
                raw = f.read(MAX_BYTES + 1)
        finally:
            os.close(fd)
    except FileNotFoundError:
        raise SpecError(f"file not found: {p}", file=str(path)) from None
    except IsADirectoryError:
        raise SpecError("is a directory, expected a YAML file", file=str(path)) from None
    except OSError as e:  # a symlink loop (ELOOP), a permission, ...
        raise SpecError(f"cannot read: {e.strerror or e}", file=str(path)) from None
    except ValueError as e:  # a NUL byte in the path
        raise SpecError(f"cannot read: {e}", file=str(path).replace("\x00", "\\0")) from None
    if len(raw) > MAX_BYTES:
        raise SpecError(f"file is larger than {MAX_BYTES} bytes; spec files are limited to {MAX_BYTES}", file=str(path))
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise SpecError(f"not valid UTF-8 (byte {e.start})", file=str(path), line=line) from None


def load_yaml(text: str, file: str = "<string>") -> tuple[Any, Lines]:
    """Parse YAML text into plain Python data plus {path tuple: line number}."""
    if "\x00" in text:
        raise SpecError("file contains NUL bytes; expected YAML text", file=file, line=text[: text.index("\x00")].count("\n") + 1)
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        line = mark.line + 1 if mark else None
        msg = " ".join(str(x) for x in (e.context, e.problem) if x)
        raise SpecError(f"YAML syntax error: {msg}", file=file, line=line) from None
    except yaml.reader.ReaderError as e:
        line = text[: e.position].count("\n") + 1
        raise SpecError(f"character {e.character!r} is not allowed in YAML ({e.reason})", file=file, line=line) from None
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise SpecError(f"YAML error: {first}", file=file) from None
    except RecursionError:
        raise SpecError(f"nesting deeper than {MAX_DEPTH} levels", file=file) from None
    lines: Lines = {}
    if node is None:
        return None, lines
    conv = _Converter(file, lines)
    return conv.convert(node, ()), lines


class _Converter:
    def __init__(self, file: str, lines: Lines):
        self.file = file
        self.lines = lines
        self.count = 0
        self.constructor = yaml.SafeLoader("")  # only used for scalar construction

    def _err(self, msg: str, node: yaml.Node, path: tuple) -> SpecError:
        return SpecError(msg, file=self.file, line=node.start_mark.line + 1, key=".".join(map(str, path)) or None)

    def convert(self, node: yaml.Node, path: tuple, depth: int = 0) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise self._err(f"more than {MAX_NODES} YAML nodes (alias expansion?)", node, path)
        if depth > MAX_DEPTH:
            raise self._err(f"nesting deeper than {MAX_DEPTH} levels", node, path)
        if node.tag not in _SAFE_TAGS:
            raise self._err(f"YAML tag {node.tag!r} is not allowed: spec files hold plain data only", node, path)
        self.lines.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            out: dict = {}
            for k_node, v_node in node.value:
                if k_node.tag == "tag:yaml.org,2002:merge":
                    raise self._err("YAML merge keys ('<<') are not supported", k_node, path)
                if not isinstance(k_node, yaml.ScalarNode):
                    raise self._err("mapping keys must be plain scalars", k_node, path)
                key = self.convert(k_node, path, depth + 1)
                if not isinstance(key, (str, int, float, bool)) or key is None:
                    raise self._err(f"mapping key {key!r} must be a string", k_node, path)
                key = str(key) if not isinstance(key, str) else key
                if key in out:
                    raise self._err(f"duplicate key {key!r}", k_node, path + (key,))
                self.lines[path + (key,)] = k_node.start_mark.line + 1
                out[key] = self.convert(v_node, path + (key,), depth + 1)
            return out
        if isinstance(node, yaml.SequenceNode):
            return [self.convert(v, path + (i,), depth + 1) for i, v in enumerate(node.value)]
        value = self.constructor.construct_object(node, deep=True)
        if node.tag == "tag:yaml.org,2002:timestamp":
            return node.value
        return value


def line_of(lines: Lines, path: tuple) -> int | None:
    """Line of the closest enclosing key that has one."""
    p = tuple(path)
    while True:
        if p in lines:
            return lines[p]
        if not p:
            return None
        p = p[:-1]
