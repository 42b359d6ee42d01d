"""`runner.kind: table`: a search served by the recorded runs of a published table (`nas_stab.bench`) instead of
training: every job the search asks for (a grid point, a bracket's next lr, an adaptive seed, an Optuna trial) is
answered with the record of the same configuration and seed, so a search strategy runs against a published
experiment in seconds. A run the table does not hold is an error naming it, never an invented value.

A job's record is the one row of the table's run file (`runner.table_file`, default trials) whose searched keys
equal the job's (numbers to 1e-6 relative) and whose seed is the job's. Its status, metrics, steps and times are
the record's; so is its history, where the release stores the table's (`nas_stab.bench.history_tables`): its
steps as they were logged (a replayed run of a table without stored histories has none).
"""
from __future__ import annotations

import functools
import math
from typing import TYPE_CHECKING, Any, TextIO

import numpy as np
import pandas as pd

from nas_stab.bench import load, manifest, table_history
from nas_stab.config.schema import Spec
from nas_stab.errors import RunError
from nas_stab.search.driver import Driver
from nas_stab.search.protocols import Executor, JobSource, Run

if TYPE_CHECKING:
    from nas_stab.store.protocol import RunStore
    from nas_stab.training.loop import RunResult

_NOT_METRICS = {"table", "file", "archived", "trial", "seed", "status", "steps", "wall_s", "train_s", "measure_s", "diverged_step",
                "error", "run_id", "key", "optuna_trial", "outer_trial", "filled", "source_spec", "spec_hash", "source_commit",
                "source_command", "source_rules"}


def table_runs(spec: Spec) -> pd.DataFrame:
    """The rows of `spec.runner.table`'s run file, or RunError naming what the release holds."""
    runs = load()
    r = spec.runner
    mine = runs[(runs["table"] == r.table) & (runs["file"] == r.table_file)].reset_index(drop=True)
    if mine.empty:
        files = sorted({f"{t}/{f}" for t, f in zip(runs["table"], runs["file"])})
        raise RunError(f"runner.table: the bench release holds no runs of {r.table}/{r.table_file} (it holds {', '.join(files)})")
    missing = [k for k in spec.space.keys if k not in mine.columns]
    if missing:
        raise RunError(f"runner.table: {r.table} does not record {', '.join(missing)}: its runs cannot answer this search")
    return mine


def data_note(spec: Spec) -> str:
    """What the run directory says of its data; RunError first when the table cannot answer the search."""
    table_runs(spec)
    return (f"replayed from the published table {spec.runner.table} ({spec.runner.table_file}), nas_stab.bench release "
            f"{manifest()['release']}: nothing trained")


class FromTable(Executor):
    """The `protocols.Executor` of `runner.kind: table`: each run answered at once with its record."""

    def __init__(self, spec: Spec, runs: pd.DataFrame):
        self.spec, self.runs = spec, runs
        self.pending: list[Run] = []
        self.keys = list(spec.space.keys)
        self.columns = {k: runs[k].to_numpy() for k in [*self.keys, "seed"]}

    @functools.cached_property
    def _steps(self) -> tuple[pd.DataFrame, dict[Any, Any]] | None:
        """The table's stored histories and the rows of each run (by key), or None without them."""
        h = table_history(str(self.spec.runner.table))
        return None if h is None else (h.drop(columns=["key", "run_id"]), h.groupby("key").indices)

    def history(self, key: str) -> list[dict[str, float]]:
        """A recorded run's steps as the run logged them (the empty cells left out); [] when the release has none."""
        if self._steps is None or key not in self._steps[1]:
            return []
        steps, rows = self._steps
        return [{k: (int(v) if k == "step" else float(v)) for k, v in rec.items() if v == v}
                for rec in steps.iloc[rows[key]].to_dict("records")]

    @property
    def idle(self) -> int:
        return 1_000_000  # answering costs nothing: the driver may hand every startable run at once

    @property
    def busy(self) -> list[Run]:
        return list(self.pending)

    def submit(self, run: Run) -> None:
        self.pending.append(run)

    def wait(self) -> list[tuple[Run, RunResult, str]]:
        done, self.pending = self.pending, []
        return [(run, self.record(run.job.params, run.job.seed), "") for run in done]

    def record(self, params: dict[str, Any], seed: int) -> RunResult:
        from nas_stab.training.loop import RunResult  # deferred: training.loop imports torch

        keep = self.columns["seed"] == seed
        for k in self.keys:
            if params.get(k) is None:  # a conditional key its condition leaves unset: the record holds its base value
                continue
            keep &= _equal(self.columns[k], params[k])
        rows = np.flatnonzero(keep)
        if len(rows) != 1:
            what = ", ".join(f"{k}={params[k]!r}" for k in self.keys if params.get(k) is not None) + f", seed {seed}"
            held = "no run" if not len(rows) else f"{len(rows)} runs"
            raise RunError(f"runner.table: {self.spec.runner.table} holds {held} of {what}"
                           + ("" if not len(rows) else " (its run file names them apart by keys this search does not vary)")
                           + ": a replayed search can ask only for the runs the table recorded")
        r = self.runs.iloc[rows[0]]
        metrics = {c: _value(r[c]) for c in self.runs.columns if c not in _NOT_METRICS and "." not in c and _value(r[c]) is not None}
        return RunResult(str(r["status"]), metrics=metrics, steps=int(_value(r.get("steps")) or 0),
                         wall_s=float(_value(r.get("wall_s")) or 0.0), train_s=float(_value(r.get("train_s")) or 0.0),
                         measure_s=float(_value(r.get("measure_s")) or 0.0),
                         diverged_step=int(r["diverged_step"]) if _value(r.get("diverged_step")) is not None else None,
                         error=str(_value(r.get("error")) or ""), history=self.history(str(r["key"])))


def _equal(col: np.ndarray, want: Any) -> np.ndarray:
    if isinstance(want, bool) or not isinstance(want, int | float):
        return np.array([str(v).lower() == str(want).lower() for v in col])
    num = pd.to_numeric(pd.Series(col), errors="coerce").to_numpy(dtype=float)
    return np.isclose(num, float(want), rtol=1e-6, atol=0.0)


def _value(v: Any) -> Any:
    if v is None or v is pd.NA or (isinstance(v, float) and math.isnan(v)):
        return None
    return v.item() if hasattr(v, "item") else v


def run_table(spec: Spec, rd: RunStore, *, trials: int | None = None, progress_stream: TextIO | None = None,
              source: JobSource | None = None) -> dict:
    """Run every pending trial of `spec` into `rd`, each answered from the published table's records."""
    runs = table_runs(spec)
    driver = Driver(spec, rd, trials=trials, source=source, progress_stream=progress_stream)
    try:
        driver.drive(FromTable(spec, runs))
    finally:
        counts = driver.close()
    return counts
