"""`runner.kind: table` (nas_stab/search/table_runner.py): a search served by a published table's records instead of
training reproduces the table's verdicts; a run the table does not hold is an error, never an invented value."""
from __future__ import annotations

import pandas as pd
from conftest import ROOT, run_cli

SPEC = ROOT / "spaces" / "published" / "tau-fig1.yaml"
TABLE = ["--set", "runner.kind=table", "--set", "runner.table=tau-fig1"]


def test_replaying_a_published_experiment_reproduces_its_verdicts_without_training(tmp_path):
    r = run_cli("run", SPEC, *TABLE, "--out", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    d = tmp_path / "tau-fig1"
    assert "replayed from the published table tau-fig1 (trials)" in (d / "log.txt").read_text()
    r = run_cli("leaderboard", d, "--format", "csv")
    assert r.returncode == 0, r.stderr[-2000:]
    mine = pd.read_csv(d / "leaderboard.csv").set_index("label")
    published = pd.read_csv(ROOT / "leaderboards" / "tau-fig1" / "leaderboard.csv").set_index("label")
    cols = ["transfers", "worst_regret", "worst_regret_lo", "worst_regret_hi", "lr_drift", "runs", "best"]
    pd.testing.assert_frame_equal(mine.loc[published.index, cols], published[cols], check_dtype=False)
    replayed = pd.read_csv(d / "trials.csv")
    recorded = pd.read_csv(ROOT / "leaderboards" / "tau-fig1" / "trials.csv")
    key = ["model.depth", "model.skip", "model.tau", "seed"]  # (a fixed-lr experiment: Figure 1 at lr 0.001)
    both = replayed.merge(recorded, on=key, suffixes=("", "_rec"))
    assert len(both) == len(recorded) == len(replayed)
    assert (both["status"] == both["status_rec"]).all()
    assert ((both["train_loss"] - both["train_loss_rec"]).abs().fillna(0) < 1e-9).all()  # the record's value, never another


def test_a_run_the_table_does_not_hold_is_an_error(tmp_path):
    r = run_cli("run", SPEC, *TABLE, "--set", "space.train.lr=[0.5, 0.7, 0.9]", "--out", tmp_path)
    assert r.returncode == 2 and "tau-fig1 holds no run of" in r.stderr and "train.lr=0.5, seed 0" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_an_unknown_table_or_a_missing_name_is_refused_before_anything_is_written(tmp_path):
    r = run_cli("run", SPEC, "--set", "runner.kind=table", "--set", "runner.table=nope", "--out", tmp_path)
    assert r.returncode == 2 and "holds no runs of nope/trials" in r.stderr, r.stderr
    assert not (tmp_path / "tau-fig1").exists()
    r = run_cli("validate", SPEC, "--set", "runner.kind=table")
    assert r.returncode == 2 and "runner.table: runner.kind: table serves a published table's runs" in r.stderr


def test_the_readme_strategy_table_is_the_stored_benchmark():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_strategies", ROOT / "benchmarks" / "bench_strategies.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.BEGIN + "\n" + bench.render() + bench.END in (ROOT / "README.md").read_text()
    rows = pd.read_csv(bench.STORE)
    published = rows[rows["strategy"] == "published search"].dropna(subset=["runs"])
    assert len(published) >= 3 and (published["agree"] == published["rows"]).all()  # a replay reproduces its table


def test_an_optuna_sampler_is_served_from_the_table_too(tmp_path):
    """A random sampler's trials (each trains every seed) are answered from the records, value for value."""
    r = run_cli("run", SPEC, *TABLE, "--set", "search.sampler=random", "--set", "search.trials=8", "--set", "seeds=3",
                "--out", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    replayed = pd.read_csv(tmp_path / "tau-fig1" / "trials.csv")
    recorded = pd.read_csv(ROOT / "leaderboards" / "tau-fig1" / "trials.csv")
    assert len(replayed) == 8 * 3 and set(replayed["seed"]) == {0, 1, 2}
    key = ["model.depth", "model.skip", "model.tau", "seed"]
    both = replayed.fillna({"model.tau": "-"}).merge(recorded.fillna({"model.tau": "-"}), on=key, suffixes=("", "_rec"))
    assert len(both) == len(replayed)
    assert (both["status"] == both["status_rec"]).all()
    assert ((both["train_loss"] - both["train_loss_rec"]).abs().fillna(0) < 1e-9).all()


def test_a_replayed_run_gets_its_stored_history(tmp_path):
    """Where the release stores a table's histories (width-heldout), a replayed run's history file is the run's own
    steps: its last logged training loss is its record's, and its steps run to the record's."""
    import yaml

    d = yaml.safe_load((ROOT / "spaces" / "published" / "width-heldout.yaml").read_text())
    d.update(name="replay-history", seeds=[105, 106], search={"sampler": "grid", "objective": "train_loss_tail"},
             space={"model.width": [256, 512], "model.parametrization": ["mup"], "model.readout_zero_init": [True],
                    "train.lr": [0.0016, 0.0032, 0.0064]},
             leaderboard={**d["leaderboard"], "reference": 256})
    spec = tmp_path / "replay.yaml"
    spec.write_text(yaml.safe_dump(d))
    r = run_cli("run", spec, "--set", "runner.kind=table", "--set", "runner.table=width-heldout", "--out", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    run = tmp_path / "replay-history"
    rows = pd.read_csv(run / "trials.csv")
    assert len(rows) == 12
    for _, row in rows.iterrows():
        h = pd.read_csv(run / "history" / f"{row['run_id']}.csv")
        assert h["step"].iloc[-1] == row["steps"] == 600
        assert abs(h["train_loss"].dropna().iloc[-1] - row["train_loss"]) < 1e-5


def test_a_transfer_search_is_served_from_the_table_too(tmp_path):
    """A transfer search (outer trials sample the aggregation, each trains every size x lr x seed of the grid)
    replayed against the archived stam-branches grid: every inner run is the table's record, so each sampled row's
    point estimates are the table's own (its intervals and verdicts follow today's rules)."""
    spec = ROOT / "spaces" / "published" / "stam-branches.yaml"
    r = run_cli("run", spec, "--set", "runner.kind=table", "--set", "runner.table=stam-branches", "--set",
                "search.sampler=random", "--set", "search.trials=3", "--set", "search.transfer={}", "--out", tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    d = tmp_path / "stam-branches"
    runs = pd.read_csv(d / "trials.csv")
    assert runs["outer_trial"].notna().all() and runs.groupby("model.aggregation").size().eq(42).all()
    r = run_cli("leaderboard", d, "--format", "csv")
    assert r.returncode == 0, r.stderr[-2000:]
    mine = pd.read_csv(d / "leaderboard.csv").set_index("label")
    table = pd.read_csv(ROOT / "leaderboards" / "archive" / "stam-branches" / "leaderboard.csv", comment="#").set_index("label")
    cols = ["transfer_regret", "worst_regret", "lr_drift", "best"]
    assert len(mine) >= 1
    pd.testing.assert_frame_equal(mine[cols], table.loc[mine.index, cols], check_dtype=False)
