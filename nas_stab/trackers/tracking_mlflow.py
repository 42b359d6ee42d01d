"""The MLflow backend of the experiment tracking (tracking.py): one MLflow run per recorded run, children of a
run named `leaderboard` that holds the tables; by default in ``sqlite:///<run dir>/mlflow.db``."""
from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nas_stab.store.reader import SPEC_YAML
from nas_stab.trackers.tracking_records import LEADERBOARD_RUN, TAG, Experiment, RunRecord, leaderboard_artifacts

__all__ = ["MlflowTracker"]


def _text(v: Any) -> str:
    """A configuration value as a param's text: strings as they are, anything else as JSON."""
    return v if isinstance(v, str) else json.dumps(v)


HTTP_TIMEOUT_S = 10


def _public_uri(uri: str) -> str:
    """A tracking URI without the user and password it may hold, for log lines."""
    return re.sub(r"//[^/@]*@", "//", uri)


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


CONFIG_ARTIFACT = "config.json"  # each run's resolved configuration with its types (MLflow keeps params as text)


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

    def open_hint(self) -> str:
        """How to look at what was logged (the password of a URI masked)."""
        return (f"mlflow ui --backend-store-uri {self.where()}; each run's params are text, its typed configuration "
                f"is the artifact {CONFIG_ARTIFACT}")

    def _open(self):
        """The client and the experiment (created, or restored when deleted), once."""
        if self._client is None:
            # a server that does not answer costs one short timeout, not MLflow's default retries with backoff (the
            # backend is then left alone until the end of the search, which tries once more)
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(HTTP_TIMEOUT_S))
            from mlflow.tracking import MlflowClient  # deferred: loads MLflow only when this runs

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
            from mlflow.entities import ViewType  # deferred: loads MLflow only when this runs

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
        from mlflow.entities import Metric, Param, RunTag  # deferred: loads MLflow only when this runs

        client = self._open()
        parent = self._parent_run()
        logged = self._index()
        old = logged.get(rec.run_id)
        with _quiet("mlflow", "alembic"):
            if old is not None:
                client.delete_run(old[0])
                del logged[rec.run_id]
            tags = {**rec.tags(), "mlflow.parentRunId": parent}
            run = client.create_run(self._experiment_id, run_name=rec.run_id,
                                    tags={_key(k): _clip(v, _limit("MAX_TAG_VAL_LENGTH", 8000)) for k, v in tags.items()})
            mid = run.info.run_id
            try:
                params = [Param(_key(k), _clip(_text(v), _limit("MAX_PARAM_VAL_LENGTH", 6000)))
                          for k, v in rec.config().items()]
                for i in range(0, len(params), 100):  # MLflow's limit of params per batch
                    client.log_batch(mid, params=params[i:i + 100])
                client.log_dict(mid, rec.config(), CONFIG_ARTIFACT)  # params are text in MLflow: the typed copy
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
        logged[rec.run_id] = (mid, rec.fingerprint)

    def log_leaderboard(self, files: Mapping[str, Path], root: Path, *, again: bool = False) -> None:
        """The leaderboard files (paths under `root` kept: plots/...) and spec.yaml, into the parent run
        (the same run every time: a file logged again replaces the earlier one, whatever `again`)."""
        client = self._open()
        parent = self._parent_run()
        with _quiet("mlflow", "alembic"):
            for p in leaderboard_artifacts(files, root, self.exp.path):
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


def _limit(name: str, default: int) -> int:
    """One of MLflow's size limits, as the installed version says (the default when it does not)."""
    try:
        from mlflow.utils import validation  # deferred: loads MLflow only when this runs

        return int(getattr(validation, name, default))
    except Exception:  # noqa: BLE001 - a limit is only a bound to stay under
        return default


def _key(key: str) -> str:
    """A name MLflow accepts (letters, digits, _ - . / : and spaces; at most 250 characters)."""
    return re.sub(r"[^\w./\- :]", "_", key)[:250]


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 3] + "..."
