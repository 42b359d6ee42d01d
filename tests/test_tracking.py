"""Experiment tracking (logging.tracking): MLflow's local store and W&B's offline files, read back.

Offline throughout: MLflow's default store is a SQLite file in the run directory, W&B writes its
offline run files there. The backends' packages are optional (pip install 'nas_stab[mlflow]',
'nas_stab[wandb]'): the tests of one skip without it."""
from __future__ import annotations

import csv
import json
import struct

import pytest
import yaml
from conftest import TINY, run_cli

from nas_stab.config import config_key, loads_spec, spec_hash
from nas_stab.errors import SpecError
from nas_stab.results.leaderboard import build_leaderboard
from nas_stab.search.local import run_local
from nas_stab.store.rundir import RunDir
from nas_stab.trackers.views import record_views

NO_TB = "  tensorboard: false\n"


def _spec(tracking: str, extra: str = "", *, runs: int = 4) -> str:
    """TINY (4 runs; 2 with runs=2) with this tracking and no TensorBoard logs."""
    base = TINY if runs == 4 else TINY.replace("model.branches: [1, 2]", "model.branches: [2]")
    return base + f"logging:\n  tracking: {tracking}\n{NO_TB}{extra}"


def _run(text: str, out) -> tuple:
    """`nas-stab run` in this process: the search, its leaderboard.md, then the tracking's end."""
    spec = loads_spec(text)
    with RunDir.open(out, spec, views=record_views) as rd:
        run_local(spec, rd)
        paths = build_leaderboard([rd.path], formats=("md",), plots=False)
        failures = rd.track_end(paths)
    return out / spec.name, failures


def _rows(d) -> list[dict]:
    with open(d / "trials.csv") as f:
        return list(csv.DictReader(f))


def _history(d, run_id) -> list[dict]:
    with open(d / "history" / f"{run_id}.csv") as f:
        return list(csv.DictReader(f))


def _mlflow_runs(d, uri=None):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri or f"sqlite:///{d / 'mlflow.db'}")
    exp = client.get_experiment_by_name("tiny")
    return client, client.search_runs([exp.experiment_id], max_results=1000)


# ---------------------------------------------------------------- the schema


def test_tracking_keys_leave_the_spec_hash_alone_and_name_the_missing_extra(monkeypatch):
    base = loads_spec(TINY)
    assert base.logging.tracking == "none" and base.logging.mlflow_uri is None
    other = loads_spec(TINY + "logging: {mlflow_uri: 'http://127.0.0.1:5000', wandb_project: my-proj}\n")
    assert (spec_hash(other), config_key(other, 0)) == (spec_hash(base), config_key(base, 0))  # logging: not hashed
    if _installed("mlflow", "wandb"):
        both = loads_spec(TINY + "logging: {tracking: [mlflow, wandb]}\n")
        assert both.logging.tracking == ("mlflow", "wandb") and spec_hash(both) == spec_hash(base)
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(SpecError) as e:
        loads_spec(TINY + "logging: {tracking: wandb}\n")
    assert "nas_stab[wandb]" in str(e.value) and "logging.tracking" in str(e.value)
    # a run directory's spec.yaml that names it still loads (nas-stab leaderboard, status)
    assert loads_spec(TINY + "logging: {tracking: wandb}\n", run_file=True).logging.tracking == "wandb"
    with pytest.raises(SpecError) as e:
        loads_spec(TINY + "logging: {tracking: mlfow}\n")
    assert "mlflow" in str(e.value)
    with pytest.raises(SpecError) as e:
        loads_spec(TINY + "logging: {wandb_project: 'a/b'}\n")
    assert "logging.wandb_project" in str(e.value)


def _installed(*names: str) -> bool:
    import importlib.util

    return all(importlib.util.find_spec(n) is not None for n in names)


# ---------------------------------------------------------------- MLflow


