"""Leaderboard settings are not part of an experiment's identity: `nas-stab leaderboard` re-slices a
run by another metric or axis, and rerunning with an edited `leaderboard:` rebuilds the table
without training; run directories made before these settings existed still open."""
from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent / "data"))
from lb_fixtures import grid_rows, make_run, spec_dict

from nas_stab.cli import main

SPEC = """\
name: lbset
seeds: 1
task: {dataset: {name: digits, train: 300, val: 100}}
model: {arch: mlp_resnet, depth: 2, width: 16}
train: {lr: 0.05, steps: 4, batch_size: 32}
stability: {every: 0, probe_batch: 32, hessian: false}
space:
  model.branches: [1, 2]
  train.lr: [0.01, 0.03, 0.1]
leaderboard: {transfer: model.branches}
"""


def _rows():
    t = {}
    for lab in ("sum", "stam"):
        for s in (1, 2):
            for lr in (0.1, 0.2, 0.4):
                t[(lab, s, lr)] = [0.9 - abs(lr - 0.2) - 0.01 * k for k in range(3)]
    rows = grid_rows(t)
    for r in rows:
        r["val_loss"] = 2.0 - r["val_acc"]
    return rows


def test_reslice_by_another_metric_and_axis_without_training(tmp_path, capsys):
    d = make_run(tmp_path, _rows(), spec=spec_dict("slice", seeds=[0, 1, 2]))
    before = (d / "trials.csv").read_bytes()
    assert main(["leaderboard", str(d), "--format", "csv", "--metric", "val_loss", "--tolerance", "0.5"]) == 0
    prov = (d / "leaderboard_provenance.txt").read_text()
    assert "metric: val_loss (minimize)" in prov and "tolerance: 0.5 octave" in prov
    assert "--metric val_loss" in prov  # the command that made the table
    df = pd.read_csv(d / "leaderboard.csv")
    assert df["best"].min() < 1.2  # a loss now: 2 - 0.9
    # swap the axes: rows by branch count, sizes by aggregation (not numbers: no slope)
    assert main(["leaderboard", str(d), "--format", "csv", "--transfer", "model.aggregation", "--compare", "model.branches"]) == 0
    df = pd.read_csv(d / "leaderboard.csv")
    assert sorted(df["label"]) == [1, 2] and df["lr_slope"].isna().all()
    assert (d / "trials.csv").read_bytes() == before  # nothing retrained or rewritten
    capsys.readouterr()
    assert main(["leaderboard", str(d), "--metric", "val_accc"]) == 2
    assert "did you mean 'val_acc'" in capsys.readouterr().err
    assert main(["leaderboard", str(d), "--transfer", "model.width2"]) == 2
    assert "--transfer" in capsys.readouterr().err
    assert main(["leaderboard", str(d), "--tolerance", "0"]) == 2


def test_rerun_with_edited_leaderboard_rebuilds_without_training(tmp_path, capsys):
    spec = tmp_path / "lbset.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "runs"
    assert main(["run", str(spec), "--out", str(out)]) == 0
    run = out / "lbset"
    trials = (run / "trials.csv").read_bytes()
    stored = yaml.safe_load((run / "spec.yaml").read_text())
    assert "**metric**: val_acc" in (run / "leaderboard.md").read_text()
    capsys.readouterr()
    spec.write_text(SPEC.replace("leaderboard: {transfer: model.branches}",
                                 "leaderboard: {transfer: model.branches, metric: val_loss, tolerance_octaves: 2}"))
    assert main(["run", str(spec), "--out", str(out)]) == 0
    assert (run / "trials.csv").read_bytes() == trials  # trained nothing
    md = (run / "leaderboard.md").read_text()
    assert "**metric**: val_loss" in md and "2 octave(s)" in md  # the new settings, not the stored ones
    now = yaml.safe_load((run / "spec.yaml").read_text())
    assert now["leaderboard"]["metric"] == "val_loss" and now["meta"] == stored["meta"]
    assert "leaderboard updated" in (run / "log.txt").read_text()


