"""The one reader of a run directory (layout in `rundir.py` and docs/run-directory.md).

`read_run(path)` returns a `Run`: the stored spec as the typed, validated `Spec`
(so every setting the analysis needs, with its default, comes from the schema in
`nas_stab/config/schema.py`), the provenance block (``meta:``), and, read on
first use, the trials as a DataFrame whose text cells are unescaped
(`csvsafe.py`) and each run's step history.

    run = read_run("runs/quickstart")
    run.spec.leaderboard.tolerance_octaves   # 1.0 unless the experiment set it
    run.meta["spec_hash"]
    run.trials                               # DataFrame; RunError when there is none yet
    run.history("a1b2c3d4")                  # DataFrame of history/a1b2c3d4.csv, or None
    run.rows()                               # trials.csv as text records (the driver's view)

Two views of ``trials.csv``: `Run.trials` for analysis (pandas types; a missing,
empty or malformed file is an error naming it) and `read_rows` for the driver
and `nas-stab status` (cells as the text the driver wrote; a partial last line
left by a kill and malformed rows are dropped, with a note to `log`).
`stored_spec` gives the stored mapping itself, for the driver that compares a
run's hash and rewrites its presentation keys.

Reading never imports matplotlib; pandas only for `Run.trials` and histories.
"""
from __future__ import annotations

import csv
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas_stab import metrics
from nas_stab.csvsafe import unescape_cell, unescape_frame
from nas_stab.errors import RunError, RunErrors, SpecError
from nas_stab.safefiles import check_regular

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd  # deferred: loads pandas only when this runs

    from nas_stab.config import Spec

__all__ = ["HISTORY", "RUN_ID", "Run", "SPEC_YAML", "TRIALS_CSV", "history_frame", "history_path", "is_run_id",
           "iter_history_rows", "iter_rows", "read_history_rows", "read_rows", "read_run", "stored_spec"]

SPEC_YAML = "spec.yaml"
TRIALS_CSV = "trials.csv"
HISTORY = "history"
RUN_ID = re.compile(r"t[0-9]{1,12}-s-?[0-9]{1,20}")  # `t<trial>-s<seed>`: the only names a path is built from


def is_run_id(value: Any) -> bool:
    """Whether `value` is a run id as the driver writes them (``t00003-s1``); anything else names no file."""
    return isinstance(value, str) and RUN_ID.fullmatch(value) is not None


@dataclass(frozen=True, eq=False)
class Run:
    """One run directory, read: ``spec`` typed, ``meta`` as stored, trials and histories on demand."""

    path: Path
    spec: Spec
    meta: Mapping[str, Any]

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def seeds(self) -> list[int]:
        return list(self.spec.seeds)

    def stored(self, key: str, default: Any = None) -> Any:
        """A dotted key's value exactly as spec.yaml stores it (`default` when absent): a table shows a
        base value as the run wrote it (``1.0``, where the typed spec would give the number ``1``)."""
        node: Any = self.spec.raw
        for part in key.split("."):
            if not isinstance(node, Mapping) or part not in node:
                return default
            node = node[part]
        return node

    @cached_property
    def trials(self) -> pd.DataFrame:
        """trials.csv with pandas' types and the text cells unescaped.

        Raises:
            RunError: naming the file, when it is missing, unreadable, malformed or has no trials.
        """

        tpath = self.path / TRIALS_CSV
        check_regular(tpath, "trials.csv")  # a link to /dev/zero, a FIFO: one line, never read
        if not tpath.is_file():
            raise RunError(f"{tpath}: missing; no trial has been recorded in this run yet")
        announce_big(tpath, "reading")
        # values as the run wrote them (csvsafe.py); a key or run id is text even when its characters are digits
        trials = unescape_frame(read_table(tpath, "empty file; no trial has been recorded", dtype={"key": str, "run_id": str}))
        if trials.empty:
            raise RunError(f"{tpath}: has a header but no trials")
        check_trials(trials, self.spec, tpath)
        return trials

    def rows(self, log: Callable[[str], None] | None = None) -> list[dict[str, str]]:
        """The records of trials.csv as text (see `read_rows`)."""
        return read_rows(self.path, log)

    def history(self, run_id: Any, *, nrows: int | None = None) -> pd.DataFrame | None:
        """One trained run's step history (see `history_frame`)."""
        return history_frame(self.path / HISTORY, run_id, nrows=nrows)


