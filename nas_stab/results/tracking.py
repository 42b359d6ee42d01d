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
what is missing. mlflow and wandb are optional packages, imported here only when used.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import re
import shutil
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from nas_stab import metrics
from nas_stab.analysis.values import dotted, number_or_text
from nas_stab.config import hooks
from nas_stab.results.reader import HISTORY, SPEC_YAML, TRIALS_CSV, read_history_rows, read_rows

TRACKERS = ("mlflow", "wandb")
LEADERBOARD_RUN = "leaderboard"  # the name of the run holding the leaderboard files
WANDB_LEDGER = "nas_stab-logged.json"  # in <run dir>/wandb/: run id (and `leaderboard`) -> fingerprint of what W&B holds
TAG = "nas_stab."
# trials.csv columns that identify or describe a run: tags, never final metrics
_NOT_METRICS = {"trial", "seed", "status", "run_id", "key", "optuna_trial", "outer_trial", "error", "diverged_why"}
_CONFIG_SECTIONS = ("task", "model", "train", "stability")  # the resolved configuration (config.load.SEARCHABLE)


def backends(tracking: Any) -> tuple[str, ...]:
    """The backends `logging.tracking` names, each once, in order ('none' and an empty list: none)."""
    names = [tracking] if isinstance(tracking, str) else list(tracking or ())
    return tuple(dict.fromkeys(n for n in names if n != "none"))


def missing_package(name: str) -> str | None:
    """Why backend `name` cannot work here (its package is not installed), None when it can."""
    import importlib.util

    if importlib.util.find_spec(name) is not None:
        return None
    return (f"{name} is not installed: pip install 'nas_stab[{name}]' (the {name} extra), or set logging.tracking "
            f"to none")


@hooks.register("tracking", "packages")
def _check_tracking(spec) -> tuple[tuple, str] | None:
    """logging.tracking names backends whose packages are installed."""
    for name in backends(spec.logging.tracking):
        problem = missing_package(name)
        if problem:
            return ("logging", "tracking"), problem
    return None


# ---------------------------------------------------------------- what is logged


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


def experiment(spec, path: Path, meta: Mapping[str, Any] | None) -> Experiment:
    """The tracking view of a run directory: its spec (the stored or the running one) and its meta."""
    from nas_stab.config import spec_hash
    from nas_stab.config.display import applicable_plain

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
        from nas_stab.results.tensorboard import scalar_tag

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
    from nas_stab.results.rundir import cell_text

    cells = {str(k): cell_text(v) for k, v in row.items() if k is not None}
    cells = {k: v for k, v in cells.items() if v != ""}
    blob = json.dumps(sorted(cells.items()))
    return RunRecord(run_id=cells.get("run_id", ""), cells=cells, exp=exp,
                     fingerprint=hashlib.sha256(blob.encode()).hexdigest()[:16])


def _text(v: Any) -> str:
    """A configuration value as a param's text: strings as they are, anything else as JSON."""
    return v if isinstance(v, str) else json.dumps(v)


def _public_uri(uri: str) -> str:
    """A tracking URI without the user and password it may hold, for log lines."""
    return re.sub(r"//[^/@]*@", "//", uri)


# ---------------------------------------------------------------- MLflow


@contextlib.contextmanager
def _quiet(*names: str):
    """MLflow and alembic tell each new database and experiment at INFO on stderr, through the live
    progress display: below WARNING they are quiet while a tracker works, as they were after."""
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(max(lg.getEffectiveLevel(), logging.WARNING))
    try:
        yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


