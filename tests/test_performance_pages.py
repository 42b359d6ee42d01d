"""The measured figures the pages quote are rendered from the benchmarks' stored CSVs, never typed: the scale table
(benchmarks/bench_leaderboard.py --scale --write: docs/performance.md and the README) and the chaos paragraph
(benchmarks/chaos.py --write: docs/ray.md)."""
from __future__ import annotations

import csv
import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def _block(page: Path, begin: str, end: str) -> str:
    return page.read_text(encoding="utf-8").split(begin, 1)[1].split(end, 1)[0].lstrip("\n")


@pytest.mark.parametrize("page", ["docs/performance.md", "README.md"])
def test_the_scale_table_is_the_stored_measurement(page):
    lb = _bench("bench_leaderboard")
    assert _block(ROOT / page, lb.BEGIN, lb.END) == lb.render_scale()


def test_the_stored_scale_measurement_meets_the_targets():
    """10^5 records from 200 configurations in at most 2 minutes and 3 GB, 10^6 from 2,000 in 5 minutes and 4 GB."""
    with open(ROOT / "docs" / "performance" / "scale.csv") as f:
        rows = {(r["command"], int(r["records"])): r for r in csv.DictReader(f)}
    for n, (minutes, gib) in {100_000: (2, 3), 1_000_000: (5, 4)}.items():
        r = rows["leaderboard", n]
        assert int(r["configurations"]) == n // 500 and float(r["wall_s"]) <= 60 * minutes and float(r["peak_gib"]) <= gib
def test_the_chaos_paragraph_is_the_stored_measurement():
    chaos = _bench("chaos")
    assert _block(chaos.PAGE, chaos.BEGIN, chaos.END) == chaos.render()
    with open(chaos.CHAOS_CSV) as f:
        r = next(csv.DictReader(f))
    assert int(r["trials"]) >= 1000 and int(r["nodes"]) >= 3
    assert (r["lost"], r["duplicated"], r["not_once"]) == ("0", "0", "0")
