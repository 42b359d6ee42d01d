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
interval), whether it trains, its best value and the regret of the carried lr at each size (``leaderboard_sizes.csv``);
to ``<!-- cells:begin -->`` ... ``<!-- cells:end -->``: the seed mean of the leaderboard's metric at every row, size
and lr, lrs as columns, diverged and stuck seeds counted (``leaderboard_cells.csv``); and to ``report-cells``, the same
for the metric reported on the held-out split.

A README without the markers gets the first two blocks appended before its ``## Reproduce`` section (or at its
end). Run ``leaderboards/claims.py`` first: this script reads the claims.csv it writes.

A figure in prose is generated too, by an inline tag around it (in a table's README, the findings page
leaderboards/README.md and the repository's README.md)::

    the best lr moved by <!--fig width-umup/leaderboard.csv lr_drift label="False" fmt=+.2f-->+0.81<!--/fig--> octave

``SOURCE COLUMN [KEY=VALUE ...] [KEY<X KEY<=X KEY>X KEY>=X KEY!=X ...] [agg=mean|median|min|max|sum|count|std|nunique]
[fmt=SPEC] [mul=X]``: SOURCE is a CSV under leaderboards/ (in a table's README a bare file name is that table's own),
KEY=VALUE picks rows (string equality with the cell, or numeric equality when both are numbers; quote values with
spaces), the comparisons pick rows by number, exactly one row unless ``agg`` reduces them (``nunique``: distinct
values of COLUMN), ``mul`` multiplies (100 for a percentage), ``fmt`` is a Python format spec (default ``.3g``).
The text between the tags is rewritten from the CSV; ``--check`` fails on one that differs, and a tag that selects
no row, or several without ``agg``, is an error naming its file and line. A tag shown in code is an example and is
left alone.

Other sources of a tag: ``derived.csv`` (a table's own analysis code, run by ``leaderboards/derive.py``:
``<!--fig derived.csv value name=d30-gap fmt=+.3f-->``), and a YAML file, with a dotted key (a list item by its
index; a key that holds dots, such as ``space.train.lr.log_grid.0``, is matched whole; ``agg=count``: a list's length):
a protocol constant from the experiment file that set it, ``<!--fig ../spaces/published/pathbn.yaml
train.momentum-->0.9<!--/fig-->``, or a declared effect from a ``claims.yaml``. A number quoted from a paper, which
no CSV of ours holds and no rerun can make stale, is marked with its source: ``<!--quote Path-BN, Table 1-->6.93
<!--/quote-->`` (an error without a source or a number).

Every other decimal in prose is counted per page in ``leaderboards/untagged_figures.csv`` (untagged and quoted
figures), so a commit that adds figures by hand shows its count rise; ``figures.py PAGE ...`` processes only those
pages (a table folder stands for its README) and keeps the other rows of that ledger.
"""
from __future__ import annotations

import argparse
import functools
import math
import re
import shlex
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
    cols = list(sizes.columns)
    size_col = cols[cols.index("x_star") - 1]  # the size key: after the label and the compared keys, before x_star
    lines = [f"| row | {size_col} | best lr (x* interval) | trains | best value (counted seed mean) | regret of the carried lr (90%) "
             "| seeds | bracket |", "|---|---|---|---|---|---|---|---|"]
    for _, r in sizes.iterrows():
        x = f"{_g(r['best_lr'])} ({_g(2 ** r['x_lo'])} to {_g(2 ** r['x_hi'])})" if pd.notna(r.get("x_lo")) else _g(r.get("best_lr"))
        lines.append(f"| {_md(r['label'])} | {_g(r[size_col], 6)} | {x} | {_md(r['trains'])} | {_g(r['m_star'])} | {_interval(r, 'regret')} "
                     f"| {_g(r['seeds'])} | {_md(r.get('bracket_end', '-'))} |")
    return "\n".join(lines) + "\n"


def _cells_block(table: Path, value: str) -> str:
    """The seed mean of `value` at every (row, size, lr) cell, lrs as columns, from leaderboard_cells.csv; a cell
    with diverged or stuck seeds says how many (a diverged or failed seed counts at the no-learning value in the
    mean, as in the verdicts; a stuck one keeps the value it reached, at the no-learning level). A table without a
    size axis shows '-' as its size."""
    cells = pd.read_csv(table / "leaderboard_cells.csv", comment="#")
    cols = list(cells.columns)
    size_col, lr_col = cols[cols.index("mean") - 2], cols[cols.index("mean") - 1]
    lrs = sorted(cells[lr_col].unique())
    lines = [f"| row | {size_col} | " + " | ".join(_g(x) for x in lrs) + " |", "|---|---|" + "---|" * len(lrs)]
    # (a table without a size axis stores its size as null: one row per label, '-' for the size)
    for label, rows in cells.groupby("label", sort=False):
        for size, at in rows.groupby(size_col, sort=True, dropna=False):
            by_lr = {r[lr_col]: r for _, r in at.iterrows()}
            out = []
            for x in lrs:
                r = by_lr.get(x)
                if r is None:
                    out.append("")
                    continue
                bad = [f"{int(r[k])} of {int(r['n'])} {w}" for k, w in (("n_diverged", "diverged"), ("n_stuck", "stuck"))
                       if pd.notna(r.get(k)) and int(r[k]) > 0]
                out.append(_g(r[value]) + (f" ({', '.join(bad)})" if bad else ""))
            lines.append(f"| {_md(label)} | {_g(size, 6)} | " + " | ".join(out) + " |")
    return "\n".join(lines) + "\n"


MAKERS = {"verdicts": verdicts_block, "claim-verdicts": claims_block, "sizes": sizes_block,
          "cells": functools.partial(_cells_block, value="mean"), "report-cells": functools.partial(_cells_block, value="report_mean")}
# written only where the README has the markers:
OPT_IN = {"sizes": "leaderboard_sizes.csv", "cells": "leaderboard_cells.csv", "report-cells": "leaderboard_cells.csv"}


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



# a decimal number (one that ends a sentence too: "0.026."), not a rules version (2026.12) or a dotted version (2.60.1)
DECIMAL = re.compile(r"(?<![\w.])(?!20\d\d\.\d\d(?!\d|\.\d))[-+]?\d+\.\d+(?!\w|\.\d)")
LEDGER = BOARDS / "untagged_figures.csv"  # per README: decimals in its prose not yet generated (ratchet: see main)


def untagged(text: str) -> list[tuple[int, str]]:
    """(line, figure) of every decimal number in `text` outside generated blocks, figure tags and code: the
    prose figures nothing regenerates (paper values and protocol constants among them)."""
    blank = lambda m: re.sub(r"[^\n]", " ", m.group(0))  # noqa: E731  (keeps line numbers)
    text = re.sub(r"^ {4}.*$", blank, text, flags=re.M)  # indented code (before the blanks below indent prose)
    text = re.sub(r"<!-- ([a-z-]+):begin -->.*?<!-- \1:end -->", blank, text, flags=re.S)
    text = re.sub(r"<!-- ([a-z_ .-]+): begin -->.*?<!-- \1: end -->", blank, text, flags=re.S)  # the benchmarks' tables
    text = re.sub(r"<!--fig [^>]*?-->.*?<!--/fig-->", blank, text, flags=re.S)
    text = re.sub(r"<!--quote [^>]*?-->.*?<!--/quote-->", blank, text, flags=re.S)
    text = re.sub(r"(?:Sections?|section|§|Appendix|Eq\.|Equations?|Theorem|Lemma|Proposition|Corollary|Definition)"
                  r" [A-Z]?\d+(?:\.\d+)+", blank, text)  # a paper's section or equation number is a reference
    text = re.sub(r"```.*?```", blank, text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", blank, text)
    return [(text.count("\n", 0, m.start()) + 1, m.group(0)) for m in DECIMAL.finditer(text)]


FIG = re.compile(r"<!--fig (?P<spec>[^>]*?)-->(?P<text>.*?)<!--/fig-->", re.S)
QUOTE = re.compile(r"<!--quote(?P<cite>[^>]*?)-->(?P<text>.*?)<!--/quote-->", re.S)


def quoted(text: str, where: str) -> tuple[int, list[str]]:
    """How many figures `text` quotes from a paper (``<!--quote CITATION-->6.93<!--/quote-->``: a number no CSV of
    ours holds, that no rerun can make stale), and an error per quote that names no source or holds no number."""
    n, errors = 0, []
    for m in QUOTE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        found = len(DECIMAL.findall(m.group("text"))) + len(re.findall(r"(?<![\w.])\d+(?![\w.])", m.group("text")))
        if not m.group("cite").strip():
            errors.append(f"{where}:{line}: a quote names no source (<!--quote PAPER, TABLE-->)")
        elif not found:
            errors.append(f"{where}:{line}: a quote holds no number: {m.group('text')!r}")
        n += len(DECIMAL.findall(m.group("text")))
    return n, errors
AGGS = ("mean", "median", "min", "max", "sum", "count", "std", "nunique")


COMPARE = re.compile(r"([^=<>!\s]+)(<=|>=|!=|<|>)(.+)")  # KEY<=X, KEY>X, KEY!=X: numeric row filters
OPS = {"<": lambda c, x: c < x, "<=": lambda c, x: c <= x, ">": lambda c, x: c > x, ">=": lambda c, x: c >= x,
       "!=": lambda c, x: c != x}


class FigureError(ValueError):
    """A figure tag that cannot be evaluated (its file and line in the message)."""


def _matches(cell: object, want: str) -> bool:
    if str(cell) == want:
        return True
    try:
        return float(cell) == float(want)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False


@functools.lru_cache(maxsize=64)
def _read(path: Path, stamp: tuple[int, int]) -> pd.DataFrame:
    """A CSV as text cells, read once per version of the file (`stamp`: its mtime and size): a page's tags
    mostly share a few files."""
    return pd.read_csv(path, comment="#", dtype=str, keep_default_na=False)


def _yaml_value(path: Path, key: str, source: str, agg_count: bool = False) -> float:
    """The number at a dotted `key` of a YAML file (a list item by its index): a protocol constant quoted from
    the experiment file that set it, or a declared effect from a claims.yaml."""
    import yaml

    node: object = yaml.safe_load(path.read_text(encoding="utf-8"))
    parts = key.split(".")
    while parts:
        if isinstance(node, dict):  # the longest key that matches: space: keys hold dots (train.lr)
            n = next((n for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in node), 0)
            if n:
                node, parts = node[".".join(parts[:n])], parts[n:]
                continue
        elif isinstance(node, list) and parts[0].isdigit() and int(parts[0]) < len(node):
            node, parts = node[int(parts[0])], parts[1:]
            continue
        raise FigureError(f"{source} has no key {key!r} (stops at {parts[0]!r})")
    if agg_count and isinstance(node, (list, dict)):
        return float(len(node))
    if isinstance(node, bool) or not isinstance(node, (int, float)):
        raise FigureError(f"{source} {key} is {node!r}, not a number")
    return float(node)


def figure(spec: str, home: Path | None) -> str:
    """The text of one inline figure tag's value (see the module docstring), or FigureError."""
    words = shlex.split(spec)
    if len(words) < 2:
        raise FigureError(f"needs a source CSV and a column, got {spec!r}")
    source, column, rest = words[0], words[1], words[2:]
    path = (home / source) if home is not None and "/" not in source else BOARDS / source
    if not path.is_file():
        raise FigureError(f"no file {path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}")
    compares = [m.groups() for w in rest if (m := COMPARE.fullmatch(w))]
    rest = [w for w in rest if not COMPARE.fullmatch(w)]
    opts = dict(w.split("=", 1) for w in rest if "=" in w)
    bad = [w for w in rest if "=" not in w]
    if bad:
        raise FigureError(f"words without KEY=VALUE: {' '.join(bad)}")
    agg, fmt, mul = opts.pop("agg", None), opts.pop("fmt", ".3g"), float(opts.pop("mul", "1"))
    if path.suffix in (".yaml", ".yml"):
        if opts or agg not in (None, "count"):
            raise FigureError(f"{source} is a YAML file: a dotted key, agg=count (a list's length) and fmt=/mul= only, no row filters")
        return format(_yaml_value(path, column, source, agg == "count") * mul, fmt)
    st = path.stat()
    df = _read(path, (st.st_mtime_ns, st.st_size))
    if column not in df.columns:
        raise FigureError(f"{source} has no column {column!r}")
    for key, want in opts.items():
        if key not in df.columns:
            raise FigureError(f"{source} has no column {key!r}")
        df = df.loc[[_matches(c, want) for c in df[key]]] if len(df) else df  # (an empty list would select columns)
    for key, op, want in compares:
        if key not in df.columns:
            raise FigureError(f"{source} has no column {key!r}")
        try:
            bound = float(want)
        except ValueError:
            raise FigureError(f"{key}{op}{want}: a comparison needs a number") from None
        cells = pd.to_numeric(df[key], errors="coerce")
        df = df.loc[OPS[op](cells, bound).fillna(False).to_numpy(bool)] if len(df) else df
    if agg is not None and agg not in AGGS:
        raise FigureError(f"agg {agg!r} is not one of {', '.join(AGGS)}")
    if len(df) == 0 and agg != "count":
        raise FigureError(f"{spec!r} selects no row of {source}")
    if agg is None and len(df) != 1:
        raise FigureError(f"{spec!r} selects {len(df)} rows of {source}; exactly one needed (or agg=)")
    values = pd.to_numeric(df[column], errors="coerce")
    reduce = {None: lambda v: v.iloc[0], "count": lambda v: len(v),
              "nunique": lambda v: df[column].nunique()}.get(agg, lambda v: getattr(v, str(agg))())
    value = float(reduce(values))
    if math.isnan(value):
        return str(df[column].iloc[0]) if agg is None and len(df) == 1 and df[column].iloc[0] else "-"
    return format(value * mul, fmt)


def rewrite_figures(text: str, home: Path | None, where: str) -> str:
    """`text` with every inline figure's value rewritten from its CSV; FigureError naming `where`:line."""
    out, last, errors = [], 0, []
    code = [(c.start(), c.end()) for c in re.finditer(r"```[\s\S]*?```|^ {4}.*$|`[^`\n]*`", text, flags=re.M)]
    for m in FIG.finditer(text):
        if any(a <= m.start() < b for a, b in code):  # a tag shown in code is an example, not a figure
            continue
        try:
            value = figure(m.group("spec"), home)
        except FigureError as e:
            errors.append(f"{where}:{text.count(chr(10), 0, m.start()) + 1}: {e}")
            value = m.group("text")
        out.append(text[last:m.start("text")] + value)
        last = m.end("text")
    if errors:
        raise FigureError("\n".join(errors))
    return "".join(out) + text[last:]


def tables() -> list[Path]:
    return sorted(p for p in BOARDS.iterdir() if p.is_dir() and p.name != "archive" and (p / "README.md").is_file())


def _pages(only: list[str]) -> list[tuple[Path, Path | None]]:
    pages: list[tuple[Path, Path | None]] = [(t / "README.md", t) for t in tables()]
    pages += [(BOARDS / "README.md", None), (ROOT / "README.md", None)]
    pages += [(p, None) for p in sorted((ROOT / "docs").glob("*.md"))]
    if not only:
        return pages
    want = {(Path(o).resolve() / "README.md" if Path(o).is_dir() else Path(o).resolve()) for o in only}
    missing = want - {p for p, _ in pages}
    if missing:
        raise SystemExit("figures.py: not a page it writes: " + ", ".join(map(str, sorted(missing))))
    return [(p, t) for p, t in pages if p in want]


def _ledger(counts: dict[str, tuple[int, int]]) -> str:
    """The ledger, every page's row: those not processed this time kept as stored."""
    rows: dict[str, str] = {}
    if LEDGER.is_file():
        for line in LEDGER.read_text(encoding="utf-8").splitlines()[1:]:
            rows[line.split(",", 1)[0]] = line.split(",", 1)[1] + ("" if line.count(",") > 1 else ",0")
    rows.update({k: f"{u},{q}" for k, (u, q) in counts.items()})
    return "file,untagged_figures,quoted_figures\n" + "".join(f"{k},{v}\n" for k, v in rows.items())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pages", nargs="*", help="only these READMEs (or table folders); default every page")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a README's blocks are out of date")
    ap.add_argument("--untagged", action="store_true", help="list every prose figure not generated (file:line figure)")
    args = ap.parse_args(argv)
    stale, errors = [], []
    written: dict[Path, str] = {}
    for path, table in _pages(args.pages):
        old = path.read_text(encoding="utf-8")
        new = rewrite(old, table) if table is not None else old
        try:
            new = rewrite_figures(new, table, str(path.relative_to(ROOT)))
        except FigureError as e:
            errors.append(str(e))
            continue
        errors += quoted(new, str(path.relative_to(ROOT)))[1]
        written[path] = new
        if new != old:
            stale.append(str(path.relative_to(ROOT)))
            if not args.check:
                path.write_text(new, encoding="utf-8")
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 2
    counts: dict[str, tuple[int, int]] = {}  # the ledger: a commit that adds prose figures without tags shows its count rise
    for path, text in written.items():
        found = untagged(text)
        counts[str(path.relative_to(ROOT))] = (len(found), quoted(text, "")[0])
        if args.untagged:
            print("\n".join(f"{path.relative_to(ROOT)}:{line} {fig}" for line, fig in found))
    ledger = _ledger(counts)
    if not LEDGER.is_file() or LEDGER.read_text(encoding="utf-8") != ledger:
        stale.append(str(LEDGER.relative_to(ROOT)))
        if not args.check:
            LEDGER.write_text(ledger, encoding="utf-8")
    if args.check and stale:
        print("out of date (run python leaderboards/figures.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
