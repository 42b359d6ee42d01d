"""Experiment tracking: every recorded run in MLflow and/or Weights & Biases (``logging.tracking``).

    logging: {tracking: mlflow}            # or wandb, or [mlflow, wandb]

Like the TensorBoard logs (tensorboard.py), the tracked runs are a view of the run directory,
made from its records after they are on disk: each trials.csv row and its ``history/<run_id>.csv``.
For each recorded run one tracked run, named by its run id, holds

- params: the resolved configuration (task, model, train, stability) flattened to dotted keys,
  the searched keys with the run's values, and the seed;
- tags: the experiment's name, its spec hash, the run's status, seed, trial, run id and key
  (``nas_stab.*``);
- metrics: the history's curves, named as TensorBoard's (``train/loss``, ``train/lr``,
  ``val/val_acc``, ``stability/fwd_ratio``, ...) at their steps, and the row's final values under
  their trials.csv column names (``val_acc``, ``final_fwd_ratio``, ``objective``, ...); values that
  are not finite are left out, as in TensorBoard.

A run named ``leaderboard`` holds the leaderboard files written at the end of ``nas-stab run`` and by
``nas-stab leaderboard RUN_DIR``, with spec.yaml: in MLflow one run, the parent of every run, whose
files are replaced each time; in W&B a new run each time (one whose trials.csv and spec.yaml did not
change since the last one adds none at the end of ``nas-stab run``).

Where. MLflow: ``logging.mlflow_uri``, by default ``sqlite:///<run dir>/mlflow.db`` with the
artifacts in ``<run dir>/mlartifacts`` (``mlflow ui --backend-store-uri sqlite:///<run dir>/mlflow.db``
shows it), one MLflow experiment per nas_stab experiment (its name). W&B: offline under
``<run dir>/wandb/`` (``wandb sync`` uploads it) unless ``WANDB_MODE`` is set, project
``logging.wandb_project`` (default the experiment's name), group the experiment's name.

Never twice. A tracked run carries the run directory's identity (its spec hash and creation time)
and a fingerprint of its trials.csv row: MLflow finds the runs already logged by that tag, W&B
keeps a ledger (``wandb/nas_stab-logged.json``), so a resumed search, and the catch-up at the end
of each ``nas-stab run``, log only what is missing. A row recorded again with other values (a
retrained run) replaces its MLflow run (the earlier one is deleted) and gets a new W&B run.

Best effort. A tracking failure (a server that does not answer, a package missing) is a line in
log.txt and never stops or fails the search: that backend is left alone for the rest of the
search, and the end of ``nas-stab run`` (or ``nas-stab leaderboard RUN_DIR``) tries again to log
what is missing. mlflow and wandb are optional packages, imported only when used.

This module holds the run directory's trackers (`Tracking`); what a tracked run holds is in
tracking_records.py, the backends in tracking_mlflow.py and tracking_wandb.py.
"""
from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from nas_stab.config import hooks
from nas_stab.config.schema import Spec
from nas_stab.store.reader import read_rows
from nas_stab.textfmt import mask_secrets
from nas_stab.trackers.tracking_mlflow import MlflowTracker
from nas_stab.trackers.tracking_records import Experiment, backends, experiment, record
from nas_stab.trackers.tracking_wandb import WandbTracker

__all__ = ["TRACKERS", "Tracking", "backends", "missing_package", "open_tracking"]

TRACKERS = ("mlflow", "wandb")


def missing_package(name: str) -> str | None:
    """Why backend `name` cannot work here (its package is not installed), None when it can."""
    if importlib.util.find_spec(name) is not None:
        return None
    return (f"{name} is not installed: pip install 'nas_stab[{name}]' (the {name} extra), or set logging.tracking "
            f"to none")


@hooks.register("tracking", "packages")
def _check_tracking(spec: Spec) -> tuple[tuple, str] | None:
    """logging.tracking names backends whose packages are installed."""
    for name in backends(spec.logging.tracking):
        problem = missing_package(name)
        if problem:
            return ("logging", "tracking"), problem
    return None


