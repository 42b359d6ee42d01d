"""TensorBoard logs of every run, from the records the driver has just written.

    runs/<name>/tensorboard/<run_id>_<key>=<value>,.../events.out.tfevents...

One subdirectory per trained run, named by its run id and searched values, so
`tensorboard --logdir runs/<name>/tensorboard` lists runs by configuration and
its regex filter selects them (`depth=32`, `aggregation=stam`). Each holds the
step history as scalars (`train/loss`, `train/lr`, `val/<metric>` at each
validation, `stability/<metric>` at each snapshot) and the run's hyperparameters
(the searched keys and the seed) with its final task and stability metrics in
TensorBoard's HParams tab.

The logs are written by the driver after a run's history and trials.csv row are
on disk, from those records: they are a view of the run directory, never the
source of anything, and `nas-stab tensorboard RUN_DIR` rebuilds them. A failure
to write them is logged and never stops the experiment. `logging.tensorboard:
false` turns them off.
"""
from __future__ import annotations

import contextlib
import math
import re
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from nas_stab import metrics
from nas_stab.errors import RunError
from nas_stab.store.reader import HISTORY, TRIALS_CSV, is_run_id, iter_history_rows, iter_rows

TB_DIR = "tensorboard"
_SKIP = {"step"}
# rows of one run's history: nas_stab logs at most about 1,000 training steps a run (train.loop: total // 1000) plus
# its snapshots and validations, so a longer file is not one it wrote, and exporting it would take minutes unannounced
HISTORY_CAP = 100_000


