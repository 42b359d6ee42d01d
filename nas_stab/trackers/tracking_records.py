"""What a tracked run holds (tracking.py): the run directory's shared view (`Experiment`) and one recorded
run's params, tags, final metrics and curves (`RunRecord`), from its trials.csv row and history file."""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas_stab import metrics
from nas_stab.analysis.values import dotted, number_or_text
from nas_stab.csvsafe import cell_text
from nas_stab.store.reader import HISTORY, SPEC_YAML, read_history_rows
from nas_stab.trackers.tensorboard import scalar_tag

if TYPE_CHECKING:
    from nas_stab.config.schema import Spec

__all__ = ["LEADERBOARD_RUN", "TAG", "Experiment", "RunRecord", "backends", "experiment", "leaderboard_artifacts", "record"]

LEADERBOARD_RUN = "leaderboard"  # the name of the run holding the leaderboard files
TAG = "nas_stab."
# trials.csv columns that identify or describe a run: tags, never final metrics
_NOT_METRICS = {"trial", "seed", "status", "run_id", "key", "optuna_trial", "outer_trial", "error", "diverged_why"}
_CONFIG_SECTIONS = ("task", "model", "train", "stability")  # the resolved configuration (config.load.SEARCHABLE)


def backends(tracking: Any) -> tuple[str, ...]:
    """The backends `logging.tracking` names, each once, in order ('none' and an empty list: none)."""
    names = [tracking] if isinstance(tracking, str) else list(tracking or ())
    return tuple(dict.fromkeys(n for n in names if n != "none"))


@dataclasses.dataclass(frozen=True)
class Experiment:
    """What every tracked run of one run directory shares."""

    name: str
    path: Path
    spec_hash: str
    identity: str  # which run directory a tracked run came from (tag nas_stab.run_dir)
    searched: tuple[str, ...]
    task_kind: str
    config: Mapping[str, Any]  # the base configuration, flattened to dotted keys (typed values)
    tracking: tuple[str, ...]
    mlflow_uri: str | None
    wandb_project: str


def experiment(spec: Spec, path: Path, meta: Mapping[str, Any] | None) -> Experiment:
    """The tracking view of a run directory: its spec (the stored or the running one) and its meta."""
    from nas_stab.config import spec_hash  # deferred: loads PyYAML only when this runs
    from nas_stab.config.display import applicable_plain  # deferred: loads PyYAML only when this runs

    meta = meta or {}
    h = str(meta.get("spec_hash") or spec_hash(spec))
    created = meta.get("created")
    # spec hash + creation time: the same directory wherever it moves, a new one after --fresh
    seed = f"{h}|{created}" if created else f"{h}|{Path(path).resolve()}"
    plain = applicable_plain(spec)
    config: dict[str, Any] = {}
    for section in _CONFIG_SECTIONS:
        config.update(dotted(plain.get(section), section))
    log = spec.logging
    return Experiment(
        name=spec.name, path=Path(path), spec_hash=h, identity=hashlib.sha256(seed.encode()).hexdigest()[:16],
        searched=tuple(spec.space.keys) if spec.space else (), task_kind=spec.task.kind, config=config,
        tracking=backends(log.tracking), mlflow_uri=log.mlflow_uri, wandb_project=log.wandb_project or spec.name)


def _num(text: str) -> float | None:
    try:
        x = float(text)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One recorded run as the trackers log it, from its trials.csv row and history file."""

    run_id: str
    cells: Mapping[str, str]  # the trials.csv row as text (empty cells left out)
    fingerprint: str  # of `cells`: a tracked run whose fingerprint differs is out of date
    exp: Experiment

    @property
    def status(self) -> str:
        return self.cells.get("status", "")

    def config(self) -> dict[str, Any]:
        """The resolved configuration: the base one with the run's searched values, and its seed."""
        out = dict(self.exp.config)
        for k in self.exp.searched:
            out[k] = number_or_text(self.cells.get(k, ""))
        out["seed"] = number_or_text(self.cells.get("seed", ""))
        return out

    def tags(self) -> dict[str, str]:
        t = {"experiment": self.exp.name, "spec_hash": self.exp.spec_hash, "run_dir": self.exp.identity,
             "path": str(self.exp.path), "kind": "run", "run_id": self.run_id}
        for col in ("status", "seed", "trial", "key", "optuna_trial", "outer_trial", "diverged_why", "error"):
            if self.cells.get(col):
                t[col] = self.cells[col]
        return {TAG + k: v for k, v in t.items()}

    def final(self) -> dict[str, float]:
        """The row's finite metrics (task, stability, objective, steps, wall time), by column name."""
        out = {}
        for col, text in self.cells.items():
            x = _num(text)
            if col not in _NOT_METRICS and col not in self.exp.searched and x is not None:
                out[col] = x
        return out

    @property
    def step(self) -> int:
        x = _num(self.cells.get("steps", ""))
        return int(x) if x is not None else 0

    def curves(self) -> dict[int, dict[str, float]]:
        """The history file's finite values by step, named as the TensorBoard scalars."""
        task_metrics = set(metrics.TASK_METRICS[self.exp.task_kind])
        out: dict[int, dict[str, float]] = {}
        for h in read_history_rows(self.exp.path / HISTORY, self.run_id):
            step = _num(h.get("step", ""))
            if step is None:
                continue
            for col, text in h.items():
                x = _num(text)
                if col != "step" and col and x is not None:
                    out.setdefault(int(step), {})[scalar_tag(col, task_metrics)] = x
        return dict(sorted(out.items()))


def record(exp: Experiment, row: Mapping[str, Any]) -> RunRecord:
    """A run's record from its trials.csv row: the driver's (typed values) or the file's (text) give the
    same cells and fingerprint."""
    cells = {str(k): cell_text(v) for k, v in row.items() if k is not None}
    cells = {k: v for k, v in cells.items() if v != ""}
    blob = json.dumps(sorted(cells.items()))
    return RunRecord(run_id=cells.get("run_id", ""), cells=cells, exp=exp,
                     fingerprint=hashlib.sha256(blob.encode()).hexdigest()[:16])


def leaderboard_artifacts(files: Mapping[str, Path], root: Path, run_path: Path) -> list[Path]:
    """The leaderboard's files that exist, with the run's spec.yaml."""
    out = [Path(p) for p in files.values() if Path(p).is_file()]
    spec = run_path / SPEC_YAML
    if spec.is_file() and spec not in out:
        out.append(spec)
    return out
