"""The one reader of a run directory (nas_stab/store/reader.py)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent / "data"))
from lb_fixtures import make_run, spec_dict

from nas_stab.config.schema import LeaderboardConfig
from nas_stab.errors import RunError
from nas_stab.store.reader import iter_rows, read_rows, read_run
from nas_stab.store.rundir import RunDir


def _rows():
    return [{"seed": s, "model.branches": 1, "model.aggregation": "sum", "train.lr": lr, "val_acc": 0.5 + lr}
            for s in (0, 1) for lr in (0.1, 0.2)]


def test_spec_is_typed_with_schema_defaults_meta_and_trials(tmp_path):
    spec = spec_dict("typed")
    del spec["leaderboard"]  # every setting from the schema
    spec["search"]["objective"] = "val_loss"
    d = make_run(tmp_path, _rows(), spec=spec)
    run = read_run(d)
    assert run.name == "typed" and run.seeds == [0, 1]
    assert run.spec.leaderboard == LeaderboardConfig()  # the schema's defaults, not re-typed ones
    assert run.spec.search.objective == "val_loss"
    assert run.meta["spec_hash"] == "0123456789abcdef"
    assert run.stored("model.width") == 16 and run.stored("model.nothing", "x") == "x"
    assert len(run.trials) == 4 and list(run.trials["seed"]) == [0, 0, 1, 1]


def test_trials_cells_are_unescaped(tmp_path):
    rows = _rows()
    rows[0]["model.aggregation"] = "=cmd"  # the fixture writes it as is: escape it by hand, as the driver does
    d = make_run(tmp_path, rows)
    p = d / "trials.csv"
    p.write_text(p.read_text().replace(",=cmd,", ",'=cmd,"))
    assert "'=cmd" in p.read_text()
    assert read_run(d).trials["model.aggregation"].iloc[0] == "=cmd"


def test_missing_trials_is_an_error_naming_the_file_and_status_still_reads(tmp_path):
    d = make_run(tmp_path, _rows())
    (d / "trials.csv").unlink()
    run = read_run(d)  # the spec reads; the trials are read on first use
    with pytest.raises(RunError, match=r"trials\.csv: missing"):
        run.trials  # noqa: B018
    assert run.rows() == []


def test_history_is_read_on_demand_and_never_outside_history(tmp_path):
    d = make_run(tmp_path, _rows())
    run = read_run(d)
    h = run.history("t00000-s0")
    assert h is not None and "step" in h.columns
    assert run.history("missing") is None
    (d / "secret.csv").write_text("step\n0\n")
    assert run.history("../secret") is None


def test_rows_drop_a_partial_last_line_and_malformed_rows_and_say_so(tmp_path):
    (tmp_path / "trials.csv").write_text(
        "trial,seed,status,key,note\n0,0,complete,k0,'=x\n1,0,bogus,k1,\n2,0,complete,,\n3,0,complete,k3,par")
    notes = []
    rows = read_rows(tmp_path, notes.append)
    assert [r["key"] for r in rows] == ["k0"] and rows[0]["note"] == "=x"
    assert notes == ["trials.csv: dropped a partial last row", "trials.csv: dropped 2 malformed row(s)"]
    assert RunDir(tmp_path).read_trials() == rows  # the driver's reader is this one


def test_rows_are_read_as_they_come_and_keep_only_the_columns_asked(tmp_path):
    """`nas-stab status` and `tensorboard` stream trials.csv: a record is handed over before the rest of the file is
    read (a bad row further down is met only when reached), and with `columns` a record holds only those."""
    (tmp_path / "trials.csv").write_text("trial,seed,status,key,run_id,val_acc,init_fwd_ratio\n"
                                         "0,0,complete,k0,t00000-s0,0.5,1.2\n" + "1,0,complete,k1,../x,0.6,1.3\n")
    rows = iter_rows(tmp_path, strict=True, columns=("val_acc",))
    assert next(rows) == {"status": "complete", "key": "k0", "run_id": "t00000-s0", "val_acc": "0.5"}
    with pytest.raises(RunError, match=r"line 3: run_id: '\.\./x' is not a run id"):
        next(rows)
    assert list(iter_rows(tmp_path / "nothing")) == []


def test_invalid_spec_is_a_run_error_with_file_line_and_key(tmp_path):
    d = make_run(tmp_path, _rows())
    data = yaml.safe_load((d / "spec.yaml").read_text())
    data["leaderboard"]["tolerance_octaves"] = -1
    (d / "spec.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(RunError, match=r"spec\.yaml:\d+: leaderboard\.tolerance_octaves"):
        read_run(d)


def test_config_keys_are_the_keys_runs_were_recorded_under():
    """`config_keys` makes the configuration plain once for every seed; each key is the hash of the same text as
    before (json.dumps of {"config", "seed"}), so a resume finds the runs recorded by an older nas_stab."""
    import hashlib
    import json

    from conftest import TINY

    from nas_stab.config import config_key, config_keys, loads_spec, resolve
    from nas_stab.config.load import SEARCHABLE, _drop_added, to_plain

    spec = resolve(loads_spec(TINY), {"model.branches": 2, "train.lr": 0.01})
    plain = {k: to_plain(getattr(spec, k)) for k in SEARCHABLE}
    _drop_added(plain, spec)
    seeds = [0, 7, -3, 123456789]
    old = [hashlib.sha256(json.dumps({"config": plain, "seed": s}, sort_keys=True, default=str).encode()).hexdigest()[:16]
           for s in seeds]
    assert config_keys(spec, seeds) == old == [config_key(spec, s) for s in seeds]
    assert len(set(old)) == 4


def test_a_long_read_says_so_first(tmp_path, monkeypatch, capsys):
    """A trials.csv over BIG_FILE (32 MiB, about 10^5 records) is announced on stderr before it is read: a command
    is never silent for a minute."""
    from nas_stab.store import reader

    (tmp_path / "trials.csv").write_text("trial,seed,status,key\n0,0,complete,k0\n")
    assert len(read_rows(tmp_path)) == 1 and capsys.readouterr().err == ""
    monkeypatch.setattr(reader, "BIG_FILE", 10)
    assert len(read_rows(tmp_path)) == 1
    assert capsys.readouterr().err == f"reading {tmp_path / 'trials.csv'} (0 MiB; about 10 s per 100 MiB)...\n"
