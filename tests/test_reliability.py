"""Bad data, divergence anywhere, concurrent drivers, escaping paths."""
import gzip
import math
import os
import signal
import struct
import subprocess
import sys
import time

import numpy as np
import pytest
from conftest import SHARED, TINY, run_cli

from nas_stab.cli import main
from nas_stab.config import loads_spec
from nas_stab.errors import DataError

MNIST = """\
name: m
task:
  dataset: {{name: mnist, root: {root}, train: 200, val: 100, test: 100}}
model: {{arch: mlp, depth: 1, width: 16}}
train: {{lr: 0.05, steps: 5}}
stability: {{hessian: false}}
"""


def idx(path, arr, gz=True):
    header = struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    data = header + arr.astype(np.uint8).tobytes()
    (gzip.open if gz else open)(path, "wb").write(data)


def write_mnist(root, n=400, labels=None, gz=True):
    root.mkdir(parents=True, exist_ok=True)
    ext = ".gz" if gz else ""
    idx(root / f"t10k-images-idx3-ubyte{ext}", np.random.RandomState(0).randint(0, 255, (n, 28, 28)), gz)
    idx(root / f"t10k-labels-idx1-ubyte{ext}", np.arange(labels if labels is not None else n) % 10, gz)


def load(root):
    from nas_stab.data import load_dataset

    return load_dataset(loads_spec(MNIST.format(root=root)), "cpu")


def test_mnist_from_shared_data_splits_test_set():
    if not (SHARED / "data" / "mnist").exists():
        pytest.skip("../shared/data/mnist not present")
    d = load(SHARED / "data")
    assert (len(d.x_train), len(d.x_val), len(d.x_test)) == (200, 100, 100)
    assert "test split" in d.note
    again = load(SHARED / "data")
    assert (d.x_train == again.x_train).all()  # deterministic subsets


