"""Progress lines name the configuration; `nas-stab status` knows whether a driver is alive."""
import io

from conftest import TINY

from nas_stab.config import loads_spec
from nas_stab.results.status import status_text
from nas_stab.search.local import run_local
from nas_stab.search.progress import Progress, describe
from nas_stab.store.rundir import RunDir


def test_plain_lines_name_the_configuration_and_count():
    spec = loads_spec(TINY)
    out = io.StringIO()
    p = Progress(spec, 4, stream=out)
    p.update({"trial": 0, "seed": 0, "status": "complete", "objective": 0.5, "model.branches": 2, "train.lr": 0.05,
              "run_id": "t00000-s0", "wall_s": 1.2})
    p.update({"trial": 1, "seed": 0, "status": "diverged", "objective": "", "model.branches": 1, "train.lr": 50.0,
              "run_id": "t00001-s0", "wall_s": 0.3})
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("complete: branches=2 lr=0.05 seed 0 val_acc 0.5 in 1s | [1/4] complete 1")
    assert lines[1].startswith("diverged: branches=1 lr=50 seed 0 in 0s | [2/4] complete 1  pruned 0  diverged 1")
    assert "best single run val_acc 0.5 (trial 0 seed 0)" in lines[1] and "left" in lines[1]


def test_live_display_shows_running_configurations_and_prints_finished_runs():
    spec = loads_spec(TINY)
    out = io.StringIO()
    p = Progress(spec, 4, stream=out, live=True)
    p.started("t00000-s0", {"model.branches": 2, "train.lr": 0.05}, 0, 20)
    p.step("t00000-s0", 10)
    assert "branches=2 lr=0.05 seed 0" in p.running["t00000-s0"]["label"] and p.running["t00000-s0"]["step"] == 10
    p.update({"trial": 0, "seed": 0, "status": "complete", "objective": 0.5, "model.branches": 2, "train.lr": 0.05,
              "run_id": "t00000-s0", "wall_s": 1.0})
    p.close()
    assert not p.running
    assert "complete: branches=2 lr=0.05 seed 0 val_acc 0.5" in out.getvalue()


def test_describe_is_short():
    assert describe({"model.depth": 8, "train.lr": 0.0316228}, 1) == "depth=8 lr=0.03162 seed 1"


def test_status_says_whether_a_driver_is_running(tmp_path):
    spec = loads_spec(TINY)
    with RunDir.open(tmp_path, spec) as rd:
        run_local(spec, rd, trials=2)
        held = status_text(rd.path)  # this process holds the run directory, as a driver does
    assert "running now" in held and "left" in held
    dead = status_text(tmp_path / "tiny")
    assert "not running" in dead and "2 runs not trained yet" in dead and "left" not in dead
    # how to watch it live: the study in optuna-dashboard, the logs in TensorBoard when they are written
    d = (tmp_path / "tiny").resolve()
    assert f"watch: optuna-dashboard sqlite:///{d / 'study.db'}" in dead


def test_watch_commands_mask_a_storage_password(tmp_path):
    import dataclasses

    from nas_stab.results.status import watch_commands

    spec = loads_spec(TINY)
    spec = dataclasses.replace(spec, search=dataclasses.replace(spec.search, storage="postgresql://me:s3cret@127.0.0.1/db"))
    cmds = watch_commands(spec, tmp_path)
    assert "optuna-dashboard postgresql://me:***@127.0.0.1/db" in cmds and not any("s3cret" in c for c in cmds)
    tb = dataclasses.replace(spec, logging=dataclasses.replace(spec.logging, tensorboard=True))
    assert f"tensorboard --logdir {tmp_path.resolve() / 'tensorboard'}" in watch_commands(tb, tmp_path)


def test_sigterm_is_handled_like_ctrl_c_and_the_rerun_says_it_resumes(tmp_path):
    import csv
    import os
    import signal
    import subprocess
    import sys

    import optuna
    from conftest import run_cli

    spec_path = tmp_path / "tiny.yaml"
    spec_path.write_text(TINY.replace("steps: 20", "steps: 400").replace("[1, 2]", "[1, 2, 3]"))
    p = subprocess.Popen([sys.executable, "-m", "nas_stab.cli", "run", str(spec_path), "--out", str(tmp_path / "runs")],
                         env=dict(os.environ, PYTHONUNBUFFERED="1"), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    for line in p.stderr:
        if " | [" in line:  # the first finished run
            break
    p.send_signal(signal.SIGTERM)
    err = p.stderr.read()
    assert p.wait(timeout=120) == 143, err
    assert "terminated (SIGTERM)" in err and "rerun the same command to resume" in err and "Traceback" not in err
    d = tmp_path / "runs" / "tiny"
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{d / 'study.db'}")
    assert "RUNNING" not in [t.state.name for t in study.trials]  # the run in progress was closed, not left running
    with open(d / "trials.csv") as f:
        done = len(list(csv.DictReader(f)))
    r = run_cli("run", spec_path, "--out", tmp_path / "runs")
    assert r.returncode == 0, r.stderr[-2000:]
    assert f"resuming {d}: {done} of 6 runs already recorded; training the other {6 - done}" in r.stderr
