"""How fast `nas_stab.bench` answers: loading the release, and a one-configuration query (first and later).

    python benchmarks/bench_query.py        # median of 200 queries, each a (table, configuration, lr, seed) drawn from the release
"""
from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from nas_stab import bench  # noqa: E402


def main() -> int:
    t0 = time.perf_counter()
    runs = bench.load()
    load_ms = (time.perf_counter() - t0) * 1000
    sample = runs.sample(200, random_state=0)
    keys = ["table", "train.lr", "seed", "model.width", "model.depth", "model.parametrization"]
    times = []
    for _, r in sample.iterrows():
        filters = {k: r[k] for k in keys if k in r and r[k] == r[k] and r[k] is not None}
        t = time.perf_counter()
        got = bench.query(**filters)
        times.append((time.perf_counter() - t) * 1000)
        assert len(got) >= 1
    print(f"load: {load_ms:.0f} ms ({len(runs)} runs, {len(runs.columns)} fields)")
    print(f"one-configuration query: first {times[0]:.1f} ms (turns every field into an array, once), then median "
          f"{statistics.median(times[1:]):.2f} ms, 95th percentile {statistics.quantiles(times[1:], n=20)[-1]:.2f} ms, max "
          f"{max(times[1:]):.2f} ms over {len(times) - 1} queries (target <= 10 ms)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
