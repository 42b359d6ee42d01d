"""`nas-stab run --runner ray` killed with SIGKILL mid-run, then rerun: nothing lost, nothing duplicated."""
import os
import signal
import subprocess
import sys
import time

import pytest
from conftest import TINY
from conftest_ray import rows, spec_text, study_of

pytestmark = pytest.mark.slow


def _ppids() -> dict[int, int]:
    out = {}
    for e in os.listdir("/proc"):
        if e.isdigit():
            try:
                with open(f"/proc/{e}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                out[int(e)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                pass
    return out


def _descendants(pid: int) -> set[int]:
    parents = _ppids()
    found, todo = set(), [pid]
    while todo:
        cur = todo.pop()
        for child, parent in parents.items():
            if parent == cur and child not in found:
                found.add(child)
                todo.append(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")[:150]
    except OSError:
        return "?"


def _alive(pids) -> list[int]:
    out = []
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] != "Z":
                    out.append(p)
        except (OSError, IndexError):
            pass
    return out


def test_driver_sigkill_and_rerun(tmp_path):
    from nas_stab.config import loads_spec

    text = spec_text(TINY, train={"steps": 200, "threads": 1}, stability={"every": 100})
    spec_file = tmp_path / "tiny.yaml"
    spec_file.write_text(text)
    out = tmp_path / "runs"
    d = out / "tiny"
    cmd = [sys.executable, "-m", "nas_stab.cli", "run", str(spec_file), "--out", str(out), "--runner", "ray",
           "--set", "runner.concurrency=2"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    family: set[int] = set()
    with open(tmp_path / "first.log", "w") as log:
        p = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            deadline = time.time() + 300
            while time.time() < deadline and p.poll() is None:
                family.update(_descendants(p.pid))
                if (d / "trials.csv").exists() and 1 <= len(rows(d)) < 4:
                    break
                time.sleep(0.1)
            assert p.poll() is None, "the run ended before it could be killed:\n" + (tmp_path / "first.log").read_text()[-2000:]
            family.update(_descendants(p.pid))
            p.send_signal(signal.SIGKILL)
            p.wait(30)
        finally:
            if p.poll() is None:
                p.kill()
    done_before = {r["key"]: r for r in rows(d)}
    assert 1 <= len(done_before) < 4

    # Ray's reaper ends the GCS, raylet and workers of the killed driver, but Ray 2.60 leaves the raylet's
    # agents running; the driver recorded its local Ray's processes and the rerun ends those orphans
    assert (d / ".local_ray.pids").exists()
    deadline = time.time() + 20
    while len(_alive(family)) > 2 and time.time() < deadline:
        time.sleep(0.5)
    lingering = _alive(family)

    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    try:
        left = _alive(lingering)
        assert not left, f"still alive after the rerun: {[_cmdline(p) for p in left]}"
        assert "process(es) left by the local Ray of a killed run" in (d / "log.txt").read_text() or not lingering
        assert not (d / ".local_ray.pids").exists()
    finally:
        for pid in _alive(family):
            if _cmdline(pid).startswith("ray::") or "/ray/" in _cmdline(pid):
                os.kill(pid, signal.SIGKILL)
    after = rows(d)
    assert len(after) == 4 and len({x["key"] for x in after}) == 4, "no run lost, none duplicated"
    for x in after:
        assert x["status"] == "complete"
        if x["key"] in done_before:
            assert x == done_before[x["key"]], "finished runs are not trained again"
    study = study_of(loads_spec(text), d)
    states = [t.state.name for t in study.trials]
    assert "RUNNING" not in states and "WAITING" not in states
    complete = [t for t in study.trials if t.state.name == "COMPLETE"]
    # every run is COMPLETE under its key; a trial told COMPLETE in the instant before the kill, whose
    # row was not written yet, is trained again on the rerun (its row is the rerun's): at most one
    # extra COMPLETE trial per concurrent trial
    assert {t.user_attrs.get("key") for t in complete} == {x["key"] for x in after}
    assert 4 <= len(complete) <= 4 + 2
    interrupted = [t for t in study.trials if t.user_attrs.get("status") == "interrupted"]
    assert all(t.state.name == "FAIL" for t in interrupted)
    assert len(interrupted) == len(study.trials) - len(complete)
    assert "closed" in (d / "log.txt").read_text()
