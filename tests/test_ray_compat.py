"""One test per private-Ray workaround in nas_stab.search.ray.compat: each fails when Ray changes underneath.

Each test checks that the private name still exists with the parameters nas_stab passes, and that
the workaround still has its effect. No Ray cluster is started (one subprocess imports Ray).
When one fails after a Ray upgrade, the workaround's docstring says what to do.
"""
from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

from nas_stab.search.ray import compat as _ray_compat  # noqa: E402  (after the skip)

ROOT = Path(__file__).resolve().parents[1]


class _Stop(Exception):
    """Raised by a stand-in for Ray's next step, carrying what it was given."""


# ---------------------------------------------------------------- version pin


def test_tested_range_is_pyprojects_pin_and_the_installed_ray():
    pin = re.search(r'"ray\[[^\]]*\]>=([\d.]+),<([\d.]+)"', (ROOT / "pyproject.toml").read_text())
    assert pin, "pyproject.toml pins ray as ray[...]>=A,<B"
    assert pin.groups() == _ray_compat.TESTED
    assert _ray_compat.untested_version() is None, "the installed Ray is the one the workarounds were verified on"
    assert ray.__version__.startswith(_ray_compat.VERIFIED_ON.rsplit(".", 1)[0])


def test_an_untested_ray_gives_one_warning_naming_the_module(monkeypatch):
    for v in ("2.60.0", "2.60.7", "2.60.1rc1"):
        assert _ray_compat.untested_version(v) is None, v
    for v in ("2.59.9", "2.61.0", "3.0.0.dev0"):
        assert "nas_stab.search.ray.compat" in _ray_compat.untested_version(v), v
    monkeypatch.setattr(ray, "__version__", "2.61.0")
    try:
        with pytest.warns(UserWarning) as caught:
            importlib.reload(_ray_compat)  # as the first import in a process with that Ray
        assert len(caught) == 1 and caught[0].category.__name__ == "RayVersionWarning"
        assert "Ray 2.61.0" in str(caught[0].message) and "nas_stab.search.ray.compat" in str(caught[0].message)
    finally:
        monkeypatch.undo()
        importlib.reload(_ray_compat)


# ---------------------------------------------------------------- Tune under Ray Client


def test_local_tuner_runs_tune_here(monkeypatch, tmp_path):
    """TunerInternal still takes our arguments and hands ``_remote=False`` to `tune.run`, which still has it."""
    from ray import tune
    from ray.tune.impl import tuner_internal

    params = inspect.signature(tuner_internal.TunerInternal).parameters
    assert {"trainable", "tune_config", "run_config", "_tuner_kwargs"} <= set(params)
    assert "_remote" in inspect.signature(tune.run).parameters

    def run(**kwargs):
        raise _Stop(kwargs)

    monkeypatch.setattr(tuner_internal, "run", run)  # what TunerInternal.fit calls
    tuner = _ray_compat.local_tuner(
        lambda config: None,
        tune_config=tune.TuneConfig(num_samples=1),
        run_config=tune.RunConfig(name="x", storage_path=str(tmp_path), verbose=0),
    )
    with pytest.raises(_Stop) as stop:
        tuner.fit()
    assert stop.value.args[0]["_remote"] is False


def test_driver_staging_here_moves_tunes_staging_dir(monkeypatch, tmp_path):
    """Without a local Ray node, Tune's driver stages in `path`: emptied first (a killed driver's
    leftovers), removed afterwards, Ray's function restored; with a node, nothing changes."""
    import ray._private.worker as worker
    import ray.train._internal.storage as storage

    assert hasattr(worker, "_global_node")
    monkeypatch.setattr(worker, "_global_node", None)  # a Ray Client has no local Ray node
    d = tmp_path / ".ray_client"
    (d / "old").mkdir(parents=True)
    before = storage._get_ray_train_session_dir
    with _ray_compat.driver_staging_here(d):
        assert storage._get_ray_train_session_dir() == str(d) and d.is_dir() and not (d / "old").exists()
        ctx = storage.StorageContext(storage_path=str(tmp_path / "store"), experiment_dir_name="exp")
        assert Path(ctx.experiment_driver_staging_path).is_relative_to(d)  # what Tune's driver writes to
    assert storage._get_ray_train_session_dir is before and not d.exists()

    monkeypatch.setattr(worker, "_global_node", object())  # a normal driver: its session dir is used
    with _ray_compat.driver_staging_here(d):
        assert storage._get_ray_train_session_dir is before and not d.exists()


