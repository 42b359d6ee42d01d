"""The local runner end to end: run directory, statuses, resume, kills."""
import csv
import os
import signal
import subprocess
import sys
import time

import optuna
import pytest
from conftest import TINY, run_cli
from optuna.trial import TrialState

from nas_stab.config import loads_spec
from nas_stab.errors import RunError
from nas_stab.metrics import TASK_METRICS, stability_metrics
from nas_stab.search.local import run_local
from nas_stab.store.rundir import RunDir


def rows(run_dir):
    with open(run_dir / "trials.csv") as f:
        return list(csv.DictReader(f))


def run(text, out, **kw):
    spec = loads_spec(text)
    with RunDir.open(out, spec, fresh=kw.pop("fresh", False)) as rd:
        counts = run_local(spec, rd, **kw)
    return spec, out / spec.name, counts


def test_run_directory_and_columns(tmp_path):
    spec, d, counts = run(TINY, tmp_path)
    assert counts == {"complete": 4}
    for name in ("spec.yaml", "study.db", "trials.csv", "history", "log.txt"):
        assert (d / name).exists(), name
    r = rows(d)
    assert len(r) == 4
    cols = list(r[0])
    head = ["trial", "seed", "status", "objective", "model.branches", "train.lr"]
    assert cols[: len(head)] == head
    for c in TASK_METRICS["classification"] + tuple(f"{p}{m}" for p in ("init_", "final_") for m in stability_metrics("classification")):
        assert c in cols, c
    for c in ("max_update_ratio", "steps", "wall_s", "train_s", "measure_s", "diverged_step", "error"):
        assert c in cols
    assert all(x["status"] == "complete" and float(x["val_acc"]) > 0 for x in r)
    hist = (d / "history" / f"{r[0]['run_id']}.csv").read_text().splitlines()
    assert hist[0].startswith("step,train_loss,lr") and "fwd_ratio" in hist[0] and "update_ratio" in hist[0]
    meta = RunDir(d).read_meta()
    assert meta["spec_hash"] and meta["git_commit"] and meta["torch_version"]
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{d / 'study.db'}")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4


def test_rerun_does_no_training(tmp_path, monkeypatch):
    from nas_stab.search import plan

    _, d, _ = run(TINY, tmp_path)
    before = rows(d)

    def no_training(*a, **kw):
        raise AssertionError("a finished run was trained again")

    monkeypatch.setattr(plan, "run_job", no_training)
    _, _, counts = run(TINY, tmp_path)
    assert counts == {"complete": 4}
    assert rows(d) == before
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{d / 'study.db'}")
    assert len(study.trials) == 4


def test_changed_spec_refused_unless_fresh(tmp_path):
    run(TINY, tmp_path)
    changed = TINY.replace("steps: 20", "steps: 21")
    with pytest.raises(RunError) as e:
        run(changed, tmp_path)
    assert "--fresh" in str(e.value)
    _, d, counts = run(changed, tmp_path, fresh=True)
    assert counts == {"complete": 4}
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("tiny.old-")]
    assert len(aside) == 1 and (aside[0] / "trials.csv").exists()  # nothing lost


def test_divergence_is_recorded_with_step(tmp_path):
    text = TINY.replace("  train.lr: [0.01, 0.05]", "  train.lr: [50.0]")
    _, d, counts = run(text, tmp_path)
    assert counts == {"diverged": 2}
    for r in rows(d):
        assert r["status"] == "diverged" and int(r["diverged_step"]) >= 1 and r["error"]
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{d / 'study.db'}")
    assert {t.state.name for t in study.trials} == {"PRUNED"}
    assert {t.user_attrs["status"] for t in study.trials} == {"diverged"}


def test_pruned_trial_ends_pruned(tmp_path):
    # a threshold pruner that nothing can pass: every run is pruned at its first report
    text = TINY + "search: {pruner: {threshold: {lower: 2.0}}}\n"
    _, d, counts = run(text, tmp_path)
    assert counts == {"pruned": 4}
    r = rows(d)
    assert all(x["status"] == "pruned" and int(x["steps"]) < 20 for x in r)
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{d / 'study.db'}")
    assert {t.state.name for t in study.trials} == {"PRUNED"}


