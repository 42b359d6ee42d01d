"""`nas-stab judge`: a sweep trained outside nas_stab (a CSV, an MLflow experiment, an Optuna study) gets the verdicts
`nas-stab leaderboard` gives the same runs; a bad sweep fails with one line per problem, all at once."""
import math
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
from conftest import ROOT, run_cli

from nas_stab.errors import SpecError, SpecErrors
from nas_stab.results.judge import Sweep, SweepColumns, judge, read_sweep

PUBLISHED = ROOT / "leaderboards"
COMPARED = ["transfers", "why", "worst_regret", "worst_regret_lo", "worst_regret_hi", "transfer_regret_lo", "transfer_regret_hi"]

# published tables as someone else's tool would export them: plain column names, its own status words
TABLES = {
    "tau-depth": ({"model.depth": "depth", "model.tau": "tau", "train.lr": "lr", "val_acc": "acc"},
                  dict(size="depth", compare=("tau",), metric="acc"), {"kind": None}),
    "skip-lambda": ({"model.depth": "depth", "model.skip": "skip", "model.skip_lambda": "lam", "train.lr": "learning_rate"},
                    dict(size="depth", compare=("skip", "lam"), metric="val_acc", lr="learning_rate"), {}),
    "mup-width": ({"model.width": "width", "model.parametrization": "param", "train.lr": "lr"},
                  dict(size="width", compare=("param",), metric="train_loss_tail"), {}),
}
WORDS = {"complete": "finished", "diverged": "diverged", "failed": "crashed", "pruned": "pruned"}


def _export(name: str) -> tuple[pd.DataFrame, SweepColumns]:
    rename, cols, _ = TABLES[name]
    t = pd.read_csv(PUBLISHED / name / "trials.csv").rename(columns=rename)
    t["state"] = t["status"].map(WORDS)
    keep = list(dict.fromkeys([cols["size"], cols.get("lr", "lr"), "seed", cols["metric"], "state", *cols["compare"]]))
    return t[keep], SweepColumns(lr=cols.get("lr", "lr"), metric=cols["metric"], size=cols["size"], seed="seed",
                                 status="state", compare=cols["compare"])


def _same_as_published(a, name: str) -> None:
    """The judged rows equal the published leaderboard.csv (what `nas-stab leaderboard` wrote for the run
    directory), row by row in rank order."""
    pub = pd.read_csv(PUBLISHED / name / "leaderboard.csv")
    got = a.rows
    assert list(got["label"].astype(str)) == list(pub["label"].astype(str))
    for c in COMPARED:
        if not pd.api.types.is_numeric_dtype(got[c]):
            assert list(got[c]) == list(pub[c]), c
        else:  # the CSV holds 6 significant digits
            np.testing.assert_allclose(got[c].to_numpy(float), pub[c].to_numpy(float), rtol=1e-5, atol=1e-12, err_msg=c)


@pytest.mark.parametrize("name", sorted(TABLES))
def test_a_published_table_exported_to_csv_is_judged_as_published(name, tmp_path):
    df, cols = _export(name)
    p = tmp_path / f"{name}.csv"
    df.to_csv(p, index=False)
    a, prov = judge(read_sweep(str(p)), cols, classes=10)
    _same_as_published(a, name)
    assert dict(prov)["sweep"] == str(p)


def test_a_parquet_file_and_a_wandb_runs_export_are_judged_as_published(tmp_path):
    """Parquet (pyarrow); a W&B runs table exported as CSV: its config and summary columns, its state words."""
    pytest.importorskip("pyarrow")
    df, cols = _export("skip-lambda")
    p = tmp_path / "sweep.parquet"
    df.to_parquet(p)
    a, _ = judge(read_sweep(str(p)), cols, classes=10)
    _same_as_published(a, "skip-lambda")
    wandb = df.rename(columns={"depth": "config.depth", "learning_rate": "config.learning_rate", "seed": "config.seed",
                               "skip": "config.skip", "lam": "config.lam", "val_acc": "summary.val_acc", "state": "State"})
    wandb["State"] = wandb["State"].str.replace("crashed", "failed")
    q = tmp_path / "wandb_export.csv"
    wandb.to_csv(q, index=False)
    a, _ = judge(read_sweep(str(q)), replace(cols, status="State"), classes=10)
    _same_as_published(a, "skip-lambda")