@pytest.mark.slow  # over 15 s: CI runs it in its slow stage (pytest -m slow)
def test_mlflow_one_run_per_run_with_params_curves_final_metrics_and_the_leaderboard(tmp_path):
    """Through the command line: `nas-stab run` twice (the second resumes, trains and logs nothing), then
    `nas-stab leaderboard` adds its files to the same leaderboard run."""
    pytest.importorskip("mlflow")
    spec = tmp_path / "tiny.yaml"
    spec.write_text(_spec("mlflow"))
    out = tmp_path / "runs"
    r = run_cli("run", spec, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "warning: tracking" not in r.stderr
    d = out / "tiny"
    rows = _rows(d)
    client, runs = _mlflow_runs(d)
    # one line says what was logged and how to open it
    uri = f"sqlite:///{d.resolve() / 'mlflow.db'}"
    assert (f"tracking: mlflow: 4 run(s) logged and the leaderboard to {uri}; open it: mlflow ui --backend-store-uri {uri}"
            in r.stdout), r.stdout
    by_name = {run.info.run_name: run for run in runs}
    assert sorted(by_name) == sorted([row["run_id"] for row in rows] + ["leaderboard"]) and len(runs) == 5
    parent = by_name["leaderboard"].info.run_id
    for row in rows:
        run = by_name[row["run_id"]]
        tags, params, metrics = run.data.tags, run.data.params, run.data.metrics
        assert tags["mlflow.parentRunId"] == parent and run.info.status == "FINISHED"
        assert (tags["nas_stab.experiment"], tags["nas_stab.status"], tags["nas_stab.seed"], tags["nas_stab.trial"]) == \
            ("tiny", row["status"], row["seed"], row["trial"])
        assert tags["nas_stab.spec_hash"] == spec_hash(loads_spec(spec.read_text()))
        # params: the searched values, the seed and the resolved configuration
        assert (params["model.branches"], params["train.lr"], params["seed"]) == \
            (row["model.branches"], row["train.lr"], row["seed"])
        assert params["model.width"] == "16" and params["train.steps"] == "20" and params["task.dataset.name"] == "digits"
        # params are text in MLflow; the typed configuration is each run's config.json
        dst = tmp_path / "dl" / row["run_id"]
        dst.mkdir(parents=True)
        with open(client.download_artifacts(run.info.run_id, "config.json", str(dst))) as f:
            typed = json.load(f)
        assert typed["model.width"] == 16 and typed["train.lr"] == float(row["train.lr"]) and typed["seed"] == int(row["seed"])
        assert typed["task.dataset.name"] == "digits" and isinstance(typed["train.steps"], int)
        # final metrics: trials.csv's values exactly
        for col in ("objective", "val_acc", "val_loss", "test_acc", "train_loss", "init_fwd_ratio", "final_fwd_ratio",
                    "max_update_ratio", "steps"):
            assert metrics[col] == float(row[col]), col
        # the curves: every history point at its step
        hist = _history(d, row["run_id"])
        loss = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "train/loss")}
        assert loss == {int(h["step"]): float(h["train_loss"]) for h in hist if h["train_loss"]}
        assert len(client.get_metric_history(run.info.run_id, "stability/fwd_ratio")) == \
            sum(1 for h in hist if h.get("fwd_ratio"))
        assert len(client.get_metric_history(run.info.run_id, "val/val_acc")) >= 1
    assert {a.path for a in client.list_artifacts(parent)} >= {"leaderboard.md", "spec.yaml"}

    # resuming: nothing trained, nothing logged twice
    r = run_cli("run", spec, "--out", out)
    assert r.returncode == 0, r.stderr
    assert "tracking: mlflow: 0 run(s) logged and the leaderboard" in r.stdout
    _, again = _mlflow_runs(d)
    assert sorted(x.info.run_id for x in again) == sorted(x.info.run_id for x in runs)

    # nas-stab leaderboard: its files into the same leaderboard run
    r = run_cli("leaderboard", d, "--format", "md,csv")
    assert r.returncode == 0, r.stderr
    _, after = _mlflow_runs(d)
    assert len(after) == 5
    assert {a.path for a in client.list_artifacts(parent)} >= {"leaderboard.md", "leaderboard.csv", "spec.yaml"}


def test_a_broken_tracking_uri_fails_nothing_and_a_later_run_logs_what_is_missing(tmp_path, monkeypatch):
    pytest.importorskip("mlflow")
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")  # MLflow's own default puts artifacts in ./mlruns: not here
    (tmp_path / "blocker").write_text("a file where the store's directory should be")
    bad = f"sqlite:///{tmp_path / 'blocker' / 'mlflow.db'}"
    d, failures = _run(_spec("mlflow", f"  mlflow_uri: '{bad}'\n", runs=2), tmp_path)
    rows = _rows(d)
    assert len(rows) == 2 and {r["status"] for r in rows} == {"complete"}
    log = (d / "log.txt").read_text()
    lines = [line for line in log.splitlines() if "mlflow: could not log" in line]
    assert lines and "the search goes on" in lines[0]
    assert len(lines) == 2 == len(failures)  # once during the search (then left alone), once more at its end

    # the same experiment resumed with a store that works: the end of the run logs the two runs
    good = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"
    d, failures = _run(_spec("mlflow", f"  mlflow_uri: '{good}'\n", runs=2), tmp_path)
    assert not failures
    client, runs = _mlflow_runs(d, good)
    assert sorted(r.info.run_name for r in runs) == sorted([r["run_id"] for r in rows] + ["leaderboard"])
    stored = yaml.safe_load((d / "spec.yaml").read_text())["logging"]  # the settings it was resumed with
    assert (stored["tracking"], stored["mlflow_uri"]) == ("mlflow", good)
    parent = next(r.info.run_id for r in runs if r.info.run_name == "leaderboard")
    assert {a.path for a in client.list_artifacts(parent)} == {"leaderboard.md", "leaderboard_sizes.csv", "spec.yaml"}
    assert (d / "mlartifacts").is_dir() and not any((tmp_path / "cwd").iterdir())