@pytest.mark.parametrize("sampler", ["random", "tpe", "cmaes", "qmc"])
def test_samplers_run_seeds_and_report_mean(tmp_path, sampler):
    # the tiny mlp_resnet starts at a loss of ~15 on digits (6.6 x ln 10): a generous divergence
    # threshold keeps every seed complete, so that the trial's value is the mean over its seeds
    text = TINY.replace("seeds: 1", "seeds: 2").replace(
        "  train.lr: [0.01, 0.05]", "  train.lr: {loguniform: [0.005, 0.1]}"
    ).replace("hessian: false}", "hessian: false, divergence: {loss_factor: 1000}}") + f"search: {{sampler: {sampler}, trials: 3}}\n"
    _, d, counts = run(text, tmp_path)
    r = rows(d)
    assert len(r) == 6 and sorted({x["seed"] for x in r}) == ["0", "1"]
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{d / 'study.db'}")
    t0 = study.trials[0]
    vals = [float(x["val_acc"]) for x in r if x["trial"] == str(t0.number)]
    assert t0.value == pytest.approx(sum(vals) / len(vals), rel=1e-4)


@pytest.mark.parametrize("sampler", ["random", "tpe"])
def test_a_resumed_seeded_search_does_not_replay_its_first_draws(tmp_path, sampler):
    # a sampler rebuilt with the spec's seed on resume drew the same first values again: a random
    # search stopped after 2 of 4 trials trained trial 0's and trial 1's configurations a second time
    text = TINY.replace("steps: 20", "steps: 2").replace(
        "  train.lr: [0.01, 0.05]", "  train.lr: {loguniform: [0.001, 0.1]}"
    ) + f"search: {{sampler: {sampler}, trials: 4, seed: 7}}\n"
    spec, d, _ = run(text, tmp_path, trials=2)
    assert len(rows(d)) == 2
    run(text, tmp_path)
    got = [(x["model.branches"], x["train.lr"]) for x in sorted(rows(d), key=lambda x: int(x["trial"]))]
    assert len(got) == 4 and len(set(got)) == 4, got
    # and the same interruption gives the same configurations (a resumed search stays reproducible)
    spec, d2, _ = run(text.replace("name: tiny", "name: tiny2"), tmp_path, trials=2)
    run(text.replace("name: tiny", "name: tiny2"), tmp_path)
    assert [(x["model.branches"], x["train.lr"]) for x in sorted(rows(d2), key=lambda x: int(x["trial"]))] == got


@pytest.mark.slow  # over 15 s: CI runs it in its slow stage (pytest -m slow)
def test_sigkill_and_rerun_loses_and_duplicates_nothing(tmp_path):
    spec_path = tmp_path / "tiny.yaml"
    spec_path.write_text(TINY.replace("steps: 20", "steps: 400").replace("[1, 2]", "[1, 2, 3]"))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    p = subprocess.Popen([sys.executable, "-m", "nas_stab.cli", "run", str(spec_path), "--out", str(tmp_path / "runs")],
                         env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    # wait for two finished runs, then for the third to be asked (its Optuna trial RUNNING), and kill mid-trial
    seen = 0
    for line in p.stderr:
        if " | [" in line:  # a finished run's progress line
            seen += 1
            if seen == 2:
                break
    d = tmp_path / "runs" / "tiny"
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{d / 'study.db'}")
    deadline = time.monotonic() + 120  # a hang guard only
    while p.poll() is None and not study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        assert time.monotonic() < deadline, "the third run never started"
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait()
    p.stderr.close()
    # the trial the kill left open (none only if it finished in between and the next was not asked yet)
    killed = [t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    partial = rows(d)
    assert 2 <= len(partial) < 6 and len(killed) <= 1
    res = run_cli("run", spec_path, "--out", tmp_path / "runs")
    assert res.returncode == 0, res.stderr[-2000:]
    final = rows(d)
    assert len(final) == 6 and len({(x["trial"], x["seed"]) for x in final}) == 6
    for old in partial:  # finished runs were kept, not retrained
        assert old in final
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{d / 'study.db'}")
    states = [t.state.name for t in study.trials]
    assert "RUNNING" not in states and "WAITING" not in states
    assert states.count("COMPLETE") == 6
    assert all(t.user_attrs.get("status") == "interrupted" for t in study.trials if t.state.name == "FAIL")
    assert all(study.trials[n].state.name == "FAIL" and study.trials[n].user_attrs.get("status") == "interrupted" for n in killed)


def test_second_driver_refuses(tmp_path):
    spec = loads_spec(TINY)
    with RunDir.open(tmp_path, spec), pytest.raises(RunError) as e:
        RunDir.open(tmp_path, spec)
    assert "in use" in str(e.value)
