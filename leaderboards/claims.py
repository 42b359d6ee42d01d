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
import subprocess
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
from nas_stab.analysis.values import fill_base, fmt_value, lookup  # noqa: E402
from nas_stab.csvsafe import csv_cell  # noqa: E402
from nas_stab.data import DATASETS  # noqa: E402

BOARDS = ROOT / "leaderboards"
README = BOARDS / "README.md"
BEGIN, END = "<!-- claims:begin -->", "<!-- claims:end -->"


DEFAULT_DATA = {"transfer": ("leaderboard",), "slope": ("probe_slopes",)}  # what a claim without `runs:` reads
PROVENANCE = {"leaderboard": "leaderboard_provenance.txt", "trials": "leaderboard_provenance.txt",
              "probe_slopes": "probe_provenance.txt"}  # a stored run NAME.csv has NAME_provenance.txt
Q_LEVEL = 0.10  # the Benjamini-Hochberg false discovery rate the findings page reads the q-values at


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"git {' '.join(args)}: {done.stderr.strip()} (the declaration check reads the repository's history)")
    return done.stdout


def _table_of(path: str) -> str | None:
    """The table a claims file belongs to: leaderboards/TABLE/claims.yaml or spaces/.../TABLE.claims.yaml."""
    m = re.match(r"^leaderboards/([^/]+)/claims\.yaml$", path) or re.match(r"^spaces/(?:.*/)?([^/]+)\.claims\.yaml$", path)
    return m.group(1) if m else None


def full_history() -> bool:
    """Whether this checkout holds the repository's whole history (a shallow clone or an export does not: there
    the declaration columns are kept as stored, `stored_declarations`)."""
    done = subprocess.run(["git", "rev-parse", "--is-shallow-repository"], capture_output=True, text=True, cwd=ROOT)
    return done.returncode == 0 and done.stdout.strip() == "false"


def stored_declarations(table: Path) -> dict[str, dict[str, str]]:
    """The declaration columns of a table's stored claims.csv, per claim id."""
    path = table / "claims.csv"
    if not path.is_file():
        return {}
    df = pd.read_csv(path, dtype=str, keep_default_na=False)
    cols = [c for c in ("declared", "declared_in", "data_from") if c in df.columns]
    return {r["id"]: {c: r[c] for c in cols} for r in df.to_dict("records")}


def declarations() -> dict[tuple[str, str], str]:
    """The commit that first declared each (table, claim id), from the history of every claims file (a claim
    moved from spaces/.../TABLE.claims.yaml to leaderboards/TABLE/claims.yaml keeps the commit that first declared
    it; the same id in another table is another claim)."""
    out: dict[tuple[str, str], str] = {}
    log = _git("log", "--reverse", "--format=@@commit %H", "-p", "-U0", "--", ":(glob)**/claims.yaml", ":(glob)**/*.claims.yaml")
    commit, table = "", None
    for line in log.splitlines():
        if line.startswith("@@commit "):
            commit = line.split()[1]
        elif line.startswith("+++ "):
            table = _table_of(line[6:]) if line.startswith("+++ b/") else None
        else:
            m = re.match(r"^\+\s*-\s*id:\s*(\S+)", line)
            if m and table and (table, m.group(1)) not in out:
                out[(table, m.group(1))] = commit
    return out


def data_commits(table: Path, names: tuple[str, ...]) -> list[str]:
    """The commits the runs behind `names` (a claim's data files) were trained from: their provenance's
    ``trained by`` line, every ``(commit ...)`` on it (a probe's, which has none: its ``nas_stab:`` line)."""
    out: list[str] = []
    for n in names:
        prov = table / PROVENANCE.get(n, f"{n}_provenance.txt")
        text = prov.read_text(encoding="utf-8") if prov.is_file() else ""
        lines = text.splitlines()
        line = next((ln for ln in lines if ln.startswith("trained by:")), "") or next((ln for ln in lines if ln.startswith("nas_stab:")), "")
        for c in re.findall(r"\(commit ([0-9a-f]{7,40})", line):
            if c not in out:
                out.append(c)
    return out


def declared_before(claim_commit: str | None, data: list[str]) -> str:
    """"yes" when the declaring commit is an ancestor of (or is) every commit the data was trained from, "no"
    when it is not, "unknown" without a declaring commit or a training commit."""
    if not claim_commit or not data:
        return "unknown"
    for c in data:
        done = subprocess.run(["git", "merge-base", "--is-ancestor", claim_commit, c], capture_output=True, cwd=ROOT)
        if done.returncode == 1:
            return "no"
        if done.returncode != 0:
            return "unknown"
    return "yes"


def _matches(df: pd.DataFrame, sel: dict) -> pd.Series:
    mask = pd.Series(True, index=df.index)
    for k, v in sel.items():
        if k not in df.columns:
            return pd.Series(False, index=df.index)
        mask &= df[k].map(fmt_value) == fmt_value(v)
    return mask