BIG_FILE = 32 << 20  # bytes: a trials.csv this large (about 10^5 records) takes seconds to read, and says so first


def announce_big(path: Path, doing: str) -> None:
    """One line on stderr before a long read: `path` is over BIG_FILE (a command that would otherwise be silent
    for a minute at 10^6 records says what it is doing)."""
    try:
        size = path.stat().st_size
    except OSError:
        return
    if size > BIG_FILE:
        print(f"{doing} {path} ({size >> 20:,} MiB; about 10 s per 100 MiB)...", file=sys.stderr, flush=True)


def read_table(path: Path, empty: str = "empty file, not a CSV table", **kwargs: Any) -> pd.DataFrame:
    """A CSV file of a run directory read by pandas (`kwargs` for `read_csv`), or RunError in one line naming it: `empty`
    for a file with nothing in it, else why it is not a readable table."""
    import pandas as pd  # deferred: loads pandas only when this runs

    try:
        return pd.read_csv(path, **kwargs)
    except pd.errors.EmptyDataError:
        raise RunError(f"{path}: {empty}") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        raise RunError(f"{path}: not a readable CSV table ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
    except OSError as e:
        raise RunError(f"{path}: cannot read ({e.strerror or e})") from None


def check_trials(trials: pd.DataFrame, spec: Spec, tpath: Path) -> None:
    """trials.csv as the driver writes it, or every problem at once, each naming the file, the line and the column:
    a column per searched key (a spec.yaml that searches a key its records lack disagrees with them), `seed` and `status`, each
    status a known one, seeds whole numbers, numbers where numbers belong (the objective, every metric, numeric
    searched keys), the learning rate and a numeric size a finite number > 0, every run id ``t<trial>-s<seed>``.
    A table built from anything else would give a confident verdict about data that means nothing.

    Raises:
        RunErrors: one line per problem, ``<file>: line <n>: <column>: ...`` (line 1 is the header).
    """
    problems = _column_problems(trials, spec, tpath)
    if problems:  # the cell checks below read these columns
        raise RunErrors(problems)
    problems += _cell_problems(trials, spec, tpath)
    if problems:
        raise RunErrors(problems)


def _column_problems(trials: pd.DataFrame, spec: Spec, tpath: Path) -> list[str]:
    searched = list(spec.space.keys)
    out = [f"{tpath}: no column {c!r} (every run records its seed, status and searched keys)"
           for c in ("seed", "status", *searched) if c not in trials.columns]
    return out


def _cell_problems(trials: pd.DataFrame, spec: Spec, tpath: Path) -> list[str]:
    import pandas as pd  # deferred: loads pandas only when this runs

    def cell(v: Any) -> str:
        return "an empty cell" if pd.isna(v) else repr(v.item() if hasattr(v, "item") else v)

    out: list[str] = []

    def report(bad: pd.Series, col: str, what: str) -> None:
        """One line per column and problem: its first bad cell, and the lines of the others (the first MAX_LINES)."""
        rows = bad.to_numpy().nonzero()[0]
        if not len(rows):
            return
        more = ", ".join(str(i + 2) for i in rows[1:MAX_LINES + 1]) + (", ..." if len(rows) > MAX_LINES + 1 else "")
        out.append(f"{tpath}: line {rows[0] + 2}: {col}: {cell(trials[col].iloc[rows[0]])} {what}"
                   + (f" (also line{'s' if len(rows) > 2 else ''} {more}: {len(rows) - 1} more)" if len(rows) > 1 else ""))

    report(~trials["status"].isin(metrics.STATUSES), "status", f"is not one of {', '.join(metrics.STATUSES)}")
    numeric = ["seed", "objective", *[c for c in trials.columns if c in metrics.OBJECTIVES]]
    numeric += [d.key for d in spec.space if not d.discrete or d.kind == "int"
                or all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in d.values)]
    positive = {k for k in (spec.leaderboard.lr, spec.leaderboard.transfer) if k}
    for col in dict.fromkeys(c for c in numeric if c in trials.columns):
        cells = trials[col]
        num = pd.to_numeric(cells, errors="coerce")
        bad = num.isna() & cells.notna() & (cells.astype(str).str.strip() != "")
        if col == "seed":
            bad |= cells.isna() | (num.notna() & (num % 1 != 0))
        if bad.any():
            report(bad, col, f"is not {'a whole number' if col == 'seed' else 'a number'}")
        elif col in positive:
            report(num.notna() & ~((num > 0) & (num < float("inf"))), col, "is not a finite number > 0")
    for col in (d.key for d in spec.space if d.key in trials.columns and d.key not in numeric):
        text = trials[col]  # a row label: a control character (a newline, an escape) breaks every table it keys
        report(text.notna() & text.astype(str).str.contains(r"[\x00-\x1f\x7f]", regex=True), col,
               "holds a control character (a newline, tab or escape): the leaderboard cannot key a row on it")
    if "run_id" in trials.columns:
        ids = trials["run_id"]
        report(ids.notna() & ~ids.map(lambda v: is_run_id(v) if isinstance(v, str) else False), "run_id",
               "is not t<trial>-s<seed> (a run id names its history file)")
    return out


