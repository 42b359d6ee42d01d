"""The records of a search in its run directory: history files and trials.csv rows.

A finished trial's records are on disk (fsynced) before Optuna is told (`write_records`):
a driver killed between the two loses nothing (`trial_states.open_study` tells the trial
from its rows). Rows are appended in the order runs finish; the file is put back in
(trial, seed) order once, when the driver closes.
"""
from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nas_stab.config.schema import Spec
    from nas_stab.store.protocol import RunStore
    from nas_stab.training.loop import RunResult

FAULT_ENV = "NAS_STAB_FAULT"  # test hook: "kill@N" or "enospc@N" (see write_records)
_fault_calls = [0]


def write_records(write: Callable[[], None]) -> None:
    """Call `write()`, which puts a finished trial's records on disk (fsynced), before Optuna is told.

    Test hook: with NAS_STAB_FAULT=kill@N this process SIGKILLs itself right after
    the N-th call has written its records (the window between records and tell);
    with enospc@N the N-th and later calls fail as on a full disk.
    """
    fault = os.environ.get(FAULT_ENV, "")
    action, _, nth = fault.partition("@")
    hit = False
    if action in ("kill", "enospc") and nth.isdigit():
        _fault_calls[0] += 1
        hit = _fault_calls[0] >= int(nth) if action == "enospc" else _fault_calls[0] == int(nth)
    if hit and action == "enospc":
        raise OSError(errno.ENOSPC, f"No space left on device ({FAULT_ENV})")
    write()
    if hit and action == "kill":
        os.kill(os.getpid(), signal.SIGKILL)


def in_trial_order(rows: Iterable[Mapping[str, Any]]) -> bool:
    """Whether trials.csv rows are in (trial, seed) order: appended rows are in the order runs
    finished, and the driver sorts the file once at the end (not done by a killed driver)."""
    def num(v: Any) -> int:
        try:
            return int(v)
        except (TypeError, ValueError):
            return 1 << 62

    order = [(num(r.get("trial")), num(r.get("seed"))) for r in rows]
    return order == sorted(order)


class Records:
    """Every recorded trials.csv row by key, and the writes that keep the run directory in step."""

    def __init__(self, rd: RunStore, spec: Spec, rows: dict):
        self.rd, self.spec, self.rows = rd, spec, rows
        self.added = 0
        self.in_order = in_trial_order(rows.values())  # False after a kill between an append and the final sort

    def save(self, new_rows: list[dict], results: Sequence[RunResult]) -> None:
        """A finished trial's history files and trials.csv rows, on disk (fsynced) before Optuna is told."""
        rd, rows = self.rd, self.rows

        def write() -> None:
            replaced = False
            for row, res in zip(new_rows, results):
                replaced |= row["key"] in rows
                rows[row["key"]] = row
                rd.write_history(row["run_id"], res.history)
            rd.add_trials(new_rows, rows.values(), self.spec.space.keys, self.spec.task.kind, rewrite=replaced)

        write_records(write)
        self.added += len(new_rows)

    def close(self) -> dict[str, int]:
        """Leave trials.csv in (trial, seed) order; the count of recorded runs by status."""
        if self.added or not self.in_order:
            self.rd.write_trials(self.rows.values(), self.spec.space.keys, self.spec.task.kind)
            self.added, self.in_order = 0, True
        counts: dict[str, int] = {}
        for r in self.rows.values():
            counts[r["status"]] = counts.get(r["status"], 0) + 1
        return counts
