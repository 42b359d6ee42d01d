"""The Weights & Biases backend of the experiment tracking (tracking.py): one W&B run per recorded run, offline
under ``<run dir>/wandb/`` unless WANDB_MODE is set, and a run per leaderboard written; a ledger in that
directory keeps what W&B holds."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Mapping
from pathlib import Path

from nas_stab.store.atomic import atomic_write
from nas_stab.store.reader import SPEC_YAML, TRIALS_CSV
from nas_stab.trackers.tracking_records import LEADERBOARD_RUN, Experiment, RunRecord, leaderboard_artifacts

__all__ = ["WANDB_LEDGER", "WandbTracker"]

WANDB_LEDGER = "nas_stab-logged.json"  # in <run dir>/wandb/: run id (and `leaderboard`) -> fingerprint of what W&B holds


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

    def open_hint(self) -> str:
        """How to look at what was logged: offline runs are uploaded by `wandb sync`."""
        if (os.environ.get("WANDB_MODE") or "offline") in ("offline", "dryrun", "disabled"):
            return f"wandb sync {self.dir}/offline-run-* (then the project {self.exp.wandb_project} in W&B; config values keep their types)"
        return f"the project {self.exp.wandb_project} in W&B (config values keep their types)"

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
        import wandb  # deferred: loads W&B only when this runs

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
        with self._finishing(run):
            for step, values in rec.curves().items():
                run.log(values, step=step)
            run.summary.update({**rec.final(), "status": rec.status, "run_id": rec.run_id})
        self._remember(rec.run_id, rec.fingerprint)

    @contextlib.contextmanager
    def _finishing(self, run) -> Iterator[None]:
        """Finish `run` after the block; if the block fails, finish it as failed and discard its offline files."""
        try:
            yield
        except BaseException:
            with contextlib.suppress(Exception):
                run.finish(exit_code=1)
            self._discard(run)
            raise
        run.finish()

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
        paths = leaderboard_artifacts(files, root, self.exp.path)
        digest = hashlib.sha256()
        for p in [self.exp.path / TRIALS_CSV, self.exp.path / SPEC_YAML]:
            digest.update(p.read_bytes() if p.is_file() else b"")
        digest.update("\0".join(sorted(p.name for p in paths)).encode())
        fingerprint = digest.hexdigest()[:16]
        if not again and self._read_ledger().get(LEADERBOARD_RUN) == fingerprint:
            return
        run = self._init(name=LEADERBOARD_RUN, job_type="leaderboard",
                         config={"experiment": self.exp.name, "spec_hash": self.exp.spec_hash})
        with self._finishing(run):
            for p in paths:
                rel = p.relative_to(root) if p.is_relative_to(root) else Path(p.name)
                dest = Path(run.dir) / rel
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(p, dest)  # a copy: the table as it is now, not a link to the next one
                run.save(str(dest), base_path=run.dir, policy="now")
        self._remember(LEADERBOARD_RUN, fingerprint)

    def _remember(self, name: str, fingerprint: str) -> None:
        """Record in the ledger what W&B now holds (a run id, or the leaderboard's files)."""
        ledger = self._read_ledger()
        ledger[name] = fingerprint
        atomic_write(self._ledger_path(), json.dumps(ledger, indent=0, sort_keys=True) + "\n")

    def close(self) -> None:
        """Stop the W&B service this process started, unless a run of the user's own is active."""
        if not self._used:
            return
        import wandb  # deferred: loads W&B only when this runs

        if wandb.run is None:
            wandb.teardown()