class MlflowTracker:
    """One MLflow run per recorded run, children of a run named `leaderboard` with the tables."""

    name = "mlflow"

    def __init__(self, exp: Experiment):
        self.exp = exp
        self.uri = exp.mlflow_uri or f"sqlite:///{exp.path.resolve() / 'mlflow.db'}"
        self._client = None
        self._experiment_id: str | None = None
        self._parent: str | None = None
        self._logged: dict[str, tuple[str, str]] | None = None  # run id -> (MLflow run id, fingerprint)

    def where(self) -> str:
        return _public_uri(self.uri)

    def _open(self):
        """The client and the experiment (created, or restored when deleted), once."""
        if self._client is None:
            from mlflow.tracking import MlflowClient

            with _quiet("mlflow", "alembic"):
                client = MlflowClient(tracking_uri=self.uri)
                found = client.get_experiment_by_name(self.exp.name)
                if found is None:
                    # artifacts in the run directory (MLflow's own default is ./mlruns under the working
                    # directory), unless a tracking server decides where they go
                    where = None if _server(self.uri) else (self.exp.path.resolve() / "mlartifacts").as_uri()
                    eid = client.create_experiment(self.exp.name, artifact_location=where)
                else:
                    eid = found.experiment_id
                    if found.lifecycle_stage == "deleted":
                        client.restore_experiment(eid)
            self._client, self._experiment_id = client, eid
        return self._client

    def _index(self) -> dict[str, tuple[str, str]]:
        """The runs of this run directory already in MLflow, found by their tag (one query, at first use)."""
        if self._logged is None:
            from mlflow.entities import ViewType

            client = self._open()
            logged: dict[str, tuple[str, str]] = {}
            token = None
            with _quiet("mlflow", "alembic"):
                while True:
                    page = client.search_runs([self._experiment_id], f"tags.`{TAG}run_dir` = '{self.exp.identity}'",
                                              run_view_type=ViewType.ACTIVE_ONLY, max_results=1000, page_token=token)
                    for r in page:
                        tags = r.data.tags
                        if tags.get(TAG + "kind") == "leaderboard":
                            self._parent = self._parent or r.info.run_id
                        elif tags.get(TAG + "run_id"):
                            logged[tags[TAG + "run_id"]] = (r.info.run_id, tags.get(TAG + "logged", ""))
                    token = page.token
                    if not token:
                        break
            self._logged = logged
        return self._logged

    def logged(self, run_id: str) -> str | None:
        """The fingerprint of what MLflow holds for `run_id` ('' when its logging never finished), None: nothing."""
        got = self._index().get(run_id)
        return None if got is None else got[1]

    def _parent_run(self) -> str:
        """The run named `leaderboard` of this run directory: every run's parent, the tables' home."""
        self._index()
        if self._parent is None:
            client = self._open()
            tags = {TAG + "experiment": self.exp.name, TAG + "spec_hash": self.exp.spec_hash,
                    TAG + "run_dir": self.exp.identity, TAG + "path": str(self.exp.path), TAG + "kind": "leaderboard"}
            with _quiet("mlflow", "alembic"):
                run = client.create_run(self._experiment_id, run_name=LEADERBOARD_RUN, tags=tags)
                if (self.exp.path / SPEC_YAML).is_file():
                    client.log_artifact(run.info.run_id, str(self.exp.path / SPEC_YAML))
                client.set_terminated(run.info.run_id, "FINISHED")
            self._parent = run.info.run_id
        return self._parent

    def log_run(self, rec: RunRecord) -> None:
        """Log one run; an earlier, different or unfinished MLflow run of it is deleted first."""
        from mlflow.entities import Metric, Param, RunTag

        client = self._open()
        parent = self._parent_run()
        old = self._index().get(rec.run_id)
        with _quiet("mlflow", "alembic"):
            if old is not None:
                client.delete_run(old[0])
                del self._logged[rec.run_id]
            tags = {**rec.tags(), "mlflow.parentRunId": parent}
            run = client.create_run(self._experiment_id, run_name=rec.run_id,
                                    tags={_key(k): _clip(v, _limit("MAX_TAG_VAL_LENGTH", 8000)) for k, v in tags.items()})
            mid = run.info.run_id
            try:
                params = [Param(_key(k), _clip(_text(v), _limit("MAX_PARAM_VAL_LENGTH", 6000)))
                          for k, v in rec.config().items()]
                for i in range(0, len(params), 100):  # MLflow's limit of params per batch
                    client.log_batch(mid, params=params[i:i + 100])
                now = int(time.time() * 1000)
                points = [Metric(_key(k), v, now, step) for step, values in rec.curves().items() for k, v in values.items()]
                points += [Metric(_key(k), v, now, rec.step) for k, v in rec.final().items()]
                for i in range(0, len(points), 1000):  # MLflow's limit of metrics per batch
                    client.log_batch(mid, metrics=points[i:i + 1000])
                client.log_batch(mid, tags=[RunTag(TAG + "logged", rec.fingerprint)])  # last: the run is complete
                client.set_terminated(mid, "FAILED" if rec.status == "failed" else "FINISHED")
            except BaseException:
                with contextlib.suppress(Exception):
                    client.delete_run(mid)  # half logged: found again and replaced next time anyway
                raise
        self._logged[rec.run_id] = (mid, rec.fingerprint)

    def log_leaderboard(self, files: Mapping[str, Path], root: Path, *, again: bool = False) -> None:
        """The leaderboard files (paths under `root` kept: plots/...) and spec.yaml, into the parent run
        (the same run every time: a file logged again replaces the earlier one, whatever `again`)."""
        client = self._open()
        parent = self._parent_run()
        with _quiet("mlflow", "alembic"):
            for p in _artifacts(files, root, self.exp.path):
                rel = p.parent.relative_to(root) if p.is_relative_to(root) else Path(".")
                client.log_artifact(parent, str(p), artifact_path=None if str(rel) == "." else rel.as_posix())
            client.set_terminated(parent, "FINISHED")

    def close(self) -> None:
        self._client = None