def shared_seeds(claim, confirm: pd.DataFrame, trials: pd.DataFrame | None) -> list[int]:
    """The seeds a confirmation's runs share with the table's own runs of the claim's two configurations: not
    fresh (with the same seed and configuration a rerun is the same run)."""
    if trials is None or "seed" not in confirm.columns or "seed" not in trials.columns or claim.kind not in ("difference", "equivalence"):
        return []
    seen: set[int] = set()
    for side in (claim.a, claim.b):
        keys = {k: v for k, v in side.items() if k in trials.columns}
        seen |= set(pd.to_numeric(trials.loc[_matches(trials, keys), "seed"], errors="coerce").dropna().astype(int))
    return sorted(seen & set(pd.to_numeric(confirm["seed"], errors="coerce").dropna().astype(int)))


def _classes(spec: dict) -> int | None:
    """The class count of the table's dataset (its registry entry: chance level and the no-learning loss)."""
    name = str(lookup(spec, "task.dataset.name"))
    if lookup(spec, "task.kind") == "classification" and name in DATASETS:
        n = DATASETS.entry(name).info.get("classes")
        return (lookup(spec, "task.dataset.classes") or 10) if n == "option" else n
    return None


def judge(table: Path, declared: dict[tuple[str, str], str] | None = None) -> pd.DataFrame:
    """The claims of one table directory, judged (columns of `claim_verdicts.COLUMNS` plus ``table`` and the
    declaration columns: ``declared`` before the data yes / no / unknown, ``declared_in``, ``data_from``, and
    ``not_fresh``, the seeds a confirmation shared with the table and that were left out of it)."""
    history = full_history()
    declared = (declarations() if history else {}) if declared is None else declared
    stored = stored_declarations(table)
    claims = load_claims(table / "claims.yaml")
    spec = experiment_data(spec_file(table.name))
    metric = lookup(spec, "leaderboard.metric") or lookup(spec, "search.objective") or "val_acc"
    classes = _classes(spec)
    names = {"trials", "probe_slopes", "leaderboard"} | {n for c in claims for n in c.runs}
    files = {n: pd.read_csv(table / f"{n}.csv") for n in names if (table / f"{n}.csv").is_file()}
    keys = [lookup(spec, "leaderboard.lr") or "train.lr", *{k for c in claims for k in (*c.a, *c.b)}]
    for n in set(files) - {"trials", "probe_slopes", "leaderboard"}:
        files[n] = fill_base(files[n], keys, own_spec(table, n))
    rows = []
    for c in claims:
        used = tuple(c.runs) or DEFAULT_DATA.get(c.kind, ("trials",))
        own = dict(files)
        dropped: list[int] = []
        for n in c.runs:  # a confirmation judged on its fresh seeds only
            shared = shared_seeds(c, own[n], files.get("trials"))
            if shared:
                own[n] = own[n][~pd.to_numeric(own[n]["seed"], errors="coerce").isin(shared)]
                dropped += shared
        r = evaluate([c], own, metric=str(metric), lr_key=str(lookup(spec, "leaderboard.lr") or "train.lr"),
                     classes=classes, base=spec)
        commits = data_commits(table, used)
        if history:
            r["declared"] = declared_before(declared.get((table.name, c.id)), commits)
            r["declared_in"] = (declared.get((table.name, c.id)) or "")[:12]
            r["data_from"] = " ".join(x[:12] for x in commits)
        else:  # no history to read: what the last full checkout wrote
            for col, v in stored.get(c.id, {"declared": "unknown", "declared_in": "", "data_from": ""}).items():
                r[col] = v
        r["not_fresh"] = " ".join(str(x) for x in sorted(set(dropped)))
        rows.append(r)
    out = pd.concat(rows, ignore_index=True)
    out.insert(0, "table", table.name)
    return out


def add_q_values(df: pd.DataFrame) -> pd.DataFrame:
    """Benjamini-Hochberg q-values (``q``) over every published difference claim with a p-value: one family, so a
    q-value changes when a claim joins it (scipy.stats.false_discovery_control)."""
    from scipy.stats import false_discovery_control

    df = df.copy()
    fam = (df["kind"] == "difference") & df["p"].notna()
    df["q"] = float("nan")
    if fam.any():
        df.loc[fam, "q"] = false_discovery_control(df.loc[fam, "p"].to_numpy(dtype=float), method="bh")
    return df


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


DECIDED = ("replicates", "reversed")  # a difference claim's decided directional verdicts


