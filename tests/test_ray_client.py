"""The Ray runner through Ray Client (`runner.address: ray://host:port`), on loopback.

A head started by runners/local_cluster.sh with a Ray Client server on 127.0.0.1; the
runner connects to ``ray://127.0.0.1:PORT`` itself. Tune's driver loop, the Optuna study
and the run directory stay in the test process (the client):

- a grid experiment (`nas-stab run SPEC --runner ray --address ray://...`) gives the
  same trials.csv and histories as the local runner, and COMPLETE trials in the study;
- Optuna's pruner and the divergence rule still act through the client connection
  (the pruning board is reached from the client): PRUNED, PRUNED/diverged, COMPLETE;
- when the head cannot start the per-client driver (Ray's "Starting Ray client server
  failed", seen once in CI), the runner connects again, and says so when it gives up.
"""
import pytest
from conftest import TINY, run_cli
from conftest_ray import (
    client_head,
    rows,
    run_local_text,
    run_ray_text,
    spec_text,
    study_of,
    without_timing,
)
from test_ray_traps import PRUNE


@pytest.mark.slow
def test_grid_through_ray_client_matches_the_local_runner(ray_client_head, tmp_path):
    from nas_stab.config import loads_spec

    text = spec_text(TINY, train={"threads": 1})
    (tmp_path / "tiny.yaml").write_text(text)
    r = run_cli("run", tmp_path / "tiny.yaml", "--out", tmp_path / "client", "--runner", "ray",
                "--address", ray_client_head, "--set", "runner.concurrency=2", env={"RAY_AUTH_MODE": "token"})
    assert r.returncode == 0, r.stderr[-3000:]
    spec, d = loads_spec(text), tmp_path / "client" / "tiny"
    assert [x["status"] for x in rows(d)] == ["complete"] * 4
    study = study_of(spec, d)
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4
    assert all(t.user_attrs.get("ray_node") for t in study.trials), "trained on the cluster"
    log = (d / "log.txt").read_text()
    assert f"connected to the cluster at {ray_client_head} through Ray Client" in log
    assert not (d / "ray").exists(), "the finished Tune experiment is removed"

    local = run_local_text(text, tmp_path / "local")  # the same file, on the local runner
    assert without_timing(rows(d)) == without_timing(rows(local))
    for f in sorted((local / "history").iterdir()):
        assert (d / "history" / f.name).read_text() == f.read_text(), f.name


@pytest.mark.slow
def test_pruned_and_diverged_through_ray_client(ray_client_head, tmp_path):
    import ray

    text = spec_text(PRUNE, runner={"address": ray_client_head})
    spec, d, counts = run_ray_text(text, tmp_path)  # in this process: runner.address in the file
    assert counts == {"complete": 2, "pruned": 1, "diverged": 1}
    assert not ray.is_initialized(), "the runner disconnects its client"
    st = {t.params["train.lr"]: t for t in study_of(spec, d).trials}
    assert [st[lr].state.name for lr in (0.05, 0.1)] == ["COMPLETE", "COMPLETE"]
    small = {float(r["train.lr"]): r for r in rows(d)}[0.0003]
    assert st[0.0003].state.name == "PRUNED" and int(small["steps"]) < 60  # stopped by the board, cleanly
    assert st[20.0].state.name == "PRUNED" and st[20.0].user_attrs["status"] == "diverged"


FAIL_DRIVER = """\
import os, subprocess, sys
_count = os.environ.get("NAS_TEST_DRIVER_FAILS")  # a file holding how many driver starts still fail
if _count and "--mode=proxy" in sys.argv:  # in the head's Ray Client server (the proxier)
    _init = subprocess.Popen.__init__

    def _dies_at_start(self, args, *a, **kw):
        if isinstance(args, (list, tuple)) and "--mode=specific-server" in args:
            n = int(open(_count).read() or 0)
            if n > 0:  # the per-client driver dies before it runs, as gRPC's fork bug makes it do
                open(_count, "w").write(str(n - 1))
                args = ["/bin/sh", "-c", "exit 3"]
        _init(self, args, *a, **kw)

    subprocess.Popen.__init__ = _dies_at_start
"""