def test_the_command_line_writes_the_leaderboard_files(tmp_path):
    df, cols = _export("skip-lambda")
    p = tmp_path / "sweep.csv"
    df.to_csv(p, index=False)
    out = tmp_path / "out"
    r = run_cli("judge", p, "--size", "depth", "--lr", "learning_rate", "--seed", "seed", "--metric", "val_acc",
                "--status", "state", "--compare", "skip,lam", "--classes", "10", "--format", "md,csv", "--out", out, "--no-plots")
    assert r.returncode == 0, r.stderr
    got = pd.read_csv(out / "leaderboard.csv")
    pub = pd.read_csv(PUBLISHED / "skip-lambda" / "leaderboard.csv")
    assert list(got["transfers"]) == list(pub["transfers"]) and list(got["why"]) == list(pub["why"])
    md = (out / "leaderboard.md").read_text()
    assert md.startswith(f"# LR-transfer leaderboard: {p}") and "nas-stab judge" in md
    assert {f.name for f in out.iterdir()} >= {"leaderboard.md", "leaderboard.csv", "leaderboard_cells.csv", "leaderboard_provenance.txt"}


def test_an_mlflow_experiment_is_judged_as_published(tmp_path):
    mlflow = pytest.importorskip("mlflow")
    df, cols = _export("skip-lambda")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("skip-lambda")
    for r in df.to_dict("records"):
        with mlflow.start_run():
            mlflow.log_params({k: (r[k].item() if hasattr(r[k], "item") else r[k])
                               for k in ("depth", "learning_rate", "seed", "skip", "lam")})
            if isinstance(r["val_acc"], float) and math.isfinite(r["val_acc"]):
                mlflow.log_metric("val_acc", r["val_acc"])
            mlflow.set_tag("state", r["state"])
    a, prov = judge(read_sweep(mlflow_uri=uri, experiment="skip-lambda"), cols, classes=10)
    _same_as_published(a, "skip-lambda")
    assert dict(prov)["sweep"] == f"MLflow experiment 'skip-lambda' at {uri}"


def test_an_optuna_study_is_judged_as_published(tmp_path):
    optuna = pytest.importorskip("optuna")
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    df, _ = _export("skip-lambda")
    storage = f"sqlite:///{tmp_path / 'optuna.db'}"
    study = optuna.create_study(study_name="skip-lambda", storage=storage, direction="maximize")
    dist = {"depth": IntDistribution(1, 10_000), "learning_rate": FloatDistribution(1e-6, 100, log=True),
            "skip": CategoricalDistribution(sorted(df["skip"].unique().tolist())),
            "lam": CategoricalDistribution(sorted(df["lam"].unique().tolist()))}
    trials = []
    for r in df.to_dict("records"):
        r = {k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()}  # numpy scalars -> Python (JSON)
        ok = r["state"] == "finished" and math.isfinite(r["val_acc"])
        trials.append(optuna.trial.create_trial(
            params={k: r[k] for k in dist}, distributions=dist, value=r["val_acc"] if ok else None,
            state=optuna.trial.TrialState.COMPLETE if ok else optuna.trial.TrialState.FAIL,
            user_attrs={"seed": int(r["seed"]), "status": r["state"]}))
    study.add_trials(trials)
    cols = SweepColumns(lr="learning_rate", metric="value", size="depth", seed="seed", status="status", compare=("skip", "lam"))
    a, _ = judge(read_sweep(optuna_storage=storage, study="skip-lambda"), cols, kind="accuracy", classes=10)
    _same_as_published(a, "skip-lambda")


def _sweep(**cols) -> Sweep:
    base = {"width": [64, 64, 128, 128] * 3, "lr": [0.1, 0.2] * 6, "seed": [0] * 4 + [1] * 4 + [2] * 4,
            "acc": [0.9, 0.8, 0.85, 0.9] * 3, "state": ["finished"] * 12}
    base.update(cols)
    return Sweep(pd.DataFrame(base), "sweep.csv")


COLS = SweepColumns(lr="lr", metric="acc", size="width", seed="seed", status="state")


def test_a_bad_sweep_gets_every_problem_at_once_one_line_each():
    bad = _sweep(lr=["x", 0.2] * 6, width=[64, 64, 128, math.inf] * 3, state=["finished", "exploded"] * 6)
    with pytest.raises(SpecErrors) as e:
        judge(bad, COLS)
    assert str(e.value).splitlines() == [
        "sweep.csv: --status: column 'state': unknown status 'exploded'; known: complete, completed, crashed, diverged, "
        "error, fail, failed, finished, killed, nan, ok, pruned, queued, running, scheduled, success, waiting",
        "sweep.csv: --lr: column 'lr' holds values that are not finite numbers ('x'), in 6 of 12 rows",
        "sweep.csv: --size: column 'width' holds values that are not finite numbers ('inf'), in 3 of 12 rows",
    ]
    with pytest.raises(SpecErrors) as e:
        judge(_sweep(), SweepColumns(lr="lrr", metric="accuracy_top1", size="widht", seed="seed"))
    assert str(e.value).splitlines() == [
        "sweep.csv: --lr: no column 'lrr'; did you mean 'lr'?",
        "sweep.csv: --metric: no column 'accuracy_top1'; valid: width, lr, seed, acc, state",
        "sweep.csv: --size: no column 'widht'; did you mean 'width'?",
    ]


