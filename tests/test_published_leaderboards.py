"""Every published table in leaderboards/ meets the evidence protocol (leaderboards/README.md, "Protocol").

A table is a directory of leaderboards/ (not archive/) holding an lr-transfer leaderboard
(leaderboard.csv with leaderboard_sizes.csv and leaderboard_provenance.txt) and/or a stability
probe (probe.csv with probe_provenance.txt). Each must have:

- an experiment file in spaces/published/ or spaces/ named after the table;
- a README.md that cites the paper's figure, table, theorem, appendix, section or equation it reproduces;
- provenance naming a clean commit (no "+dirty", not "unknown");
- enough seeds: probes >= 5 (they cost seconds); training tables >= 5 when the median run
  costs under a minute, else >= 3;
- training tables: a learning-rate grid no coarser than half an octave around each optimum
  (`grid_step` <= 0.5) and every optimum that trains bracketed (not censored at a grid end);
  except a fixed-lr figure (the experiment does not search `leaderboard.lr`, as the tau paper's
  Figure 1 at lr 0.001): it can show that the one lr fails a size (`no`) but never that it
  transfers, so no verdict in it may be `yes`;
- MNIST MLP tables ranked by accuracy: a best validation accuracy of at least 0.95 (trained long enough);
- declared claims (docs/leaderboard.md, "Claims"): every leaderboard table has a claims.yaml, judged into
  claims.csv; a claim with fewer seeds than its power calculation needs carries no verdict but
  "underpowered: needs N seeds" unless its interval decided it (replicates, reversed, holds, fails,
  equivalent, not equivalent; a transfer row's own yes / no); claims.csv and the findings page's claims
  table are what `python leaderboards/claims.py` writes from the stored runs.

A table of an earlier generation that predates the protocol goes in AWAITING_REDO: it is
expected to fail (strict xfail, so a table that starts passing is noticed) until it is redone
or archived. Since multi30k-rskip's redo (2026-11-26) every published table meets the protocol
and the set is empty.
"""
from __future__ import annotations

import csv
import re
import statistics
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
BOARDS = REPO / "leaderboards"
AWAITING_REDO: set[str] = set()
CITES = re.compile(r"\b(Fig(?:ure)?\.?|Table|Theorem|Appendix|Section|Equations?|eq\.)\s*\(?[A-Z]?\d", re.I)
MLPS = ("mlp", "mlp_resnet")


def _rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _field(text: str, name: str) -> list[str]:
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith(name + ":")]


def problems(table: Path, repo: Path = REPO) -> list[str]:
    """What keeps `table` (a directory) from meeting the protocol; [] when it does."""
    out: list[str] = []
    name = table.name
    spec_file = next((p for p in (repo / "spaces" / "published" / f"{name}.yaml", repo / "spaces" / f"{name}.yaml")
                      if p.exists()), None)
    if spec_file is None:
        out.append(f"no experiment file spaces/published/{name}.yaml")
    readme = table / "README.md"
    if not readme.exists():
        out.append("no README.md")
    elif not CITES.search(readme.read_text(encoding="utf-8")):
        out.append("README.md cites no figure, table, theorem, appendix, section or equation of a paper")
    lb, probe = table / "leaderboard.csv", table / "probe.csv"
    if not lb.exists() and not probe.exists():
        return out + ["neither leaderboard.csv nor probe.csv"]
    for prov_name in (["leaderboard_provenance.txt"] if lb.exists() else []) + (["probe_provenance.txt"] if probe.exists() else []):
        prov = table / prov_name
        if not prov.exists():
            out.append(f"no {prov_name}")
            continue
        text = prov.read_text(encoding="utf-8")
        commits = re.findall(r"commit ([0-9a-f]{7,40}(?:\+dirty)?|unknown)", text)
        if not commits:
            out.append(f"{prov_name}: no commit")
        for c in commits:
            if c.endswith("+dirty") or c == "unknown":
                out.append(f"{prov_name}: produced from {c}, not a clean commit")
        seeds = [s for line in _field(text, "seeds") for s in re.split(r"[,\s]+", line) if s.isdigit()]
        if prov_name == "probe_provenance.txt" and len(seeds) < 5:
            out.append(f"probe: {len(seeds)} seed(s), the protocol asks for >= 5")
    if lb.exists():
        out += _leaderboard_problems(table, spec_file)
        if not (table / "claims.yaml").exists():
            out.append("no claims.yaml (the table's claims, with the paper's effect sizes)")
    out += _claims_problems(table)
    return out