_BACKENDS: dict[str, Callable[[Experiment], Any]] = {"mlflow": MlflowTracker, "wandb": WandbTracker}


# ---------------------------------------------------------------- the run directory's trackers


class Tracking:
    """The trackers of one run directory, for the driver (each recorded run, then the end of the
    search) and for `nas-stab leaderboard`. Never raises: a failure is a line through `log` (log.txt)
    and in `failures`, and that backend is left alone until `finish` tries once more."""

    def __init__(self, exp: Experiment, log: Callable[[str], None]):
        self.exp, self.log = exp, log
        self.trackers = {name: _BACKENDS[name](exp) for name in exp.tracking}
        self.off: set[str] = set()
        self.failures: list[str] = []
        self.logged: dict[str, int] = {name: 0 for name in self.trackers}  # runs written per backend, this process
        self._ending = False  # in `finish`: a failure's line says what tries again then

    def runs(self, rows: Iterable[Mapping[str, Any]]) -> int:
        """Log these trials.csv rows where they are not logged yet; how many tracked runs were written."""
        records = [r for r in (record(self.exp, row) for row in rows) if r.run_id]
        n = 0
        for name, tracker in self.trackers.items():
            if name in self.off:
                continue
            rec = None
            try:
                for rec in records:
                    if tracker.logged(rec.run_id) != rec.fingerprint:
                        tracker.log_run(rec)
                        n += 1
                        self.logged[name] += 1
            except Exception as e:  # the records are written; tracking must not stop the search
                self._failed(tracker, f"run {rec.run_id}" if rec else "runs", e)
        return n

    def finish(self, files: Mapping[str, Path] | None = None, root: Path | None = None, *, again: bool = False) -> int:
        """The end of a search (or `nas-stab leaderboard`, `again`: the table is logged even when its inputs
        did not change): every row of trials.csv not logged yet (those a failure skipped), then the
        leaderboard files. Each backend is tried again once. Returns how many runs were logged."""
        self.off.clear()
        self._ending = True
        n = self.runs(read_rows(self.exp.path))
        if files:
            for name, tracker in self.trackers.items():
                if name in self.off:
                    continue
                try:
                    tracker.log_leaderboard(files, Path(root or self.exp.path), again=again)
                except Exception as e:
                    self._failed(tracker, "the leaderboard", e)
        return n

    def summary(self) -> list[str]:
        """One line per backend that did not fail: what this process logged there, where, and how to open it."""
        return [f"{name}: {self.logged[name]} run(s) logged" + (" and the leaderboard" if self._ending else "")
                + f" to {tracker.where()}; open it: {tracker.open_hint()}"
                for name, tracker in self.trackers.items() if name not in self.off]

    def _failed(self, tracker, what: str, e: Exception) -> None:
        why = mask_secrets(" ".join(str(e).split()))[:300] or "no message"  # a server's error may quote the URI
        then = ("nas-stab leaderboard RUN_DIR (or the next nas-stab run) logs what is missing" if self._ending else
                "the search goes on, and the end of nas-stab run or nas-stab leaderboard RUN_DIR logs what is missing")
        line = f"{tracker.name}: could not log {what} to {tracker.where()} ({type(e).__name__}: {why}); {then}"
        self.off.add(tracker.name)
        self.failures.append(line)
        self.log(line)

    def close(self) -> None:
        for tracker in self.trackers.values():
            with contextlib.suppress(Exception):
                tracker.close()


def open_tracking(spec: Spec, path: Path, meta: Mapping[str, Any] | None, log: Callable[[str], None]) -> Tracking | None:
    """The trackers `spec.logging.tracking` names for the run directory `path`; None when it names none.
    Nothing is imported or contacted until the first run is logged."""
    if not backends(spec.logging.tracking):
        return None
    return Tracking(experiment(spec, path, meta), log)
