"""Every shipped vision space validates (SPEC 1), names a leaderboard and
stays within the sizes its comments promise."""
from __future__ import annotations

from pathlib import Path

import pytest

from nas_stab.config import get_key, load_spec

SPACES = Path(__file__).resolve().parents[1] / "spaces"
VISION = [
    "stam-branches-mnist", "stam-branches-cifar", "tau-depth-mnist", "skip-lambda-mnist", "skip-lambda-cifar",
    "pathbn-mnist", "pathbn-cifar", "learnable-tau-mnist", "learnable-tau-cifar", "deepnorm-depth-mnist",
]


@pytest.mark.parametrize("name", VISION)
def test_vision_space_validates(name):
    spec = load_spec(SPACES / f"{name}.yaml")
    assert spec.name == name
    lb = spec.leaderboard
    assert lb.lr == "train.lr" and lb.transfer and lb.compare
    keys = set(spec.space.keys)
    assert "train.lr" in keys and lb.transfer in keys and set(lb.compare) <= keys
    runs = len(spec.space.grid(lambda k: get_key(spec, k))) * len(spec.seeds)
    assert 10 <= runs <= 130, runs
    assert spec.train.steps is not None and spec.train.steps <= 300
    assert spec.task.dataset.name in ("mnist", "imagefolder")
    assert spec.task.dataset.train is not None and spec.task.dataset.train <= 8000