DECIDED = ("replicates", "reversed", "does not replicate", "holds", "fails", "equivalent", "not equivalent", "yes", "no")


def _claims_problems(table: Path) -> list[str]:
    """A claim judged with fewer seeds than it needs must be decided by its interval or say it is underpowered."""
    if not (table / "claims.yaml").exists():
        return []
    if not (table / "claims.csv").exists():
        return ["claims.yaml is not judged (no claims.csv: run python leaderboards/claims.py)"]
    out = []
    declared = yaml.safe_load((table / "claims.yaml").read_text(encoding="utf-8")) or {}
    extra = {n for c in declared.get("claims") or [] for n in ([c["runs"]] if isinstance(c.get("runs"), str) else c.get("runs") or [])}
    for name in sorted(extra - {"trials", "probe_slopes", "leaderboard"}):
        prov = table / f"{name}_provenance.txt"
        if not (table / f"{name}.csv").exists() or not prov.exists():
            out.append(f"claims read {name}.csv: it needs {name}.csv and {name}_provenance.txt beside it")
            continue
        for c in re.findall(r"commit ([0-9a-f]{7,40}(?:\+dirty)?|unknown)", prov.read_text(encoding="utf-8")) or ["missing"]:
            if c.endswith("+dirty") or c in ("unknown", "missing"):
                out.append(f"{prov.name}: produced from {c}, not a clean commit")
    for r in _rows(table / "claims.csv"):
        verdict = r.get("verdict", "")
        decided = verdict.split(" (")[0] in DECIDED
        if int(float(r["seeds"])) < int(float(r["needed"])) and not decided and not verdict.startswith("underpowered: needs"):
            out.append(f"claim {r['id']}: {r['seeds']} seeds of {r['needed']} needed, verdict {verdict!r} (say underpowered)")
    return out


def _trained_step(table: Path, label: str, lr_key: str) -> float | None:
    """The median lr gap (octaves) over the sizes of row `label` that train (leaderboard_sizes.csv): a row whose
    other sizes train at no lr has its union grid stretched by the bracket's 1-octave steps down from them,
    which say nothing of the resolution around an optimum. None when it cannot be told."""
    import math

    sizes, trials = table / "leaderboard_sizes.csv", table / "trials.csv"
    if not sizes.exists() or not trials.exists():
        return None
    rows = [s for s in _rows(sizes) if s.get("label") == label and s.get("trains") == "True"]
    if not rows:
        return None
    cols = list(rows[0])
    size_key = cols[cols.index("x_star") - 1]
    keys = [c for c in cols[1:cols.index(size_key)]]  # the row's compare keys, between label and the size
    runs = _rows(trials)
    steps = []
    for s in rows:
        lrs = sorted({float(t[lr_key]) for t in runs if t.get(size_key) == s[size_key] and all(t.get(k) == s[k] for k in keys)})
        steps += [math.log2(b / a) for a, b in zip(lrs, lrs[1:])]
    return statistics.median(steps) if steps else None


