"""What the search needs of a run directory (`RunStore`): the driver, the records and the runners are typed by it,
`store.rundir.RunDir` is the one implementation (a test's fake, or a store elsewhere, would be another)."""
from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any, Protocol


class RunStore(Protocol):
    """A run directory as the search writes it (`store.rundir.RunDir`)."""

    path: Path

    def log(self, message: str) -> None:
        """A line in log.txt."""
        ...

    @property
    def storage_url(self) -> str:
        """The Optuna storage of the run's study when the spec names none (its study.db)."""
        ...

    def read_trials(self) -> list[dict[str, str]]:
        """trials.csv's rows as text (a partial last line left by a kill dropped)."""
        ...

    def write_trials(self, rows: Iterable[dict[str, Any]], searched: Iterable[str], task_kind: str) -> None:
        """Rewrite trials.csv atomically with every row."""
        ...

    def add_trials(self, new_rows: list[dict[str, Any]], rows: Iterable[dict[str, Any]], searched: Iterable[str],
                   task_kind: str, *, rewrite: bool = False) -> None:
        """Record finished runs (appended and fsynced, or the file rewritten); `rows` is every row."""
        ...

    def write_history(self, run_id: str, history: list[dict[str, float]]) -> None:
        """A run's step history (history/<run_id>.csv), atomically."""
        ...

    def release_reserve(self) -> bool:
        """Give back the disk held while the driver runs (a full disk: the trials in flight can still be closed)."""
        ...
