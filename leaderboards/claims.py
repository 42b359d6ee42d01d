"""Judge every published table's declared claims, sized by power, and write the findings page's claims table.

    python leaderboards/claims.py            # every table with a claims.yaml
    python leaderboards/claims.py --check    # exit 1 if a claims.csv or the findings table is not up to date

Per table directory holding a ``claims.yaml`` (the claims, their paper effect sizes and margins, declared
before the runs that test them: ``git log`` of the file says when), this reads the stored runs
(``trials.csv``), the probe's slopes (``probe_slopes.csv``) or the leaderboard's rows (``leaderboard.csv``),
judges each claim (`nas_stab.analysis.claim_verdicts`, docs/leaderboard.md "Claims") and writes
``claims.csv``; then it rewrites the table between the ``claims:begin`` and ``claims:end`` markers of
leaderboards/README.md: per claim the seeds run and needed, the estimate with its 90% interval, and the
verdict. Nothing is trained.
"""
from __future__ import annotations

import argparse
import csv
import io
import math
import re
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from republish import experiment_data, spec_file  # noqa: E402

from nas_stab.analysis.claim_verdicts import evaluate  # noqa: E402
from nas_stab.analysis.claims import load_claims  # noqa: E402
from nas_stab.analysis.power import MAX_SEEDS  # noqa: E402
from nas_stab.analysis.settings import CLASSES  # noqa: E402
from nas_stab.analysis.values import fill_base, lookup  # noqa: E402
from nas_stab.csvsafe import csv_cell  # noqa: E402

BOARDS = ROOT / "leaderboards"
README = BOARDS / "README.md"
BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"


def judge(table: Path) -> pd.DataFrame:
    """The claims of one table directory, judged (columns of `claim_verdicts.COLUMNS` plus ``table``)."""
    claims = load_claims(table / "claims.yaml")
    spec = experiment_data(spec_file(table.name))
    metric = lookup(spec, "leaderboard.metric") or lookup(spec, "search.objective") or "val_acc"
    classes = CLASSES.get(str(lookup(spec, "task.dataset.name"))) if lookup(spec, "task.kind") == "classification" else None
    names = {"trials", "probe_slopes", "leaderboard"} | {n for c in claims for n in c.runs}
    files = {n: pd.read_csv(table / f"{n}.csv") for n in names if (table / f"{n}.csv").is_file()}
    keys = [lookup(spec, "leaderboard.lr") or "train.lr", *{k for c in claims for k in (*c.a, *c.b)}]
    for n in set(files) - {"trials", "probe_slopes", "leaderboard"}:
        files[n] = fill_base(files[n], keys, own_spec(table, n))
    out = evaluate(claims, files, metric=str(metric), lr_key=str(lookup(spec, "leaderboard.lr") or "train.lr"),
                   classes=classes, base=spec)
    out.insert(0, "table", table.name)
    return out


def own_spec(table: Path, name: str) -> dict:
    """The experiment file of a run stored beside the table (``<name>.csv``), named by the ``spec:`` line of
    its ``<name>_provenance.txt``: its base values fill the keys the run did not search."""
    prov = table / f"{name}_provenance.txt"
    m = re.search(r"^spec: ([\w-]+) \(hash", prov.read_text(encoding="utf-8"), re.M) if prov.is_file() else None
    if m is None:
        raise SystemExit(f"{prov}: no 'spec: NAME (hash ...)' line naming the experiment file of {name}.csv")
    return experiment_data(spec_file(m.group(1)))


def csv_text(df: pd.DataFrame) -> str:
    """The judged claims as CSV, numbers to 6 significant digits (as trials.csv writes them)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(df.columns)
    for rec in df.itertuples(index=False):
        w.writerow([csv_cell(v.item() if hasattr(v, "item") else v) for v in rec])
    return buf.getvalue()


def _num(v: float) -> str:
    if not isinstance(v, (int, float)) or not math.isfinite(v):
        return "-"
    return f"{v:+.3g}" if abs(v) < 1e4 else f"{v:+.3e}"


def findings_table(all_claims: pd.DataFrame) -> str:
    """The findings page's table: one line per claim."""
    lines = ["| claim (paper) | table | kind | seeds run / needed | estimate (90%) | judged against | verdict |",
             "|---|---|---|---|---|---|---|"]
    for r in all_claims.to_dict("records"):
        need = f"> {MAX_SEEDS // 10}" if r["needed"] >= MAX_SEEDS // 10 else str(int(r["needed"]))
        what = r["report"] if r["kind"] in ("difference", "equivalence") else r["metric"]
        est = f"{_num(r['estimate'])} ({_num(r['lo'])} to {_num(r['hi'])}) {what}"
        lines.append(f"| {r['says']} ({r['paper']}) | [{r['table']}]({r['table']}/README.md) | {r['kind']} | "
                     f"{int(r['seeds'])} / {need} | {est} | {r['criterion']} | **{r['verdict']}** |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything is out of date")
    args = ap.parse_args(argv)
    stale: list[str] = []
    frames = []
    for table in sorted(p for p in BOARDS.iterdir() if (p / "claims.yaml").is_file() and p.name != "archive"):
        df = judge(table)
        frames.append(df)
        text = csv_text(df)
        path = table / "claims.csv"
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(str(path.relative_to(ROOT)))
            if not args.check:
                path.write_text(text, encoding="utf-8")
        for r in df.to_dict("records"):
            print(f"{table.name}: {r['id']}: {r['verdict']} ({int(r['seeds'])} seeds run, {int(r['needed'])} needed)")
    page = README.read_text(encoding="utf-8")
    if BEGIN not in page or END not in page:
        raise SystemExit(f"{README}: no {BEGIN} ... {END} markers to write the claims table between")
    head, rest = page.split(BEGIN, 1)
    new = head + BEGIN + "\n" + findings_table(pd.concat(frames, ignore_index=True)) + END + rest.split(END, 1)[1]
    if new != page:
        stale.append(str(README.relative_to(ROOT)))
        if not args.check:
            README.write_text(new, encoding="utf-8")
    if args.check and stale:
        print("out of date (run python leaderboards/claims.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