def _leaderboard_problems(table: Path, spec_file: Path | None) -> list[str]:
    out = []
    rows = _rows(table / "leaderboard.csv")
    spec = yaml.safe_load(spec_file.read_text(encoding="utf-8")) if spec_file is not None else {}
    lr_key = (spec.get("leaderboard") or {}).get("lr", "train.lr")
    fixed_lr = spec_file is not None and lr_key not in (spec.get("space") or {})
    if fixed_lr:
        for r in rows:
            if r.get("transfers") == "yes":
                out.append(f"row {r.get('label', '?')}: a fixed-lr table says transfers 'yes'")
    trials = _rows(table / "trials.csv") if (table / "trials.csv").exists() else []
    walls = [float(t["wall_s"]) for t in trials if t.get("wall_s") not in (None, "")]
    need = 5 if walls and statistics.median(walls) < 60 else 3
    for r in rows:
        label = r.get("label", "?")
        if int(float(r.get("seeds") or 0)) < need:
            out.append(f"row {label}: {r.get('seeds')} seed(s), the protocol asks for >= {need}")
        step = r.get("grid_step")
        if not fixed_lr and step not in (None, "") and float(step) > 0.5 + 1e-4:  # lrs are stored to 6 significant digits: half-octave gaps read 0.500001
            trained = _trained_step(table, label, lr_key)
            if trained is None or trained > 0.5 + 1e-4:
                out.append(f"row {label}: lr grid step {float(step):.2f} octaves > 0.5")
    sizes = table / "leaderboard_sizes.csv"
    if not sizes.exists():
        out.append("no leaderboard_sizes.csv")
    else:
        for s in _rows(sizes):
            cols = list(s)
            size = s[cols[cols.index("x_star") - 1]] if "x_star" in cols else "?"  # the size column precedes x_star
            if not fixed_lr and s.get("trains") == "True" and s.get("censored"):
                out.append(f"row {s.get('label')} size {size}: optimum censored ({s['censored']})")
    if spec_file is not None:
        ds = (spec.get("task") or {}).get("dataset") or {}
        arch = (spec.get("model") or {}).get("arch", "mlp_resnet")
        metric = (spec.get("leaderboard") or {}).get("metric") or (spec.get("search") or {}).get("objective", "val_acc")
        if ds.get("name") == "mnist" and arch in MLPS and metric in ("val_acc", "test_acc"):
            best = max((float(r["best"]) for r in rows if r.get("best") not in (None, "")), default=0.0)
            if best < 0.95:
                out.append(f"MNIST MLP: best val_acc {best:.3f} < 0.95 (train longer)")
    return out


def _declared() -> list[Path]:
    """Tables declared before their runs and still awaiting them (leaderboards/claims.py `awaiting`)."""
    import sys

    sys.path.insert(0, str(BOARDS))
    from claims import awaiting

    return awaiting(BOARDS)


def _tables() -> list[Path]:
    return sorted(p for p in BOARDS.iterdir() if p.is_dir() and p.name != "archive" and p not in _declared())


@pytest.mark.parametrize("table", [pytest.param(p, id=p.name) for p in _declared()] or [pytest.param(None, marks=pytest.mark.skip(
    reason="no table awaits its runs"))])
def test_a_declared_table_has_its_experiment_file_claims_and_a_readme_saying_it_awaits_its_runs(table):
    from nas_stab.analysis.claims import load_claims
    from nas_stab.analysis.rules import RULES_VERSION
    from nas_stab.config import load_spec

    spec = load_spec(REPO / "spaces" / "published" / f"{table.name}.yaml")
    assert spec.leaderboard.reference is not None and spec.leaderboard.epsilon is not None, "reference and epsilon declared"
    claims = load_claims(table / "claims.yaml")
    for c in claims:
        assert c.seeds is not None and c.rules == RULES_VERSION, (c.id, "seeds and the rules version declared")
        assert c.kind != "transfer" or c.predicts in ("yes", "no"), (c.id, "the predicted verdict declared")
    assert "awaiting its runs" in (table / "README.md").read_text(encoding="utf-8")
    assert not any(table.glob("*.csv")), "a declared table holds no data yet"


@pytest.mark.parametrize("table", [
    pytest.param(p, id=p.name, marks=pytest.mark.xfail(strict=True, reason="previous generation: redo or archive"))
    if p.name in AWAITING_REDO else pytest.param(p, id=p.name)
    for p in _tables()
])
def test_published_table_meets_the_protocol(table):
    assert problems(table) == []


def test_claims_and_the_findings_table_are_rebuilt_from_the_stored_runs():
    """claims.csv of every table and the findings page's claims table are what leaderboards/claims.py writes."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(BOARDS / "claims.py"), "--check"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]


def test_every_tables_readme_carries_its_verdicts_and_claims_as_generated_from_its_csvs():
    """The verdicts and claims blocks of each table's README are what leaderboards/figures.py writes from
    leaderboard.csv and claims.csv (no hand-copied verdict figure goes stale)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(BOARDS / "figures.py"), "--check"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    for table in _tables():
        text = (table / "README.md").read_text(encoding="utf-8")
        if (table / "leaderboard.csv").is_file():
            assert "<!-- verdicts:begin -->" in text, table.name
        if (table / "claims.csv").is_file():
            assert "<!-- claim-verdicts:begin -->" in text, table.name