@pytest.mark.slow
def test_driver_that_dies_at_start_is_retried_then_reported(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(FAIL_DRIVER)
    count = tmp_path / "fails"
    count.write_text("0")
    text = spec_text(TINY, train={"threads": 1}, space={"model.branches": [1, 2], "train.lr": [0.05]})
    (tmp_path / "one.yaml").write_text(text)
    with client_head(PYTHONPATH=str(site), NAS_TEST_DRIVER_FAILS=str(count)) as address:
        count.write_text("1")  # the first driver dies: the runner connects again
        r = run_cli("run", tmp_path / "one.yaml", "--out", tmp_path / "a", "--runner", "ray",
                    "--address", address, env={"RAY_AUTH_MODE": "token"})
        assert r.returncode == 0, r.stderr[-3000:]
        assert count.read_text() == "0", "the injected failure happened"
        log = (tmp_path / "a" / "tiny" / "log.txt").read_text()
        assert "could not start a driver for this connection (attempt 1 of 3); connecting again" in log
        assert [x["status"] for x in rows(tmp_path / "a" / "tiny")] == ["complete"] * 2


def test_driver_start_failures_end_in_a_clear_error(monkeypatch, tmp_path):
    """Three failed driver starts: a RunError naming the head's log and the gRPC fix, nothing else tried."""
    import nas_stab.search.ray.cluster as ray_cluster
    import nas_stab.search.ray.loopback as loopback
    from nas_stab.config import loads_spec
    from nas_stab.errors import RunError

    calls = []

    def fails(addr, **kw):
        calls.append(addr)
        raise ConnectionError("Initialization failure from server:\nRuntimeError: Starting Ray client server failed. "
                              "See ray_client_server_23000.err for detailed logs.")

    monkeypatch.setattr(loopback, "init_ray", fails)
    monkeypatch.setattr(ray_cluster, "CLIENT_BACKOFF_S", 0.0)
    spec = loads_spec(spec_text(TINY, runner={"kind": "ray", "address": "ray://127.0.0.1:1"}))
    logs = []
    with pytest.raises(RunError) as e, ray_cluster.ray_session(spec.runner, log=logs.append):
        pass
    assert len(calls) == 3 and len(logs) == 2
    msg = str(e.value)
    assert "could not start a driver process for it (3 attempts)" in msg
    assert "ray_client_server_*.err" in msg and "GRPC_ENABLE_FORK_SUPPORT=false" in msg
    assert "token" not in msg  # not the authentication advice of a refused connection


def test_only_a_driver_start_failure_is_retried():
    from nas_stab.search.ray.cluster import connect_client

    failed = ConnectionError("Initialization failure from server:\nRuntimeError: Starting Ray client server "
                             "failed. See ray_client_server_23000.err for detailed logs.")
    calls, logs, sleeps = [], [], []

    def flaky(addr):
        calls.append(addr)
        if len(calls) < 3:
            raise failed

    connect_client("ray://h:1", flaky, logs.append, sleeps.append)
    assert len(calls) == 3 and sleeps == [2.0, 4.0] and len(logs) == 2 and "attempt 2 of 3" in logs[1]

    calls.clear()
    with pytest.raises(ConnectionError, match="Starting Ray client server failed"):
        connect_client("ray://h:1", lambda a: (calls.append(a), (_ for _ in ()).throw(failed)), logs.append, sleeps.append)
    assert len(calls) == 3  # gives up after three

    calls.clear()
    late = ConnectionError("Initialization failure from server:\nRuntimeError: Proxy failed to Connect to backend! "
                           "Check `ray_client_server.err` and `ray_client_server_23000.err`")
    connect_client("ray://h:1", lambda a: calls.append(a) or (len(calls) < 2 and (_ for _ in ()).throw(late)),
                   logs.append, sleeps.append)
    assert len(calls) == 2  # a driver that died a little later: connected again

    calls.clear()
    with pytest.raises(ConnectionError, match="refused"):
        connect_client("ray://h:1", lambda a: (calls.append(a), (_ for _ in ()).throw(ConnectionError("refused"))),
                       logs.append, sleeps.append)
    assert len(calls) == 1  # nothing listening, or authentication: no retry


def test_ray_client_checkpoints_need_shared_storage(tmp_path):
    """A remote client's run directory is not on the cluster: checkpointing needs runner.storage."""
    from nas_stab.errors import RunError

    text = spec_text(TINY, runner={"kind": "ray", "address": "ray://10.0.0.1:10001", "checkpoint_every": 10})
    with pytest.raises(RunError, match="runner.storage"):
        run_ray_text(text, tmp_path)  # refused before connecting anywhere
