"""Shared pieces of the Ray runner tests (tests/test_ray_*.py and others).

Ray clusters here are small (1-2 CPUs per node), on loopback only, and always
shut down. The fixtures (ray_local, ray_two_nodes, ray_client_head, postgres_url)
reach every test module through tests/conftest.py (`pytest_plugins`): a test asks
for them by name and imports only the helpers (spec_text, rows, run_ray_text, ...).
"""
from __future__ import annotations

import contextlib
import csv
import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from conftest import TINY

os.environ.setdefault("RAY_DEDUP_LOGS", "0")
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")


def spec_text(base: str = TINY, **sections) -> str:
    """TINY (tests/conftest.py) with whole sections replaced or merged: spec_text(search={...})."""
    data = yaml.safe_load(base)
    for k, v in sections.items():
        if isinstance(v, dict) and isinstance(data.get(k), dict) and k != "space":
            data[k] = {**data[k], **v}
        else:
            data[k] = v
    return yaml.safe_dump(data, sort_keys=False)


def rows(run_dir) -> list[dict]:
    with open(Path(run_dir) / "trials.csv") as f:
        return list(csv.DictReader(f))


def run_ray_text(text: str, out: Path, **kw):
    """Load `text`, run it with the Ray runner into `out`; (spec, run dir, counts)."""
    from nas_stab.config import loads_spec
    from nas_stab.search.ray.runner import run_ray
    from nas_stab.store.rundir import RunDir

    spec = loads_spec(text)
    with RunDir.open(out, spec) as rd:
        counts = run_ray(spec, rd, **kw)
    return spec, Path(out) / spec.name, counts


TIMING = ("wall_s", "train_s", "measure_s", "optuna_trial")  # trials.csv columns allowed to differ between runners


def without_timing(rs):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in rs]


def run_local_text(text, out):
    """Load `text`, run it with the local runner into `out`; the run directory."""
    from nas_stab.config import loads_spec
    from nas_stab.search.local import run_local
    from nas_stab.store.rundir import RunDir

    spec = loads_spec(text)
    with RunDir.open(out, spec) as rd:
        run_local(spec, rd)
    return Path(out) / spec.name


def study_of(spec, run_dir, storage: str | None = None):
    import optuna

    from nas_stab.search.optuna_study import make_storage

    url = storage or f"sqlite:///{Path(run_dir) / 'study.db'}"
    return optuna.load_study(study_name=spec.name, storage=make_storage(url))


def start_local_ray(num_cpus: int = 2):
    from nas_stab.search.ray.loopback import init_ray

    init_ray(None, num_cpus=num_cpus)


