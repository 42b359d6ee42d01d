"""Hostile data and inputs (issue 16): no code from data, bounded work, one-line errors.

Each test here failed on the code before the fix (see the issue's report)."""
from __future__ import annotations

import contextlib
import gzip
import os
import pickle
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest

from nas_stab.cli import main

CIFAR = """\
name: c
task:
  dataset: {{name: cifar10, root: {root}, train: 40, val: 10, test: 10}}
model: {{arch: mlp, depth: 1, width: 8}}
train: {{lr: 0.05, steps: 2, batch_size: 8}}
stability: {{hessian: false}}
"""


def _cifar_batch(path: Path, n: int = 20) -> None:
    rng = np.random.RandomState(0)
    d = {b"batch_label": b"b", b"labels": [int(v) for v in rng.randint(0, 10, n)],
         b"data": rng.randint(0, 255, (n, 3072)).astype(np.uint8), b"filenames": [b"f%d" % i for i in range(n)]}
    path.write_bytes(pickle.dumps(d, protocol=2))


def _cifar(root: Path) -> Path:
    d = root / "cifar-10-batches-py"
    d.mkdir(parents=True)
    for f in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        _cifar_batch(d / f)
    return d


class _Exploit:
    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_cifar_batches_load_through_the_restricted_reader(tmp_path, capsys):
    _cifar(tmp_path / "data")
    spec = tmp_path / "c.yaml"
    spec.write_text(CIFAR.format(root=tmp_path / "data"))
    assert main(["validate", str(spec), "--no-timing"]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("where", ["top", "inside"])
def test_exploit_pickle_in_cifar_batch_runs_nothing(tmp_path, capsys, where):
    d = _cifar(tmp_path / "data")
    marker = tmp_path / "pwned"
    evil = _Exploit(marker)
    payload = evil if where == "top" else {b"data": np.zeros((2, 3072), np.uint8), b"labels": [evil, 1]}
    (d / "data_batch_3").write_bytes(pickle.dumps(payload, protocol=2))
    spec = tmp_path / "c.yaml"
    spec.write_text(CIFAR.format(root=tmp_path / "data"))
    for cmd in (["validate", str(spec), "--no-timing"], ["run", str(spec), "--out", str(tmp_path / "out")]):
        assert main(cmd) == 2
        err = capsys.readouterr().err
        assert not marker.exists(), "the data file ran code"
        assert "posix.system is not allowed" in err and "data_batch_3" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


MNIST = """\
name: m
task:
  dataset: {{name: mnist, root: {root}, train: 20, val: 10, test: 10}}
model: {{arch: mlp, depth: 1, width: 8}}
train: {{lr: 0.05, steps: 2}}
stability: {{hessian: false}}
"""


def _idx(arr) -> bytes:
    return struct.pack(">BBBB", 0, 0, 0x08, arr.ndim) + struct.pack(">" + "I" * arr.ndim, *arr.shape) + arr.astype(np.uint8).tobytes()


def _mnist(root: Path, labels=None, n: int = 60) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "t10k-images-idx3-ubyte.gz").write_bytes(gzip.compress(_idx(np.random.RandomState(0).randint(0, 255, (n, 28, 28)))))
    (root / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(_idx(np.asarray(labels if labels is not None else np.arange(n) % 10))))


def _validate(tmp_path, capsys, text: str) -> tuple[int, str]:
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    code = main(["validate", str(spec), "--no-timing"])
    return code, capsys.readouterr().err


def test_decompression_bomb_is_capped(tmp_path, capsys, monkeypatch):
    from nas_stab.data import safeio

    monkeypatch.setattr(safeio, "MAX_DECOMPRESSED", 1 << 20)  # the real cap is GBs; the mechanism is the same
    _mnist(tmp_path / "d")
    bomb = gzip.compress(b"\0" * (8 << 20))  # 8 MB of zeros in ~8 KB
    (tmp_path / "d" / "t10k-images-idx3-ubyte.gz").write_bytes(bomb)
    code, err = _validate(tmp_path, capsys, MNIST.format(root=tmp_path / "d"))
    assert code == 2 and "decompresses to more than 1048576 bytes" in err and "Traceback" not in err