MAX_LINES = 10  # the other bad lines of a column named in its one line


def read_run(run_dir: str | Path) -> Run:
    """Read a run directory's spec.yaml: the typed spec (validated as a stored run's) and its ``meta:``.

    Raises:
        RunError: not a directory, spec.yaml missing, unreadable or invalid (the message names the
            file, line and key).
    """
    from nas_stab.config import load_run_spec  # deferred: loads PyYAML only when this runs

    d = Path(run_dir)
    if not d.is_dir():
        raise RunError(f"{d}: not a run directory")
    spec_path = d / SPEC_YAML
    if not spec_path.is_file():
        raise RunError(f"{spec_path}: missing; a run directory holds the resolved spec.yaml")
    data = _load_mapping(spec_path)
    try:
        spec = load_run_spec(d)
    except SpecError as e:
        raise RunError(str(e)) from None
    meta = data.get("meta")
    return Run(path=d, spec=spec, meta=dict(meta) if isinstance(meta, Mapping) else {})


def _load_mapping(spec_path: Path) -> dict:
    from nas_stab.config.yamlio import load_yaml, read_text  # deferred: loads PyYAML only when this runs

    try:
        data, _ = load_yaml(read_text(spec_path), file=str(spec_path))
    except SpecError as e:
        raise RunError(str(e)) from None
    if not isinstance(data, dict):
        raise RunError(f"{spec_path}: expected a mapping of the experiment's keys")
    return data


def stored_spec(run_dir: str | Path) -> dict | None:
    """spec.yaml as the plain mapping it stores (``meta:`` included), None when the directory has none.

    Not validated against the schema: the driver reads it to compare an existing run's hash, which
    must work for a run of an older or different spec.

    Raises:
        RunError: the file is not YAML, or not a mapping with a ``meta:`` mapping.
    """
    import yaml  # deferred: loads PyYAML only when this runs

    p = Path(run_dir) / SPEC_YAML
    if not p.exists():
        return None
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError, OSError) as e:
        raise RunError(f"{p} is corrupt ({' '.join(str(e).split())}); move the directory aside or rerun with --fresh") from None
    if data is not None and not isinstance(data, dict) or not isinstance((data or {}).get("meta") or {}, dict):
        raise RunError(f"{p} is corrupt (not a mapping with meta); move the directory aside or rerun with --fresh")
    return data or {}


def read_rows(run_dir: str | Path, log: Callable[[str], None] | None = None, *, strict: bool = False) -> list[dict[str, str]]:
    """The records of trials.csv, cells as the text the driver wrote (unescaped); [] without the file
    (`iter_rows`, all of them in a list)."""
    return list(iter_rows(run_dir, log, strict=strict))