def test_every_derived_figure_is_its_tables_code_rerun_on_its_csvs():
    """Each table's derived.csv (the figures its README quotes that no leaderboard or claims CSV holds) is what its
    derived.py computes from the table's CSVs today (leaderboards/derive.py --check)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, str(BOARDS / "derive.py"), "--check"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    for table in _tables():
        assert (table / "derived.csv").is_file() == (table / "derived.py").is_file(), table.name


def test_the_generated_blocks_follow_the_csvs(tmp_path):
    """A changed verdict in leaderboard.csv changes the README's block (the generator reads the file, not a copy)."""
    import shutil
    import sys

    sys.path.insert(0, str(BOARDS))
    import figures

    t = tmp_path / "depth-mup"
    shutil.copytree(BOARDS / "depth-mup", t)
    before = figures.rewrite((t / "README.md").read_text(encoding="utf-8"), t)
    board = (t / "leaderboard.csv").read_text(encoding="utf-8").replace("depth_mup,depth_mup,yes,", "depth_mup,depth_mup,no,", 1)
    (t / "leaderboard.csv").write_text(board, encoding="utf-8")
    after = figures.rewrite(before, t)
    assert "| depth_mup | **yes** |" in before and "| depth_mup | **no** |" in after


def test_awaiting_redo_names_existing_tables():
    """The exemption list shrinks as tables are redone; it never names a table that is gone."""
    names = {p.name for p in _tables()}
    assert names >= AWAITING_REDO, AWAITING_REDO - names


def test_archive_says_why_each_table_was_retired():
    archive = BOARDS / "archive"
    if not archive.exists():
        pytest.skip("nothing archived")
    text = (archive / "README.md").read_text(encoding="utf-8")
    for p in archive.iterdir():
        if p.is_dir():
            assert f"{p.name}" in text, f"archive/README.md does not say why {p.name} was retired"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_the_check_finds_each_violation(tmp_path):
    """A table built to break every rule is reported on each; the same table mended passes."""
    repo = tmp_path
    _write(repo / "spaces" / "published" / "t.yaml",
           "name: t\ntask: {dataset: {name: mnist}}\nmodel: {arch: mlp_resnet}\nspace: {train.lr: [0.1, 0.2, 0.4]}\n")
    t = repo / "leaderboards" / "t"
    _write(t / "README.md", "Our numbers beside the paper's.\n")
    _write(t / "leaderboard_provenance.txt", "spec: t\nseeds: 0, 1\nnas_stab: 0.1.0 (commit 1234567abcde+dirty)\n")
    _write(t / "leaderboard.csv", "rank,label,seeds,grid_step,best\n1,a,2,1.0,0.93\n")
    _write(t / "leaderboard_sizes.csv", "label,x,model.branches,x_star,censored,trains\na,a,1,-3,>=,True\n")
    _write(t / "trials.csv", "wall_s\n5\n5\n")
    found = "\n".join(problems(t, repo))
    for what in ("cites no figure", "not a clean commit", "2 seed(s)", "grid step 1.00", "censored", "0.930 < 0.95"):
        assert what in found, (what, found)
    _write(t / "README.md", "Beside the paper's Figure 4.\n")
    _write(t / "leaderboard_provenance.txt", "spec: t\nseeds: 0, 1, 2, 3, 4\nnas_stab: 0.1.0 (commit 1234567abcde)\n")
    _write(t / "leaderboard.csv", "rank,label,seeds,grid_step,best\n1,a,5,0.5,0.96\n")
    _write(t / "leaderboard_sizes.csv", "label,x,model.branches,x_star,censored,trains\na,a,1,-3,,True\n")
    _write(t / "claims.yaml", "claims: []\n")
    _write(t / "claims.csv", "id,seeds,needed,verdict\n")
    assert problems(t, repo) == []
    _write(t / "claims.yaml", "claims: []\n")
    _write(t / "claims.csv", "id,seeds,needed,verdict\nc,5,22,inconclusive\nd,5,22,replicates\ne,5,22,underpowered: needs 22 seeds\n")
    found = "\n".join(problems(t, repo))
    assert "claim c: 5 seeds of 22 needed" in found and "claim d" not in found and "claim e" not in found
    (t / "claims.csv").unlink()
    assert "no claims.csv" in "\n".join(problems(t, repo))
    (t / "claims.yaml").unlink()
    assert "no claims.yaml" in "\n".join(problems(t, repo))
    _write(t / "claims.yaml", "claims: []\n")
    _write(t / "claims.csv", "id,seeds,needed,verdict\n")
    _write(t / "probe.csv", "config,seed\n")
    _write(t / "probe_provenance.txt", "seeds: 0, 1, 2\nnas_stab: 0.1.0 (commit unknown)\n")
    found = "\n".join(problems(t, repo))
    assert "probe: 3 seed(s)" in found and "commit unknown" not in found and "not a clean commit" in found


