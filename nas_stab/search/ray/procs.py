"""Processes of a local Ray this driver started: recorded, so a rerun can end the orphans.

When `nas-stab run --runner ray` starts its own Ray and is then killed with
SIGKILL, Ray's reaper ends the GCS, the raylet and the workers, but the
raylet's agents (``ray::DashboardAgent``, ``ray::RuntimeEnvAgent``) are left
running with parent 1 (seen with Ray 2.60). The driver records the process
ids (with their start times, so a reused id is never touched) of the Ray it
started; the next run of the same experiment ends the ones still alive. Only
processes this experiment's driver started are ever signalled, by id.
Linux only (/proc); elsewhere it does nothing.
"""
from __future__ import annotations

import json
import os
import signal
from pathlib import Path


def _stat(pid: int) -> tuple[int, str, int] | None:
    """(parent id, state, start time) of a process, or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return int(fields[1]), fields[0], int(fields[19])
    except (OSError, IndexError, ValueError):
        return None


def descendants(pid: int) -> list[int]:
    """Every process below `pid` in the process tree."""
    parents: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for e in entries:
        if e.isdigit():
            st = _stat(int(e))
            if st:
                parents.setdefault(st[0], []).append(int(e))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def record(path: Path) -> None:
    """Write the ids and start times of this process's descendants (the local Ray) to `path`."""
    procs = []
    for pid in descendants(os.getpid()):
        st = _stat(pid)
        if st:
            procs.append([pid, st[2]])
    if procs:
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(procs))
        os.replace(tmp, path)


def end_orphans(path: Path) -> int:
    """SIGKILL the recorded processes still alive (same id and start time); remove the record."""
    if not path.exists():
        return 0
    try:
        procs = json.loads(path.read_text())
    except (OSError, ValueError):
        procs = []
    n = 0
    for pid, start in procs:
        st = _stat(int(pid))
        if st and st[2] == start and st[1] != "Z" and int(pid) != os.getpid():
            try:
                os.kill(int(pid), signal.SIGKILL)
                n += 1
            except OSError:
                pass
    path.unlink(missing_ok=True)
    return n
