"""TensorBoard logs of every run, read back with TensorBoard's own reader."""
import csv

import pytest
from conftest import TINY, run_cli
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tensorboard.plugins.hparams import plugin_data_pb2

from nas_stab.config import loads_spec
from nas_stab.search.local import run_local
from nas_stab.store.rundir import RunDir
from nas_stab.trackers.views import record_views


def _run(text, out):
    spec = loads_spec(text)
    with RunDir.open(out, spec, views=record_views) as rd:
        run_local(spec, rd)
    return out / spec.name


def _rows(d):
    with open(d / "trials.csv") as f:
        return list(csv.DictReader(f))


def _load(path):
    acc = EventAccumulator(str(path), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_every_run_has_its_history_and_hparams_in_tensorboard(tmp_path):
    d = _run(TINY, tmp_path)
    rows = _rows(d)
    subdirs = sorted(p.name for p in (d / "tensorboard").iterdir())
    assert len(subdirs) == len(rows) == 4
    row = rows[0]
    sub = next(s for s in subdirs if s.startswith(row["run_id"] + "_"))
    assert f"branches={row['model.branches']}" in sub and f"lr={row['train.lr']}" in sub
    acc = _load(d / "tensorboard" / sub)
    tags = acc.Tags()["scalars"]
    for tag in ("train/loss", "train/lr", "stability/fwd_ratio", "val/val_acc", "hparam/val_acc"):
        assert tag in tags, (tag, tags)
    with open(d / "history" / f"{row['run_id']}.csv") as f:
        hist = list(csv.DictReader(f))
    loss = {int(h["step"]): float(h["train_loss"]) for h in hist if h["train_loss"]}
    got = {e.step: e.value for e in acc.Scalars("train/loss")}
    assert got.keys() == loss.keys() and all(abs(got[k] - loss[k]) <= 1e-5 * max(1, abs(loss[k])) for k in loss)
    assert acc.Scalars("hparam/val_acc")[0].value == pytest.approx(float(row["val_acc"]), abs=1e-5)  # csv: 6 digits
    last = acc.Scalars("val/val_acc")[-1]  # the final validation point is in the history
    assert last.step == int(row["steps"]) and last.value == pytest.approx(float(row["val_acc"]), abs=1e-5)
    # the HParams tab: the searched keys and the seed, with the run's values
    content = acc.PluginTagToContent("hparams")
    info = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"]).session_start_info
    assert info.hparams["model.branches"].number_value == float(row["model.branches"])
    assert info.hparams["train.lr"].number_value == pytest.approx(float(row["train.lr"]))
    assert info.hparams["seed"].number_value == 0 and info.hparams["status"].string_value == "complete"


def test_tensorboard_off_and_rebuilt_by_the_command(tmp_path):
    d = _run(TINY + "logging: {tensorboard: false}\n", tmp_path)
    assert not (d / "tensorboard").exists()
    r = run_cli("tensorboard", d)
    assert r.returncode == 0, r.stderr
    assert "4 runs" in r.stdout and len(list((d / "tensorboard").iterdir())) == 4


def test_a_history_longer_than_any_nas_stab_writes_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """A history file far longer than nas_stab logs (at most about 1,000 steps a run; the cap is 100,000 rows, 60
    here) is not exported for minutes without a word: one line naming it, exit 2, the half-written logs removed."""
    from nas_stab.cli import main
    from nas_stab.trackers import tensorboard

    d = _run(TINY + "logging: {tensorboard: false}\n", tmp_path)
    run_id = _rows(d)[0]["run_id"]
    h = d / "history" / f"{run_id}.csv"
    lines = h.read_text().splitlines()
    h.write_text("\n".join(lines + [lines[-1]] * 100) + "\n")
    monkeypatch.setattr(tensorboard, "HISTORY_CAP", 60)
    assert main(["tensorboard", str(d)]) == 2
    err = capsys.readouterr().err
    assert "more than 60 rows" in err and run_id in err and "Traceback" not in err, err
    assert not any(p.name.startswith(run_id) for p in (d / "tensorboard").iterdir())
