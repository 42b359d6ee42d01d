"""The benchmark release (nas_stab/bench/data/): every run of every published table, built from leaderboards/.

    python leaderboards/bench_release.py            # (re)write runs.parquet, tables.parquet and manifest.json
    python leaderboards/bench_release.py --check    # write nothing; exit 1 if the release's content is not what
                                                    # leaderboards/ gives (the tests run this)
    python leaderboards/bench_release.py --history TABLE RUN_DIR [RUN_DIR ...]
                                                    # store the per-step histories of TABLE's runs from the run
                                                    # directories that trained them (history/TABLE.parquet)

Histories are not in leaderboards/ (a table publishes its records, not every step): they come from the run
directories that trained the table, where those are still held, matched to the table's runs by key (a run's
configuration hash with its seed), and are kept in the release once stored.

The manifest holds the schema version, the release version (bumped by hand with a note in docs/bench.md whenever a
published run changes), each file's sha256 (what `bench.verify()` checks) and each frame's content hash (its values:
what --check compares, independent of the Parquet writer's bytes).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nas_stab.bench import DATA  # noqa: E402
from nas_stab.bench.build import HISTORY_DIR, SCHEMA_VERSION, build, content_hash, file_hash  # noqa: E402
from nas_stab.store.reader import HISTORY, iter_rows  # noqa: E402

RELEASE = "2026.11.29.2"  # the release version: bumped (with a line in docs/bench.md, Releases) when a published run changes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    ap.add_argument("--history", nargs="+", metavar=("TABLE", "RUN_DIR"), help="store TABLE's histories from RUN_DIRs")
    args = ap.parse_args(argv)
    runs, files = build(ROOT / "leaderboards", ROOT / "spaces" / "published")
    content = {"runs.parquet": content_hash(runs), "tables.parquet": content_hash(files)}
    stored = json.loads((DATA / "manifest.json").read_text()) if (DATA / "manifest.json").is_file() else {}
    if args.check:
        stale = [n for n, h in content.items() if stored.get("content", {}).get(n) != h]
        stale += check_histories(runs, stored)
        if stale or stored.get("schema_version") != SCHEMA_VERSION:
            print(f"out of date (run python leaderboards/bench_release.py): {', '.join(stale) or 'schema version'}", file=sys.stderr)
            return 1
        return 0
    DATA.mkdir(parents=True, exist_ok=True)
    if args.history:
        store_history(args.history[0], [Path(d) for d in args.history[1:]], runs)
    runs.to_parquet(DATA / "runs.parquet", index=False, compression="zstd")
    files.to_parquet(DATA / "tables.parquet", index=False, compression="zstd")
    histories = sorted(p.relative_to(DATA).as_posix() for p in (DATA / HISTORY_DIR).glob("*.parquet"))
    manifest = {"schema_version": SCHEMA_VERSION, "release": RELEASE, "rows": {"runs.parquet": len(runs), "tables.parquet": len(files)},
                "columns": len(runs.columns), "files": {n: file_hash(DATA / n) for n in [*content, *histories]},
                "content": content, "history": {Path(h).stem: _history_info(DATA / h) for h in histories}}
    (DATA / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"{len(runs)} runs of {files['table'].nunique()} tables, {len(runs.columns)} fields; histories of "
          f"{sum(i['runs'] for i in manifest['history'].values())} runs of {len(histories)} tables; "
          f"{sum((DATA / n).stat().st_size for n in manifest['files']) / 1e6:.1f} MB")
    return 0


def store_history(table: str, run_dirs: list[Path], runs: pd.DataFrame) -> None:
    """history/<table>.parquet: the steps of every run of `table` the run directories hold (matched by key)."""
    keys = set(runs.loc[runs["table"] == table, "key"].dropna().astype(str))
    if not keys:
        sys.exit(f"--history: no published table {table!r} (leaderboards/<table>/ with runs)")
    frame = history_frame(run_dirs, keys)
    if frame.empty:
        sys.exit(f"--history: none of {', '.join(map(str, run_dirs))} holds a history of a run of {table}")
    (DATA / HISTORY_DIR).mkdir(exist_ok=True)
    frame.to_parquet(DATA / HISTORY_DIR / f"{table}.parquet", index=False, compression="zstd", compression_level=9)
    print(f"{table}: histories of {frame['key'].nunique()} of its {len(keys)} runs, {len(frame):,} steps")


def history_frame(run_dirs: list[Path], keys: set[str]) -> pd.DataFrame:
    """The step histories (`<run dir>/history/<run_id>.csv`) of the runs in `run_dirs` whose key is in `keys` (a
    published table's runs), one long frame: key, run_id, step, then every history column as float32 (the files
    hold 6 significant digits). A run without its history file is left out."""
    frames = []
    for d in run_dirs:
        for r in iter_rows(d, columns=("key", "run_id")):
            p = Path(d) / HISTORY / f"{r['run_id']}.csv"
            if r["key"] not in keys or not p.is_file():
                continue
            h = pd.read_csv(p)
            h.insert(0, "run_id", r["run_id"])
            h.insert(0, "key", r["key"])
            frames.append(h)
    if not frames:
        return pd.DataFrame(columns=["key", "run_id", "step"])
    out = pd.concat(frames, ignore_index=True, sort=False)
    metrics = [c for c in out.columns if c not in ("key", "run_id", "step")]
    out[metrics] = out[metrics].astype("float32")
    out["step"] = out["step"].astype("int64")
    return out.drop_duplicates(["key", "step"]).reset_index(drop=True)


def _history_info(path: Path) -> dict[str, int]:
    keys = pd.read_parquet(path, columns=["key"])["key"]
    return {"runs": int(keys.nunique()), "rows": len(keys)}


def check_histories(runs: pd.DataFrame, stored: dict) -> list[str]:
    """What is wrong with the stored histories: a file missing or changed since the manifest, a run no table holds."""
    bad = []
    known = set(runs["key"].dropna().astype(str))
    for table in stored.get("history", {}):
        name = f"{HISTORY_DIR}/{table}.parquet"
        if not (DATA / name).is_file() or file_hash(DATA / name) != stored.get("files", {}).get(name):
            bad.append(name)
        elif not set(pd.read_parquet(DATA / name, columns=["key"])["key"]) <= known:
            bad.append(f"{name} (runs that no published table holds)")
    return bad


if __name__ == "__main__":
    raise SystemExit(main())
