"""Write before tell (issue 16, point 1): a finished trial's history and trials.csv rows
are on disk (fsynced) before Optuna is told, for every sampler, and a rerun reconciles
the study with trials.csv. The driver is killed, or its disk fills, exactly inside the
window between the two, through the NAS_STAB_FAULT test hook (nas_stab.search.records.write_records):
no timing luck. Then a rerun: 0 runs lost, 0 duplicated."""
from __future__ import annotations

import csv
import signal

import optuna
from conftest import run_cli
from conftest_ray import spec_text

SAMPLED = spec_text(seeds=2, train={"steps": 10, "threads": 1}, stability={"every": 0, "probe_batch": 32, "hessian": False},
                    search={"sampler": "random", "trials": 4, "seed": 3})


def _rows(d):
    with open(d / "trials.csv") as f:
        return list(csv.DictReader(f))


def _check_complete(d, trials: int, seeds: int = 2):
    """Every trial the study finished has all its rows, nothing is there twice, nothing is lost."""
    rows = _rows(d)
    pairs = [(r["optuna_trial"], r["seed"]) for r in rows]
    assert len(pairs) == len(set(pairs)), f"duplicated rows: {pairs}"
    assert len({r["key"] for r in rows}) == len(rows)
    study = optuna.load_study(study_name="tiny", storage=f"sqlite:///{d / 'study.db'}")
    states = {t.number: t for t in study.trials}
    assert not [t for t in study.trials if t.state.name in ("RUNNING", "WAITING")]
    done = {n for n, t in states.items() if t.state.name == "COMPLETE"}
    recorded = {int(r["optuna_trial"]) for r in rows}
    superseded = {t.user_attrs["retrains"] for t in study.trials if "retrains" in t.user_attrs}
    assert recorded <= done, "rows of a trial the study does not count"
    assert done - recorded <= superseded, f"trials finished in the study without rows: {sorted(done - recorded - superseded)}"
    assert len(recorded) == trials and len(rows) == trials * seeds, (len(recorded), len(rows))
    assert len(list((d / "history").glob("*.csv"))) == trials * seeds


def _main(*args) -> int:
    from nas_stab.cli import main

    return main([str(a) for a in args])


def test_sampled_search_killed_between_records_and_tell_loses_nothing(tmp_path):
    spec = tmp_path / "tiny.yaml"
    spec.write_text(SAMPLED)
    out = tmp_path / "out"
    first = run_cli("run", spec, "--out", out, env={"NAS_STAB_FAULT": "kill@2"})
    d = out / "tiny"
    assert first.returncode == -signal.SIGKILL, first.stderr[-2000:]
    assert len(_rows(d)) == 4  # the second trial's rows were written, Optuna was not told
    assert _main("run", spec, "--out", out) == 0
    _check_complete(d, 4)
    assert "told Optuna 1 trial(s) whose rows were recorded" in (d / "log.txt").read_text()
    assert _main("run", spec, "--out", out) == 0 and len(_rows(d)) == 8  # a finished search trains nothing more


def test_sampled_search_disk_full_at_records_loses_nothing(tmp_path, monkeypatch, capsys):
    from nas_stab.search import records

    spec = tmp_path / "tiny.yaml"
    spec.write_text(SAMPLED)
    out = tmp_path / "out"
    monkeypatch.setenv(records.FAULT_ENV, "enospc@2")
    monkeypatch.setattr(records, "_fault_calls", [0])
    assert _main("run", spec, "--out", out) == 2
    err = capsys.readouterr().err
    assert "No space left on device" in err and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: No space left on device")
    d = out / "tiny"
    assert len(_rows(d)) == 2
    monkeypatch.delenv(records.FAULT_ENV)
    assert _main("run", spec, "--out", out) == 0
    _check_complete(d, 4)


def test_finished_trial_without_rows_is_trained_again(tmp_path):
    """A study trial told COMPLETE whose rows never reached trials.csv (what an older nas_stab
    left after a kill or a full disk) is trained again on the rerun, with its configuration."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(SAMPLED)
    out = tmp_path / "out"
    assert _main("run", spec, "--out", out) == 0
    d = out / "tiny"
    rows = _rows(d)
    lost = [r for r in rows if r["optuna_trial"] == "2"]
    kept = [r for r in rows if r["optuna_trial"] != "2"]
    with open(d / "trials.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(kept)
    for r in lost:
        (d / "history" / f"{r['run_id']}.csv").unlink()
    assert _main("run", spec, "--out", out) == 0
    _check_complete(d, 4)
    redone = [r for r in _rows(d) if r["optuna_trial"] not in {k["optuna_trial"] for k in kept}]
    assert [r["model.branches"] + r["train.lr"] for r in redone] == [r["model.branches"] + r["train.lr"] for r in lost]
    assert "trained again" in (d / "log.txt").read_text()