def iter_rows(run_dir: str | Path, log: Callable[[str], None] | None = None, *, strict: bool = False,
              columns: Iterable[str] | None = None) -> Iterator[dict[str, str]]:
    """The records of trials.csv one at a time, read as they come (a million records never sit in memory at once);
    with `columns`, each record holds only those (and key, status, run_id). Nothing without the file.

    A file cut short by a kill is repaired: its partial last line is dropped, and so is any row
    without a key or a known status; each repair is reported to `log`. With `strict` such a row, or
    one whose run_id is not ``t<trial>-s<seed>``, is an error naming the file, its line and the column
    (for a command that builds paths from the rows: `nas-stab tensorboard`).
    """
    p = Path(run_dir) / TRIALS_CSV
    check_regular(p, "trials.csv")
    if not p.exists():
        return
    announce_big(p, "reading")
    keep = None if columns is None else {*columns, "key", "status", "run_id"}
    cut: list[bool] = []
    with open(p, encoding="utf-8", errors="replace", newline="") as f:
        reader = csv.DictReader(_whole_lines(f, cut))
        n = bad = 0
        for raw in reader:
            n += 1
            r = {k: unescape_cell(v) for k, v in raw.items() if keep is None or k in keep}
            problem = _row_problem(r, strict)
            if problem is None:
                yield r
                continue
            bad += 1
            if strict:
                raise RunError(f"{p}: line {reader.line_num}: {problem}")
    if cut and log:
        log("trials.csv: dropped a partial last row")
    if bad and log:
        log(f"trials.csv: dropped {bad} malformed row(s)")


def _whole_lines(f: Iterable[str], cut: list[bool]) -> Iterator[str]:
    """The lines of `f` that end with a newline: a last line without one (an append cut short by a kill) is dropped,
    and `cut` gets True."""
    for line in f:
        if line.endswith("\n"):
            yield line
        else:
            cut.append(True)


def _row_problem(r: Mapping[str, Any], run_id: bool) -> str | None:
    """What makes a trials.csv record unusable (column: why), None when it is fine."""
    if not r.get("key"):
        return "key: empty (every run has the hash of its configuration)"
    if r.get("status") not in metrics.STATUSES:
        return f"status: {r.get('status')!r} is not one of {', '.join(metrics.STATUSES)}"
    if run_id and not is_run_id(r.get("run_id")):
        return f"run_id: {r.get('run_id')!r} is not a run id (t<trial>-s<seed>)"
    return None


def history_path(history_dir: str | Path, run_id: Any) -> Path | None:
    """``<history_dir>/<run_id>.csv`` when it is a file inside the directory; None otherwise, and for
    anything but a run id (``t<trial>-s<seed>``)."""
    if not is_run_id(run_id):
        return None
    path = Path(history_dir) / f"{run_id}.csv"
    try:
        if not path.is_file() or path.resolve().parent != Path(history_dir).resolve():  # a symlink out of history/
            return None
    except (OSError, RuntimeError):
        return None
    return path


def history_frame(history_dir: str | Path, run_id: Any, *, nrows: int | None = None) -> pd.DataFrame | None:
    """One run's history file as a DataFrame (its first `nrows` rows); None when absent or unreadable."""
    import pandas as pd  # deferred: loads pandas only when this runs

    path = history_path(history_dir, run_id)
    if path is None:
        return None
    try:
        return pd.read_csv(path, nrows=nrows)
    except (OSError, ValueError, pd.errors.ParserError):
        return None


def read_history_rows(history_dir: str | Path, run_id: Any) -> list[dict[str, str]]:
    """One run's history file as text records; [] when it has none."""
    return list(iter_history_rows(history_dir, run_id))


def iter_history_rows(history_dir: str | Path, run_id: Any) -> Iterator[dict[str, str]]:
    """One run's history file as text records, read as they come; nothing when it has none (a file that is not a
    regular one, or over the cap: RunError)."""
    path = history_path(history_dir, run_id)
    if path is None:
        return
    check_regular(path, "history")
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
        yield from csv.DictReader(f)
