"""nas_stab's published runs as a dataset: every run of every published (and archived) table, with its complete
configuration, learning rate, size, seed, status, task and stability metrics and where it came from, as a versioned
release (Parquet files and a manifest of content hashes; `build.py` makes it from `leaderboards/`).

    from nas_stab import bench
    runs = bench.load()                                   # every run, a DataFrame (docs/bench.md: every field)
    bench.query(table="width-heldout", **{"model.parametrization": "mup", "model.width": 256}, seed=3)
    bench.tables()                                        # one row per run file: its table, spec, commit, command
    bench.verify()                                        # the files against the manifest (raises if one differs)
    bench.history(table="width-heldout", seed=105)        # per-step histories of the runs a query selects

From the shell: ``nas-stab bench tables``, ``nas-stab bench query table=pathbn model.depth=30``, ``nas-stab bench verify``,
``nas-stab bench history table=width-heldout model.width=256 --out steps.csv``.
"""
from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nas_stab.errors import RunError
from nas_stab.textfmt import nearest

DATA = Path(__file__).resolve().parent / "data"

# the fields the release adds to a run's record (its trials.csv columns: docs/run-directory.md; its configuration's
# dotted keys: docs/experiment-file.md): name -> (unit, meaning)
FIELDS = {
    "table": ("text", "the published table the run belongs to (leaderboards/<table>/)"),
    "file": ("text", "the table's file that recorded it: trials (the table's search), or a confirmation beside it "
                     "(confirm, confirm2, confirm_avg, equivalence, sharpness): fresh seeds, judged by its claims"),
    "archived": ("true/false", "the table is retired (leaderboards/archive/: kept as history, not a finding)"),
    "filled": ("dotted keys, space-separated", "searched keys the record left empty, filled from its own experiment "
                                               "file's value (a run merged into the table from an experiment that did "
                                               "not search them); empty for every other run"),
    "source_spec": ("text", "the experiment the run was trained by (spaces/published/<source_spec>.yaml)"),
    "spec_hash": ("hex", "that experiment's hash when it ran (meta.spec_hash of its run directory)"),
    "source_commit": ("git commit", "the nas_stab commit that trained it"),
    "source_command": ("text", "the command that trained it, as its provenance records it"),
    "source_rules": ("version", "the verdict rules the table was judged by (docs/leaderboard.md, Rules versions)"),
}
FILES = ("runs.parquet", "tables.parquet")


@functools.cache
def _runs() -> pd.DataFrame:
    return pd.read_parquet(DATA / "runs.parquet")


@functools.cache
def _column(name: str) -> tuple[str, Any]:
    """A field as a numpy array once: ("num", float64 with NaN for missing) or ("text", object)."""
    col = _runs()[name]
    if col.dtype.kind in "iufb" or str(col.dtype) in ("Int64", "boolean"):
        return "num", col.astype("float64").to_numpy()
    return "text", col.astype(object).to_numpy()


def manifest() -> dict[str, Any]:
    return json.loads((DATA / "manifest.json").read_text(encoding="utf-8"))


def load() -> pd.DataFrame:
    """Every published run (a copy: change it freely)."""
    return _runs().copy()


def tables() -> pd.DataFrame:
    """One row per run file of the release: table, file, archived, runs, spec, spec_hash, commit, command, rules."""
    return pd.read_parquet(DATA / "tables.parquet")


@functools.cache
def _warm() -> None:
    """Every field as an array at the first query (tens of ms, once): no later query pays a conversion."""
    for c in _runs().columns:
        _column(c)


def _mask(column: str, value: Any) -> Any:
    runs = _runs()
    if column not in runs.columns:
        near = nearest(column, runs.columns)
        raise RunError(f"bench.query: no field {column!r}" + (f"; did you mean {near!r}?" if near else "")
                       + " (docs/bench.md lists every field; nas-stab bench fields)")
    kind, arr = _column(column)
    if kind == "num":
        try:
            return arr == float(value)
        except (TypeError, ValueError):
            return np.zeros(len(arr), dtype=bool)  # text asked of a number: nothing matches
    return arr == (str(value).lower() if isinstance(value, bool) else str(value))


def query(**filters: Any) -> pd.DataFrame:
    """The runs whose fields equal every filter (a dotted configuration key as ``**{"model.width": 128}``, or with
    ``__`` for the dot: ``model__width=128``; numbers compare by value). No filter: every run."""
    runs = _runs()
    _warm()
    keep = np.ones(len(runs), dtype=bool)
    for k, v in filters.items():
        keep &= _mask(k.replace("__", "."), v)
    return runs.iloc[np.flatnonzero(keep)].copy()


def history_tables() -> dict[str, dict[str, int]]:
    """The tables whose runs' per-step histories the release holds: {table: {"runs": n, "rows": steps}}."""
    return dict(manifest().get("history", {}))


def history(**filters: Any) -> pd.DataFrame:
    """The per-step histories (docs/run-directory.md, history/) of the runs `query(**filters)` selects, one long frame:
    table, key, run_id, step, then the history's columns (training loss, lr, each stability metric at its snapshots,
    validation metrics at their evaluations; float32). Runs whose table has no stored history are left out
    (`history_tables`); nothing is ever interpolated or filled."""
    runs = query(**filters)
    held = history_tables()
    frames = []
    for table, keys in runs.groupby("table")["key"]:
        if table in held:
            h = _history(str(table))
            frames.append(h[h["key"].isin(set(keys))].assign(table=table))
    if not frames:
        return pd.DataFrame(columns=["table", "key", "run_id", "step"])
    out = pd.concat(frames, ignore_index=True, sort=False)
    return out[["table", *[c for c in out.columns if c != "table"]]].dropna(axis=1, how="all")


@functools.cache
def _history(table: str) -> pd.DataFrame:
    return pd.read_parquet(DATA / "history" / f"{table}.parquet")


def table_history(table: str) -> pd.DataFrame | None:
    """Every stored step of one table's runs (key, run_id, step, columns), or None when the release holds none of it."""
    return _history(table) if table in history_tables() else None


def verify() -> dict[str, str]:
    """Each release file's sha256 against the manifest; RunError naming every file that differs or is missing."""
    from nas_stab.bench.build import file_hash  # deferred: build loads the config package

    want = manifest()["files"]
    bad = [f"{name}: {'missing' if not (DATA / name).is_file() else 'sha256 differs from the manifest'}"
           for name in want if not (DATA / name).is_file() or file_hash(DATA / name) != want[name]]
    if bad:
        raise RunError("bench.verify: " + "; ".join(bad))
    return dict(want)
