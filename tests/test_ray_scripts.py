"""runners/: the loopback cluster script end to end; the SLURM script and the `ray up` file checked."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import TINY, run_cli
from conftest_ray import rows, spec_text, study_of

RUNNERS = Path(__file__).resolve().parents[1] / "runners"


@pytest.mark.parametrize("script", ["local_cluster.sh", "slurm_ray.sbatch"])
def test_shell_scripts_parse(script):
    r = subprocess.run(["bash", "-n", str(RUNNERS / script)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_ray_up_cluster_file_is_valid():
    from ray.autoscaler._private.util import prepare_config, validate_config

    cfg = yaml.safe_load((RUNNERS / "ray_cluster_gpu.yaml").read_text())
    validate_config(prepare_config(cfg))
    assert any("pip install -e ~/nas_stab" in c for c in cfg["setup_commands"])
    assert cfg["available_node_types"]["head"]["resources"] == {"CPU": 0}


@pytest.mark.slow
def test_local_cluster_script_runs_an_experiment(tmp_path):
    env = dict(os.environ, PYTHON=sys.executable, RAY_AUTH_MODE="token")
    start = subprocess.run(["bash", str(RUNNERS / "local_cluster.sh"), "1", "1"], capture_output=True, text=True,
                           env=env, timeout=300)
    assert start.returncode == 0, start.stderr + start.stdout
    address = re.search(r"^address: (\S+)$", start.stdout, re.M).group(1)
    tmp_dir = re.search(r"local_cluster\.sh stop (\S+)", start.stdout).group(1)
    assert address.startswith("127.0.0.1:")
    try:
        spec = tmp_path / "tiny.yaml"
        spec.write_text(spec_text(TINY, space={"train.lr": [0.01, 0.05]}, train={"threads": 1}))
        r = run_cli("run", spec, "--out", tmp_path / "runs", "--runner", "ray", "--address", address,
                    "--set", "runner.concurrency=2", env={"RAY_AUTH_MODE": "token"}, timeout=600)
        assert r.returncode == 0, r.stderr[-3000:]
        d = tmp_path / "runs" / "tiny"
        assert [x["status"] for x in rows(d)] == ["complete", "complete"]
        from nas_stab.config import loads_spec

        study = study_of(loads_spec(spec.read_text()), d)
        assert len({t.user_attrs["ray_node"] for t in study.trials}) == 2, "both nodes trained"
        assert f"joined the cluster at {address}" in (d / "log.txt").read_text()
    finally:
        stop = subprocess.run(["bash", str(RUNNERS / "local_cluster.sh"), "stop", tmp_dir], capture_output=True,
                              text=True, timeout=120)
    assert stop.returncode == 0, stop.stderr
    left = subprocess.run(["pgrep", "-f", f"{tmp_dir}/session"], capture_output=True, text=True).stdout.split()
    # the head's Ray Client server names only the head's address on its command line
    client = subprocess.run(["pgrep", "-f", f"ray.util.client.server --address={address} "], capture_output=True,
                            text=True).stdout.split()
    assert not left and not client and not Path(tmp_dir).exists()


@pytest.mark.slow
def test_local_cluster_script_on_a_machine_without_a_token(tmp_path):
    """A fresh machine has no ~/.ray/auth_token and `ray start` will not make one: the script does."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    env.update(PYTHON=sys.executable, RAY_AUTH_MODE="token", HOME=str(home))
    start = subprocess.run(["bash", str(RUNNERS / "local_cluster.sh"), "0", "1"], capture_output=True, text=True,
                           env=env, timeout=300)
    m = re.search(r"local_cluster\.sh stop (\S+)", start.stdout)
    try:
        assert start.returncode == 0, start.stderr + start.stdout
        assert f"created Ray's auth token in {home}/.ray/auth_token" in start.stdout
        assert len((home / ".ray" / "auth_token").read_text().strip()) >= 32
    finally:
        if m:
            subprocess.run(["bash", str(RUNNERS / "local_cluster.sh"), "stop", m.group(1)], capture_output=True,
                           text=True, env=env, timeout=120)


def test_local_cluster_script_fails_loudly_when_a_node_does_not_start():
    env = dict(os.environ, PYTHON=sys.executable, RAY_AUTH_MODE="token", HEAD_CPUS="not-a-number")  # `ray start` refuses it
    r = subprocess.run(["bash", str(RUNNERS / "local_cluster.sh"), "0", "1"], capture_output=True,
                       text=True, env=env, timeout=300)
    assert r.returncode == 1, r.stdout + r.stderr  # it exited 0 before, after cleaning up
    assert "--num-cpus" in r.stderr and "address:" not in r.stdout


def test_local_cluster_script_without_nas_stab_says_so_in_one_line(tmp_path):
    """Run from outside the venv: one clear line and exit 2, no Ray started, no temp dir left."""
    before = set(Path("/tmp").glob("nas-ray-*"))
    env = dict(os.environ, PYTHON="/usr/bin/python3", PYTHONPATH="")
    r = subprocess.run(["bash", str(RUNNERS / "local_cluster.sh"), "1", "1"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "cannot import nas_stab and ray" in r.stderr and "PYTHON=" in r.stderr
    assert set(Path("/tmp").glob("nas-ray-*")) == before
    r = subprocess.run(["bash", str(RUNNERS / "local_cluster.sh"), "two"], capture_output=True, text=True,
                       env=dict(os.environ, PYTHON=sys.executable), timeout=60)
    assert r.returncode == 2 and "N_WORKERS must be a number" in r.stderr


def test_slurm_script_checks_the_environment_and_the_token_first(tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    env = dict(os.environ, PATH="/usr/bin:/bin", HOME=str(tmp_path), PYTHONPATH="", NAS_STAB_VENV="")
    env.pop("RAY_AUTH_TOKEN", None)
    r = subprocess.run(["bash", str(RUNNERS / "slurm_ray.sbatch"), str(spec)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and r.stderr.strip().count("\n") == 0 and "nas-stab is not installed" in r.stderr, r.stderr
    venv_bin = str(Path(sys.executable).parent)
    env["PATH"] = f"{venv_bin}:/usr/bin:/bin"
    env["PYTHONPATH"] = os.environ.get("PYTHONPATH", "")
    r = subprocess.run(["bash", str(RUNNERS / "slurm_ray.sbatch"), str(spec)], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 2 and "no Ray auth token" in r.stderr and "ray get-auth-token --generate" in r.stderr, r.stderr
