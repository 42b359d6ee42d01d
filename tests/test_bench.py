"""The benchmark as a dataset (nas_stab.bench, docs/bench.md): every published run, its record unchanged and its
configuration complete, a release kept current with leaderboards/, verified against its manifest, and queries that
answer the same from one release to the next."""
from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from conftest import ROOT, run_cli

from nas_stab import bench
from nas_stab.bench.build import run_files
from nas_stab.errors import RunError

BOARDS = ROOT / "leaderboards"
QUERIES = ROOT / "tests" / "data" / "bench_queries.json"


def test_the_release_is_what_leaderboards_gives():
    r = subprocess.run([sys.executable, str(BOARDS / "bench_release.py"), "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_verify_passes_and_catches_a_changed_file(tmp_path, monkeypatch):
    assert set(bench.verify()) == {"runs.parquet", "tables.parquet", *(f"history/{t}.parquet" for t in bench.history_tables())}
    copy = tmp_path / "data"
    shutil.copytree(bench.DATA, copy)
    raw = bytearray((copy / "runs.parquet").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (copy / "runs.parquet").write_bytes(bytes(raw))
    (copy / "tables.parquet").unlink()
    monkeypatch.setattr(bench, "DATA", copy)
    with pytest.raises(RunError, match="runs.parquet: sha256 differs from the manifest; tables.parquet: missing"):
        bench.verify()


def _tables() -> list[Path]:
    out = [p for p in BOARDS.iterdir() if p.is_dir() and p.name != "archive" and (p / "README.md").is_file()]
    return out + [p for p in (BOARDS / "archive").iterdir() if p.is_dir() and (p / "README.md").is_file()]


def test_every_published_run_is_there_as_recorded():
    """Every run of every run file (trials.csv and the confirmations; archived tables too), with its own seed,
    status, lr and objective: nothing patched, substituted or dropped."""
    runs = bench.load()
    n = 0
    for table in _tables():
        for f in run_files(table):
            with f.open() as fh:
                rows = list(csv.DictReader(fh))
            got = runs[(runs["table"] == table.name) & (runs["file"] == f.stem)]
            assert len(got) == len(rows), (table.name, f.name)
            for r, (_, g) in zip(rows, got.iterrows()):  # in the file's order (a merged table repeats run ids)
                assert g["run_id"] == r["run_id"] and int(g["seed"]) == int(r["seed"]) and g["status"] == r["status"], \
                    (table.name, r["run_id"])
                if r.get("train.lr"):  # (a file that did not search the lr: its experiment's, from the configuration)
                    assert float(g["train.lr"]) == pytest.approx(float(r["train.lr"]), rel=1e-9)
                if r["objective"]:
                    assert float(g["objective"]) == pytest.approx(float(r["objective"]), rel=1e-9)
            n += len(rows)
    assert n == len(runs) == bench.manifest()["rows"]["runs.parquet"]


def test_every_row_carries_its_complete_configuration():
    runs = bench.load()
    with_spec = runs[runs["source_spec"].isin(bench.tables().query("spec_file != ''")["spec"])]
    for key in ("model.arch", "model.depth", "train.optimizer", "train.batch_size", "task.dataset.name"):
        assert with_spec[key].notna().all(), key
    from nas_stab.bench.build import LOCATION_KEYS

    assert not set(LOCATION_KEYS) & set(runs.columns)  # where the data lived on our machines is not a run's configuration
    post_ln = bench.query(table="multi30k-rskip", source_spec="multi30k-rskip-postln")
    assert len(post_ln) == 6 and (post_ln["model.skip"] == "plain").all() and (post_ln["model.skip_lambda"] == 1.0).all()
    assert (post_ln["filled"] == "model.skip model.skip_lambda").all()  # said, not hidden
    # elsewhere only an inactive conditional key (a dimension with when:) takes its base value, and says so
    assert set(runs.loc[runs["filled"] != "", "table"]) == {"multi30k-rskip", "learnable-tau-cifar", "learnable-tau-mnist"}


def test_every_field_is_documented():
    sys.path.insert(0, str(ROOT / "tests"))
    from test_docs import _documented

    run_doc = (ROOT / "docs" / "run-directory.md").read_text()
    keys_doc = (ROOT / "docs" / "experiment-file.md").read_text()
    bench_doc = (ROOT / "docs" / "bench.md").read_text()
    assert all(f"| `{name}` | {unit} | {meaning} |" in bench_doc for name, (unit, meaning) in bench.FIELDS.items())
    missing = [c for c in bench.load().columns
               if c not in bench.FIELDS and not _documented(c, run_doc) and f"`{c}`" not in keys_doc]
    assert not missing, missing


def test_queries_answer_the_same_from_release_to_release():
    """A query written for an earlier release answers the same now (tests/data/bench_queries.json: the queries and
    their answers' content, stored with the release they were written for; a change is a new release with a note)."""
    stored = json.loads(QUERIES.read_text())
    for q in stored["queries"]:
        got = bench.query(**q["filters"])[q["columns"]].sort_values(q["columns"]).reset_index(drop=True)
        assert got.to_csv(index=False, float_format="%.10g") == q["answer"], q["filters"]
    releases = [line.split("|")[1].strip() for line in (ROOT / "docs" / "bench.md").read_text().splitlines()
                if line.startswith("| 20")]
    assert stored["release"] in releases and bench.manifest()["release"] in releases


def test_query_filters_and_its_errors():
    width = bench.query(table="width-heldout", **{"model.parametrization": "mup"}, model__width=256)
    assert len(width) and (width["model.width"] == 256).all() and (width["model.parametrization"] == "mup").all()
    assert len(bench.query(table="width-heldout", model__width="256")) == len(bench.query(table="width-heldout", model__width=256.0))
    assert bench.query(table="nope").empty
    with pytest.raises(RunError, match="no field 'model.widht'; did you mean 'model.width'"):
        bench.query(model__widht=3)


def test_the_bench_command(tmp_path):
    r = run_cli("bench", "query", "table=pathbn", "model.depth=30", "model.norm=path_bn", "train.lr=0.045", "--format", "csv")
    assert r.returncode == 0, r.stderr
    df = pd.read_csv(__import__("io").StringIO(r.stdout))
    assert len(df) == 5 and set(df["status"]) == {"diverged"} and list(df.columns[:2]) == ["table", "file"]
    r = run_cli("bench", "verify")
    assert r.returncode == 0 and "match the manifest" in r.stdout
    r = run_cli("bench", "query", "model.widht=3")
    assert r.returncode == 2 and "did you mean 'model.width'" in r.stderr


def test_histories_are_the_runs_own_steps():
    """The stored per-step histories (from the run directories that trained the tables) belong to the runs the
    release holds, and each run's last logged training loss and validation accuracy are its published record's."""
    held = bench.history_tables()
    assert {"width-heldout", "depth-heldout", "width-readout", "width-umup"} <= set(held)
    for table, info in held.items():
        steps = bench.history(table=table)
        runs = bench.query(table=table).set_index("key")
        assert steps["key"].nunique() == info["runs"] and len(steps) == info["rows"] and set(steps["key"]) <= set(runs.index)
        last = steps.sort_values(["key", "step"]).groupby("key")[["train_loss", "val_acc"]].agg(
            lambda x: x.dropna().iloc[-1] if x.notna().any() else float("nan"))
        done = runs.loc[last.index][runs.loc[last.index, "status"] == "complete"]
        assert len(done) > 0.5 * len(last), table
        for col in ("train_loss", "val_acc"):
            assert (last.loc[done.index, col] - done[col]).abs().max() <= 1e-5 * (1 + done[col].abs().max()), (table, col)
    assert bench.history(table="pathbn").empty  # a table whose run directories are gone: no steps, none invented


def test_the_bench_history_command(tmp_path):
    out = tmp_path / "steps.csv"
    r = run_cli("bench", "history", "table=width-heldout", "model.width=256", "seed=105", "--out", out)
    assert r.returncode == 0, r.stderr
    steps = pd.read_csv(out)
    assert steps["run_id"].nunique() == 16 and steps.groupby("run_id")["step"].max().eq(600).all()
    r = run_cli("bench", "history", "table=width-heldout", "model.width=256", "seed=105")
    assert r.returncode == 0 and "16 run(s)" in r.stderr and "t05001-s105" in r.stdout


def test_the_history_figures_in_the_docs_are_the_manifests():
    """docs/bench.md's count of runs with histories, their steps and their size come from the release."""
    held = bench.history_tables()
    runs, steps = sum(i["runs"] for i in held.values()), sum(i["rows"] for i in held.values())
    size = sum((bench.DATA / "history" / f"{t}.parquet").stat().st_size for t in held)
    text = " ".join((ROOT / "docs" / "bench.md").read_text().split())
    assert f"{runs:,} runs, about {steps / 1e6:.1f} million logged steps, {size / 1e6:.0f} MB of Parquet" in text
    assert f"histories of the four held-out controls' {runs:,} runs" in text and len(held) == 4
