"""Files of a run directory (or a sweep to judge) are read only when they are regular files under a size cap: a
symbolic link to /dev/zero or /dev/urandom, a FIFO, a socket or a device would otherwise be read until memory
runs out, or hang. The check opens without blocking (a FIFO nobody writes to does not hang) and looks at what it
opened, so a path swapped after the check is not read either."""
from __future__ import annotations

import os
import stat
from pathlib import Path

from nas_stab.errors import RunError

GB = 1 << 30
CAPS = {"trials.csv": 4 * GB, "decisions.jsonl": GB, "history": GB, "sweep": 4 * GB, "table": GB}  # bytes, per kind of file


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def check_regular(path: str | Path, what: str) -> None:
    """RunError (one line: the file, what it is, the cap) unless `path` is a regular file within `what`'s cap
    (`CAPS`); a missing file passes (its reader says it is missing)."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        return
    except OSError as e:  # a symlink loop, a permission
        raise RunError(f"{p}: cannot read ({e.strerror or e})") from None
    try:
        st = os.fstat(fd)
    finally:
        os.close(fd)
    link = f"a symbolic link to {os.readlink(p)}, " if p.is_symlink() else ""
    if not stat.S_ISREG(st.st_mode):
        raise RunError(f"{p}: {link}{_kind(st.st_mode)}, not a regular file: nas_stab reads only regular files here")
    cap = CAPS[what]
    if st.st_size > cap:
        raise RunError(f"{p}: {link}{st.st_size:,} bytes, over the {cap:,}-byte cap of a {what} file")
