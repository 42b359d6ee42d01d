"""The verdict's calibration table: P(yes), P(no) and interval coverage per curve family, true drift and criterion.

Simulated learning-rate sweeps with a known answer (``nas_stab/analysis/calibration.py``: symmetric and
asymmetric peaks, divergence cliffs, an optimum at a cliff's edge, an accuracy ceiling, a quartic top, a
plateau, heteroscedastic and heavy-tailed noise, random divergences, missing runs, merged run directories,
a peak 10x steeper above its optimum ("skew"), a largest size that trains at one or two lrs only ("isolated"),
cells where some seeds are stuck at chance ("bimodal"))
go through ``analyze``, the code that builds every leaderboard. True drifts 0, 0.5T, T, 1.5T, 2T and 3T
(T = 1 octave), both criteria (regret, the default, and drift).

    python benchmarks/bench_calibration.py                 # print the table (about 1-2 min on 2 cores)
    python benchmarks/bench_calibration.py --write         # and replace it in docs/leaderboard.md
    python benchmarks/bench_calibration.py --tables 400 --seeds 3,5,10 --grid one

Targets (docs/leaderboard.md): P(yes) <= 5% where one lr truly does not transfer (carrying the lr the
reference size's fit found costs >= 2 epsilon; drift >= 2T with the drift criterion); P(no) <= 5% where the
optimum does not move (with a divergence cliff that moves between sizes, a `no` at drift 0 is right when the
carried lr diverges at another size: there the target is P(no | the carried lr costs < epsilon), `no_if_cheap`,
<= 5%, as for every setting); P(yes) >= 80% for the same curve at every size with 5 seeds at sd 0.01 on a
half-octave grid; the x*, lr_drift and worst_regret intervals cover their truth >= 85% (`cover_carried`: the
regret of the lr the fit found, which `worst_regret` estimates; `cover_worst`, shown beside it, is the
coverage of the regret of carrying the true optimum); the upper end of worst_regret alone, on which a `yes` is
decided, covers the carried lr's true cost >= 95% (`cover_upper`, one-sided) in every family.

`--write` also stores the table as the rules version's calibration table (docs/calibration/rules-VERSION.csv,
`nas_stab.analysis.rules`); `--fingerprint` stores the verdicts of fixed simulated tables that
tests/test_rules_version.py compares against.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import pandas as pd

from nas_stab.analysis.calibration import FAMILIES, Setting, evaluate, fingerprint
from nas_stab.analysis.rules import RULES_VERSION, calibration_file, fingerprint_file

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- calibration table: begin -->", "<!-- calibration table: end -->"
ABEGIN, AEND = "<!-- adaptive calibration table: begin -->", "<!-- adaptive calibration table: end -->"


def table(tables: int, seeds: list[int], sizes: int, sd: float, grid: str, n_boot: int,
          adaptive: tuple[int, int] | None = None) -> pd.DataFrame:
    out = []
    for criterion in ("regret", "drift"):
        for k in (seeds if adaptive is None else [adaptive[1]]):
            settings = [Setting(f, d, sizes, k, sd, grid) for f in FAMILIES for d in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0)]
            r = evaluate(settings, tables=tables, n_boot=n_boot, seed=k, criterion=criterion, adaptive=adaptive)
            out.append(r.assign(criterion=criterion))
    return pd.concat(out, ignore_index=True)


def check(r: pd.DataFrame) -> list[str]:
    """The targets each row misses."""
    miss = []
    for x in r.to_dict("records"):
        name = f"{x['criterion']} {x['family']} drift {x['drift']:g} seeds {x.get('adaptive') or x['seeds']}"
        if x["criterion"] == "regret":
            if x["yes_if_costly"] == x["yes_if_costly"] and x["yes_if_costly"] > 0.05:
                miss.append(f"{name}: P(yes | the carried lr costs >= 2 epsilon) {x['yes_if_costly']:.2f} > 0.05")
            if x["true_worst"] >= 2 * x["epsilon"] and x["yes"] > 0.05:
                miss.append(f"{name}: P(yes | the true optimum's regret >= 2 epsilon) {x['yes']:.2f} > 0.05")
        elif x["drift"] >= 2 and x["yes"] > 0.05:
            miss.append(f"{name}: P(yes | drift >= 2T) {x['yes']:.2f} > 0.05")
        # where the optimum does not move a `no` is wrong, unless carrying it truly costs: a cliff that moves between
        # sizes (the carried lr diverges at another), a failing regime at the carried lr ("bimodal": 6 epsilon)
        right = x["true_worst"] >= 2 * x["epsilon"] or (x["family"] == "cliff" and x["no_if_cheap"] <= 0.05)
        if x["drift"] == 0 and x["no"] > 0.05 and not right:
            miss.append(f"{name}: P(no) {x['no']:.2f} > 0.05")
        if x["no_if_cheap"] == x["no_if_cheap"] and x["no_if_cheap"] > 0.05:
            miss.append(f"{name}: P(no | the carried lr costs < epsilon) {x['no_if_cheap']:.2f} > 0.05")
        for c in ("cover_x", "cover_drift", "cover_carried"):
            if x[c] == x[c] and x[c] < 0.85:
                miss.append(f"{name}: {c} {x[c]:.2f} < 0.85")
        # the upper end alone, on which a `yes` is decided (and which the 2x reflection where the lower end is 0 narrows)
        if x["criterion"] == "regret" and x["cover_upper"] == x["cover_upper"] and x["cover_upper"] < 0.95:
            miss.append(f"{name}: cover_upper {x['cover_upper']:.2f} < 0.95")
    return miss


def markdown(r: pd.DataFrame, how: str, begin: str = BEGIN, end: str = END) -> str:
    cols = ["criterion", "family", "drift", "true_worst", "carried_worst", "epsilon", "yes", "no", "yes_if_costly", "no_if_cheap", "cover_x",
            "cover_drift", "cover_carried", "cover_upper", "cover_worst"]
    if (r["adaptive"] != "").any():
        cols[6:6] = ["runs", "batches"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for x in r[cols].to_dict("records"):
        cells = [f"{v:.3f}" if isinstance(v, float) and c not in ("drift",) else ("–" if v != v else str(v)) for c, v in x.items()]
        lines.append("| " + " | ".join(cells) + " |")
    return f"{begin}\n{how}\n\n" + "\n".join(lines) + f"\n{end}"


def write_block(begin: str, end: str, body: str) -> bool:
    """Replace the text from `begin` to `end` (markers included; `body` carries them) in docs/leaderboard.md."""
    doc = ROOT / "docs" / "leaderboard.md"
    text = doc.read_text(encoding="utf-8")
    if begin not in text or end not in text:
        print(f"{doc} has no {begin} ... {end} markers", file=sys.stderr)
        return False
    i, j = text.index(begin), text.index(end) + len(end)
    doc.write_text(text[:i] + body + text[j:], encoding="utf-8")
    print(f"wrote {doc}")
    return True


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tables", type=int, default=200, help="simulated tables per setting (default 200)")
    p.add_argument("--seeds", default="5", help="seed counts, comma-separated (default 5)")
    p.add_argument("--sizes", type=int, default=3)
    p.add_argument("--sd", type=float, default=0.01, help="noise sd of one run's metric (default 0.01)")
    p.add_argument("--grid", default="half", choices=("quarter", "half", "one", "irregular"))
    p.add_argument("--boot", type=int, default=200, help="bootstrap replicates (default 200)")
    p.add_argument("--adaptive", default=None, metavar="MIN,MAX",
                   help="adaptive seeds (seeds: {min, max}): each table starts with MIN seeds and grows where its verdict "
                        "is open, up to MAX (--seeds is ignored); --write replaces the adaptive table")
    p.add_argument("--write", action="store_true", help="replace the table in docs/leaderboard.md and store it as the rules "
                   "version's calibration table (docs/calibration/rules-VERSION.csv)")
    p.add_argument("--fingerprint", action="store_true", help="only store the rules version's verdict fingerprint "
                   "(docs/calibration/rules-VERSION-fingerprint.csv) and exit")
    a = p.parse_args(argv)
    if a.fingerprint:
        out = ROOT / fingerprint_file()
        fingerprint().to_csv(out, index=False, lineterminator="\n")
        print(f"wrote {out} (rules {RULES_VERSION})")
        return 0
    adaptive = tuple(int(v) for v in a.adaptive.split(",")) if a.adaptive else None
    begin, end = (BEGIN, END) if adaptive is None else (ABEGIN, AEND)
    t0 = time.perf_counter()
    r = table(a.tables, [int(s) for s in a.seeds.split(",")], a.sizes, a.sd, a.grid, a.boot, adaptive)
    took = time.perf_counter() - t0
    pd.set_option("display.width", 200)
    print(r.drop(columns=["sizes", "sd", "grid", "inconclusive"] + (["adaptive"] if adaptive is None else [])).to_string(float_format=lambda v: f"{v:.3f}"))
    miss = check(r)
    print(f"\n{len(r)} settings, {a.tables} tables each, {took:.0f} s; targets missed: {len(miss)}")
    for m in miss:
        print("  " + m)
    if a.write:
        seeds = f"seeds {a.seeds}" if adaptive is None else f"adaptive seeds {adaptive[0]}-{adaptive[1]}"
        cmd = "--write" if adaptive is None else f"--adaptive {a.adaptive} --write"
        how = (f"`python benchmarks/bench_calibration.py {cmd}` ({a.tables} tables per setting, {a.sizes} sizes, "
               f"{seeds}, noise sd {a.sd:g}, {a.grid}-octave grid, {a.boot} bootstrap replicates; {len(miss)} target(s) missed, "
               "listed after the table)")
        body = markdown(r, how, begin, end)
        if miss:
            body = body.replace(end, "\nMissed: " + "; ".join(miss) + "\n" + end)
        if not write_block(begin, end, body):
            return 1
        if adaptive is None:
            store = ROOT / calibration_file()
            r.assign(rules=RULES_VERSION, tables=a.tables, boot=a.boot).to_csv(store, index=False, lineterminator="\n", float_format="%.4g")
            print(f"wrote {store} (rules {RULES_VERSION})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
