"""The benchmark's release, built from the published tables (`leaderboards/`): every recorded run of every table (its
trials.csv and the fresh-seed runs beside it: confirm.csv, equivalence.csv, ...; archived tables included), each
row with its complete configuration and where it came from.

A row's values are the record's own (its searched keys, seed, status, metrics: never patched or substituted); the
keys its experiment did not search come from that experiment's file (`spaces/published/<spec>.yaml`, named by the
record's provenance), so every row carries the whole configuration it was trained with. A searched key whose cell
is empty (a run merged from another experiment that did not search it: multi30k-rskip's post-LN extension) takes
that experiment file's value, and the row's `filled` names the keys so filled.

    python leaderboards/bench_release.py            # write nas_stab/bench/data/ (runs.parquet, tables.parquet, manifest.json)
    python leaderboards/bench_release.py --check    # write nothing; exit 1 if the release is not what leaderboards/ gives
"""
from __future__ import annotations

import hashlib
import io
import json
import re
from pathlib import Path
from typing import Any

import pandas as pd

from nas_stab.config import load_spec
from nas_stab.config.display import applicable_plain

SCHEMA_VERSION = 1
KNOWN_SECTIONS = ("task", "model", "train", "stability")  # what a run's configuration is (not search, runner, logging)
_PROV = {"spec": re.compile(r"^spec: (?P<spec>\S+) \(hash (?P<hash>[0-9a-f]+)\)", re.M),
         "commit": re.compile(r"^nas_stab: \S+ \(commit (?P<commit>[0-9a-f+dirty]+)\)", re.M),
         "command": re.compile(r"^trained by: (?P<command>.+)$", re.M),
         "rules": re.compile(r"^rules: (?P<rules>\S+)", re.M)}


def provenance(path: Path) -> dict[str, str]:
    """spec name and hash, the training commit, the command and the rules version of a provenance file ({} without)."""
    if not path.is_file():
        return {}
    text = path.read_text(encoding="utf-8")
    out: dict[str, str] = {}
    for m in (rx.search(text) for rx in _PROV.values()):
        if m:
            out.update({k: v for k, v in m.groupdict().items() if v})
    return out


_RUN = re.compile(r"^run: (?P<spec>\S+) \([^)]*\): hash (?P<hash>[0-9a-f]+), commit (?P<commit>[0-9a-f+dirty]+)", re.M)


def merged_runs(path: Path) -> dict[str, dict[str, str]]:
    """A table merged from several runs (`leaderboard` of several run directories): per run, its spec, hash, commit."""
    if not path.is_file():
        return {}
    return {m["spec"]: m.groupdict() for m in _RUN.finditer(path.read_text(encoding="utf-8"))}


def run_files(table: Path) -> list[Path]:
    """The files of a table that hold recorded runs (a run id per row): trials.csv first, then the others."""
    out = []
    for p in sorted(table.glob("*.csv")):
        with p.open(encoding="utf-8") as f:
            header = f.readline().strip().split(",")
        if {"seed", "status", "run_id"} <= set(header):
            out.append(p)
    return sorted(out, key=lambda p: (p.name != "trials.csv", p.name))


def _flat(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix.rstrip("."): (json.dumps(node) if isinstance(node, list | tuple) else node)}


# where the data lived on the machine that ran it: not the configuration (a user's data is where `nas-stab validate`
# says it looks), so the release leaves these keys out
LOCATION_KEYS = ("task.dataset.root", "task.dataset.cache_dir")


def configuration(spec_file: Path) -> dict[str, Any]:
    """The resolved configuration of an experiment file, as dotted keys (task., model., train., stability.), without
    the data's location (`LOCATION_KEYS`)."""
    plain = applicable_plain(load_spec(spec_file, probe=True))
    return {k: v for k, v in _flat({s: plain.get(s) or {} for s in KNOWN_SECTIONS}).items() if k not in LOCATION_KEYS}


def _text(v: Any) -> Any:
    """A configuration value as one type per column: numbers stay numbers, anything else its text."""
    if v is None or isinstance(v, bool):
        return None if v is None else str(v).lower()
    return v


def _spec_file(name: str, specs: Path) -> Path | None:
    """The experiment file a provenance names: spaces/published/<name>.yaml, else spaces/<name>.yaml."""
    for p in (specs / f"{name}.yaml", specs.parent / f"{name}.yaml"):
        if name and p.is_file():
            return p
    return None


