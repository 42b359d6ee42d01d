"""The Ray runner on a two-node Ray cluster on loopback (1 CPU per node).

- a grid experiment with concurrency 2 runs on both nodes and gives the same
  trials.csv, histories and leaderboard as the local runner;
- a worker node killed mid-trial: the trial is retried from its last
  checkpoint and every trial still ends with a final status.
"""
import threading
import time
from pathlib import Path

import pytest
from conftest import TINY
from conftest_ray import (
    rows,
    run_local_text,
    run_ray_text,
    spec_text,
    study_of,
    without_timing,
)


def test_grid_on_two_nodes_matches_the_local_runner(ray_two_nodes, tmp_path):
    text = spec_text(TINY, train={"threads": 1}, runner={"kind": "ray", "concurrency": 2})
    spec, d, counts = run_ray_text(text, tmp_path / "ray")
    assert counts == {"complete": 4}
    study = study_of(spec, d)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4
    nodes = {t.user_attrs["ray_node"] for t in study.trials}
    assert len(nodes) == 2, "both nodes ran trials"

    local = run_local_text(text, tmp_path / "local")
    assert without_timing(rows(d)) == without_timing(rows(local))
    for f in sorted((local / "history").iterdir()):
        assert (d / "history" / f.name).read_text() == f.read_text(), f.name
    assert _table(d) == _table(local)


def _table(run_dir):
    """The leaderboard's ranking table (the provenance lines differ: dates, compute time)."""
    from nas_stab.results.leaderboard import leaderboard_markdown

    md = leaderboard_markdown(run_dir, n_boot=50)
    return [ln for ln in md.splitlines() if ln.startswith("|")]


def _checkpointed_trials(exp_root: Path) -> int:
    return sum(1 for t in exp_root.glob("*/*") if t.is_dir() and any(t.glob("checkpoint_*")))


def _finished_runs(run_dir: Path) -> int:
    """Rows in trials.csv: the driver appends a trial's row as soon as it finishes."""
    f = run_dir / "trials.csv"
    return max(0, len(f.read_text().splitlines()) - 1) if f.exists() else 0


@pytest.mark.slow
def test_worker_node_killed_mid_trial(ray_two_nodes, tmp_path):
    cluster, worker = ray_two_nodes
    text = spec_text(
        TINY,
        space={"model.branches": [1, 2]},
        # 2400 steps: long enough that neither trial can finish before the other's first checkpoint even when
        # Ray starts the second one seconds later (480-step trials lost that race once in a quiet-machine CI run)
        # lr 0.01, not TINY's 0.05: at 0.05 the 2-branch run sits at the edge of stability for 2400 steps and
        # diverges on some CPUs (an Intel host: loss 54.6 > 10 x ln 10), completes on others (AMD); at 0.01 both
        # runs train (val_acc 0.97 and 0.89 on the Intel host), so the test is about the retry, not the rounding
        train={"threads": 1, "steps": 2400, "eval_every": 200, "lr": 0.01},
        stability={"every": 600},
        runner={"kind": "ray", "concurrency": 2, "max_failures": 2, "checkpoint_every": 20,
                "storage": str(tmp_path / "tune")},
    )
    killed = threading.Event()
    seen: list = []

    def kill_worker_when_both_checkpointed():
        # while both trials run: each has a checkpoint and neither has finished (a trial that finished
        # before the other's first checkpoint, on a busy machine, would leave nothing to retry)
        deadline = time.time() + 240
        while time.time() < deadline:
            done = _finished_runs(tmp_path / "ray" / "tiny")
            if done:
                seen.append(f"a trial finished before both had checkpointed ({done} row(s))")
                return
            if _checkpointed_trials(tmp_path / "tune") >= 2:
                cluster.remove_node(worker, allow_graceful=False)
                killed.set()
                return
            time.sleep(0.05)

    t = threading.Thread(target=kill_worker_when_both_checkpointed, daemon=True)
    t.start()
    spec, d, counts = run_ray_text(text, tmp_path / "ray")
    t.join(5)
    assert killed.is_set(), f"the worker node was never killed: {seen}"
    log = (d / "log.txt").read_text()
    assert counts == {"complete": 2}, (rows(d), log[-4000:])
    study = study_of(spec, d)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    retried = [t for t in study.trials if t.user_attrs.get("ray_failures")]
    assert len(retried) == 1, ([t.user_attrs for t in study.trials], (d / "log.txt").read_text()[-3000:])
    assert retried[0].user_attrs.get("resumed_from_step", 0) >= 20, retried[0].user_attrs
    assert "worker failure 1" in log and "resumed from its checkpoint" in log
    # the resumed trial trained exactly as an uninterrupted one
    local = run_local_text(text.replace("kind: ray", "kind: local"), tmp_path / "local")
    assert without_timing(rows(d)) == without_timing(rows(local))