def test_corrupt_zlib_stream_is_one_line(tmp_path, capsys):
    _mnist(tmp_path / "d")
    p = tmp_path / "d" / "t10k-images-idx3-ubyte.gz"
    raw = bytearray(p.read_bytes())
    raw[10] = 0xFF  # the first deflate block of a reserved type: zlib.error, not OSError
    p.write_bytes(bytes(raw))
    with pytest.raises(zlib.error):
        gzip.decompress(bytes(raw))
    code, err = _validate(tmp_path, capsys, MNIST.format(root=tmp_path / "d"))
    assert code == 2 and str(p) in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_labels_outside_the_classes_fail_validation(tmp_path, capsys):
    _mnist(tmp_path / "d", labels=[255] + [1] * 59)
    code, err = _validate(tmp_path, capsys, MNIST.format(root=tmp_path / "d"))
    assert code == 2 and "label 255 outside" in err, err


# ---------------------------------------------------------------- command line and run directory: one line, exit 2

from conftest import TINY  # noqa: E402


def _run(tmp_path, capsys, *extra, spec_text: str = TINY, out=None) -> tuple[int, str, Path]:
    spec = tmp_path / "tiny.yaml"
    spec.write_text(spec_text)
    out = out or tmp_path / "out"
    code = main(["run", str(spec), "--out", str(out), *map(str, extra)])
    return code, capsys.readouterr().err, out


def _one_line(err: str) -> str:
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith(("run directory:", "watch it:", "[", "data:"))]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("n", [0, -1])
def test_trials_must_be_positive_and_nothing_is_written(tmp_path, capsys, n):
    code, err, out = _run(tmp_path, capsys, "--trials", n)
    assert code == 2 and "--trials: must be a count" in _one_line(err)
    assert not out.exists()


def test_out_that_is_a_file_or_a_symlink_loop(tmp_path, capsys):
    f = tmp_path / "file"
    f.write_text("x")
    code, err, _ = _run(tmp_path, capsys, out=f)
    assert code == 2 and "cannot use" in _one_line(err)
    loop = tmp_path / "loop"
    loop.symlink_to(tmp_path / "loop")
    code, err, _ = _run(tmp_path, capsys, out=loop)
    assert code == 2 and _one_line(err)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_out(tmp_path, capsys):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        code, err, _ = _run(tmp_path, capsys, out=ro)
        assert code == 2 and "cannot use" in _one_line(err)
    finally:
        ro.chmod(0o700)


@pytest.mark.parametrize("damage", ["spec-list", "spec-meta-list", "study-random", "history-file"])
def test_hand_damaged_run_directory_is_one_line(tmp_path, capsys, damage):
    code, err, out = _run(tmp_path, capsys, "--trials", 1)
    assert code == 0, err
    d = out / "tiny"
    if damage == "spec-list":
        (d / "spec.yaml").write_text("- a\n- b\n")
    elif damage == "spec-meta-list":
        (d / "spec.yaml").write_text("meta: [1, 2]\n")
    elif damage == "study-random":
        for p in d.glob("study.db*"):
            p.unlink()
        (d / "study.db").write_bytes(os.urandom(8192))
    else:
        import shutil

        shutil.rmtree(d / "history")
        (d / "history").write_text("not a directory")
    code, err, _ = _run(tmp_path, capsys)
    assert code == 2, err
    assert "--fresh" in _one_line(err)


