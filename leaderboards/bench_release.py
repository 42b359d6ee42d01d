"""The benchmark release (nas_stab/bench/data/): every run of every published table, built from leaderboards/.

    python leaderboards/bench_release.py            # (re)write runs.parquet, tables.parquet and manifest.json
    python leaderboards/bench_release.py --check    # write nothing; exit 1 if the release's content is not what
                                                    # leaderboards/ gives (the tests run this)

The manifest holds the schema version, the release version (bumped by hand with a note in docs/bench.md whenever a
published run changes), each file's sha256 (what `bench.verify()` checks) and each frame's content hash (its values:
what --check compares, independent of the Parquet writer's bytes).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nas_stab.bench import DATA  # noqa: E402
from nas_stab.bench.build import SCHEMA_VERSION, build, content_hash, file_hash  # noqa: E402

RELEASE = "2026.11.29"  # the release version: bumped (with a line in docs/bench.md, Releases) when a published run changes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args(argv)
    runs, files = build(ROOT / "leaderboards", ROOT / "spaces" / "published")
    content = {"runs.parquet": content_hash(runs), "tables.parquet": content_hash(files)}
    if args.check:
        stored = json.loads((DATA / "manifest.json").read_text()) if (DATA / "manifest.json").is_file() else {}
        stale = [n for n, h in content.items() if stored.get("content", {}).get(n) != h]
        if stale or stored.get("schema_version") != SCHEMA_VERSION:
            print(f"out of date (run python leaderboards/bench_release.py): {', '.join(stale) or 'schema version'}", file=sys.stderr)
            return 1
        return 0
    DATA.mkdir(parents=True, exist_ok=True)
    runs.to_parquet(DATA / "runs.parquet", index=False, compression="zstd")
    files.to_parquet(DATA / "tables.parquet", index=False, compression="zstd")
    manifest = {"schema_version": SCHEMA_VERSION, "release": RELEASE, "rows": {"runs.parquet": len(runs), "tables.parquet": len(files)},
                "columns": len(runs.columns), "files": {n: file_hash(DATA / n) for n in content}, "content": content}
    (DATA / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
    print(f"{len(runs)} runs of {files['table'].nunique()} tables, {len(runs.columns)} fields; "
          f"{sum((DATA / n).stat().st_size for n in content) / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