def _num(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return x if math.isfinite(x) else None


def run_dir_name(row: dict, searched: Iterable[str]) -> str:
    """`<run_id>_<short key>=<value>,...`: readable, unique (the run id) and safe as a file name.

    Raises:
        RunError: the row's run_id is not ``t<trial>-s<seed>`` (a path is never built from anything else).
    """
    if not is_run_id(row.get("run_id")):
        raise RunError(f"{TRIALS_CSV}: run_id: {row.get('run_id')!r} is not a run id (t<trial>-s<seed>); "
                       "no TensorBoard directory is named after it")
    parts = [f"{k.split('.')[-1]}={row.get(k, '')}" for k in searched]
    name = f"{row['run_id']}_" + ",".join(parts) if parts else str(row["run_id"])
    name = re.sub(r"[^A-Za-z0-9_.,=+-]", "_", name)
    return name[:200]


def scalar_tag(column: str, task_metrics: set[str]) -> str:
    """The name of a history column's curve (`train/loss`, `val/val_acc`, `stability/fwd_ratio`); the
    experiment trackers (tracking.py) name their curves the same way."""
    if column in ("train_loss", "lr"):
        return f"train/{column[6:] if column.startswith('train_') else column}"
    if column in task_metrics or column.startswith(("val_", "test_")) or column in ("bleu", "test_bleu"):
        return f"val/{column}"
    return f"stability/{column}"


def write_run(root: Path, row: dict, history: Iterable[dict], searched: list[str], task_kind: str) -> Path:
    """Write one run's TensorBoard logs under `root` (replacing any earlier ones of that run)."""
    from torch.utils.tensorboard import SummaryWriter  # deferred: loads torch only when this runs
    from torch.utils.tensorboard.summary import hparams  # deferred: loads torch only when this runs

    out = root / run_dir_name(row, searched)
    if root.is_symlink() or out.resolve().parent != root.resolve():
        raise RunError(f"{out}: outside {root}; TensorBoard logs are written only inside the run directory")
    if out.exists() or out.is_symlink():
        remove_log_dir(out)
    try:
        with _writer_errors_raised():
            _write(out, row, history, searched, task_kind, SummaryWriter, hparams)
    except BaseException:
        if is_log_dir(out):  # made by this call, half written (a full disk): gone, `nas-stab tensorboard` retries
            shutil.rmtree(out, ignore_errors=True)
        raise
    return out


@contextlib.contextmanager
def _writer_errors_raised():
    """TensorBoard writes from a background thread; a failure there (a full disk) printed that thread's
    traceback before the caller learnt of it. Here the thread's error is kept quiet and raised in the
    caller when the writer closes (SummaryWriter.close() itself does not raise it)."""
    caught: list[BaseException] = []
    old = threading.excepthook

    def hook(args):
        if type(args.thread).__name__ == "_AsyncWriterThread":
            caught.append(args.exc_value)
        else:
            old(args)

    threading.excepthook = hook
    try:
        yield
    finally:
        threading.excepthook = old
    if caught:
        raise caught[0]


def _write(out: Path, row: dict, history: Iterable[dict], searched: list[str], task_kind: str, SummaryWriter, hparams) -> None:
    task_metrics = set(metrics.TASK_METRICS[task_kind])
    w = SummaryWriter(log_dir=str(out), max_queue=10_000, flush_secs=3600)
    try:
        for n, h in enumerate(history, 1):
            if n > HISTORY_CAP:
                raise RunError(f"{out.name}: its history file has more than {HISTORY_CAP:,} rows; nas_stab logs at most "
                               "about 1,000 steps a run, so it did not write this one: move it aside (history/<run_id>.csv)")
            step = _num(h.get("step"))
            if step is None:
                continue
            for col, v in h.items():
                x = _num(v)
                if col in _SKIP or x is None:
                    continue
                w.add_scalar(scalar_tag(col, task_metrics), x, int(step))
        hp = {k: _hparam(row.get(k)) for k in searched}
        hp["seed"] = _hparam(row.get("seed"))
        hp["status"] = str(row.get("status", ""))
        final = {}
        for col in list(metrics.TASK_METRICS[task_kind]) + [c for c in row if c.startswith(("init_", "final_"))]:
            x = _num(row.get(col))
            if x is not None:
                final[f"hparam/{col}"] = x
        # the HParams summaries go into the run's own directory (SummaryWriter.add_hparams would make a subdirectory)
        exp, ssi, sei = hparams(hp, final)
        fw = w._get_file_writer()
        for summary in (exp, ssi, sei):
            fw.add_summary(summary)
        for k, v in final.items():
            w.add_scalar(k, v, int(_num(row.get("steps")) or 0))
    finally:
        w.close()


def is_log_dir(path: Path) -> bool:
    """Whether `path` is a run's TensorBoard directory as `write_run` makes it: a real directory (not a
    symlink) named after a run id, holding nothing but event files."""
    if path.is_symlink() or not path.is_dir() or not is_run_id(path.name.split("_", 1)[0]):
        return False
    return all(p.name.startswith("events.out.tfevents.") and p.is_file() and not p.is_symlink() for p in path.iterdir())


def remove_log_dir(path: Path) -> None:
    """Remove a run's earlier TensorBoard directory; anything else is refused, never removed."""
    if not is_log_dir(path):
        raise RunError(f"{path}: not a TensorBoard log directory that nas-stab wrote (only event files); "
                       "move it aside, nothing was removed")
    shutil.rmtree(path)


def _hparam(v: Any) -> Any:
    x = _num(v)
    if x is not None and v not in ("", None):
        return int(x) if float(x).is_integer() and "." not in str(v) else x
    return "" if v is None else str(v)


def write_rows(run_path: Path, rows: Iterable[dict], searched: list[str], task_kind: str,
               progress: Callable[[int], None] | None = None) -> list[Path]:
    """TensorBoard logs of these trials.csv rows, from their history files (each read as it is written);
    `progress(runs written)` after each run."""
    root = Path(run_path) / TB_DIR
    out = []
    for row in rows:
        history = iter_history_rows(Path(run_path) / HISTORY, row["run_id"])
        out.append(write_run(root, row, history, searched, task_kind))
        if progress is not None:
            progress(len(out))
    return out


class _Progress:
    """One line on stderr every `every` seconds while `nas-stab tensorboard` writes: runs written of `total`."""

    def __init__(self, total: int, every: float = 5.0):
        self.total, self.every = total, every
        self.t0 = self.last = time.monotonic()

    def __call__(self, done: int) -> None:
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            rate = done / (now - self.t0)
            print(f"tensorboard: {done:,} of {self.total:,} runs written ({now - self.t0:.0f} s, "
                  f"~{(self.total - done) / rate:.0f} s left)", file=sys.stderr, flush=True)


def rebuild(run_path: Path, searched: list[str], task_kind: str) -> tuple[int, Path]:
    """`nas-stab tensorboard`: every run's logs written again from trials.csv and history/ (the caller
    holds the run directory's lock). A row that names no run (`reader.read_rows`, strict) is an error
    before anything is touched; only directories `write_run` made are removed; returns (runs, root).

    Raises:
        RunError: a malformed row, a `tensorboard` that is not a real directory of the run, or a
            directory in it this command cannot write (full disk, read-only: the error names it).
    """
    n = sum(1 for _ in iter_rows(run_path, strict=True))  # every row checked before anything is touched, none kept
    root = Path(run_path) / TB_DIR
    if root.is_symlink() or root.exists() and not root.is_dir():
        raise RunError(f"{root}: not a directory of the run (a symlink or a file); move it aside")
    try:
        if root.is_dir():  # the logs of runs trials.csv no longer lists go too; anything else stays
            for p in root.iterdir():
                if is_log_dir(p):
                    shutil.rmtree(p)
        write_rows(run_path, iter_rows(run_path, strict=True), searched, task_kind, progress=_Progress(n))
    except OSError as e:
        raise RunError(f"{e.filename or root}: cannot write TensorBoard logs ({e.strerror or e}); the run's records are "
                       "untouched") from None
    return n, root