def _old_spec_hash(spec) -> str:
    """spec_hash as the code before leaderboard settings were refreshed computed it (a verbatim copy)."""
    from nas_stab.config import to_plain
    from nas_stab.config.schema import DatasetConfig

    plain = to_plain(spec)
    for k, v in DatasetConfig.RETIRED.items():  # every dataset's section then held every dataset's options
        plain["task"]["dataset"].setdefault(k, v)
    plain.pop("description", None)
    plain.pop("runner", None)
    plain.pop("leaderboard", None)
    plain.pop("logging", None)  # a section the earlier code did not have
    plain["search"].pop("bracket", None)  # nor these keys (search.sampler: bracket came later,
    plain["search"].pop("transfer", None)  # then search.transfer and the exponent knobs)
    plain["model"].pop("aggregation_exponent", None)
    plain["model"].pop("tau_exponent", None)
    plain["model"].pop("stages", None)  # and model.stages (plainnet) came after them
    plain["search"].pop("population_size", None)  # then search.population_size (nsga2)
    plain["model"].pop("layer_skip", None)  # and model.layer_skip (mlp, plainnet)
    for k in ("base_width", "base_depth", "readout_zero_init", "ffn_ratio"):  # then the muP keys
        plain["model"].pop(k, None)
    plain["stability"].pop("budget", None)  # then stability.budget
    plain["space"] = spec.raw.get("space") if spec.raw else None
    return hashlib.sha256(json.dumps(plain, sort_keys=True, default=str).encode()).hexdigest()[:16]


def test_run_dir_made_before_this_change_still_opens(tmp_path):
    """A spec.yaml written by the earlier code: no leaderboard.tolerance_octaves, the hash of the earlier
    algorithm. Reopening it with the same experiment (now validated with the new rules) resumes it."""
    from nas_stab.config import loads_spec
    from nas_stab.results.leaderboard import build_leaderboard
    from nas_stab.store.rundir import RunDir

    spec = loads_spec(SPEC)
    run = tmp_path / "runs" / "lbset"
    run.mkdir(parents=True)
    data = RunDir.spec_plain(spec)
    del data["leaderboard"]["tolerance_octaves"]
    data["meta"] = {"spec_hash": _old_spec_hash(spec), "nas_stab_version": "0.1.0", "git_commit": "c7f252aac8e3"}
    (run / "spec.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    rows = [{"seed": 0, "model.branches": b, "train.lr": lr, "val_acc": 0.5 + lr, "key": f"k{b}{lr}", "status": "complete"}
            for b in (1, 2) for lr in (0.01, 0.03, 0.1)]
    pd.DataFrame(rows).to_csv(run / "trials.csv", index=False)
    with RunDir.open(tmp_path / "runs", spec) as rd:  # no "different spec" refusal
        assert rd.read_meta()["spec_hash"] == _old_spec_hash(spec)
    paths = build_leaderboard([run], formats=("md", "csv"), plots=False)
    assert pd.read_csv(paths["csv"])["transfers"].tolist() == ["inconclusive"]


def test_warnings_for_few_seeds_and_a_coarse_grid(tmp_path, capsys):
    from nas_stab.config import loads_spec
    from nas_stab.config.rules_leaderboard import leaderboard_warnings

    fine = SPEC.replace("seeds: 1", "seeds: 3").replace("[0.01, 0.03, 0.1]", "[0.01, 0.02, 0.04]")
    assert leaderboard_warnings(loads_spec(fine)) == []
    warns = leaderboard_warnings(loads_spec(SPEC))  # 1 seed, steps of 1.58 and 1.74 octaves
    assert len(warns) == 2 and "1 seed" in warns[0] and "coarser than 1 octave (largest step 1.74" in warns[1]
    assert all("inconclusive" in w for w in warns)
    p = tmp_path / "w.yaml"
    p.write_text(SPEC)
    assert main(["validate", str(p), "--no-timing"]) == 0  # a warning, not an error
    assert capsys.readouterr().err.count("warning:") == 2