# ---------------------------------------------------------------- Ray on loopback


@pytest.fixture
def linux_lookup(monkeypatch):
    """Ray's node-IP lookup as in a driver with no Ray node yet, on Linux (clusters enabled)."""
    import ray._private.ray_constants as constants
    import ray._private.services as services
    import ray._private.worker as worker

    monkeypatch.setattr(worker, "_global_node", None)
    monkeypatch.setattr(constants, "ENABLE_RAY_CLUSTER", True)
    monkeypatch.setattr(services, "resolve_ip_for_localhost", services.resolve_ip_for_localhost)  # restored after
    return services


def test_node_ip_is_loopback_keeps_loopback(linux_lookup):
    import ray._private.ray_constants as constants

    services = linux_lookup
    with _ray_compat.node_ip_is_loopback():
        assert services.get_node_ip_address() == "127.0.0.1"
        assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"
        assert services.canonicalize_bootstrap_address("127.0.0.1:6379") == "127.0.0.1:6379"  # ray.init(address=...)
    assert constants.ENABLE_RAY_CLUSTER is True


def test_init_takes_node_ip_address(linux_lookup, monkeypatch):
    """`ray.init` still reads ``_node_ip_address``, and the node it would start gets 127.0.0.1."""
    import ray._private.node as node

    assert 'kwargs.pop("_node_ip_address"' in inspect.getsource(ray.init)

    def start(ray_params, **kwargs):
        raise _Stop(ray_params)

    monkeypatch.setattr(node, "Node", start)  # stop where ray.init would start the head node
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    with pytest.raises(_Stop) as stop:
        _ray_compat.init_on_loopback(address="local", num_cpus=1, include_dashboard=False)
    assert stop.value.args[0].node_ip_address == "127.0.0.1"


def test_cluster_address_reads_ray_address(monkeypatch):
    from ray._private import services

    assert list(inspect.signature(services.get_ray_address_from_environment).parameters) == ["addr", "temp_dir"]
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:6399")
    assert _ray_compat.cluster_address("auto") == "127.0.0.1:6399"
    assert _ray_compat.cluster_address("10.0.0.1:6379") == "10.0.0.1:6379"


def test_keep_loopback_addresses(linux_lookup):
    """The identity in place of `resolve_ip_for_localhost`: what `ray start` resolves keeps 127.0.0.1."""
    from ray.scripts import scripts

    services = linux_lookup
    assert list(inspect.signature(services.resolve_ip_for_localhost).parameters) == ["host"]
    assert "services.resolve_ip_for_localhost(" in inspect.getsource(scripts.start.callback)  # looked up at call time
    _ray_compat.keep_loopback_addresses()
    assert services.resolve_ip_for_localhost("127.0.0.1") == "127.0.0.1"
    assert services.canonicalize_bootstrap_address("127.0.0.1:6379") == "127.0.0.1:6379"


def test_node_ip_env_var_keeps_loopback():
    """A process started with the variable finds its node IP on loopback (a head's Ray Client drivers)."""
    import os

    env = dict(os.environ)
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    _ray_compat.node_ip_is_loopback_in_children(env)
    code = ("import ray._private.ray_constants as c, ray._private.services as s; "
            "print(c.ENABLE_RAY_CLUSTER, s.resolve_ip_for_localhost('127.0.0.1'))")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "127.0.0.1"]
