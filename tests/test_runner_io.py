"""The local runner's per-run bookkeeping: appended trials.csv, data loaded once, fast SQLite."""
import csv

import optuna
from conftest import TINY

from nas_stab import data as data_mod
from nas_stab.config import loads_spec
from nas_stab.search.local import run_local
from nas_stab.search.optuna_study import make_storage
from nas_stab.store.rundir import RunDir, trials_csv


def _rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_add_trials_appends_then_final_rewrite_is_sorted(tmp_path):
    rd = RunDir(tmp_path)

    def row(t, **kw):
        return {"trial": t, "seed": 0, "status": "complete", "objective": 0.5, "key": f"k{t}", "run_id": f"t{t}", **kw}

    rows = {}

    def add(r, **kw):
        rows[r["key"]] = r
        rd.add_trials([r], rows.values(), ["train.lr"], "classification", **kw)

    add(row(2, **{"train.lr": 0.1}))  # first write: a rewrite, sets the header
    size = (tmp_path / "trials.csv").stat().st_size
    add(row(1, **{"train.lr": 0.2}))  # appended: the file grows by one line, finish order kept
    text = (tmp_path / "trials.csv").read_text()
    assert len(text) > size and text.count("\n") == 3
    assert [r["trial"] for r in _rows(tmp_path / "trials.csv")] == ["2", "1"]
    add(row(3, new_metric=1.0))  # a column the header lacks: the whole file is rewritten, sorted
    got = _rows(tmp_path / "trials.csv")
    assert [r["trial"] for r in got] == ["1", "2", "3"] and "new_metric" in got[0]
    assert (tmp_path / "trials.csv").read_text() == trials_csv(list(rows.values()), ["train.lr"], "classification")


def test_partial_appended_row_is_dropped(tmp_path):
    rd = RunDir(tmp_path)
    rows = [{"trial": 0, "seed": 0, "status": "complete", "key": "a", "run_id": "t0"}]
    rd.write_trials(rows, [], "classification")
    with open(tmp_path / "trials.csv", "a") as f:
        f.write("1,0,complete,0.5")  # a kill in the middle of an append
    assert [r["key"] for r in RunDir(tmp_path).read_trials()] == ["a"]


def test_local_run_appends_and_ends_sorted(tmp_path):
    spec = loads_spec(TINY.replace("[0.01, 0.05]", "[0.01, 0.02, 0.05]"))
    with RunDir.open(tmp_path, spec) as rd:
        run_local(spec, rd)
    d = tmp_path / "tiny"
    text = (d / "trials.csv").read_text()
    rows = _rows(d / "trials.csv")
    assert len(rows) == 6 and [(int(r["trial"]), int(r["seed"])) for r in rows] == sorted((int(r["trial"]), int(r["seed"])) for r in rows)
    assert text == trials_csv(RunDir(d).read_trials(), spec.space.keys, "classification")


def test_reuse_loaded_loads_once_inside_the_block_only(monkeypatch):
    spec = loads_spec("name: x\ntask: {dataset: {name: digits}}\nmodel: {arch: mlp}")
    calls = []
    real = data_mod.DATASETS.get("digits")
    monkeypatch.setattr(data_mod.DATASETS, "get", lambda name: (lambda cfg, device: calls.append(1) or real(cfg, device)))
    with data_mod.reuse_loaded():
        a = data_mod.load_dataset(spec, "cpu")
        assert data_mod.load_dataset(spec, "cpu") is a
    assert len(calls) == 1
    assert data_mod.load_dataset(spec, "cpu") is not a  # outside the block: read again
    assert len(calls) == 2


def test_sqlite_storage_is_wal_and_readable_by_plain_optuna(tmp_path):
    url = f"sqlite:///{tmp_path / 'study.db'}"
    study = optuna.create_study(study_name="s", storage=make_storage(url))
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=3)
    with make_storage(url).engine.connect() as c:
        assert c.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert c.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
    assert len(optuna.load_study(study_name="s", storage=url).trials) == 3


def test_rerun_sorts_a_file_left_in_finish_order(tmp_path):
    spec = loads_spec(TINY)
    with RunDir.open(tmp_path, spec) as rd:
        run_local(spec, rd)
    p = tmp_path / "tiny" / "trials.csv"
    sorted_text = p.read_text()
    head, *lines = sorted_text.splitlines(keepends=True)
    p.write_text(head + "".join(reversed(lines)))  # as if killed between the last append and the final sort
    with RunDir.open(tmp_path, spec) as rd:
        assert run_local(spec, rd) == {"complete": 4}  # nothing to train
    assert p.read_text() == sorted_text