def table_runs(table: Path, specs: Path, archived: bool) -> tuple[pd.DataFrame, list[dict[str, Any]]]:
    """Every run file of one table, each row with its provenance and its complete configuration."""
    frames, infos = [], []
    for f in run_files(table):
        prov = provenance(table / f"{'leaderboard' if f.stem == 'trials' else f.stem}_provenance.txt")
        df = pd.read_csv(f, dtype={"run_id": str, "key": str}).drop(columns=list(LOCATION_KEYS), errors="ignore")
        merged = merged_runs(table / "leaderboard_provenance.txt") if f.stem == "trials" else {}
        # each row's own experiment: the run it came from (a merged table's source_run), else the file's
        names = df["source_run"].fillna(prov.get("spec", "")).astype(str) if "source_run" in df.columns and merged else \
            pd.Series(prov.get("spec", ""), index=df.index)
        spec_file = _spec_file(prov.get("spec", ""), specs)
        filled: list[list[str]] = [[] for _ in range(len(df))]
        added: dict[str, list[Any]] = {}
        for name in names.unique():
            rows = names.index[names == name]
            own = _spec_file(name, specs)
            for key, value in (configuration(own) if own is not None else {}).items():
                if key not in df.columns:
                    added.setdefault(key, [None] * len(df))
                    for i in rows:
                        added[key][i] = _text(value)
                else:  # a searched key these rows left empty (their experiment did not search it): the experiment's value
                    empty = rows[df.loc[rows, key].isna().to_numpy()]
                    if len(empty):
                        df[key] = df[key].astype(object)
                        df.loc[empty, key] = _text(value)
                        for i in empty:
                            filled[i].append(key)
        source = {k: [merged.get(n, {}).get(k, prov.get(k, "")) for n in names] for k in ("hash", "commit")}
        head = pd.DataFrame({"table": table.name, "file": f.stem, "archived": archived}, index=df.index)
        tail = pd.DataFrame({"filled": [" ".join(k) for k in filled], "source_spec": names.to_numpy(),
                             "spec_hash": source["hash"], "source_commit": source["commit"],
                             "source_command": prov.get("command", ""), "source_rules": prov.get("rules", "")}, index=df.index)
        frames.append(pd.concat([head, df.drop(columns=["source_run"], errors="ignore"), pd.DataFrame(added, index=df.index), tail], axis=1))
        infos.append({"table": table.name, "file": f.stem, "archived": archived, "runs": len(df),
                      "spec": prov.get("spec", ""), "spec_hash": prov.get("hash", ""), "commit": prov.get("commit", ""),
                      "command": prov.get("command", ""), "rules": prov.get("rules", ""),
                      "spec_file": spec_file.relative_to(specs.parents[1]).as_posix() if spec_file is not None else ""})
    return (pd.concat(frames, ignore_index=True, sort=False) if frames else pd.DataFrame()), infos


def build(boards: Path, specs: Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(runs, files): every published and archived table's runs, and one row per run file with its provenance."""
    frames, infos = [], []
    for archived, root in ((False, boards), (True, boards / "archive")):
        for table in sorted(p for p in root.iterdir() if p.is_dir() and p.name != "archive" and (p / "README.md").is_file()):
            df, info = table_runs(table, specs, archived)
            if len(df):
                frames.append(df)
                infos += info
    runs = pd.concat(frames, ignore_index=True, sort=False)
    for c in runs.columns:  # one type per column (Parquet): numbers where every value is one, else text
        if runs[c].dtype == object:
            num = pd.to_numeric(runs[c], errors="coerce")
            runs[c] = num if num.notna().sum() == runs[c].notna().sum() and c not in TEXT_COLUMNS else runs[c].map(
                lambda v: v if v is None or (isinstance(v, float) and v != v) else str(v))
        if runs[c].dtype.kind == "f" and runs[c].notna().any() and (runs[c].dropna() % 1 == 0).all() and c not in FLOAT_COLUMNS:
            runs[c] = runs[c].astype("Int64")  # whole numbers (widths, depths, seeds, steps) as integers, missing allowed
    return runs, pd.DataFrame(infos)


FLOAT_COLUMNS = {"train.lr", "objective"}  # a learning rate or a metric is a real number even where it is whole


TEXT_COLUMNS = {"run_id", "key", "table", "file", "filled", "spec_hash", "source_spec", "source_commit",
                "source_command", "source_rules", "diverged_why", "error", "status"}


def content_hash(frame: pd.DataFrame) -> str:
    """A hash of a frame's values (its canonical CSV), independent of the Parquet writer's bytes."""
    buf = io.StringIO()
    frame.to_csv(buf, index=False, lineterminator="\n", float_format="%.10g")
    return hashlib.sha256(buf.getvalue().encode()).hexdigest()


def file_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


HISTORY_DIR = "history"  # nas_stab/bench/data/history/<table>.parquet: the per-step histories of a table's runs