def test_status_opens_a_run_made_before_the_lr_rule(tmp_path):
    """A run directory whose stored spec searches 2 lrs with a transfer axis (valid before the >= 3 lrs
    rule) still opens for `status` and `leaderboard`; only a new run of such a file is refused."""
    from nas_stab.config import load_run_spec, loads_spec
    from nas_stab.store.rundir import RunDir

    old = SPEC.replace("[0.01, 0.03, 0.1]", "[0.01, 0.03]")
    spec = loads_spec(SPEC)
    run = tmp_path / "lbset"
    run.mkdir()
    data = RunDir.spec_plain(spec)
    data["space"]["train.lr"] = [0.01, 0.03]
    data["meta"] = {"spec_hash": "x"}
    (run / "spec.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
    pd.DataFrame([{"trial": i, "seed": 0, "status": "complete", "model.branches": b, "train.lr": lr, "val_acc": 0.5,
                   "key": f"k{i}"} for i, (b, lr) in enumerate([(1, 0.01), (1, 0.03), (2, 0.01), (2, 0.03)])]
                 ).to_csv(run / "trials.csv", index=False)
    assert load_run_spec(run).space.get("train.lr").values == (0.01, 0.03)
    assert main(["status", str(run)]) == 0
    assert main(["leaderboard", str(run), "--format", "csv"]) == 0
    p = tmp_path / "old.yaml"
    p.write_text(old)
    assert main(["validate", str(p), "--no-timing"]) == 2


def test_a_fixed_lr_is_a_comparison_across_sizes_and_two_lrs_an_error(tmp_path, capsys):
    """lr left out of space: the sizes are compared at one lr (a warning says every verdict is inconclusive);
    lr searched with two values: an error naming the file, line and key (every optimum is at a grid end)."""
    from nas_stab.config import loads_spec
    from nas_stab.config.rules_leaderboard import leaderboard_warnings

    fixed = SPEC.replace("seeds: 1", "seeds: 3").replace("  train.lr: [0.01, 0.03, 0.1]\n", "")
    warns = leaderboard_warnings(loads_spec(fixed))
    assert len(warns) == 1 and "not searched" in warns[0] and "'inconclusive' (one lr)" in warns[0] and "never 'yes'" in warns[0]
    p = tmp_path / "fixed.yaml"
    p.write_text(fixed)
    assert main(["validate", str(p), "--no-timing"]) == 0
    assert capsys.readouterr().err.count("warning:") == 1
    two = tmp_path / "two.yaml"
    two.write_text(SPEC.replace("[0.01, 0.03, 0.1]", "[0.01, 0.03]"))
    assert main(["validate", str(two), "--no-timing"]) != 0
    err = capsys.readouterr().err
    assert f"{two}:" in err and "leaderboard.lr" in err and "only 2 value(s)" in err


def test_a_fixed_lr_table_ranks_by_the_metric_and_says_one_lr(tmp_path):
    from nas_stab.results.leaderboard import build_leaderboard

    t = {(lab, s, 0.001): [v + 0.01 * k for k in range(3)]
         for lab, v in (("sum", 0.5), ("stam", 0.8)) for s in (3, 10)}
    spec = spec_dict(space={"model.branches": [3, 10], "model.aggregation": ["sum", "stam"]})
    run = make_run(tmp_path, grid_rows(t), spec=spec)
    out = pd.read_csv(build_leaderboard([run], formats=("csv",), plots=False)["csv"])
    assert out["label"].tolist() == ["stam", "sum"]  # ranked by the metric at the one lr
    assert (out["transfers"] == "inconclusive").all() and out["why"].str.contains("one lr").all()


def test_merging_runs_of_different_models_is_refused_unless_compared(tmp_path):
    # runs/quickstart (depth 4) and runs/qs-deeper (depth 8) used to be pooled into the same cells
    from nas_stab.errors import SpecError
    from nas_stab.results.leaderboard import load_analysis

    rows = grid_rows({("sum", 1, 0.1): [0.5, 0.52], ("sum", 1, 0.2): [0.6, 0.61], ("sum", 1, 0.4): [0.55, 0.56],
                      ("sum", 2, 0.1): [0.5, 0.52], ("sum", 2, 0.2): [0.6, 0.61], ("sum", 2, 0.4): [0.55, 0.56]})
    a_spec, b_spec = spec_dict("shallow"), spec_dict("deeper")
    b_spec["model"]["depth"] = 8
    a = make_run(tmp_path / "a", rows, spec=a_spec, history=False)
    b = make_run(tmp_path / "b", rows, spec=b_spec, history=False)
    with pytest.raises(SpecError, match=r"model\.depth \(3 in .*, 8 in .*\).*--compare model\.aggregation,model\.depth"):
        load_analysis([a, b], n_boot=0)
    an, _, _ = load_analysis([a, b], n_boot=0, overrides={"compare": ("model.aggregation", "model.depth")})
    assert sorted(an.rows["model.depth"].tolist()) == [3, 8]
    # the same model run twice (another seed set, another data root) merges as before
    c_spec = spec_dict("again")
    c_spec["task"]["dataset"]["root"] = "/elsewhere"
    c = make_run(tmp_path / "c", rows, spec=c_spec, history=False)
    load_analysis([a, c], n_boot=0)


def test_the_table_names_the_command_that_trained_it(tmp_path, monkeypatch):
    """`nas-stab run FILE --set ...` records its command line in the run's meta; the leaderboard's provenance
    gives it (with the commit) beside the command that built the table. A run started from Python records none
    and says so."""
    spec = tmp_path / "lbset.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "runs"
    argv = ["run", str(spec), "--out", str(out), "--set", "train.steps=3"]
    monkeypatch.setattr("sys.argv", ["/usr/bin/nas-stab", *argv])
    assert main(argv) == 0
    meta = yaml.safe_load((out / "lbset" / "spec.yaml").read_text())["meta"]
    assert meta["command"] == f"nas-stab run {spec} --out {out} --set train.steps=3"
    md = (out / "lbset" / "leaderboard.md").read_text()
    assert f"**trained by**: nas-stab run {spec} --out {out} --set train.steps=3 (commit " in md
    monkeypatch.setattr("sys.argv", ["pytest"])
    assert main(["run", str(spec), "--out", str(tmp_path / "api")]) == 0
    assert "**trained by**: unknown (the run did not record its command)" in (tmp_path / "api" / "lbset" / "leaderboard.md").read_text()


def test_a_rerun_by_another_command_is_named_beside_the_first(tmp_path, monkeypatch):
    """A run resumed by another command line (more seeds, other runner settings) records it once in
    meta.resumed, and the table's "trained by" names both commands; the seeds line counts every seed the
    trials hold, not only the spec's (adaptive seeds add seeds beyond it)."""
    spec = tmp_path / "lbset.yaml"
    spec.write_text(SPEC)
    out = tmp_path / "runs"
    first = ["run", str(spec), "--out", str(out)]
    again = [*first, "--set", "runner.concurrency=1"]
    for argv in (first, again, again):  # the same resume twice is recorded once
        monkeypatch.setattr("sys.argv", ["/usr/bin/nas-stab", *argv])
        assert main(argv) == 0
    meta = yaml.safe_load((out / "lbset" / "spec.yaml").read_text())["meta"]
    assert [e["command"] for e in meta["resumed"]] == [f"nas-stab run {spec} --out {out} --set runner.concurrency=1"]
    md = (out / "lbset" / "leaderboard.md").read_text()
    assert (f"**trained by**: nas-stab run {spec} --out {out} (commit " in md
            and f"; then nas-stab run {spec} --out {out} --set runner.concurrency=1 (commit " in md)

    d = make_run(tmp_path / "more", _rows(), spec=spec_dict("more", seeds=[1]))
    assert main(["leaderboard", str(d), "--format", "csv"]) == 0
    assert "seeds: 0, 1, 2\n" in (d / "leaderboard_provenance.txt").read_text()  # the spec names seed 1 only