def findings_table(all_claims: pd.DataFrame) -> str:
    """The findings page's table: one line per claim, with when it was declared and its q-value."""
    lines = ["| claim (paper) | table | kind | declared before the data (claim / runs) | seeds run / needed | estimate (90%) "
             "| judged against | q (BH) | verdict |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in all_claims.to_dict("records"):
        need = f"> {MAX_SEEDS // 10}" if r["needed"] >= MAX_SEEDS // 10 else str(int(r["needed"]))
        what = r["report"] if r["kind"] in ("difference", "equivalence") else r["metric"]
        est = f"{_num(r['estimate'])} ({_num(r['lo'])} to {_num(r['hi'])}) {what}"
        decl = f"{r['declared']} ({r['declared_in'][:7] or '?'} / {' '.join(c[:7] for c in str(r['data_from']).split()) or '?'})"
        q = r.get("q", float("nan"))
        qs = f"{q:.3f}" if isinstance(q, float) and math.isfinite(q) else "–"
        verdict = str(r["verdict"])
        notes = []
        if r["declared"] != "yes":
            notes.append("exploratory: not declared before the data")
        if verdict.startswith(DECIDED) and isinstance(q, float) and math.isfinite(q) and q > Q_LEVEL:
            notes.append(f"not significant at q = {Q_LEVEL:g} over the published claims")
        if r.get("not_fresh"):
            notes.append(f"seeds {r['not_fresh']} shared with the table left out")
        tail = f" ({'; '.join(notes)})" if notes else ""
        lines.append(f"| {r['says']} ({r['paper']}) | [{r['table']}]({r['table']}/README.md) | {r['kind']} | {decl} | "
                     f"{int(r['seeds'])} / {need} | {est} | {r['criterion']} | {qs} | **{verdict}**{tail} |")
    return "\n".join(lines) + "\n"


SBEGIN, SEND = "<!-- claims-summary:begin -->", "<!-- claims-summary:end -->"


def awaiting(boards: Path = BOARDS) -> list[Path]:
    """Tables declared and awaiting their runs: a claims.yaml (and its experiment file) but no data yet (no csv)."""
    return sorted(p for p in boards.iterdir() if (p / "claims.yaml").is_file() and not any(p.glob("*.csv"))
                  and p.name != "archive")


def awaiting_line(tables: list[Path]) -> str:
    """The findings page's line on declared tables still awaiting their runs (none: no line)."""
    if not tables:
        return ""
    parts = [f"{t.name} ({len(load_claims(t / 'claims.yaml'))} claims)" for t in tables]
    return (f"- **Declared, awaiting their runs**: {', '.join(parts)}: claims committed before any run; judged here once "
            "their runs are published.\n")


def summary_block(every: pd.DataFrame, waiting: list[Path] | None = None) -> str:
    """The findings page's counts of declaration, freshness and multiplicity, from the judged claims (no figure by hand)."""
    n = len(every)
    before = every[every["declared"] == "yes"]
    tables = every.groupby("table")["declared"].agg(lambda v: (v == "yes").all())
    decided = every[(every["kind"] == "difference") & every["verdict"].astype(str).str.startswith(DECIDED)]
    fam = every[(every["kind"] == "difference") & every["p"].notna()]
    weak = decided[decided["q"] > Q_LEVEL]
    fresh = every[every["not_fresh"].astype(str).str.strip().ne("") & every["not_fresh"].notna()]
    lines = [
        f"- **Declared before the data**: {len(before)} of {n} claims (every claim of {int(tables.sum())} of {len(tables)} tables: "
        + ", ".join(sorted(tables[tables].index)) + f"); the other {n - len(before)} were committed after the runs they "
        "judge and are exploratory: they are not counted as replications.",
        f"- **Multiplicity**: Benjamini-Hochberg over the {len(fam)} difference claims with a p-value; {len(decided)} decided "
        f"directional verdicts, {len(weak)} of them with q > {Q_LEVEL:g}"
        + (": " + "; ".join(f"{r['table']} {r['id']} (p {r['p']:.3f}, q {r['q']:.3f})" for r in weak.to_dict("records")) if len(weak) else "")
        + ".",
        f"- **Fresh seeds**: {len(fresh)} confirmation(s) shared seeds with their table and are judged without them"
        + (": " + "; ".join(f"{r['table']} {r['id']} (seeds {r['not_fresh']} left out, {int(r['seeds'])} judged)" for r in fresh.to_dict("records"))
           if len(fresh) else "")
        + ".",
        f"- **Rules**: every verdict here judged by rules {', '.join(sorted(set(every['rules'].astype(str))))} (docs/leaderboard.md, Rules versions).",
    ]
    return "\n".join(lines) + "\n" + awaiting_line(waiting or [])


def _replace(page: str, begin: str, end: str, body: str) -> str:
    if begin not in page or end not in page:
        raise SystemExit(f"{README}: no {begin} ... {end} markers to write between")
    head, rest = page.split(begin, 1)
    return head + begin + "\n" + body + end + rest.split(end, 1)[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if anything is out of date")
    args = ap.parse_args(argv)
    stale: list[str] = []
    declared = declarations() if full_history() else {}
    if not declared:
        print("claims.py: this checkout has no full git history: each claim's declaration is kept as stored", file=sys.stderr)
    waiting = awaiting()
    tables = sorted(p for p in BOARDS.iterdir() if (p / "claims.yaml").is_file() and p.name != "archive" and p not in waiting)
    every = add_q_values(pd.concat([judge(t, declared) for t in tables], ignore_index=True))
    frames = []
    for table in tables:
        df = every[every["table"] == table.name].reset_index(drop=True)
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
    new = _replace(page, BEGIN, END, findings_table(pd.concat(frames, ignore_index=True)))
    new = _replace(new, SBEGIN, SEND, summary_block(every, waiting))
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