def test_a_fixed_lr_figure_is_held_to_seeds_and_provenance_not_to_lr_bracketing(tmp_path):
    """The tau paper's Figure 1 trains at one lr: no grid to bracket, no accuracy floor for a loss
    table, but a `yes` would be a transfer claim it cannot make (a `no`, the lr failing a size, it can)."""
    repo = tmp_path
    _write(repo / "spaces" / "published" / "f.yaml", "name: f\ntask: {dataset: {name: mnist}}\nmodel: {arch: mlp_resnet}\n"
           "space: {model.depth: [3, 10]}\nleaderboard: {transfer: model.depth, metric: train_loss}\n")
    t = repo / "leaderboards" / "f"
    _write(t / "README.md", "Beside the paper's Figure 1.\n")
    _write(t / "leaderboard_provenance.txt", "spec: f\nseeds: 0, 1, 2, 3, 4\nnas_stab: 0.1.0 (commit 1234567abcde)\n")
    _write(t / "leaderboard.csv", "rank,label,seeds,grid_step,best,transfers\n1,a,5,0.0,0.03,inconclusive\n2,b,5,0.0,0.5,no\n")
    _write(t / "leaderboard_sizes.csv", "label,x,model.depth,x_star,censored,trains\na,a,3,-10,=,True\n")
    _write(t / "trials.csv", "wall_s\n5\n5\n")
    _write(t / "claims.yaml", "claims: []\n")
    _write(t / "claims.csv", "id,seeds,needed,verdict\n")
    assert problems(t, repo) == []
    _write(t / "leaderboard.csv", "rank,label,seeds,grid_step,best,transfers\n1,a,3,0.0,0.03,yes\n")
    found = "\n".join(problems(t, repo))
    assert "fixed-lr table says transfers 'yes'" in found and "3 seed(s)" in found


def test_every_table_says_which_command_trained_it():
    """A leaderboard's provenance gives the `nas-stab run` command that trained its runs (with its overrides
    and commit) beside the command that rebuilt the table; a run made before runs recorded their command
    takes its experiment file's Reproduce line, labelled as such."""
    for table in _tables():
        prov = table / "leaderboard_provenance.txt"
        if not prov.is_file():
            continue  # a probe: its provenance's command is the probe itself
        lines = [ln for ln in prov.read_text(encoding="utf-8").splitlines() if ln.startswith("trained by: ")]
        assert lines and "nas-stab run " in lines[0] and "(commit " in lines[0], (table.name, lines)


def test_a_stored_run_a_claim_reads_needs_its_provenance(tmp_path):
    """A confirmation run stored beside the table (confirm.csv) is evidence like trials.csv: it needs its
    provenance from a clean commit."""
    t = tmp_path / "leaderboards" / "t"
    _write(t / "claims.yaml", "claims:\n  - {id: c, paper: P, says: s, kind: difference, runs: confirm, a: {x: 1}, b: {x: 2}, effect: 1}\n")
    _write(t / "claims.csv", "id,seeds,needed,verdict\nc,30,20,replicates\n")
    assert "needs confirm.csv and confirm_provenance.txt" in "\n".join(_claims_problems(t))
    _write(t / "confirm.csv", "x,seed\n")
    _write(t / "confirm_provenance.txt", "spec: t-confirm (hash 1)\nnas_stab: 0.1.0 (commit 1234567abcde+dirty)\n")
    assert "confirm_provenance.txt: produced from 1234567abcde+dirty" in "\n".join(_claims_problems(t))
    _write(t / "confirm_provenance.txt", "spec: t-confirm (hash 1)\nnas_stab: 0.1.0 (commit 1234567abcde)\n")
    assert _claims_problems(t) == []