def test_fresh_when_the_aside_name_exists(tmp_path, capsys):
    import datetime as dt

    code, err, out = _run(tmp_path, capsys, "--trials", 1)
    assert code == 0, err
    now = dt.datetime.now()
    for s in range(0, 5):  # the names --fresh would pick in the next seconds already exist
        stamp = (now + dt.timedelta(seconds=s)).strftime("%Y%m%d-%H%M%S")
        (out / f"tiny.old-{stamp}").mkdir()
        (out / f"tiny.old-{stamp}" / "keep").write_text("x")
    code, err, _ = _run(tmp_path, capsys, "--trials", 1, "--fresh")
    assert code == 0, err
    assert len(list(out.glob("tiny.old-*"))) == 6 and all((p / "keep").exists() or (p / "trials.csv").exists() for p in out.glob("tiny.old-*"))


def _no_data_loaded(monkeypatch) -> list:
    """The dataset loads the run would make, each noted (and then made) in the returned list."""
    from nas_stab import data

    loads, real = [], data.load_dataset
    monkeypatch.setattr(data, "load_dataset", lambda *a, **kw: loads.append(a) or real(*a, **kw))
    return loads


def test_unreachable_ray_address_fails_fast_before_writing(tmp_path, capsys, monkeypatch):
    loads = _no_data_loaded(monkeypatch)
    code, err, out = _run(tmp_path, capsys, "--runner", "ray", "--address", "127.0.0.1:1")
    assert code == 2 and "nothing answers there" in _one_line(err)
    # fast: refused at the pre-flight check, before the data is loaded or the run directory written
    assert not loads and not out.exists()


