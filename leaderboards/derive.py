"""The derived figures of the published tables: each table's own analysis code, run on its CSVs, its results stored.

    python leaderboards/derive.py            # (re)write every table's derived.csv
    python leaderboards/derive.py --check    # write nothing; exit 1 if a derived.csv is not what its code gives

A figure a table's README quotes that no CSV written by ``nas-stab leaderboard`` or ``leaderboards/claims.py``
holds (a paired bootstrap between two rows that is not a declared claim, a confirmation run's mean, a count of
runs that stayed under a bar) is computed by the table's own ``derived.py``: a module with a function

    def derive(table: Path) -> pandas.DataFrame   # columns: name, value, lo, hi (lo and hi may be NaN)

reading only files in `table`. This script runs it and stores the frame as ``derived.csv``; the README quotes it
through figure tags (``<!--fig derived.csv value name=d30-pathbn-minus-control fmt=+.3f-->``, see figures.py). The
code must be deterministic (fixed random seeds): ``--check``, run by the tests, recomputes every figure from the
table's CSVs, so a rerun, extra seeds or a rules change that moves one is caught. Figures computed after the
table's data were published are exploratory by construction: the README says so where it quotes them.

Order: ``claims.py``, then this script, then ``figures.py``.
"""
from __future__ import annotations

import argparse
import importlib.util
import io
import sys
from pathlib import Path

import pandas as pd

BOARDS = Path(__file__).resolve().parent
ROOT = BOARDS.parent
COLUMNS = ["name", "value", "lo", "hi"]


def derived_tables() -> list[Path]:
    return sorted(p for p in BOARDS.iterdir() if p.is_dir() and p.name != "archive" and (p / "derived.py").is_file())


def derive(table: Path) -> pd.DataFrame:
    """Run `table`/derived.py's derive(table); the frame checked for its columns and unique names."""
    spec = importlib.util.spec_from_file_location(f"derived_{table.name.replace('-', '_')}", table / "derived.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    frame = module.derive(table)
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise SystemExit(f"{table / 'derived.py'}: derive() returned no column {', '.join(missing)}")
    dup = frame["name"][frame["name"].duplicated()].tolist()
    if dup:
        raise SystemExit(f"{table / 'derived.py'}: names used twice: {', '.join(map(str, dup))}")
    return frame[COLUMNS + [c for c in frame.columns if c not in COLUMNS]]


def csv_text(frame: pd.DataFrame) -> str:
    buf = io.StringIO()
    frame.to_csv(buf, index=False, float_format="%.6g", lineterminator="\n")
    return buf.getvalue()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("tables", nargs="*", help="only these table folders (default: every table with a derived.py)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a derived.csv is out of date")
    args = ap.parse_args(argv)
    tables = [Path(t).resolve() for t in args.tables] or derived_tables()
    stale = []
    for table in tables:
        text = csv_text(derive(table))
        path = table / "derived.csv"
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(str(path.relative_to(ROOT)))
            if not args.check:
                path.write_text(text, encoding="utf-8")
    if args.check and stale:
        print("out of date (run python leaderboards/derive.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
