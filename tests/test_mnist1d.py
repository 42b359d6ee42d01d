"""MNIST-1D (`task.dataset.name: mnist1d`): generated offline by the mnist1d package, deterministic, not at its
ceiling (Greydanus and Kobak 2024: an MLP reaches roughly 70%, far above chance and far below 100%)."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from conftest import run_cli

SPEC = """\
name: m1d
seeds: [0]
task: {{dataset: {{name: mnist1d, size: {size}}}}}
model: {{arch: mlp_resnet, depth: 2, width: 64}}
train: {{optimizer: adam, lr: 0.003, batch_size: 64, steps: {steps}, threads: 1}}
stability: {{every: 0, hessian: false}}
search: {{objective: val_acc}}
"""


def _load(size=500):
    from nas_stab.config import loads_spec
    from nas_stab.data import load_dataset

    return load_dataset(loads_spec(SPEC.format(size=size, steps=10)), torch.device("cpu"))


def test_splits_shapes_classes_and_determinism():
    random.seed(123)
    np.random.seed(123)
    before = (random.random(), np.random.random())
    random.seed(123)
    np.random.seed(123)
    a = _load(500)
    assert (random.random(), np.random.random()) == before  # the generator's global seeding is undone
    b = _load(500)
    assert a.info.classes == 10 and tuple(a.info.in_shape) == (40,)
    n_train, n_val, n_test = len(a.y_train), len(a.y_val), len(a.y_test)
    assert n_train + n_val == 400 and n_test == 100  # 80% / 20%, val carved from the training part
    assert set(a.y_train.tolist()) == set(range(10))
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)


def test_the_arrays_are_made_once_then_read_from_the_cache(tmp_path, monkeypatch):
    """Making 20,000 signals takes ~12 s: the second load of a size reads the cache, the same data to the bit; a
    torn cache file is made again."""
    import mnist1d.data

    monkeypatch.setenv("NAS_STAB_CACHE", str(tmp_path))
    a = _load(300)
    cached = list(tmp_path.glob("mnist1d-n300-seed42-v*.npz"))
    assert len(cached) == 1 and not list(tmp_path.glob(".*tmp*"))

    def made(*_a, **_k):
        raise AssertionError("made again")

    monkeypatch.setattr(mnist1d.data, "make_dataset", made)
    b = _load(300)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_val, b.y_val) and torch.equal(a.x_test, b.x_test)
    cached[0].write_bytes(b"torn")
    with pytest.raises(AssertionError, match="made again"):  # not read: made again
        _load(300)


def test_an_mlp_learns_it_and_stays_below_its_ceiling(tmp_path):
    spec = tmp_path / "m1d.yaml"
    spec.write_text(SPEC.format(size=4000, steps=400))
    r = run_cli("run", spec, "--out", tmp_path / "runs")
    assert r.returncode == 0, r.stderr
    import pandas as pd

    acc = float(pd.read_csv(tmp_path / "runs" / "m1d" / "trials.csv")["val_acc"].iloc[0])
    assert 0.3 < acc < 0.9, acc  # far above chance (0.1), far from saturated
    from nas_stab.data import DATASETS

    assert DATASETS.entry("mnist1d").info["classes"] == 10  # chance and the no-learning loss are known to the leaderboard


@pytest.mark.parametrize("size", [9])
def test_size_below_the_minimum_is_a_spec_error(tmp_path, size):
    spec = tmp_path / "bad.yaml"
    spec.write_text(SPEC.format(size=size, steps=10))
    r = run_cli("validate", spec)
    assert r.returncode == 2 and "task.dataset.size" in r.stderr
