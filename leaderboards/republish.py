"""Rebuild a published leaderboard from its stored trials.csv, without retraining.

    python leaderboards/republish.py leaderboards/tau-depth [leaderboards/... ...]
    python leaderboards/republish.py --add runs/NAME [runs/...] leaderboards/TABLE   # add runs to a table

A directory holding a probe (``probe.csv``) instead is rebuilt from it: the
slopes, their intervals and ``probe.md`` are recomputed with the current code
(`republish_probe`); nothing is measured again.

A published directory keeps every trained run (``trials.csv``) and the
provenance of the run(s) it came from (in ``leaderboard_provenance.txt``, or,
for tables written before that sidecar existed, the ``# field: value`` lines
at the top of ``leaderboard.csv``). This script rebuilds the run directory the
leaderboard code reads (``spec.yaml`` + ``trials.csv``): the experiment file
is the one in ``spaces/published/<name>.yaml``, else the file in ``spaces/``
whose ``name:`` matches, and the run metadata (spec hash, commit, versions,
hardware, creation date) is copied from the stored provenance, so the
republished table names the runs that actually produced its numbers. Runs
combined into one table are split back by their seeds. The per-block forward
norm plot and the loss curves need the runs' histories, which are not
published: the existing ``plots/fwd_norm_init.png`` and ``plots/loss_curves.png``
are kept and embedded as they are.

Nothing is trained; only the leaderboard files and the other plots are
rewritten (``trials.csv`` is left untouched).
"""
from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

import pandas as pd
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nas_stab.results import formats as F  # noqa: E402
from nas_stab.results import plots as P  # noqa: E402
from nas_stab.results.leaderboard import PLOTS, atomic_write, load_analysis  # noqa: E402
from nas_stab.search.replay import upgrade  # noqa: E402
from nas_stab.store.reader import read_run  # noqa: E402

_COMMIT: list[str] = []
SOURCE = "source_run"  # a stored trials.csv of runs that share seeds names each row's run in this column


def code_commit() -> str:
    """The commit of the code doing the rebuild, taken once, before this process writes anything (the
    files it rewrites would otherwise mark the later tables' commit '+dirty')."""
    from nas_stab.store.rundir_meta import git_commit

    if not _COMMIT:
        _COMMIT.append(git_commit())
    return _COMMIT[0]


def _pairs(lines: list[str]) -> list[tuple[str, str]]:
    return [tuple(ln.split(": ", 1)) for ln in lines if ": " in ln]


def _shown(d: Path) -> str:
    """The directory as the rebuild command names it (relative to the repository when inside it)."""
    return str(d.relative_to(ROOT) if d.is_relative_to(ROOT) else d)


def old_provenance(d: Path) -> list[tuple[str, str]]:
    """A published table's provenance, or a probe's (probe_provenance.txt)."""
    side = d / "leaderboard_provenance.txt"
    if (d / "probe_provenance.txt").is_file() and not side.is_file():
        return _pairs((d / "probe_provenance.txt").read_text().splitlines())
    lines = side.read_text().splitlines() if side.is_file() else [
        ln[2:] for ln in (d / "leaderboard.csv").read_text().splitlines() if ln.startswith("# ")]
    return _pairs(lines)


def spec_file(name: str) -> Path:
    pub = ROOT / "spaces" / "published" / f"{name}.yaml"
    if pub.is_file():
        return pub
    for p in sorted((ROOT / "spaces").glob("*.yaml")):
        data = yaml.safe_load(p.read_text())
        if isinstance(data, dict) and data.get("name") == name:
            return p
    raise SystemExit(f"no experiment file named {name!r} in spaces/published/ or spaces/")


def runs_of(prov: list[tuple[str, str]]) -> list[dict]:
    """Per original run: name, hash, commit, versions, hardware, created, seeds."""
    d = dict(prov)
    specs = re.findall(r"([\w-]+) \(hash (\w+)\)", d["spec"])
    run_lines = [v for k, v in prov if k == "run"]
    out = []
    for name, h in specs:
        line = next((v for v in run_lines if v.startswith(name + " ")), None)
        if line:
            m = re.search(r"commit ([\w+]+), nas_stab ([\w.]+), torch ([^,]+), hardware (.+), created (\S+); seeds ([\d, ]+);", line)
            commit, version, torch, hw, created, seeds = m.groups()
            seeds = [int(s) for s in seeds.split(",")]
        else:
            version, commit = re.match(r"(\S+) \(commit (\S+)\)", d["nas_stab"]).groups()
            torch, hw, created = d["torch"], d["hardware"], d["run created"]
            seeds = None
        meta = {"spec_hash": h, "nas_stab_version": version, "git_commit": commit, "torch_version": torch,
                "python": d.get("python", "unknown"), "hardware": hw, "created": created}
        how = re.search(r"\([^;()]*; (.*)\)$", d.get("dataset", ""))  # how the run found its data splits
        if how:
            meta["data"] = how.group(1)
        out.append({"name": name, "meta": meta, "seeds": seeds})
    return out