def test_missing_file_names_file_and_places(tmp_path, capsys):
    with pytest.raises(DataError) as e:
        load(tmp_path)
    assert "t10k-images-idx3-ubyte" in str(e.value) and str(tmp_path) in str(e.value)
    spec = tmp_path / "m.yaml"
    spec.write_text(MNIST.format(root=tmp_path))
    assert main(["run", str(spec), "--out", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "not found" in err
    assert not (tmp_path / "runs").exists()  # nothing written


def test_truncated_file(tmp_path):
    write_mnist(tmp_path, gz=False)
    p = tmp_path / "t10k-images-idx3-ubyte"
    p.write_bytes(p.read_bytes()[:-1000])
    with pytest.raises(DataError) as e:
        load(tmp_path)
    assert str(p) in str(e.value) and "truncated" in str(e.value)


def test_corrupt_gzip(tmp_path):
    write_mnist(tmp_path)
    p = tmp_path / "t10k-labels-idx1-ubyte.gz"
    p.write_bytes(p.read_bytes()[:20])
    with pytest.raises(DataError) as e:
        load(tmp_path)
    assert str(p) in str(e.value)


def test_wrong_shapes_and_empty_split(tmp_path):
    write_mnist(tmp_path, labels=300)
    with pytest.raises(DataError) as e:
        load(tmp_path)
    assert "do not match" in str(e.value)
    write_mnist(tmp_path / "e", n=0)
    with pytest.raises(DataError) as e:
        load(tmp_path / "e")
    assert "empty" in str(e.value)


def test_split_larger_than_data(tmp_path):
    write_mnist(tmp_path, n=50)
    with pytest.raises(DataError) as e:
        load(tmp_path)
    assert "cannot be split" in str(e.value)


def test_nan_in_metrics_is_divergence_not_crash(tmp_path, monkeypatch):
    from nas_stab.tasks.classification import Classification
    from nas_stab.training import train_run

    spec = loads_spec(TINY)
    real = Classification.evaluate

    def nan_eval(self, model, split):
        out = real(self, model, split)
        return {k: math.nan for k in out}

    monkeypatch.setattr(Classification, "evaluate", nan_eval)
    r = train_run(spec, 0)
    assert r.status == "diverged" and r.diverged_step is not None and "non-finite" in r.error


def test_nan_at_the_final_validation_is_divergence(monkeypatch):
    """With no validation before the end (eval_every beyond the run), a non-finite final validation
    is divergence too, not a complete run with nan metrics."""
    from nas_stab.tasks.classification import Classification
    from nas_stab.training import train_run

    spec = loads_spec(TINY, overrides=["train.eval_every=1000000"])
    real = Classification.evaluate
    monkeypatch.setattr(Classification, "evaluate",
                        lambda self, model, split: {k: math.nan for k in real(self, model, split)})
    r = train_run(spec, 0)
    assert r.status == "diverged" and "non-finite" in r.error and r.diverged_step is not None
    assert not any(isinstance(v, float) and math.isnan(v) for k, v in r.metrics.items() if k.startswith("val_"))


def test_nan_parameters_at_init_never_crash(monkeypatch):
    import torch

    from nas_stab.models import mlp
    from nas_stab.training import train_run

    spec = loads_spec(TINY)
    real = mlp.MLPResNet.__init__

    def poisoned(self, *a, **k):
        real(self, *a, **k)
        with torch.no_grad():
            next(self.parameters()).fill_(float("nan"))

    monkeypatch.setattr(mlp.MLPResNet, "__init__", poisoned)
    r = train_run(spec, 0)
    assert r.status == "diverged" and "non-finite" in r.error


def test_second_process_refuses_clearly(tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY.replace("steps: 20", "steps: 400"))
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    first = subprocess.Popen([sys.executable, "-m", "nas_stab.cli", "run", str(spec), "--out", str(tmp_path)],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        first.stderr.readline()  # the run directory is open and locked
        second = run_cli("run", spec, "--out", tmp_path)
        assert second.returncode == 2
        assert "in use by another nas-stab process" in second.stderr and "Traceback" not in second.stderr
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
        first.stderr.close()


def test_run_name_cannot_escape_out(tmp_path):
    for name in ("../evil", "a/b", "/abs", ".hidden", "UP"):
        text = TINY.replace("name: tiny", f"name: '{name}'")
        p = tmp_path / "x.yaml"
        p.write_text(text)
        assert main(["run", str(p), "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists() and not (tmp_path / "evil").exists()


def _journal_study(journal, name="tiny"):
    import optuna

    from nas_stab.search.optuna_study import make_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna.load_study(study_name=name, storage=make_storage(f"journal://{journal}"))


def test_two_drivers_on_one_external_study_second_refuses(tmp_path):
    """Issue 35: two `nas-stab run` with different --out and the same search.storage journal: the second
    closed the first's live trial as interrupted and the first crashed. Now the study names its live
    driver: the second refuses before touching a trial; once the first is gone the study is taken over."""
    journal = tmp_path / "journal.log"
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY.replace("steps: 20", "steps: 3000") + f"search: {{storage: 'journal://{journal}'}}\n")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    first = subprocess.Popen([sys.executable, "-m", "nas_stab.cli", "run", str(spec), "--out", str(tmp_path / "a")],
                             env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:  # the first driver holds the study and trains its first trial
            try:
                study = _journal_study(journal)
                if any(t.state.name == "RUNNING" for t in study.trials):
                    break
            except Exception:  # not created yet
                pass
            time.sleep(0.5)
        else:
            raise AssertionError("the first driver never started")
        second = run_cli("run", spec, "--out", tmp_path / "b")
        assert second.returncode == 2, second.stderr
        err = [ln for ln in second.stderr.splitlines() if ln.startswith("error")]
        assert len(err) == 1 and "in use by another nas-stab driver" in err[0] and f"pid {first.pid}" in err[0], second.stderr
        assert "Traceback" not in second.stderr
        assert [t.state.name for t in _journal_study(journal).trials] == ["RUNNING"]  # the first's trial untouched
        assert first.poll() is None  # and the first driver still runs
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait()
    # the first is gone (killed: its attribute stays, naming a dead pid): the study is taken over
    spec.write_text(spec.read_text().replace("steps: 3000", "steps: 5"))
    third = run_cli("run", spec, "--out", tmp_path / "c", "--trials", "1")
    assert third.returncode == 0, third.stderr
    study = _journal_study(journal)
    assert "RUNNING" not in [t.state.name for t in study.trials] and study.user_attrs.get("nas_stab_driver") is None