@pytest.mark.parametrize("what", ["dev-zero", "fifo"])
def test_spec_file_that_never_ends_is_refused_at_once(tmp_path, what):
    import subprocess
    import sys

    path = "/dev/zero" if what == "dev-zero" else str(tmp_path / "fifo")
    if what == "fifo":
        os.mkfifo(path)
    p = subprocess.run([sys.executable, "-m", "nas_stab.cli", "validate", path], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "not a regular file" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


# ---------------------------------------------------------------- issue 35: reliability round 3

import csv  # noqa: E402

NO_SPACE = TINY.split("space:")[0]  # one run: its TensorBoard directory is named by its run id alone


def _rows(d: Path) -> list[dict]:
    with open(d / "trials.csv", newline="") as f:
        return list(csv.DictReader(f))


def _write_rows(d: Path, rows: list[dict]) -> None:
    with open(d / "trials.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


@pytest.mark.parametrize("run_id", ["..", ".", "../../x", "t1-s0/../..", "", "t00000-s0x"])
def test_tensorboard_refuses_a_run_id_that_is_not_one_and_removes_nothing(tmp_path, capsys, run_id):
    code, err, out = _run(tmp_path, capsys, spec_text=NO_SPACE)
    assert code == 0, err
    d = out / "tiny"
    rows = _rows(d)
    rows.append(dict(rows[0], trial="1", key="k-evil", run_id=run_id))  # tensorboard/.. is the run directory
    _write_rows(d, rows)
    before = sorted(p.relative_to(d) for p in d.rglob("*") if "tensorboard" not in p.parts)
    code = main(["tensorboard", str(d)])
    line = _one_line(capsys.readouterr().err)
    assert code == 2 and "trials.csv: line 3: run_id" in line, line
    assert sorted(p.relative_to(d) for p in d.rglob("*") if "tensorboard" not in p.parts) == before  # nothing lost
    assert (d / "tensorboard").is_dir()


def test_tensorboard_removes_only_directories_it_wrote(tmp_path, capsys):
    code, err, out = _run(tmp_path, capsys, spec_text=NO_SPACE)
    assert code == 0, err
    d = out / "tiny"
    tb = d / "tensorboard"
    mine = tb / "notes"  # a user's directory next to the logs stays
    mine.mkdir()
    (mine / "keep.txt").write_text("x")
    sub = next(p for p in tb.iterdir() if p.name.startswith("t00000-s0"))
    (sub / "keep.txt").write_text("x")  # a log directory holding something else is refused, not emptied
    assert main(["tensorboard", str(d)]) == 2
    assert "nothing was removed" in _one_line(capsys.readouterr().err)
    assert (mine / "keep.txt").exists() and (sub / "keep.txt").exists()
    (sub / "keep.txt").unlink()
    assert main(["tensorboard", str(d)]) == 0
    capsys.readouterr()
    assert (mine / "keep.txt").exists() and len(list(tb.iterdir())) == 2
    # tensorboard/ as a symlink to a directory outside the run: refused, the target untouched
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "t00000-s0").mkdir()
    import shutil

    shutil.rmtree(tb)
    tb.symlink_to(elsewhere)
    assert main(["tensorboard", str(d)]) == 2
    assert "not a directory of the run" in _one_line(capsys.readouterr().err)
    assert [p.name for p in elsewhere.iterdir()] == ["t00000-s0"] and not list((elsewhere / "t00000-s0").iterdir())


def test_tensorboard_rebuild_takes_the_run_directory_lock(tmp_path, capsys):
    from nas_stab.store.rundir import RunDir

    code, err, out = _run(tmp_path, capsys, spec_text=NO_SPACE)
    assert code == 0, err
    d = out / "tiny"
    with RunDir.open(out, __import__("nas_stab.config", fromlist=["loads_spec"]).loads_spec(NO_SPACE)):
        assert main(["tensorboard", str(d)]) == 2
        assert "in use by another nas-stab process" in _one_line(capsys.readouterr().err)
    assert main(["tensorboard", str(d)]) == 0


def _lb_run(tmp_path) -> Path:
    import sys

    sys.path.insert(0, str(Path(__file__).parent / "data"))
    from lb_fixtures import grid_rows, make_run, spec_dict

    t = {(lab, s, lr): [0.9 - abs(lr - 0.2) - 0.01 * k for k in range(3)]
         for lab in ("sum", "stam") for s in (1, 2, 4) for lr in (0.1, 0.2, 0.4)}
    return make_run(tmp_path, grid_rows(t), spec=spec_dict("recs", seeds=[0, 1, 2]))


@pytest.mark.parametrize("damage, where", [
    ("status=weird", "line 2: status: 'weird' is not one of"),
    ("status@3=", "line 5: status: an empty cell is not one of"),
    ("objective@2=abc", "line 4: objective: 'abc' is not a number"),
    ("val_acc@5=high", "line 7: val_acc: 'high' is not a number"),
    ("train.lr@4=fast", "line 6: train.lr: 'fast' is not a number"),
    ("model.branches@1=two", "line 3: model.branches: 'two' is not a number"),
    ("seed@2=1.5", "line 4: seed: 1.5 is not a whole number"),
    ("seed@2=", "line 4: seed: an empty cell is not a whole number"),
    ("-train.lr", "no column 'train.lr'"),
    ("-model.branches", "no column 'model.branches'"),
    ("-status", "no column 'status'"),
    ("-seed", "no column 'seed'"),
])
def test_malformed_records_are_refused_with_file_line_and_column(tmp_path, capsys, damage, where):
    import pandas as pd

    d = _lb_run(tmp_path)
    assert main(["leaderboard", str(d)]) == 0
    capsys.readouterr()
    t = pd.read_csv(d / "trials.csv", dtype=str, keep_default_na=False)
    if damage.startswith("-"):
        t = t.drop(columns=[damage[1:]])
    else:
        col, value = damage.split("=")
        col, _, row = col.partition("@")
        if row:
            t.loc[int(row), col] = value
        else:
            t[col] = value
    t.to_csv(d / "trials.csv", index=False)
    for p in d.glob("leaderboard*"):
        p.unlink()
    assert main(["leaderboard", str(d)]) == 2
    line = _one_line(capsys.readouterr().err)
    assert f"{d / 'trials.csv'}: {where}" in line, line
    assert not (d / "leaderboard.md").exists()


@pytest.mark.parametrize("flags, flag, says", [
    (["--transfer", "train.lr"], "--transfer", "is the learning rate"),
    (["--compare", "train.lr"], "--compare", "is the learning rate"),
    (["--compare", "model.aggregation,model.branches"], "--compare", "is the size axis"),
    (["--lr", "model.branches"], "--lr", "is not a learning rate"),
    (["--transfer", "model.width"], "--transfer", "is not searched"),
    (["--tolerance", "inf"], "--tolerance", "finite"),
    (["--tolerance", "nan"], "--tolerance", ""),
    (["--reference", "999"], "--reference", "not a searched size of model.branches"),
    (["--reference", "abc"], "--reference", "not a searched size"),
    (["--reference", "nan"], "--reference", "not a searched size"),
])
def test_leaderboard_flags_pass_the_spec_rules(tmp_path, capsys, flags, flag, says):
    d = _lb_run(tmp_path)
    assert main(["leaderboard", str(d), *flags]) == 2
    line = _one_line(capsys.readouterr().err)
    assert line.startswith(f"error: {flag}: ") and says in line, line
    assert not (d / "leaderboard.md").exists()


def test_leaderboard_flags_that_are_fine_still_work(tmp_path, capsys):
    d = _lb_run(tmp_path)
    for flags in (["--reference", "2"], ["--reference", "2.0"], ["--tolerance", "0.5"], ["--compare", "model.aggregation"],
                  ["--transfer", "model.aggregation", "--compare", "model.branches"]):
        assert main(["leaderboard", str(d), *flags]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("setting, says", [
    ("reference: 999", "leaderboard.reference: 999 is not a searched size of model.branches"),
    ("reference: abc", "leaderboard.reference: 'abc' is not a searched size"),
    ("reference: .nan", "leaderboard.reference: nan is not a searched size"),
    ("tolerance_octaves: .inf", "leaderboard.tolerance_octaves: must be a finite number"),
    ("transfer: train.lr", "leaderboard.transfer: 'train.lr' is the learning rate"),
    ("compare: [train.lr]", "leaderboard.compare.0: 'train.lr' is the learning rate"),
    ("lr: model.branches", "leaderboard.lr: 'model.branches' is not a learning rate"),
])
def test_validate_checks_the_leaderboard_against_the_searched_sizes(tmp_path, capsys, setting, says):
    lb = setting if setting.startswith("transfer") else f"transfer: model.branches, {setting}"
    text = TINY.replace("train.lr: [0.01, 0.05]", "train.lr: [0.01, 0.02, 0.05]") + f"leaderboard: {{{lb}}}\n"
    code, err = _validate(tmp_path, capsys, text)
    assert code == 2 and says in err and len(err.strip().splitlines()) == 1, err


def test_tensorboard_writer_failure_is_raised_not_printed_from_its_thread(tmp_path, capsys, monkeypatch):
    """A full disk under tensorboard/: the writer's background thread printed its traceback; now the caller
    gets the error (the driver logs it) and the half-written directory is gone."""
    import errno

    from tensorboard.summary.writer import record_writer

    from nas_stab.trackers.tensorboard import write_run

    def full(self, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    import threading

    printed = []  # what the thread's error would print (threading.excepthook: its traceback on stderr)
    monkeypatch.setattr(threading, "excepthook", printed.append)
    monkeypatch.setattr(record_writer.RecordWriter, "write", full)
    row = {"run_id": "t00000-s0", "seed": 0, "status": "complete", "train.lr": 0.1, "val_acc": 0.5, "steps": 2}
    with pytest.raises(OSError):
        write_run(tmp_path / "tb", row, [{"step": 0, "train_loss": 1.0}], ["train.lr"], "classification")
    assert not printed and "Traceback" not in capsys.readouterr().err
    assert not list((tmp_path / "tb").iterdir())


@pytest.fixture
def small_disk(tmp_path):
    """A 4 MB tmpfs (root only) and a function that fills it to the last block."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(disk)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")

    def fill():
        with open(disk / "ballast", "ab", buffering=0) as f:
            for chunk in (1 << 16, 1 << 12, 1 << 9, 1):
                try:
                    while True:
                        f.write(b"x" * chunk)
                except OSError:
                    pass

    try:
        yield disk, fill
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.mark.parametrize("when", ["records", "tensorboard"])
def test_a_full_disk_is_one_line_and_leaves_no_trial_running(small_disk, tmp_path, capsys, monkeypatch, when):
    """The disk fills up while a trial is recorded (study.db on the same disk): one line, exit 2, and the
    trial is closed in the study (it stayed RUNNING until the next run; TensorBoard's thread printed a
    traceback first)."""
    import optuna

    from nas_stab.search.records import Records
    from nas_stab.trackers.views import TensorBoardView

    disk, fill = small_disk
    if when == "records":
        real = Records.save
        monkeypatch.setattr(Records, "save", lambda self, *a: (fill(), real(self, *a))[1])
    else:
        real = TensorBoardView.runs
        monkeypatch.setattr(TensorBoardView, "runs", lambda self, *a: (fill(), real(self, *a))[1])
    code, err, out = _run(tmp_path, capsys, out=disk / "out")
    assert code == 2 and "Traceback" not in err, err
    _one_line(err)
    (disk / "ballast").unlink()
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{out / 'tiny' / 'study.db'}")
    assert study.trials and not [t.number for t in study.trials if t.state.name in ("RUNNING", "WAITING")]
    monkeypatch.undo()
    code, err, _ = _run(tmp_path, capsys, out=disk / "out")  # and the same command resumes
    assert code == 0, err
    assert not (out / "tiny" / ".reserve").exists()  # held only while the driver runs


@pytest.mark.parametrize("ref", ["loop", "nul", "nul-only"])
def test_extends_path_that_cannot_be_resolved_is_one_line(tmp_path, capsys, ref):
    """A symlink loop (RuntimeError from Path.resolve) or a NUL byte (ValueError) in `extends:`."""
    (tmp_path / "loop.yaml").symlink_to(tmp_path / "loop.yaml")
    value = {"loop": "loop.yaml", "nul": '"base\\0.yaml"', "nul-only": '"\\0"'}[ref]
    code, err = _validate(tmp_path, capsys, f"extends: {value}\nname: x\n")
    assert code == 2 and "extends" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("space", ["[1, 2]", "abc", "3"])
def test_set_a_dimension_when_space_is_not_a_mapping(tmp_path, capsys, space):
    spec = tmp_path / "s.yaml"
    spec.write_text(NO_SPACE + f"space: {space}\n")
    code = main(["validate", str(spec), "--no-timing", "--set", "space.train.lr=[0.1,0.2]"])
    err = capsys.readouterr().err
    assert code == 2 and "space is not a mapping" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1, err


def test_leaderboard_refuses_a_plots_symlink(tmp_path, capsys):
    d = _lb_run(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (d / "plots").symlink_to(outside)
    assert main(["leaderboard", str(d), "--format", "md,html"]) == 2
    assert "plots" in _one_line(capsys.readouterr().err)
    assert not list(outside.iterdir())
    (d / "plots").unlink()
    (d / "plots").write_text("a file")
    assert main(["leaderboard", str(d)]) == 2
    capsys.readouterr()


def test_leaderboard_removes_temporary_files_a_killed_leaderboard_left(tmp_path, capsys):
    import subprocess
    import sys

    d = _lb_run(tmp_path)
    (d / "plots").mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()  # a pid no process has now
    stale = [d / f".leaderboard.md.{dead.pid}.k2j4h5g6.tmp", d / "plots" / f".lr_transfer.png.{dead.pid}.ab_cd123.tmp"]
    live = d / f".leaderboard.html.{os.getpid()}.zzzzzzzz.tmp"  # a leaderboard still writing
    other = d / ".notes.tmp"
    for p in stale + [live, other]:
        p.write_text("partial")
    assert main(["leaderboard", str(d)]) == 0
    capsys.readouterr()
    assert not any(p.exists() for p in stale) and live.exists() and other.exists()
    # atomic writes name their process, so the next leaderboard can tell
    from nas_stab.store import atomic

    assert atomic._TMP.fullmatch(f".leaderboard.md.{os.getpid()}.abc_1234.tmp")


@pytest.fixture
def silent_port():
    """A port on 127.0.0.1 that accepts TCP connections and never answers (or answers `reply`).

    Yields a namespace: `port`; `reply`, a list to put the answer in; `conns`, every connection accepted;
    `hung`, an Event set by the hang guard: a client still waiting after 120 s (the tests set a 2 s
    deadline) is cut off (the server closes its port and its connections) so that the test fails
    instead of hanging."""
    import socket
    import threading
    import types

    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    conns, reply, hung = [], [], threading.Event()

    def serve():
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            conns.append(c)
            if reply:
                c.sendall(reply[0])

    def cut_off():
        hung.set()
        srv.close()
        for c in list(conns):
            with contextlib.suppress(OSError):
                c.shutdown(socket.SHUT_RDWR)

    threading.Thread(target=serve, daemon=True).start()
    guard = threading.Timer(120, cut_off)
    guard.daemon = True
    guard.start()
    try:
        yield types.SimpleNamespace(port=srv.getsockname()[1], reply=reply, conns=conns, hung=hung)
    finally:
        guard.cancel()
        srv.close()
        for c in conns:
            c.close()


@pytest.mark.parametrize("scheme, answer", [("", None), ("ray://", None), ("", b"HTTP/1.1 400 Bad Request\r\n\r\n")])
def test_ray_address_that_is_not_ray_fails_within_the_deadline(tmp_path, capsys, silent_port, scheme, answer, monkeypatch):
    """Issue 35: a port that accepts TCP but is not Ray hung (killed after 150 s, ray:// 47 s)."""
    if answer:
        silent_port.reply.append(answer)
    loads = _no_data_loaded(monkeypatch)
    code, err, out = _run(tmp_path, capsys, "--runner", "ray", "--address", f"{scheme}127.0.0.1:{silent_port.port}",
                          "--set", "runner.connect_timeout_s=2")
    line = _one_line(err)
    assert not silent_port.hung.is_set(), "still waiting for the port after 120 s: no deadline"
    assert code == 2 and "runner.address" in line and ("not as a gRPC server" if answer else "did not answer") in line, line
    assert "within 2 s (runner.connect_timeout_s)" in line, line  # the deadline given, not Ray's own
    # one probe of the port, then nothing more: no retry, no data loaded, no run directory
    assert len(silent_port.conns) == 1 and not loads and not out.exists()


def test_ray_connect_timeout_is_a_setting_with_a_default():
    from nas_stab.config import loads_spec

    assert loads_spec(TINY).runner.connect_timeout_s == 60
    with pytest.raises(Exception, match="connect_timeout_s"):
        loads_spec(TINY, overrides=["runner.connect_timeout_s=0"])


def test_ray_address_auto_naming_a_silent_port_fails_within_the_deadline(tmp_path, capsys, silent_port, monkeypatch):
    port = silent_port.port
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{port}")
    code, err, out = _run(tmp_path, capsys, "--runner", "ray", "--address", "auto", "--set", "runner.connect_timeout_s=2")
    line = _one_line(err)
    assert not silent_port.hung.is_set(), "still waiting for the port after 120 s: no deadline"
    assert code == 2 and f"127.0.0.1:{port}" in line and "did not answer within 2 s" in line, line
    assert len(silent_port.conns) == 1 and not out.exists()
