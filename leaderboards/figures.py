"""The generated figures of each published table's README: its verdicts and its claims, from its CSVs.

    python leaderboards/figures.py            # rewrite the blocks of every table's README
    python leaderboards/figures.py --check    # write nothing; exit 1 if a block is out of date

A table's README holds two generated blocks, each between its markers; nothing inside them is written
by hand, so a figure there cannot go stale after a rerun, extra seeds or a rules change:

- ``<!-- verdicts:begin -->`` ... ``<!-- verdicts:end -->``: one line per leaderboard row
  (``leaderboard.csv``): its verdict, the worst_regret interval against epsilon, the lr drift and slope
  with their 90% intervals, the best lr at every size, seeds and runs;
- ``<!-- claim-verdicts:begin -->`` ... ``<!-- claim-verdicts:end -->``: one line per declared claim
  (``claims.csv``, written by ``leaderboards/claims.py``): the verdict, the estimate and its interval
  against the criterion, the seeds run and needed, whether the claim was declared before its data.

A README may also opt in to ``<!-- sizes:begin -->`` ... ``<!-- sizes:end -->``: every row's best lr (its x*
interval), whether it trains, its best value and the regret of the carried lr at each size (``leaderboard_sizes.csv``).

A README without the markers gets the first two blocks appended before its ``## Reproduce`` section (or at its
end). Run ``leaderboards/claims.py`` first: this script reads the claims.csv it writes.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from claims import BOARDS, _replace  # noqa: E402  (the findings page's block writer: the same markers rule)

BLOCKS = {"verdicts": ("leaderboard.csv", "Verdicts (generated from leaderboard.csv)"),
          "claim-verdicts": ("claims.csv", "Claims (generated from claims.csv)")}


def _g(v: object, digits: int = 3) -> str:
    """A number as the tables print it: 3 significant digits; '-' when missing."""
    try:
        x = float(v)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(v) if v not in (None, "") else "-"
    if math.isnan(x):
        return "-"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return f"{x:.{digits}g}"


def _interval(row: pd.Series, name: str) -> str:
    return f"{_g(row[name])} ({_g(row[name + '_lo'])} to {_g(row[name + '_hi'])})"


def _best_lrs(cell: object) -> str:
    """``size:lr;size:lr`` as ``size lr, size lr`` (a size whose runs all diverged reads 'diverged')."""
    if not isinstance(cell, str) or not cell:
        return "-"
    parts = []
    for item in cell.split(";"):
        size, _, lr = item.partition(":")
        parts.append(f"{size}: {_g(lr)}" if lr not in ("diverged", "none", "") else f"{size}: {lr or '-'}")
    return ", ".join(parts)


def _md(s: object) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def verdicts_block(table: Path) -> str:
    """The verdict of every leaderboard row, from leaderboard.csv."""
    board = pd.read_csv(table / "leaderboard.csv", comment="#")
    lines = ["| row | transfers | why | worst_regret (90%) | epsilon | lr_drift, octaves (90%) | lr_slope (90%) | best lr per size "
             "| seeds | runs (diverged) |", "|---|---|---|---|---|---|---|---|---|---|"]
    for _, r in board.iterrows():
        runs = int(r["runs"]) if pd.notna(r.get("runs")) else 0
        div = float(r["diverged"]) if pd.notna(r.get("diverged")) else 0.0
        lines.append(f"| {_md(r['label'])} | **{_md(r['transfers'])}** | {_md(r['why'])} | {_interval(r, 'worst_regret')} "
                     f"| {_g(r['epsilon'])} | {_interval(r, 'lr_drift')} | {_interval(r, 'lr_slope')} | {_best_lrs(r['best_lr(s)'])} "
                     f"| {_g(r['min_seeds'])}-{_g(r['seeds'])} | {runs} ({round(div * runs)}) |")
    return "\n".join(lines) + "\n"


def claims_block(table: Path) -> str:
    """The verdict of every declared claim, from claims.csv."""
    claims = pd.read_csv(table / "claims.csv")
    lines = ["| claim | kind | verdict | estimate (90%) | criterion | seeds (needed) | declared before the data |",
             "|---|---|---|---|---|---|---|"]
    for _, r in claims.iterrows():
        declared = r.get("declared", "")
        lines.append(f"| {_md(r['id'])} | {_md(r['kind'])} | {_md(r['verdict'])} | {_g(r['estimate'])} ({_g(r['lo'])} to {_g(r['hi'])}) "
                     f"| {_md(r['criterion'])} | {_g(r['seeds'])} ({_g(r['needed'])}) | {_md(declared) if pd.notna(declared) else '-'} |")
    return "\n".join(lines) + "\n"


def sizes_block(table: Path) -> str:
    """Every row's optimum and regret at each size, from leaderboard_sizes.csv (a README opts in with the markers)."""
    sizes = pd.read_csv(table / "leaderboard_sizes.csv", comment="#")
    size_col = next(c for c in sizes.columns if c.startswith("model.") and c not in ("model.parametrization",)
                    and sizes[c].nunique() > 1 and pd.api.types.is_numeric_dtype(sizes[c]))
    lines = [f"| row | {size_col} | best lr (x* interval) | trains | best value (counted seed mean) | regret of the carried lr (90%) "
             "| seeds | bracket |", "|---|---|---|---|---|---|---|---|"]
    for _, r in sizes.iterrows():
        x = f"{_g(r['best_lr'])} ({_g(2 ** r['x_lo'])} to {_g(2 ** r['x_hi'])})" if pd.notna(r.get("x_lo")) else _g(r.get("best_lr"))
        lines.append(f"| {_md(r['label'])} | {_g(r[size_col], 6)} | {x} | {_md(r['trains'])} | {_g(r['m_star'])} | {_interval(r, 'regret')} "
                     f"| {_g(r['seeds'])} | {_md(r.get('bracket_end', '-'))} |")
    return "\n".join(lines) + "\n"


MAKERS = {"verdicts": verdicts_block, "claim-verdicts": claims_block, "sizes": sizes_block}
OPT_IN = {"sizes": "leaderboard_sizes.csv"}  # written only where the README has the markers


def rewrite(readme_text: str, table: Path) -> str:
    """The README with every block this table's CSVs support written (added before ## Reproduce if missing)."""
    text = readme_text
    for name, (source, title) in BLOCKS.items():
        if not (table / source).is_file():
            continue
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        body = MAKERS[name](table)
        if begin in text and end in text:
            text = _replace(text, begin, end, body)
            continue
        block = f"## {title}\n\n{begin}\n{body}{end}\n\n"
        at = text.find("\n## Reproduce")
        text = text.rstrip("\n") + "\n\n" + block if at < 0 else text[: at + 1] + block + text[at + 1:]
    for name, source in OPT_IN.items():
        begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
        if begin in text and end in text and (table / source).is_file():
            text = _replace(text, begin, end, MAKERS[name](table))
    return text



def tables() -> list[Path]:
    return sorted(p for p in BOARDS.iterdir() if p.is_dir() and p.name != "archive" and (p / "README.md").is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a README's blocks are out of date")
    args = ap.parse_args(argv)
    stale = []
    for table in tables():
        path = table / "README.md"
        old = path.read_text(encoding="utf-8")
        new = rewrite(old, table)
        if new != old:
            stale.append(str(path.relative_to(ROOT)))
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if args.check and stale:
        print("out of date (run python leaderboards/figures.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