def test_held_out_tables_quote_no_figure_by_hand():
    """A table declared under frozen rules (every claim names its rules version: the held-out controls) has no
    decimal in its README's prose outside the generated blocks and figure tags: each one comes from its CSVs."""
    import sys

    sys.path.insert(0, str(BOARDS))
    import figures

    from nas_stab.analysis.claims import load_claims

    held_out = [t for t in figures.tables() if (t / "claims.yaml").is_file()
                and all(c.rules for c in load_claims(t / "claims.yaml"))]
    assert {"width-heldout", "depth-heldout", "width-readout"} <= {t.name for t in held_out}
    for t in held_out:
        assert figures.untagged((t / "README.md").read_text(encoding="utf-8")) == [], t.name


def test_untagged_figures_are_found_where_prose_quotes_them():
    import sys

    sys.path.insert(0, str(BOARDS))
    import figures

    text = ("rules 2026.12, drift +0.59 octave\n<!-- verdicts:begin -->\n0.1\n<!-- verdicts:end -->\n"
            "`lr: 0.003` and <!--fig a.csv b-->0.2<!--/fig--> but 1.5 here\n    0.7 in a code block\n")
    assert figures.untagged(text) == [(1, "+0.59"), (5, "1.5")]


def test_the_sizes_block_is_over_the_tables_size_key():
    """The opt-in sizes block names the leaderboard's transfer key (not a compared key that precedes it in
    leaderboard_sizes.csv: width-readout compares readout_zero_init, a 0/1 column)."""
    import sys

    sys.path.insert(0, str(BOARDS))
    import figures

    from nas_stab.config import load_spec

    checked = 0
    for t in figures.tables():
        text = (t / "README.md").read_text(encoding="utf-8")
        spec_file = REPO / "spaces" / "published" / f"{t.name}.yaml"
        if "<!-- sizes:begin -->" not in text or not spec_file.is_file():
            continue
        header = text.split("<!-- sizes:begin -->", 1)[1].strip().splitlines()[0]
        assert header.split("|")[2].strip() == load_spec(spec_file).leaderboard.transfer, (t.name, header)
        checked += 1
    assert checked >= 3


def test_the_protocol_constants_pages_quote_are_the_codes():
    """leaderboards/protocol.yaml holds the protocol's constants the pages quote by figure tag; one the code also
    holds is the code's (the power a claim's seeds are sized for)."""
    import inspect

    import yaml

    from nas_stab.analysis.claim_verdicts import _needed

    protocol = yaml.safe_load((BOARDS / "protocol.yaml").read_text(encoding="utf-8"))
    assert protocol["power"] == inspect.signature(_needed).parameters["power"].default
    assert 0.9 < protocol["mnist_mlp_bar"] < 1


# The figures a table's README may still quote by hand, each with why no file of ours can give it (issue 45, "No
# stale figures"); every other decimal of a table's prose is generated (figure tags, blocks, derived.csv).
BY_HAND = {
    ("multi30k-rskip", "6.8"): "epochs of the subset: 1000 steps / 147 steps an epoch (the token batcher's count, in no file)",
    ("mup-width", "2.7"): "epochs: 600 steps x batch 64 / 14,400 training examples (arithmetic across files)",
    ("mup-width", "0.447"): "the readout's init std, a constant of the model code (sqrt(2/classes))",
    ("mup-width", "-0.27"): "a review's coordinate check whose output is stored nowhere (quoted as the review's)",
    ("pathbn-fig4", "8.2"): "peak memory of the probe, measured by hand (no file records it)",
}
FINDINGS_BY_HAND = 17  # the findings page: a simulation's coverages, provenance-file sums, cost arithmetic, a CIFAR step time (ratchet)


def test_every_figure_in_a_tables_prose_is_generated_or_listed_with_its_reason():
    import sys

    sys.path.insert(0, str(BOARDS))
    import figures

    left = []
    for t in figures.tables():
        for line, fig in figures.untagged((t / "README.md").read_text(encoding="utf-8")):
            if (t.name, fig) not in BY_HAND:
                left.append(f"{t.name}/README.md:{line} {fig}")
    assert not left, "figures typed by hand (tag them: leaderboards/figures.py): " + ", ".join(left)
    findings = figures.untagged((BOARDS / "README.md").read_text(encoding="utf-8"))
    assert len(findings) <= FINDINGS_BY_HAND, [f"README.md:{line} {fig}" for line, fig in findings]
