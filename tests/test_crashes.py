"""`nas-stab run` killed with SIGKILL at random moments, ten times, then finished:
the final trials.csv equals an uninterrupted run's (up to timing), nothing lost
or duplicated, the Optuna study consistent."""
import csv
import os
import random
import signal
import subprocess
import sys
import time

import optuna
import pytest
from conftest import TINY, run_cli

TIMING = {"wall_s", "train_s", "measure_s", "optuna_trial"}
SPEC = TINY.replace("steps: 20", "steps: 60").replace("[1, 2]", "[1, 2, 3]")  # 6 runs


def table(d):
    with open(d / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    return {(r["trial"], r["seed"]): {k: v for k, v in r.items() if k not in TIMING} for r in rows}


def same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        for col in a[k]:
            x, y = a[k][col], b[k][col]
            try:
                assert float(x) == pytest.approx(float(y), rel=1e-5, abs=1e-7), (k, col, x, y)
            except ValueError:
                assert x == y, (k, col, x, y)


@pytest.mark.slow
def test_ten_sigkills_then_identical_results(tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(SPEC)
    ref = run_cli("run", spec, "--out", tmp_path / "ref")
    assert ref.returncode == 0, ref.stderr[-2000:]
    expected = table(tmp_path / "ref" / "tiny")
    assert len(expected) == 6

    rng = random.Random(7)
    out = tmp_path / "killed"
    kills = 0
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for _ in range(10):
        p = subprocess.Popen([sys.executable, "-m", "nas_stab.cli", "run", str(spec), "--out", str(out)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        p.stderr.readline()  # "run directory: ..." once the run directory is open
        time.sleep(rng.uniform(0.0, 2.0))
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
            kills += 1
        p.wait()
        p.stderr.close()
    assert kills >= 8
    final = run_cli("run", spec, "--out", out)
    assert final.returncode == 0, final.stderr[-2000:]
    d = out / "tiny"
    got = table(d)
    same(got, expected)
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{d / 'study.db'}")
    states = [t.state.name for t in study.trials]
    assert states.count("COMPLETE") == 6 and "RUNNING" not in states and "WAITING" not in states
    # every other trial is one a kill interrupted
    assert all(t.user_attrs.get("status") == "interrupted" for t in study.trials if t.state.name != "COMPLETE")
    assert not list(d.glob(".*.tmp")) and not list((d / "history").glob(".*.tmp"))
    assert len(list((d / "history").glob("*.csv"))) == 6
