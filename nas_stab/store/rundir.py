"""The run directory (layout in docs/run-directory.md): one writer, atomic files, resumable.

    runs/<name>/
      spec.yaml      resolved spec + meta (spec_hash, nas_stab version, git commit, ...)
      study.db       Optuna storage (SQLite) unless the spec names another
      trials.csv     one row per trained run (trial x seed)
      history/       <run_id>.csv per run: step, train_loss, lr, stability metrics
      leaderboard.md
      plots/
      log.txt

The driver holds an exclusive lock on log.txt while it runs, so a second
`nas-stab run` of the same experiment refuses with a clear message instead of
racing the first.
"""
from __future__ import annotations

import contextlib
import csv
import datetime as _dt
import errno
import fcntl
import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import yaml

from nas_stab import metrics
from nas_stab.config import spec_hash
from nas_stab.config.display import applicable_plain
from nas_stab.config.load import with_earlier_defaults
from nas_stab.config.schema import Spec
from nas_stab.csvsafe import csv_cell
from nas_stab.errors import RunError
from nas_stab.store.atomic import atomic_write
from nas_stab.store.reader import HISTORY, SPEC_YAML, TRIALS_CSV, read_rows, stored_spec
from nas_stab.store.rundir_meta import git_commit, invocation, meta_for, spec_changes
from nas_stab.textfmt import mask_plain, mask_secrets

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Sequence

RESERVE = ".reserve"  # room held back while a driver runs, given up to close its trials on a full disk
RESERVE_BYTES = 128 * 1024
FIXED_HEAD = ["trial", "seed", "status", "objective"]
FIXED_TAIL = ["max_update_ratio", "loss_spikes", "steps", "wall_s", "train_s", "measure_s", "diverged_step", "diverged_why", "error", "run_id",
              "key", "optuna_trial"]
TIMING_COLUMNS = ("wall_s", "train_s", "measure_s")  # seconds: the only columns two runs of the same job may differ in


class RecordView(Protocol):
    """A view of the records kept beside the run directory (TensorBoard logs, an MLflow or W&B run: `trackers/views.py`):
    told of each run once its record is on disk, and of the end of the search. A view never stops a search: it says
    its failures in log.txt and in `finish`'s list."""

    def runs(self, new_rows: list[dict[str, Any]], searched: Sequence[str], task_kind: str) -> None:
        """Runs just recorded in trials.csv."""
        ...

    def finish(self, files: dict[str, Path] | None, path: Path) -> list[str]:
        """The end of a search (`files`: the leaderboard's): what is still to log; its failures."""
        ...

    def summary(self) -> list[str]:
        """After `finish`: one line per backend that worked, what it logged and how to open it."""
        ...

    def close(self) -> None:
        ...


