"""`nas-stab run` killed with SIGKILL at ten chosen moments, then finished: the final
trials.csv equals an uninterrupted run's (up to timing), nothing lost or duplicated,
the Optuna study consistent.

Each kill waits for a line the run prints (no sleeps): its run directory open (the kill
lands as it sets up or trains its first run) or its first finished run (the kill lands
as the next one starts)."""
import csv
import os
import queue
import signal
import subprocess
import sys
import threading

import optuna
import pytest
from conftest import TINY, run_cli

TIMING = {"wall_s", "train_s", "measure_s", "optuna_trial"}
SPEC = TINY.replace("steps: 20", "steps: 60").replace("[1, 2]", "[1, 2, 3]")  # 6 runs
# what each of the ten runs waits for before its kill: "dir" the run directory line, "run" a finished
# run's line. Three finished runs at most before the last kill: the final run has runs left to do.
KILL_AFTER = ["dir", "run", "dir", "dir", "run", "dir", "dir", "run", "dir", "dir"]
HANG_GUARD_S = 300  # only for a run that never prints what is waited for: the test then fails


def _lines(stream) -> queue.Queue:
    """The lines of `stream`, read (and at its end closed) by a thread, then None; a wait for one can give up."""
    q: queue.Queue = queue.Queue()

    def read():
        with stream:
            for line in stream:
                q.put(line)
        q.put(None)

    threading.Thread(target=read, daemon=True).start()
    return q


def wait_for(lines: queue.Queue, what: str) -> str:
    """The first line that says `what` happened ("dir": the run directory is open, "run": a run finished)."""
    while True:
        try:
            line = lines.get(timeout=HANG_GUARD_S)
        except queue.Empty:
            raise AssertionError(f"no {what!r} line in {HANG_GUARD_S} s") from None
        assert line is not None, f"the run ended before its {what!r} line"
        if line.startswith("run directory: ") if what == "dir" else " | [" in line:  # " | [n/6]": a finished run's progress line
            return line


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

    out = tmp_path / "killed"
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    for what in KILL_AFTER:
        p = subprocess.Popen([sys.executable, "-m", "nas_stab.cli", "run", str(spec), "--out", str(out)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            wait_for(_lines(p.stderr), what)
            assert p.poll() is None, f"the run ended before its kill (after {what!r})"
            p.send_signal(signal.SIGKILL)
            assert p.wait() == -signal.SIGKILL
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    assert 0 < len(table(out / "tiny")) < 6  # the kills left runs to do, and kept what finished
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
