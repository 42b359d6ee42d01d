"""Time the leaderboard analysis (and rendering) on 10,000 synthetic trial records.

Run: ``python benchmarks/bench_leaderboard.py [n_records]``. Prints figures; not a test.
Target (issue 7): the analysis of 10,000 records in well under 5 s.
"""
from __future__ import annotations

import sys
import time

import numpy as np
import pandas as pd

from nas_stab.results.analysis import analyze
from nas_stab.results.formats import to_csv, to_html, to_latex, to_markdown


def synthetic(n: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    lrs = np.logspace(-3, 0, 8)
    df = pd.DataFrame({
        "trial": np.arange(n),
        "seed": rng.integers(0, 3, n),
        "status": rng.choice(["complete", "diverged", "pruned", "failed"], n, p=[0.85, 0.1, 0.03, 0.02]),
        "model.branches": rng.choice([1, 2, 4, 8, 16], n),
        "model.aggregation": rng.choice(["sum", "avg", "stam"], n),
        "model.depth": rng.choice([2, 4, 8, 16], n),
        "train.lr": rng.choice(lrs, n),
        "val_acc": rng.random(n),
        "wall_s": rng.random(n) * 10,
    })
    df.loc[rng.random(n) < 0.01, "val_acc"] = np.nan
    return df


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    df = synthetic(n)
    prov = [("spec", "bench (hash none)")]
    for compare in (["model.aggregation"], ["model.aggregation", "model.depth"]):
        t0 = time.perf_counter()
        a = analyze(df, transfer="model.branches", compare=compare, metric="val_acc")
        t1 = time.perf_counter()
        md, csv, tex, html = to_markdown(a, prov), to_csv(a, prov), to_latex(a, prov), to_html(a, prov)
        t2 = time.perf_counter()
        print(f"{n} records, compare={compare}: {len(a.rows)} rows, {len(a.cells)} cells; "
              f"analysis {t1 - t0:.3f} s (incl. 1000-replicate bootstrap), md+csv+tex+html {t2 - t1:.3f} s "
              f"({len(html) // 1024} KiB html)")
    t0 = time.perf_counter()
    analyze(df, transfer="model.branches", compare=["model.aggregation"], metric="val_acc", n_boot=0)
    print(f"analysis without bootstrap: {time.perf_counter() - t0:.3f} s")


if __name__ == "__main__":
    main()