class RunDir:
    """An experiment's run directory, opened for writing by one driver."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._lock: io.TextIOWrapper | None = None  # log.txt, open and locked (_acquire)
        self._header: list[str] | None = None  # trials.csv's columns, once this driver has written it
        self.views: list[RecordView] = []  # told of each recorded run (`RecordView`: TensorBoard, MLflow, W&B)

    # -- opening ---------------------------------------------------------------
    @staticmethod
    def adopt_earlier_defaults(out_root: str | Path, spec: Spec) -> Spec:
        """The spec to run: `spec` itself, or, when `out_root/<name>` holds a run of this experiment
        made before one of its defaults changed (config.load.CHANGED_DEFAULTS) and the experiment
        leaves that key unset, `spec` with the earlier default, the run directory's value (its hash
        and run keys then match: it resumes, nothing is trained again)."""
        try:
            path = Path(os.path.expanduser(str(out_root))) / spec.name
            meta = (stored_spec(path) or {}).get("meta") or {} if (path / SPEC_YAML).is_file() else {}
        except (OSError, RuntimeError, ValueError):
            return spec  # open() says what is wrong with the directory
        stored = meta.get("spec_hash") if isinstance(meta, dict) else None
        if not stored or stored == spec_hash(spec):
            return spec
        earlier = with_earlier_defaults(spec)
        return earlier if earlier is not None and spec_hash(earlier) == stored else spec

    @classmethod
    def open(cls, out_root: str | Path, spec: Spec, *, fresh: bool = False, data_note: str = "",
             views: Callable[[Spec, RunDir], Sequence[RecordView]] | None = None) -> RunDir:
        """Create or reopen `out_root/<spec.name>`; refuse a changed spec unless `fresh`.

        With `fresh`, an existing directory is moved aside to
        `<name>.old-<timestamp>` (never deleted: nothing a user ran is lost). `views(spec, rd)`: the views
        of its records to keep (`nas_stab.trackers.views.record_views`: the experiment's TensorBoard logs and
        tracking), opened once the directory is locked.
        """
        try:
            root = Path(os.path.expanduser(str(out_root))).resolve()
            path = (root / spec.name).resolve()
        except (OSError, RuntimeError) as e:  # a symlink loop
            raise RunError(f"cannot use {out_root} as the output directory: {e}") from None
        if path.parent != root:  # the name pattern forbids this; belt and braces
            raise RunError(f"run name {spec.name!r} would escape the output directory {root}")

        h = spec_hash(spec)
        rd = cls(path)
        try:
            if path.exists() and fresh:
                rd._acquire()  # do not move a directory another driver is using
                rd._release()
                stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
                aside = path.with_name(f"{path.name}.old-{stamp}")
                n = 1
                while aside.exists() or aside.is_symlink():  # a second --fresh within the same second
                    aside, n = path.with_name(f"{path.name}.old-{stamp}-{n}"), n + 1
                path.rename(aside)
            path.mkdir(parents=True, exist_ok=True)
            rd._acquire()
        except OSError as e:  # --out is a file, read-only, a symlink loop, a name too long...
            raise RunError(f"cannot use {path} as the run directory: {e.strerror or e}") from None
        old = rd.read_meta()
        if old is not None and old.get("spec_hash") != h:
            rd._release()
            changed = spec_changes(stored_spec(path) or {}, rd.spec_plain(spec))
            raise RunError(
                f"{path} holds a run of a different spec (hash {old.get('spec_hash')} vs {h}"
                + (f"; changed: {changed}" if changed else "") + "); "
                "rerun with --fresh to move the old run aside and start over, or choose another --out"
            )
        if old is None:
            data = rd.spec_plain(spec)
            data["meta"] = meta_for(spec)
            if data_note:
                data["meta"]["data"] = data_note  # how the splits were made (e.g. carved from one split)
            atomic_write(path / SPEC_YAML, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        else:
            rd._update_presentation(spec)
            rd._record_resume()
        if (path / "history").exists() and not (path / "history").is_dir():
            rd._release()
            raise RunError(f"{path / 'history'} is not a directory; move the run directory aside or rerun with --fresh")
        try:
            (path / "history").mkdir(exist_ok=True)
        except OSError as e:
            rd._release()
            raise RunError(f"cannot create {path / 'history'}: {e.strerror or e}") from None
        if views is not None:
            rd.views = list(views(spec, rd))
        rd.repair()
        rd.reserve()
        return rd

    def _record_resume(self) -> None:
        """A rerun by another command line (more seeds, other runner settings) goes into ``meta.resumed``, once
        per command and commit: a table names every command that trained its runs (provenance, "trained by")."""
        command = invocation()
        data = stored_spec(self.path) or {}
        meta = data.get("meta") or {}
        if not command or not meta:
            return
        entry = {"command": command, "git_commit": git_commit()}
        known = [meta, *(meta.get("resumed") or [])]
        if any(e.get("command") == entry["command"] and e.get("git_commit") == entry["git_commit"] for e in known):
            return
        at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
        meta["resumed"] = [*(meta.get("resumed") or []), {**entry, "at": at}]
        data["meta"] = meta
        atomic_write(self.path / SPEC_YAML, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))

    def _update_presentation(self, spec: Spec) -> None:
        """The same experiment rerun with other ``leaderboard:`` or ``logging:`` settings (or description):
        they are not part of its identity (the spec hash leaves them out), so the stored spec takes the
        new ones and the next table (and `nas-stab leaderboard`'s tracking) uses them; nothing is retrained."""
        p = self.path / SPEC_YAML
        data = stored_spec(self.path) or {}
        new = self.spec_plain(spec)
        changed = [k for k in ("leaderboard", "description", "logging") if data.get(k) != new.get(k)]
        if not changed:
            return
        for k in changed:
            data[k] = new[k]
        atomic_write(p, yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
        self.log(f"spec.yaml: {' and '.join(changed)} updated from {spec.source} (not part of the experiment's identity)")

    def repair(self) -> int:
        """Remove temp files a killed writer left behind (atomic writes never leave
        a half-written real file); returns how many, and logs them."""
        stale = [p for d in (self.path, self.path / "history", self.path / "plots") if d.is_dir()
                 for p in d.glob(".*.tmp")]
        for p in stale:
            with contextlib.suppress(OSError):
                p.unlink()
        if stale:
            self.log(f"removed {len(stale)} partial file(s) left by an interrupted run: " + ", ".join(p.name for p in stale))
        return len(stale)

    def reserve(self) -> bool:
        """Hold RESERVE_BYTES of disk in `.reserve` while the driver runs (best effort; False when the disk
        has not that much). On a full disk `release_reserve` gives them up so that the trials in flight can
        still be told to the study (in study.db, on the same disk) instead of staying RUNNING."""
        p = self.path / RESERVE
        try:
            if p.is_file() and not p.is_symlink() and p.stat().st_size >= RESERVE_BYTES:
                return True
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            try:
                try:
                    os.posix_fallocate(fd, 0, RESERVE_BYTES)  # real blocks, not a sparse file
                except OSError as e:
                    if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                        raise
                    os.write(fd, b"\0" * RESERVE_BYTES)
                os.fsync(fd)
            finally:
                os.close(fd)
            return True
        except OSError:
            self.release_reserve()
            return False

    def release_reserve(self) -> bool:
        """Give the reserved disk back (the next `open` takes it again); whether there was one."""
        try:
            (self.path / RESERVE).unlink()
            return True
        except OSError:
            return False

    @staticmethod
    def spec_plain(spec: Spec) -> dict:
        """The keys that apply, with every password or token of a storage or tracking URL masked (a run directory
        is shared and published: give credentials by the environment, docs/run-directory.md); reloading it gives
        the same spec and hash unless a secret was masked (the run's hash is the stored meta's)."""
        return mask_plain(applicable_plain(spec))  # type: ignore[return-value]  # a dict stays a dict

    @classmethod
    @contextlib.contextmanager
    def lock(cls, path: Path) -> Iterator[RunDir]:
        """Hold an existing run directory's lock for a command that rewrites part of it (`nas-stab
        tensorboard`): a driver running there makes it refuse, and no driver starts meanwhile."""
        rd = cls(Path(path))
        try:
            rd._acquire()
        except OSError as e:
            raise RunError(f"cannot lock {rd.path / 'log.txt'}: {e.strerror or e}") from None
        try:
            yield rd
        finally:
            rd._release()

    def _acquire(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        f = open(self.path / "log.txt", "a", encoding="utf-8")  # noqa: SIM115 - held open (and locked) until _release
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            f.close()
            raise RunError(f"{self.path} is in use by another nas-stab process (log.txt is locked); wait for it to finish") from None
        self._lock = f

    def _release(self) -> None:
        if self._lock is not None:
            self._lock.close()
            self._lock = None

    def close(self) -> None:
        for v in self.views:
            v.close()
        self.views = []
        if self._lock is not None:
            self.release_reserve()  # held only while the driver runs
        self._release()

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- files ------------------------------------------------------------------
    def read_meta(self) -> dict | None:
        """The stored provenance (``meta:`` of spec.yaml), None when there is no spec.yaml yet."""
        data = stored_spec(self.path)
        return None if data is None else data.get("meta") or {}

    def log(self, message: str) -> None:
        stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        if self._lock is not None:
            self._lock.write(f"{stamp} {mask_secrets(message)}\n")
            self._lock.flush()

    @property
    def storage_url(self) -> str:
        return f"sqlite:///{self.path / 'study.db'}"

    def read_trials(self) -> list[dict[str, str]]:
        """Rows of trials.csv; a file cut short by a kill is repaired (its last partial row dropped)."""
        return read_rows(self.path, self.log)

    def write_trials(self, rows: Iterable[dict[str, Any]], searched: Iterable[str], task_kind: str) -> None:
        """Rewrite trials.csv atomically with every row, in (trial, seed) order."""
        text = trials_csv(list(rows), searched, task_kind)
        atomic_write(self.path / TRIALS_CSV, text)
        self._header = next(csv.reader(io.StringIO(text)))

    def add_trials(self, new_rows: list[dict[str, Any]], rows: Iterable[dict[str, Any]], searched: Iterable[str],
                   task_kind: str, *, rewrite: bool = False) -> None:
        """Record finished runs. `rows` is every row, the new ones included.

        The new rows are appended to trials.csv (flushed and fsynced) when the
        file this driver last wrote already has their columns; otherwise, and
        the first time, the whole file is rewritten atomically. Rewriting every
        row after every run made a long search quadratic (~75 ms per run at
        1,000 rows here); appending costs the same at any length. Appended rows
        are in the order runs finished: `write_trials` at the end of a run puts
        the file back in (trial, seed) order. A kill during an append leaves a
        partial last line, which `read_trials` drops.
        """
        header = self._header
        p = self.path / TRIALS_CSV
        cols = set(header or ())
        if rewrite or header is None or not p.exists() or any(k not in cols for r in new_rows for k in r):
            self.write_trials(rows, searched, task_kind)
            self._view(new_rows, searched, task_kind)
            return
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=header, extrasaction="ignore", lineterminator="\n")
        for r in new_rows:
            w.writerow({k: csv_cell(r.get(k)) for k in header})
        with open(p, "a", encoding="utf-8", newline="") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())
        self._view(new_rows, searched, task_kind)

    def _view(self, new_rows: list[dict[str, Any]], searched: Iterable[str], task_kind: str) -> None:
        """The views of the records (TensorBoard, MLflow, W&B) told of runs whose records are on disk."""
        if new_rows:
            for v in self.views:
                v.runs(new_rows, list(searched), task_kind)

    def track_end(self, files: dict[str, Path] | None = None) -> list[str]:
        """The end of a search: each view logs what it has not yet (the runs, then the leaderboard files); the
        failures, as logged."""
        return [line for v in self.views for line in v.finish(files, self.path)]

    def track_summary(self) -> list[str]:
        """After `track_end`: what each view logged and how to open it (one line each)."""
        return [line for v in self.views for line in v.summary()]

    def write_history(self, run_id: str, history: list[dict[str, float]]) -> None:
        cols: list[str] = ["step", "train_loss", "lr"]
        for row in history:
            for k in row:
                if k not in cols:
                    cols.append(k)
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        for row in history:
            w.writerow({k: csv_cell(row.get(k)) for k in cols})
        atomic_write(self.path / HISTORY / f"{run_id}.csv", buf.getvalue())


def columns(searched: Iterable[str], task_kind: str, extra: Iterable[str] = ()) -> list[str]:
    """trials.csv columns in their documented order (docs/run-directory.md, "trials.csv")."""
    cols = list(FIXED_HEAD) + list(searched) + list(metrics.TASK_METRICS[task_kind])
    cols += [f"{p}{m}" for p in ("init_", "final_") for m in metrics.stability_metrics(task_kind)]
    cols += [c for c in extra if c not in cols and c not in FIXED_TAIL]
    return cols + FIXED_TAIL


def trials_csv(rows: list[dict[str, Any]], searched: Iterable[str], task_kind: str) -> str:
    searched = list(searched)
    base = columns(searched, task_kind)
    extra = sorted({k for r in rows for k in r if k not in base})
    cols = columns(searched, task_kind, extra)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    order = sorted(rows, key=lambda r: (_int(r.get("trial")), _int(r.get("seed"))))
    for r in order:
        w.writerow({k: csv_cell(r.get(k)) for k in cols})
    return buf.getvalue()


def _int(v: Any) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return 1 << 62
