"""A relative dataset root is taken from the experiment file's directory; how the
splits were made is said on the terminal, in log.txt and in the run's provenance."""
import os

import pytest
import yaml
from conftest import SHARED, run_cli

MNIST = """\
name: mnist-paths
task:
  dataset: {name: mnist, root: ../data, train: 500, val: 100, test: 100}
model: {arch: mlp, depth: 1, width: 8}
train: {lr: 0.05, steps: 2, batch_size: 16}
stability: {every: 0, probe_batch: 16, hessian: false}
"""


@pytest.fixture
def spec_elsewhere(tmp_path):
    if not (SHARED / "data" / "mnist").is_dir():
        pytest.skip("needs ../shared/data/mnist")
    (tmp_path / "data").mkdir()
    os.symlink(SHARED / "data" / "mnist", tmp_path / "data" / "mnist")
    (tmp_path / "exp").mkdir()
    p = tmp_path / "exp" / "mnist.yaml"
    p.write_text(MNIST)
    return p


def test_relative_root_is_relative_to_the_experiment_file_and_the_carving_is_said(spec_elsewhere, tmp_path):
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    r = run_cli("run", spec_elsewhere, "--out", tmp_path / "runs", cwd=elsewhere)
    assert r.returncode == 0, r.stderr[-2000:]
    note = "data: mnist: only the MNIST test split was found: it was split into train/val/test"
    assert note in r.stderr
    d = tmp_path / "runs" / "mnist-paths"
    assert note in (d / "log.txt").read_text()
    meta = yaml.safe_load((d / "spec.yaml").read_text())["meta"]
    assert meta["data"].startswith("mnist: only the MNIST test split was found")


def test_missing_root_error_names_the_absolute_path(tmp_path):
    p = tmp_path / "exp" / "bad.yaml"
    p.parent.mkdir()
    p.write_text(MNIST.replace("root: ../data", "root: ../nowhere"))
    r = run_cli("validate", p, "--no-timing", cwd=tmp_path)
    assert r.returncode == 2
    assert str(tmp_path / "nowhere") in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_root_given_with_set_is_from_the_working_directory(spec_elsewhere, tmp_path):
    r = run_cli("validate", spec_elsewhere, "--no-timing", "--set", "task.dataset.root=data", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "data: mnist: only the MNIST test split" in r.stderr