def _server(uri: str) -> bool:
    """Whether an MLflow tracking URI names a server (which keeps artifacts where it is configured to),
    not a database or directory this process writes itself."""
    scheme = uri.split(":", 1)[0].lower() if ":" in uri else ""
    return scheme in ("http", "https") or scheme.startswith("databricks")


def _artifacts(files: Mapping[str, Path], root: Path, run_path: Path) -> list[Path]:
    """The leaderboard's files that exist, with the run's spec.yaml."""
    out = [Path(p) for p in files.values() if Path(p).is_file()]
    spec = run_path / SPEC_YAML
    if spec.is_file() and spec not in out:
        out.append(spec)
    return out


def _limit(name: str, default: int) -> int:
    """One of MLflow's size limits, as the installed version says (the default when it does not)."""
    try:
        from mlflow.utils import validation

        return int(getattr(validation, name, default))
    except Exception:  # a limit is only a bound to stay under
        return default


def _key(key: str) -> str:
    """A name MLflow accepts (letters, digits, _ - . / : and spaces; at most 250 characters)."""
    return re.sub(r"[^\w./\- :]", "_", key)[:250]


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."


# ---------------------------------------------------------------- Weights & Biases


class WandbTracker:
    """One W&B run per recorded run (offline unless WANDB_MODE is set); a run per leaderboard written."""

    name = "wandb"

    def __init__(self, exp: Experiment):
        self.exp = exp
        self.dir = exp.path / "wandb"
        self._ledger: dict[str, str] | None = None
        self._used = False

    def where(self) -> str:
        mode = os.environ.get("WANDB_MODE") or "offline"
        return f"project {self.exp.wandb_project} ({mode}, {self.dir})"

    def _ledger_path(self) -> Path:
        return self.dir / WANDB_LEDGER

    def _read_ledger(self) -> dict[str, str]:
        if self._ledger is None:
            try:
                data = json.loads(self._ledger_path().read_text(encoding="utf-8"))
                self._ledger = {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
            except (OSError, ValueError):
                self._ledger = {}
        return self._ledger

    def logged(self, run_id: str) -> str | None:
        return self._read_ledger().get(run_id)

    def _init(self, **kw):
        """wandb.init with the run directory's settings: offline unless the user set WANDB_MODE."""
        import wandb

        self.dir.mkdir(parents=True, exist_ok=True)
        self._used = True
        if not os.environ.get("WANDB_MODE"):
            kw["mode"] = "offline"
        settings = wandb.Settings(silent=True, console="off", save_code=False, disable_git=True, x_disable_stats=True)
        return wandb.init(dir=str(self.exp.path), project=self.exp.wandb_project, group=self.exp.name,
                          reinit="create_new", settings=settings, **kw)

    def log_run(self, rec: RunRecord) -> None:
        """One W&B run: config, the curves by step, the final metrics in its summary. Its id holds the
        fingerprint: a run recorded again with other values is a new W&B run, never a clash."""
        run = self._init(name=rec.run_id, id=f"{self.exp.identity[:8]}-{rec.run_id}-{rec.fingerprint[:8]}",
                         job_type="run", config=rec.config(), tags=[rec.status] if rec.status else None)
        try:
            for step, values in rec.curves().items():
                run.log(values, step=step)
            run.summary.update({**rec.final(), "status": rec.status, "run_id": rec.run_id})
        except BaseException:
            with contextlib.suppress(Exception):
                run.finish(exit_code=1)
            self._discard(run)
            raise
        run.finish()
        self._remember(rec.run_id, rec.fingerprint)

    def _discard(self, run) -> None:
        """Remove the offline files of a run whose logging failed (it is logged again next time)."""
        with contextlib.suppress(Exception):
            d = Path(run.dir).parent
            if d.name.startswith("offline-run-") and d.resolve().is_relative_to(self.dir.resolve()):
                shutil.rmtree(d, ignore_errors=True)

    def log_leaderboard(self, files: Mapping[str, Path], root: Path, *, again: bool = False) -> None:
        """A run named `leaderboard` holding copies of the leaderboard files (and spec.yaml) in its files.
        Unless `again` (`nas-stab leaderboard`, asked for), none when the table's inputs (trials.csv,
        spec.yaml) and files are those logged last: a rerun that trained nothing adds no run."""
        paths = _artifacts(files, root, self.exp.path)
        digest = hashlib.sha256()
        for p in [self.exp.path / TRIALS_CSV, self.exp.path / SPEC_YAML]:
            digest.update(p.read_bytes() if p.is_file() else b"")
        digest.update("\0".join(sorted(p.name for p in paths)).encode())
        fingerprint = digest.hexdigest()[:16]
        if not again and self._read_ledger().get(LEADERBOARD_RUN) == fingerprint:
            return
        run = self._init(name=LEADERBOARD_RUN, job_type="leaderboard",
                         config={"experiment": self.exp.name, "spec_hash": self.exp.spec_hash})
        try:
            for p in paths:
                rel = p.relative_to(root) if p.is_relative_to(root) else Path(p.name)
                dest = Path(run.dir) / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, dest)  # a copy: the table as it is now, not a link to the next one
                run.save(str(dest), base_path=run.dir, policy="now")
        except BaseException:
            with contextlib.suppress(Exception):
                run.finish(exit_code=1)
            self._discard(run)
            raise
        run.finish()
        self._remember(LEADERBOARD_RUN, fingerprint)

    def _remember(self, name: str, fingerprint: str) -> None:
        """Record in the ledger what W&B now holds (a run id, or the leaderboard's files)."""
        from nas_stab.results.rundir import atomic_write

        ledger = self._read_ledger()
        ledger[name] = fingerprint
        atomic_write(self._ledger_path(), json.dumps(ledger, indent=0, sort_keys=True) + "\n")

    def close(self) -> None:
        """Stop the W&B service this process started, unless a run of the user's own is active."""
        if not self._used:
            return
        import wandb

        if wandb.run is None:
            wandb.teardown()


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

    def _failed(self, tracker, what: str, e: Exception) -> None:
        why = " ".join(str(e).split())[:300] or "no message"
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


def open_tracking(spec, path: Path, meta: Mapping[str, Any] | None, log: Callable[[str], None]) -> Tracking | None:
    """The trackers `spec.logging.tracking` names for the run directory `path`; None when it names none.
    Nothing is imported or contacted until the first run is logged."""
    if not backends(spec.logging.tracking):
        return None
    return Tracking(experiment(spec, path, meta), log)