def test_runs_given_twice_mixed_metrics_and_an_unknown_kind_are_refused():
    with pytest.raises(SpecError, match=r"--seed: 12 rows are runs given twice \(the same width, lr; e.g. width=64, lr=0.1\): "
                                        r"name the seed column with --seed"):
        judge(_sweep(), SweepColumns(lr="lr", metric="acc", size="width"))
    long = _sweep(metric=["acc", "loss"] * 6).runs.rename(columns={"acc": "value"})
    with pytest.raises(SpecError, match=r"rows hold several metrics \(column 'metric': 'acc', 'loss'\)"):
        judge(Sweep(long, "long.csv"), SweepColumns(lr="lr", metric="value", size="width", seed="seed"), kind="accuracy")
    with pytest.raises(SpecError, match=r"--kind: what is 'score'\?"):
        judge(Sweep(_sweep().runs.rename(columns={"acc": "score"}), "s.csv"), SweepColumns(lr="lr", metric="score", size="width", seed="seed"))
    with pytest.raises(SpecError, match=r"--minimize: 'acc' judged as accuracy is to be maximized"):
        judge(_sweep(), COLS, direction="minimize")
    with pytest.raises(SpecError, match=r"no run at reference size '32'; sizes: 64, 128"):
        judge(_sweep(), COLS, reference="32")


def test_the_command_line_exits_2_with_one_line_per_problem(tmp_path):
    p = tmp_path / "bad.csv"
    _sweep(lr=["x", 0.2] * 6).runs.to_csv(p, index=False)
    r = run_cli("judge", p, "--size", "widht", "--lr", "lr", "--seed", "seed", "--metric", "acc", "--out", tmp_path / "o")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip().splitlines() == [f"error: {p}: --size: no column 'widht'; did you mean 'width'?"]


def test_fewer_than_three_seeds_is_inconclusive_with_its_reason_and_running_runs_are_left_out():
    two = _sweep(seed=[0] * 4 + [1] * 4 + [2] * 4, state=["finished"] * 8 + ["running"] * 4)
    a, prov = judge(two, COLS, classes=10, n_boot=100)
    assert a.rows.loc[0, "transfers"] == "inconclusive" and a.rows.loc[0, "why"].startswith("2 seeds")
    assert ("note", "4 runs still going (status running, waiting...) were left out") in prov


@pytest.mark.parametrize("fmt", ["md", "csv", "tex", "html"])
def test_every_file_a_leaderboard_names_exists_beside_it(fmt, tmp_path):
    """Each format written alone, with and without figures: every leaderboard_*.csv, leaderboard.* and plots/*.png
    its text names is there."""
    import re

    from nas_stab.results.leaderboard import write_leaderboard

    df, cols = _export("skip-lambda")
    a, prov = judge(Sweep(df, "sweep.csv"), cols, classes=10, n_boot=100)
    for plots in (False, True):
        out = tmp_path / f"{fmt}-{plots}"
        written = write_leaderboard(a, prov, out, fmt, plots=plots)
        text = (out / f"leaderboard.{fmt}").read_text()
        named = set(re.findall(r"(?<![/\w])(leaderboard(?:_\w+)?\.(?:csv|md|tex|html|txt)|plots/\w+\.png)", text))  # not docs/
        missing = sorted(n for n in named if not (out / n).is_file())
        assert not missing, (fmt, plots, missing)
        assert set(written.values()) == {p for p in out.rglob("*") if p.is_file()}


def test_the_leaderboard_says_in_one_line_that_a_verdict_is_the_cost_of_one_lr_not_where_the_optimum_sits(tmp_path):
    """A muP reader seeing `transfers: stam (drift 1.12 oct, ...)` reads a contradiction: the md and html legends say
    what the regret criterion answers (the drift criterion's own)."""
    from nas_stab.results.leaderboard import write_leaderboard

    df, cols = _export("skip-lambda")
    for criterion, words in (("regret", "not whether the optimum stays put: it can move and one lr still serve"),
                             ("drift", "whether each size's optimum lies within the tolerance of the others")):
        a, prov = judge(Sweep(df, "sweep.csv"), cols, classes=10, n_boot=100, criterion=criterion)
        out = tmp_path / criterion
        write_leaderboard(a, prov, out, "md,html", plots=False)
        for fmt in ("md", "html"):
            import html

            text = html.unescape(" ".join((out / f"leaderboard.{fmt}").read_text().split()))
            assert words in text, (criterion, fmt)