def training_command(prov: list[tuple[str, str]], name: str, src: Path) -> str | None:
    """The command that trained run `name`: from the stored provenance's `trained by` line, else, for a run
    made before runs recorded it, the `nas-stab run` line of its experiment file's "Reproduce" comment,
    labelled as such."""
    stored = dict(prov).get("trained by", "")
    for pat in (rf"(?:^|; ){re.escape(name)}: ([^;]*?) \(commit [\w+]+\)(?:;|$)", r"^([^;]*?) \(commit [\w+]+\)$"):
        m = re.search(pat, stored)
        if m and not m.group(1).startswith("unknown"):
            return m.group(1)
    for line in src.read_text(encoding="utf-8").splitlines():
        m = re.match(r"#\s+(nas-stab run \S+.*)$", line)
        if m:
            return f"{m.group(1).strip()} [the experiment file's Reproduce line: the run did not record its command]"
    return None


def experiment_data(src: Path) -> dict:
    """The experiment file as a mapping, with `extends:` resolved (a run directory's spec.yaml is
    read as a stored run's: it must hold every section itself)."""
    from nas_stab.config.compose import compose
    from nas_stab.config.yamlio import load_yaml, read_text

    data, lines = load_yaml(read_text(src), file=str(src))
    return compose(data, lines, str(src), read_text)[0]


def _write_run(rd: Path, data: dict, meta: dict, trials: pd.DataFrame) -> Path:
    """A run directory the leaderboard code reads: spec.yaml (the experiment with `meta`), trials.csv and, for a
    search that decided as results came in (bracket, adaptive seeds), its decisions replayed from those records
    (`nas_stab.search.replay`: a published table keeps its runs, not the search's decisions.jsonl)."""
    rd.mkdir()
    (rd / "spec.yaml").write_text(yaml.safe_dump({**data, "meta": meta}, sort_keys=False))
    trials.to_csv(rd / "trials.csv", index=False)
    run = read_run(rd)
    upgrade(rd, run.spec, run.trials.to_dict("records"))
    return rd


def stored_run(tmp: Path, run: dict, prov_old: list[tuple[str, str]], trials: pd.DataFrame) -> tuple[Path, pd.DataFrame]:
    """One original run of a published table rebuilt in `tmp` from its experiment file, its stored metadata
    and its share of the stored trials (by ``source_run`` where runs share seeds, else by its seeds)."""
    src = spec_file(run["name"])
    meta = dict(run["meta"])
    command = training_command(prov_old, run["name"], src)
    if command:
        meta["command"] = command
    if SOURCE in trials.columns:  # runs that share seeds (a row's grid extended by a later run)
        t = trials[trials[SOURCE] == run["name"]].drop(columns=SOURCE).dropna(axis=1, how="all")
    else:
        t = trials if run["seeds"] is None else trials[trials["seed"].isin(run["seeds"])]
    return _write_run(tmp / run["name"], experiment_data(src), meta, t), t


def republish(d: Path) -> None:
    prov_old = old_provenance(d)
    trials = pd.read_csv(d / "trials.csv")
    with tempfile.TemporaryDirectory() as tmp:
        dirs = []
        for run in runs_of(prov_old):
            rd, t = stored_run(Path(tmp), run, prov_old, trials)
            dirs.append(rd)
            print(f"{d.name}: {run['name']} from {spec_file(run['name']).relative_to(ROOT)}, {len(t)} runs")
        command = f"python leaderboards/republish.py {_shown(d)}"
        a, prov, _ = load_analysis(dirs, command=command)
        prov = [(k, v.replace(str(Path(tmp)) + "/", "stored:")) for k, v in prov]
        prov.insert(len(prov) - 1, ("republished", f"from the stored trials.csv with the leaderboard code at commit {code_commit()}; "
                                    "nothing retrained (the run lines above are the original runs)"))
        pngs, links = {}, {}
        for name, draw in (("lr_transfer", P.transfer_plot), ("optimum_transfer", P.optimum_plot),
                           ("fwd_norm_init", None), ("divergence", P.divergence_plot), ("loss_curves", None)):
            png = draw(a) if draw else ((d / "plots" / f"{name}.png").read_bytes()
                                        if (d / "plots" / f"{name}.png").is_file() else None)
            if png is None:
                continue
            atomic_write(d / "plots" / f"{name}.png", png)
            pngs[PLOTS[name]] = png
            links[PLOTS[name]] = f"plots/{name}.png"
        for fmt in F.FORMATS:
            atomic_write(d / f"leaderboard.{fmt}", F.render(fmt, a, prov, plots_png=pngs, plots_paths=links))
        atomic_write(d / "leaderboard_cells.csv", F.to_cells_csv(a))
        atomic_write(d / "leaderboard_sizes.csv", F.to_sizes_csv(a))
        atomic_write(d / "leaderboard_edges.csv", F.to_edges_csv(a))
        atomic_write(d / "leaderboard_provenance.txt", F.provenance_text(a, prov))
    for r in a.rows.to_dict("records"):
        print(f"  {r['rank']}. {r['label']}: {r['transfers']} ({r['why']})")


