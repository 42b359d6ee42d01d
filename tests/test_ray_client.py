"""The Ray runner through Ray Client (`runner.address: ray://host:port`), on loopback.

A head started by runners/local_cluster.sh with a Ray Client server on 127.0.0.1; the
runner connects to ``ray://127.0.0.1:PORT`` itself. Tune's driver loop, the Optuna study
and the run directory stay in the test process (the client):

- a grid experiment (`nas-stab run SPEC --runner ray --address ray://...`) gives the
  same trials.csv and histories as the local runner, and COMPLETE trials in the study;
- Optuna's pruner and the divergence rule still act through the client connection
  (the pruning board is reached from the client): PRUNED, PRUNED/diverged, COMPLETE.
"""
import pytest

from conftest import TINY, run_cli
from conftest_ray import (  # noqa: F401 (fixture)
    ray_client_head,
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
    from nas_stab.spec import loads_spec

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


def test_ray_client_checkpoints_need_shared_storage(tmp_path):
    """A remote client's run directory is not on the cluster: checkpointing needs runner.storage."""
    from nas_stab.errors import RunError

    text = spec_text(TINY, runner={"kind": "ray", "address": "ray://10.0.0.1:10001", "checkpoint_every": 10})
    with pytest.raises(RunError, match="runner.storage"):
        run_ray_text(text, tmp_path)  # refused before connecting anywhere


def test_driver_staging_dir_stands_in_for_the_session_dir(monkeypatch, tmp_path):
    """Under Ray Client, Tune's driver stages in the run directory: emptied first (a killed driver's
    leftovers), removed afterwards, Ray's function restored."""
    import ray._private.worker as worker
    import ray.train._internal.storage as storage

    from nas_stab.search.ray_runner import _driver_staging_here

    monkeypatch.setattr(worker, "_global_node", None)  # a Ray Client has no local Ray node
    d = tmp_path / ".ray_client"
    (d / "old").mkdir(parents=True)
    before = storage._get_ray_train_session_dir
    with _driver_staging_here(d):
        assert storage._get_ray_train_session_dir() == str(d) and d.is_dir() and not (d / "old").exists()
    assert storage._get_ray_train_session_dir is before and not d.exists()
