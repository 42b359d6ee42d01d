"""Two small text helpers every command uses: "did you mean ...?" and durations."""
from __future__ import annotations

import difflib
import re
from collections.abc import Iterable


def nearest(word: str, choices: Iterable[str]) -> str | None:
    """The closest of `choices` to `word` (difflib ratio >= 0.5), or None."""
    m = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.5)
    return m[0] if m else None


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """'; did you mean 'x'?' for a near miss, else the list of valid choices."""
    choices = list(choices)
    n = nearest(word, choices)
    if n:
        return f"; did you mean {n!r}?"
    return "; valid: " + ", ".join(map(str, choices))


def duration(seconds: float, *, clock: bool = False, exact: bool = False) -> str:
    """A duration for people to read.

    Prose (default): '45.3 s', '3.1 min', '1.2 h'; `exact=True` adds the seconds
    to the longer forms ('3.1 min (185 s)'), as provenance does. `clock=True` is
    the compact form of live progress lines: '45s', '3m05s', '1h02m'.
    """
    if seconds != seconds:
        return "unknown"
    if clock:
        s = int(round(seconds))
        if s < 60:
            return f"{s}s"
        if s < 3600:
            return f"{s // 60}m{s % 60:02d}s"
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    if seconds < 120:
        return f"{seconds:.1f} s"
    tail = f" ({seconds:.0f} s)" if exact else ""
    if seconds < 7200:
        return f"{seconds / 60:.1f} min{tail}"
    return f"{seconds / 3600:.2f} h{tail}" if exact else f"{seconds / 3600:.1f} h"


_CONTROL = {c: f"\\x{c:02x}" for c in (*range(0x00, 0x09), *range(0x0b, 0x20), 0x7f, *range(0x80, 0xa0))}


def printable(text: object) -> str:
    """`text` for a terminal: control characters (escape sequences, bells, carriage returns; not tab or newline)
    written as \\xNN, so a user's text cannot move the cursor, recolour or rewrite what the terminal shows."""
    return str(text).translate(_CONTROL)


_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s'\"]*):(?P<secret>[^@/\s'\"]+)@")
_QUERY = re.compile(r"(?i)(?P<key>[?&;](?:password|passwd|pwd|token|access_token|api_key|apikey|secret|sig)=)(?P<secret>[^&;\s'\"]+)")


def mask_secrets(text: object) -> str:
    """`text` with every password of a URL's user info (``scheme://user:***@host``) and every password, token or key
    of a URL's query (``?token=***``) masked: for a message, a log line, a stored spec, a provenance."""
    out = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:***@", str(text))
    return _QUERY.sub(lambda m: f"{m['key']}***", out)


def mask_plain(value: object) -> object:
    """`mask_secrets` over every text of a nested plain value (a spec as stored in spec.yaml)."""
    if isinstance(value, str):
        return mask_secrets(value)
    if isinstance(value, dict):
        return {k: mask_plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return type(value)(mask_plain(v) for v in value)
    return value