def _probe_rows(path: Path) -> list[dict]:
    """probe.csv back into the rows `nas-stab probe` wrote: empty cells absent, numbers as Python numbers."""
    df = pd.read_csv(path)
    rows = []
    for rec in df.to_dict("records"):
        row = {}
        for k, v in rec.items():
            if isinstance(v, float) and v != v:
                continue
            row[k] = v.item() if hasattr(v, "item") else v
        rows.append(row)
    return rows


def republish_probe(d: Path) -> None:
    """Recompute probe_slopes.csv and probe.md of a published probe from its probe.csv (the intervals,
    e.g., after a change to how they are computed); probe.csv, the plots and the provenance stay,
    and probe.md's last line keeps the original run's commit and date with a note of this rebuild."""
    from datetime import datetime, timezone

    from nas_stab.config import load_spec
    from nas_stab.probe.cmd import probe_points
    from nas_stab.probe.seeds import aggregate, slopes
    from nas_stab.probe.table import axes, probe_markdown, write_slopes

    prov = dict(old_provenance(d))
    name = prov["spec"].split(" ")[0]
    spec = load_spec(spec_file(name))
    rows = _probe_rows(d / "probe.csv")
    seeds = [int(s) for s in prov["seeds"].split(",")]
    steps = int(m.group(1)) if (m := re.search(r"after (\d+) step", prov.get("probe", ""))) else 0
    seconds = float(prov["compute"].split()[0])
    keys = list(spec.space.keys)
    size_key, line_keys = axes(spec)
    _, notes = probe_points(spec)
    slope_rows = slopes(rows, size_key, line_keys)
    write_slopes(d / "probe_slopes.csv", slope_rows, line_keys)
    md = probe_markdown(spec, aggregate(rows), keys, steps, seeds, notes, seconds, slope_rows=slope_rows,
                        size_key=size_key, line_keys=line_keys).rstrip("\n").split("\n")
    old_last = (d / "probe.md").read_text().rstrip("\n").split("\n")[-1].split("; tables rebuilt from probe.csv")[0]
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    md[-1] = (f"{old_last}; tables rebuilt from probe.csv on {when} at commit {code_commit()} "
              f"(`python leaderboards/republish.py {_shown(d)}`), "
              "nothing re-measured")
    atomic_write(d / "probe.md", ("\n".join(md) + "\n").encode())
    print(f"{d.name}: probe of {len(rows)} rows from {spec_file(name).relative_to(ROOT)}, {len(slope_rows)} slopes")


def combine(d: Path, extra: list[Path]) -> None:
    """Add the runs of `extra` run directories (trained from spaces/published/ at a clean commit) to the
    published table `d`: its stored runs and theirs become one trials.csv with a ``source_run`` column, and a
    provenance naming every run; `republish` then rebuilds the table from them."""
    prov_old = old_provenance(d)
    trials = pd.read_csv(d / "trials.csv")
    with tempfile.TemporaryDirectory() as tmp:
        dirs, frames = [], []
        for run in runs_of(prov_old):
            rd, t = stored_run(Path(tmp), run, prov_old, trials)
            dirs.append(rd)
            frames.append(t.assign(**{SOURCE: run["name"]}))
        for added in extra:  # as republish will read them: the published experiment file and the run's metadata
            stored = yaml.safe_load((added / "spec.yaml").read_text())
            t = pd.read_csv(added / "trials.csv")
            dirs.append(_write_run(Path(tmp) / stored["name"], experiment_data(spec_file(stored["name"])),
                                   stored.get("meta") or {}, t))
            frames.append(t.assign(**{SOURCE: stored["name"]}))
        a, prov, _ = load_analysis(dirs, command=f"python leaderboards/republish.py {_shown(d)}")
        prov = [(k, v.replace(str(Path(tmp)) + "/", "stored:")) for k, v in prov]
    pd.concat(frames, ignore_index=True, sort=False).to_csv(d / "trials.csv", index=False)
    atomic_write(d / "leaderboard_provenance.txt", F.provenance_text(a, prov))
    republish(d)


if __name__ == "__main__":
    code_commit()
    if sys.argv[1:2] == ["--add"]:  # python leaderboards/republish.py --add RUN_DIR [RUN_DIR ...] TABLE_DIR
        combine(Path(sys.argv[-1]).resolve(), [Path(p).resolve() for p in sys.argv[2:-1]])
        raise SystemExit(0)
    for arg in sys.argv[1:] or sorted(str(p) for p in (ROOT / "leaderboards").iterdir() if p.is_dir() and p.name != "archive"):
        d = Path(arg).resolve()
        republish_probe(d) if (d / "probe.csv").is_file() and not (d / "trials.csv").is_file() else republish(d)
