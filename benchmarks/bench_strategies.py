"""Search strategies compared on published tables, by replay (`runner.kind: table`): nothing is trained, every run a
strategy asks for is the table's record (docs/bench.md). For each table: the published search itself, the same search
with its first 3 seeds, and adaptive seeds from 3 up to the table's count (where its seeds are 0..n-1); per strategy
the runs and optimizer steps it spent, the rows it decided (yes or no), and how many of its verdicts are the full
table's. A strategy that asks for a run the table does not hold is reported so (it cannot be judged on this table).

    python benchmarks/bench_strategies.py                  # the tables below (~5 min)
    python benchmarks/bench_strategies.py --write          # and store docs/strategies.csv, rendered into the README
"""
from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
TABLES = ["width-heldout", "stam-fig4-mnist1d", "tau-depth", "depth-mup"]
STORE = ROOT / "docs" / "strategies.csv"
BEGIN, END = "<!-- strategies table: begin -->", "<!-- strategies table: end -->"


def strategies(table: str) -> list[tuple[str, list[str]]]:
    import yaml

    seeds = yaml.safe_load((ROOT / "spaces" / "published" / f"{table}.yaml").read_text())["seeds"]
    listed = seeds if isinstance(seeds, list) else list(range(int(seeds)))
    out = [("published search", []), ("3 seeds", ["--set", f"seeds={listed[:3]}"])]
    if listed == list(range(len(listed))) and len(listed) > 3:
        out.append((f"adaptive seeds 3-{len(listed)}", ["--set", f"seeds={{min: 3, max: {len(listed)}}}"]))
    return out


def replay(table: str, extra: list[str], out: Path) -> dict:
    spec = ROOT / "spaces" / "published" / f"{table}.yaml"
    t0 = time.time()
    r = subprocess.run([sys.executable, "-m", "nas_stab.cli", "run", str(spec), "--set", "runner.kind=table", "--set",
                        f"runner.table={table}", "--out", str(out), *extra], capture_output=True, text=True, cwd=ROOT)
    wall = time.time() - t0
    if r.returncode != 0:
        line = next((x for x in r.stderr.splitlines() if x.startswith("error:")), r.stderr.strip()[-200:])
        return {"error": line.replace("error: ", "")[:160], "wall_s": wall}
    d = out / spec.stem
    subprocess.run([sys.executable, "-m", "nas_stab.cli", "leaderboard", str(d), "--format", "csv"], capture_output=True, cwd=ROOT)
    board = pd.read_csv(d / "leaderboard.csv").set_index("label")
    trials = pd.read_csv(d / "trials.csv")
    return {"verdicts": board["transfers"].to_dict(), "runs": len(trials), "steps": int(trials["steps"].fillna(0).sum()), "wall_s": wall}


def measure() -> list[dict]:
    rows = []
    for table in TABLES:
        full = pd.read_csv(ROOT / "leaderboards" / table / "leaderboard.csv").set_index("label")["transfers"].to_dict()
        recorded = pd.read_csv(ROOT / "leaderboards" / table / "trials.csv")
        base_runs, base_steps = len(recorded), int(recorded["steps"].fillna(0).sum())
        for name, extra in strategies(table):
            with tempfile.TemporaryDirectory() as tmp:
                got = replay(table, extra, Path(tmp))
            row = {"table": table, "strategy": name, "rows": len(full)}
            if "error" in got:
                row.update({"runs": "", "runs_pct": "", "steps_pct": "", "decided": "", "agree": "", "note": got["error"]})
            else:
                v = got["verdicts"]
                row.update({"runs": got["runs"], "runs_pct": f"{100 * got['runs'] / base_runs:.0f}",
                            "steps_pct": f"{100 * got['steps'] / base_steps:.0f}" if base_steps else "",
                            "decided": sum(x in ("yes", "no") for x in v.values()),
                            "agree": sum(v.get(k) == full[k] for k in full), "note": ""})
            row["wall_s"] = f"{got['wall_s']:.0f}"
            rows.append(row)
            print(row, flush=True)
    return rows


def render() -> str:
    with open(STORE) as f:
        rows = list(csv.DictReader(f))
    lines = ["| table | strategy | runs (% of the table's) | steps (%) | rows decided | verdicts as the full table's | note |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        runs = f"{r['runs']} ({r['runs_pct']}%)" if r["runs"] else "-"
        note = r["note"]
        if " holds no run of " in note:  # the run it asked for, briefly
            note = "asks for a run the table lacks: " + note.split(" holds no run of ", 1)[1].split(": a replayed", 1)[0]
        lines.append(f"| {r['table']} | {r['strategy']} | {runs} | {r['steps_pct'] or '-'} | "
                     f"{r['decided'] + ' of ' + r['rows'] if r['decided'] else '-'} | {r['agree'] + ' of ' + r['rows'] if r['agree'] else '-'} | {note} |")
    return "\n".join(lines) + ("\n\nA search replays only where it asks for the runs the table recorded: the published search does (and"
                                " reproduces the table's verdicts) where today's search code asks what the table's search asked; with fewer "
                                "seeds a bracket moves differently and asks for lrs no one trained, and tau-depth's published bracket predates "
                                "today's resolution points. `python benchmarks/bench_strategies.py --write` (replayed: nothing trained).\n")


def write_page() -> None:
    page = ROOT / "README.md"
    text = page.read_text()
    head, rest = text.split(BEGIN, 1)
    page.write_text(head + BEGIN + "\n" + render() + END + rest.split(END, 1)[1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--write", action="store_true")
    args = ap.parse_args(argv)
    rows = measure()
    if args.write:
        with open(STORE, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        write_page()
        print(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
