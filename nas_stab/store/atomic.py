"""Atomic files: `atomic_write` writes a temporary file beside the target, then renames it over the target,
so a reader never sees a half-written file; `remove_stale_tmp` clears the temporary files of a writer that
was killed."""
from __future__ import annotations

import contextlib
import os
import re
import tempfile
from collections.abc import Iterable
from pathlib import Path

from nas_stab.errors import RunError

__all__ = ["atomic_write", "remove_stale_tmp"]


def atomic_write(path: Path, data: str | bytes) -> Path:
    """Write then rename: a reader never sees a half-written file. The file gets
    the usual permissions (0666 minus the umask), not mkstemp's private 0600."""
    path = Path(path)
    if path.exists() and not path.is_file() or path.is_symlink() and not path.exists():
        what = "a directory" if path.is_dir() else "not a regular file (a device, a FIFO, a socket or a dangling link)"
        raise RunError(f"{path}: is {what}; nas_stab writes only regular files (renaming over it would replace it)")
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")  # pid: `remove_stale_tmp`
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
        _fsync_dir(path.parent)  # the rename itself survives a crash
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


_TMP = re.compile(r"\..+\.([0-9]+)\.[A-Za-z0-9_]+\.tmp")  # atomic_write's temporary files: .<name>.<pid>.<random>.tmp


def remove_stale_tmp(dirs: Iterable[Path]) -> int:
    """Remove the temporary files of `atomic_write`s whose process is gone (a killed `nas-stab
    leaderboard`); those of a live process, and any other file, stay. Returns how many."""
    n = 0
    for d in dirs:
        if not Path(d).is_dir() or Path(d).is_symlink():
            continue
        for p in Path(d).iterdir():
            m = _TMP.fullmatch(p.name)
            if m is None or not p.is_file() or p.is_symlink() or _alive(int(m.group(1))):
                continue
            with contextlib.suppress(OSError):
                p.unlink()
                n += 1
    return n


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True  # another user's process (or not a pid): left alone
    return True


def _fsync_dir(d: Path) -> None:
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

