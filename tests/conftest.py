import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
os.environ.setdefault("NAS_STAB_CACHE", str(ROOT / ".cache-test"))
# before any test starts gRPC (Ray Client, Ray): see nas_stab.search.ray.loopback.no_grpc_fork_handlers
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

# the Ray and PostgreSQL fixtures (ray_local, ray_two_nodes, ray_client_head, postgres_url) for every test
# module, without importing them; its helpers (spec_text, rows, ...) are imported as usual
pytest_plugins = ["conftest_ray"]


@pytest.fixture(autouse=True, scope="session")
def _threads():
    import torch

    torch.set_num_threads(1)


TINY = """\
name: tiny
seeds: 1
task:
  dataset: {name: digits}
model: {arch: mlp_resnet, depth: 2, width: 16}
train: {lr: 0.05, steps: 20, batch_size: 32}
stability: {every: 10, probe_batch: 64, hessian: false}
space:
  model.branches: [1, 2]
  train.lr: [0.01, 0.05]
"""  # no leaderboard.transfer: an lr-transfer table needs >= 3 lrs, and these runner tests need only 4 runs


@pytest.fixture
def tiny_yaml(tmp_path):
    p = tmp_path / "tiny.yaml"
    p.write_text(TINY)
    return p


def run_cli(*args, cwd=None, env=None, timeout=600):
    import subprocess

    e = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "nas_stab.cli", *map(str, args)], cwd=cwd, env=e,
                          capture_output=True, text=True, timeout=timeout)