@pytest.fixture(scope="module")
def ray_local():
    """A local Ray with 2 CPUs for the whole test module, shut down after it."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    start_local_ray(2)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def ray_two_nodes():
    """A two-node Ray cluster on loopback (ray.cluster_utils.Cluster), 1 CPU per node.

    Yields (cluster, worker_node). Fast failure detection, so a killed node is noticed in seconds.
    """
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1, "include_dashboard": False, "node_ip_address": "127.0.0.1",
            "_system_config": {"health_check_period_ms": 500, "health_check_failure_threshold": 4,
                               "health_check_initial_delay_ms": 0},
        },
    )
    worker = cluster.add_node(num_cpus=1, node_ip_address="127.0.0.1")
    cluster.wait_for_nodes()
    from nas_stab.search.ray.loopback import init_ray

    init_ray(cluster.address)
    try:
        yield cluster, worker
    finally:
        ray.shutdown()
        cluster.shutdown()


@contextlib.contextmanager
def client_head(**env):
    """A Ray head on loopback with a Ray Client server (runners/local_cluster.sh, 0 workers, 2 CPUs).

    Yields its Ray Client address ``ray://127.0.0.1:PORT``; `env` is added to the head's environment.
    This process is not connected to it: the runner connects itself. The cluster is stopped (its
    processes, by id) even if the test fails, and the Ray Client server's logs are printed first
    (pytest shows them with a failing test's teardown output).
    """
    import sys

    import ray

    if ray.is_initialized():
        ray.shutdown()
    script = Path(__file__).resolve().parents[1] / "runners" / "local_cluster.sh"
    port = _free_port()
    env = dict(os.environ, PYTHON=sys.executable, RAY_AUTH_MODE="token", CLIENT_PORT=str(port), **env)
    start = subprocess.run(["bash", str(script), "0", "2"], capture_output=True, text=True, env=env, timeout=300)
    m = re.search(r"local_cluster\.sh stop (\S+)", start.stdout)
    tmp_dir = m.group(1) if m else None
    from ray._private.authentication_test_utils import reset_auth_token_state

    old_auth = os.environ.get("RAY_AUTH_MODE")
    # Ray 2.60's token auth for this process's client connection; Ray caches the mode (RayConfig),
    # so it is refreshed now and again after the test (Ray's own tests do the same)
    os.environ["RAY_AUTH_MODE"] = "token"
    reset_auth_token_state()
    try:
        assert start.returncode == 0, start.stderr + start.stdout
        assert f"client address: ray://127.0.0.1:{port}" in start.stdout, start.stdout
        yield f"ray://127.0.0.1:{port}"
    finally:
        if ray.is_initialized():
            ray.shutdown()
        if old_auth is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = old_auth
        reset_auth_token_state()
        if tmp_dir:
            for f in sorted(Path(tmp_dir).glob("session_*/logs/ray_client_server*")):
                if f.is_file() and not f.parent.parent.is_symlink():
                    print(f"==== {f}\n{f.read_text(errors='replace')[-4000:]}")
            subprocess.run(["bash", str(script), "stop", tmp_dir], capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def ray_client_head():
    """`client_head()` for a whole test module."""
    with client_head() as address:
        yield address


# ---------------------------------------------------------------- PostgreSQL


def _pg_bin(name: str) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    for d in sorted(Path("/usr/lib/postgresql").glob("*/bin"), reverse=True):
        if (d / name).exists():
            return str(d / name)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def postgres_url():
    """A throwaway PostgreSQL server on 127.0.0.1 (initdb into a temp dir), or skip.

    CI installs the server with `apt-get install -y postgresql`. As root, the
    server runs as user `nobody` (initdb refuses root).
    """
    initdb, pg_ctl = _pg_bin("initdb"), _pg_bin("pg_ctl")
    if not initdb or not pg_ctl:
        pytest.skip("PostgreSQL server binaries (initdb, pg_ctl) not found; CI installs them with apt-get install -y postgresql")
    pytest.importorskip("psycopg2")
    base = Path(tempfile.mkdtemp(prefix="nas-pg-", dir="/tmp"))
    data, sock = base / "data", base / "sock"
    sock.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:
        runuser = shutil.which("runuser")
        if not runuser:
            pytest.skip("running as root without runuser: cannot start PostgreSQL as an unprivileged user")
        as_user = [runuser, "-u", "nobody", "--"]
        shutil.chown(base, "nobody")
        shutil.chown(sock, "nobody")
    port = _free_port()
    env = dict(os.environ, LC_ALL="C", LANG="C")
    r = subprocess.run(as_user + [initdb, "-D", str(data), "-U", "nas", "--auth=trust", "-E", "UTF8", "--no-sync"],
                       capture_output=True, text=True, env=env, timeout=120)
    if r.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip(f"initdb failed: {r.stderr.strip()[-300:]}")
    opts = f"-k {sock} -h 127.0.0.1 -p {port} -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
    r = subprocess.run(as_user + [pg_ctl, "-D", str(data), "-o", opts, "-l", str(base / "pg.log"), "-w", "-t", "60", "start"],
                       capture_output=True, text=True, env=env, timeout=90)
    if r.returncode != 0:
        log = (base / "pg.log").read_text() if (base / "pg.log").exists() else ""
        shutil.rmtree(base, ignore_errors=True)
        pytest.fail(f"pg_ctl start failed: {r.stderr.strip()[-300:]} {log[-500:]}")
    try:
        import psycopg2

        deadline = time.time() + 30
        while True:
            try:
                conn = psycopg2.connect(host="127.0.0.1", port=port, user="nas", dbname="postgres")
                break
            except psycopg2.OperationalError:
                if time.time() > deadline:
                    raise
                time.sleep(0.3)
        conn.autocommit = True
        conn.cursor().execute("CREATE DATABASE nas_stab")
        conn.close()
        yield f"postgresql+psycopg2://nas@127.0.0.1:{port}/nas_stab"
    finally:
        subprocess.run(as_user + [pg_ctl, "-D", str(data), "-m", "immediate", "-w", "stop"], capture_output=True, env=env, timeout=60)
        shutil.rmtree(base, ignore_errors=True)
