"""The verdict on published real curves with a planted answer: P(yes | costly), P(no | cheap), the upper end's coverage.

Each row of the published tables in ``nas_stab.analysis.calibration_real.TABLES`` (their stored trials.csv)
becomes simulated tables: each size's real curve shifted along log2 lr by a planted 0 to 2 octaves (0 at the
smallest size, linearly to the largest), 3 or 5 seeds per cell resampled from that cell's real runs. The truth is
the pooled curve of all real runs, shifted (docs/leaderboard.md, "Calibration on real curves").

    python benchmarks/bench_calibration_real.py                # print the table (about 30 s on 2 cores)
    python benchmarks/bench_calibration_real.py --write        # and store it: docs/calibration/rules-VERSION-real.csv
                                                               # and the table in docs/leaderboard.md

Targets, in every setting with at least 10 tables on the side it conditions on: P(yes | the carried lr truly costs
>= 2 epsilon) <= 5% and P(no | it costs < epsilon) <= 5%. A miss is printed with its setting; the rules version
lists the misses it knows, with their measured cause (`nas_stab.analysis.rules.KNOWN_MISSES`).
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
from bench_calibration import write_block

from nas_stab.analysis.calibration_real import evaluate_real
from nas_stab.analysis.rules import RULES_VERSION, real_calibration_file

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- real calibration table: begin -->", "<!-- real calibration table: end -->"
COLS = ["table", "row", "shift", "seeds", "epsilon", "true_worst", "yes", "no", "costly", "cheap", "yes_if_costly",
        "no_if_cheap", "yes_if_costly_beyond_ref", "cover_upper"]


def check(r: pd.DataFrame) -> list[str]:
    """The targets each setting misses."""
    miss = []
    for x in r.to_dict("records"):
        name = f"real {x['table']} {x['row']} shift {x['shift']:g} seeds {x['seeds']}"
        if x["yes_if_costly"] == x["yes_if_costly"] and x["yes_if_costly"] > 0.05:
            miss.append(f"{name}: P(yes | the carried lr costs >= 2 epsilon) {x['yes_if_costly']:.2f} > 0.05")
        if x["no_if_cheap"] == x["no_if_cheap"] and x["no_if_cheap"] > 0.05:
            miss.append(f"{name}: P(no | the carried lr costs < epsilon) {x['no_if_cheap']:.2f} > 0.05")
    return miss


def markdown(r: pd.DataFrame, how: str, miss: list[str]) -> str:
    lines = ["| " + " | ".join(COLS) + " |", "|" + "---|" * len(COLS)]
    for x in r[COLS].to_dict("records"):
        cells = [("–" if v != v else f"{v:.3f}") if isinstance(v, float) and c != "shift" else str(v) for c, v in x.items()]
        lines.append("| " + " | ".join(cells) + " |")
    tail = ("\n\nMissed: " + "; ".join(miss)) if miss else ""
    return f"{BEGIN}\n{how}\n\n" + "\n".join(lines) + tail + f"\n{END}"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tables", type=int, default=50, help="simulated tables per setting (default 50)")
    p.add_argument("--boot", type=int, default=200, help="bootstrap replicates (default 200)")
    p.add_argument("--write", action="store_true", help="store the table for the rules version and in docs/leaderboard.md")
    a = p.parse_args(argv)
    t0 = time.perf_counter()
    r = evaluate_real(tables=a.tables, n_boot=a.boot)
    took = time.perf_counter() - t0
    pd.set_option("display.width", 250)
    print(r[COLS].to_string(float_format=lambda v: f"{v:.3f}"))
    miss = check(r)
    print(f"\n{len(r)} settings, {a.tables} tables each, {took:.0f} s; targets missed: {len(miss)}")
    for m in miss:
        print("  " + m)
    if a.write:
        store = ROOT / real_calibration_file()
        r.assign(rules=RULES_VERSION, boot=a.boot).to_csv(store, index=False, lineterminator="\n", float_format="%.4g")
        print(f"wrote {store} (rules {RULES_VERSION})")
        how = (f"`python benchmarks/bench_calibration_real.py --write` (rules {RULES_VERSION}; {a.tables} tables per setting, "
               f"{a.boot} bootstrap replicates; {len(miss)} target(s) missed, listed after the table)")
        if not write_block(BEGIN, END, markdown(r, how, miss)):
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