def test_a_row_recorded_again_replaces_its_mlflow_run(tmp_path):
    """A run trained again (its trials.csv row replaced) gets a new MLflow run; the earlier one is deleted."""
    pytest.importorskip("mlflow")
    from nas_stab.store.reader import read_run
    from nas_stab.trackers.tracking import open_tracking

    d, _ = _run(_spec("mlflow", runs=2), tmp_path)
    _, runs = _mlflow_runs(d)
    first = {r.info.run_name: r.info.run_id for r in runs}
    rows = _rows(d)
    row = dict(rows[0], status="failed", val_acc="", objective="", error="RuntimeError: again")
    run = read_run(d)
    with RunDir.lock(d) as rd:
        tracking = open_tracking(run.spec, d, run.meta, rd.log)
        assert tracking.runs(rows) == 0  # all logged already
        assert tracking.runs([row]) == 1
        tracking.close()
    client, runs = _mlflow_runs(d)
    now = {r.info.run_name: r for r in runs}
    assert len(runs) == 3 and now[row["run_id"]].info.run_id != first[row["run_id"]]
    assert now[row["run_id"]].data.tags["nas_stab.status"] == "failed" and now[row["run_id"]].info.status == "FAILED"
    assert "val_acc" not in now[row["run_id"]].data.metrics
    assert client.get_run(first[row["run_id"]]).info.lifecycle_stage == "deleted"


# ---------------------------------------------------------------- W&B, offline


def _wandb_records(path):
    """The records of an offline W&B run file (.wandb: LevelDB's log format of protobuf records)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data, block = path.read_bytes(), 32768
    assert data[:4] == b":W&B"
    pos, buf, out = 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        if n == 0 and kind == 0:
            pos += left
            continue
        buf += data[pos + 7:pos + 7 + n]
        pos += 7 + n
        if kind in (1, 4):  # a whole record, or the last piece of one
            rec = pb.Record()
            rec.ParseFromString(buf)
            out.append(rec)
            buf = b""
    return out


def test_wandb_offline_run_per_run_with_config_history_and_summary(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    d, failures = _run(_spec("wandb", "  wandb_project: tiny-proj\n", runs=2), tmp_path)
    assert not failures
    rows = _rows(d)
    ledger = json.loads((d / "wandb" / "nas_stab-logged.json").read_text())
    assert set(ledger) == {r["run_id"] for r in rows} | {"leaderboard"}
    offline = sorted(p for p in (d / "wandb").iterdir() if p.name.startswith("offline-run-"))
    assert len(offline) == 3  # two runs and the leaderboard
    row = rows[0]
    run_dir = next(p for p in offline if f"-{row['run_id']}-" in p.name)
    recs = _wandb_records(next(run_dir.glob("*.wandb")))
    run = next(r.run for r in recs if r.WhichOneof("record_type") == "run")
    assert (run.display_name, run.project, run.run_group) == (row["run_id"], "tiny-proj", "tiny")
    config = {i.key: json.loads(i.value_json) for i in run.config.update}
    assert config["train.lr"] == float(row["train.lr"]) and config["model.branches"] == int(row["model.branches"])
    steps = [r.history for r in recs if r.WhichOneof("record_type") == "history"]
    with_loss = [h for h in steps if any(i.nested_key == ["train/loss"] for i in h.item)]
    assert len(with_loss) == sum(1 for h in _history(d, row["run_id"]) if h["train_loss"])
    summary = {}
    for r in recs:
        if r.WhichOneof("record_type") == "summary":
            summary.update({i.key: json.loads(i.value_json) for i in r.summary.update if i.key})
    assert summary["val_acc"] == float(row["val_acc"]) and summary["status"] == "complete"
    lb = next(p for p in offline if not any(f"-{r['run_id']}-" in p.name for r in rows))
    assert (lb / "files" / "leaderboard.md").is_file() and (lb / "files" / "spec.yaml").is_file()

    # resumed: no new W&B run, not even a leaderboard (nothing changed)
    _run(_spec("wandb", "  wandb_project: tiny-proj\n", runs=2), tmp_path)
    assert len([p for p in (d / "wandb").iterdir() if p.name.startswith("offline-run-")]) == 3
