"""The lr is chosen on validation, the result reported on a held-out split (issue 38; docs/leaderboard.md,
Reported on a held-out split): `leaderboard.report` (default: the held-out counterpart of the ranking metric)
is read at the cells the ranking metric chose, never re-optimized on itself."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parent / "data"))
from lb_fixtures import make_run, spec_dict

from nas_stab import metrics
from nas_stab.analysis.report import report_metric
from nas_stab.analysis.table import analyze
from nas_stab.cli import main
from nas_stab.errors import RunError
from nas_stab.results import formats as F

LRS = (0.01, 0.02, 0.04, 0.08, 0.16)
OFFSETS = (-0.01, 0.01, -0.01, 0.01)
VAL = (0.70, 0.80, 0.90, 0.85, 0.60)  # chosen on: the best lr is 0.04 at every size
TEST = (0.60, 0.70, 0.80, 0.95, 0.50)  # its own best would be 0.08: the report must not move there


def _trials(val=VAL, test=TEST, sizes=(1, 2), metric="val_acc", report="test_acc", flip=False) -> pd.DataFrame:
    rows = []
    for size in sizes:
        for lr, v, w in zip(LRS, val, test):
            for seed, off in enumerate(OFFSETS):
                a, b = v + off, w + 2 * off
                rows.append({"seed": seed, "status": "complete", "model.branches": size, "train.lr": lr,
                             metric: 2 - a if flip else a, report: 2 - b if flip else b})
    return pd.DataFrame(rows)


def _sizes(a) -> pd.DataFrame:
    return a.sizes.set_index("size")


@pytest.mark.parametrize("metric, report, flip", [("val_acc", "test_acc", False), ("val_loss", "test_loss", True)],
                         ids=["maximized", "minimized"])
def test_the_report_is_taken_at_the_lr_chosen_on_validation_not_its_own_best(metric, report, flip):
    a = analyze(_trials(metric=metric, report=report, flip=flip), transfer="model.branches", metric=metric, classes=10, n_boot=0)
    assert a.settings.report == report  # the default: the held-out counterpart of the ranking metric
    s = _sizes(a)
    chosen = 2 - TEST[2] if flip else TEST[2]  # at lr 0.04, where the validation metric peaks
    own_best = 2 - TEST[3] if flip else TEST[3]
    assert (s["grid_lr"] == 0.04).all()
    assert np.allclose(s["report_at_best"], chosen) and not np.isclose(s["report_at_best"], own_best).any()
    assert np.allclose(s["report_std"], np.std([2 * o for o in OFFSETS], ddof=1)) and (s["report_n"] == 4).all()
    assert a.rows["best_report"].tolist() == pytest.approx([chosen])  # at the cell of `best`
    assert a.rows.loc[0, "best_report_n"] == 4
    c = a.cells.set_index(["size", "lr"])
    assert c.loc[(1, 0.08), "report_mean"] == pytest.approx(own_best)  # every cell keeps its own value


def test_a_diverged_run_counts_with_the_report_metrics_no_learning_value_and_a_missing_value_is_left_out():
    t = _trials()
    t.loc[(t["train.lr"] == 0.02) & (t["model.branches"] == 1) & (t["seed"] == 3), ["status", "val_acc", "test_acc"]] = ["diverged", np.nan, np.nan]
    t.loc[(t["train.lr"] == 0.04) & (t["model.branches"] == 2) & (t["seed"] == 3), "test_acc"] = np.nan  # complete, not recorded
    a = analyze(t, transfer="model.branches", metric="val_acc", classes=10, n_boot=0)
    assert a.settings.report_m0 == pytest.approx(0.1)  # chance on 10 classes
    c = a.cells.set_index(["size", "lr"])
    assert c.loc[(1, 0.02), "report_mean"] == pytest.approx((0.68 + 0.72 + 0.68 + 0.1) / 4) and c.loc[(1, 0.02), "report_n"] == 4
    s = _sizes(a)
    assert s.loc[2, "grid_lr"] == 0.04 and s.loc[2, "report_n"] == 3 and s.loc[2, "report_at_best"] == pytest.approx((0.78 + 0.82 + 0.78) / 3)


def test_the_report_metric_resolved_from_the_setting():
    t = pd.DataFrame({"status": ["complete", "diverged"], "val_acc": [0.9, np.nan], "test_acc": [0.8, np.nan],
                      "bleu": [20.0, np.nan], "test_bleu": [19.0, np.nan], "val_loss": [0.3, np.nan]})
    assert report_metric(None, "val_acc", t) == "test_acc"
    assert report_metric(None, "bleu", t) == "test_bleu"
    assert report_metric(None, "val_loss", t) is None  # no test_loss column: nothing to report
    assert report_metric(None, "train_loss", t) is None  # no held-out counterpart
    assert report_metric("none", "val_acc", t) is None
    assert report_metric("test_bleu", "val_acc", t) == "test_bleu"
    assert report_metric(None, "val_acc", t.assign(test_acc=np.nan)) is None  # a column no complete run recorded
    with pytest.raises(RunError, match="test_loss"):
        report_metric("test_loss", "val_acc", t)
    assert [metrics.held_out(m) for m in ("val_acc", "val_loss", "bleu", "test_acc", "final_sharpness")] == [
        "test_acc", "test_loss", "test_bleu", None, None]


def test_the_report_changes_no_verdict_and_none_turns_it_off():
    t = _trials()
    kw = dict(transfer="model.branches", metric="val_acc", classes=10, n_boot=200)
    a, b = analyze(t, **kw), analyze(t, report="none", **kw)
    assert b.settings.report is None and b.rows["best_report"].isna().all() and b.sizes["report_at_best"].isna().all()
    assert b.sizes["report_n"].isna().all() and "report" in dict(F.settings_items(b))
    keep = [c for c in a.rows.columns if not c.startswith("best_report") and c not in ("best_lrs", "censored", "bracket_ends", "no_best_lr")]
    pd.testing.assert_frame_equal(a.rows[keep], b.rows[keep])
    assert "**Report**" not in F.to_markdown(b, [("spec", "t")])


def test_the_markdown_says_where_the_lr_was_chosen_and_where_it_is_reported():
    a = analyze(_trials(), transfer="model.branches", metric="val_acc", classes=10, n_boot=0)
    md = F.to_markdown(a, [("spec", "t")])
    assert "**Report**: lr chosen on val_acc, reported on test_acc: all 0.8 (" in md
    assert "lr chosen on val_acc, reported on test_acc at the cells chosen" in F.provenance_text(a, [])
    cells = F.to_cells_csv(a).splitlines()[0].split(",")
    assert cells[cells.index("frac_stuck") + 1:] == ["report_mean", "report_std", "report_n"]  # appended


def _run(tmp_path, with_test=True, report=None):
    rows = _trials().to_dict("records")
    for r in rows:
        r["model.aggregation"] = "sum"
        r.pop("status")
        if not with_test:
            r.pop("test_acc")
    spec = spec_dict("rep", seeds=list(range(4)), space={"model.branches": [1, 2], "train.lr": list(LRS)})
    if report is not None:
        spec["leaderboard"]["report"] = report
    return make_run(tmp_path, rows, spec=spec)


def test_cli_report_flag_overrides_the_stored_setting(tmp_path, capsys):
    d = _run(tmp_path, report="none")
    assert main(["leaderboard", str(d), "--format", "csv,md"]) == 0  # stored: none
    assert pd.read_csv(d / "leaderboard.csv")["best_report"].isna().all()
    assert "**Report**" not in (d / "leaderboard.md").read_text()
    assert main(["leaderboard", str(d), "--format", "csv,md", "--report", "test_acc"]) == 0
    assert pd.read_csv(d / "leaderboard.csv")["best_report"].tolist() == pytest.approx([0.8])
    sizes = pd.read_csv(d / "leaderboard_sizes.csv")
    assert sizes["report_at_best"].tolist() == pytest.approx([0.8, 0.8]) and sizes["report_n"].tolist() == [4, 4]
    assert "lr chosen on val_acc, reported on test_acc" in (d / "leaderboard.md").read_text()
    assert "--report test_acc" in (d / "leaderboard_provenance.txt").read_text()  # the command that rebuilds it
    capsys.readouterr()
    assert main(["leaderboard", str(d), "--report", "test_acx"]) == 2
    assert "did you mean 'test_acc'" in capsys.readouterr().err
    assert main(["leaderboard", str(d), "--report", "test_loss"]) == 2  # a metric no run recorded
    err = capsys.readouterr().err
    assert "--report" in err and "no run recorded the report metric 'test_loss'" in err


def test_a_run_without_a_held_out_metric_reports_nothing(tmp_path):
    d = _run(tmp_path, with_test=False)
    assert main(["leaderboard", str(d), "--format", "csv,md"]) == 0
    lb = pd.read_csv(d / "leaderboard.csv")
    assert lb.columns[-4:].tolist() == ["plateaus", "best_report", "best_report_std", "best_report_n"]
    assert lb["best_report"].isna().all()
    assert "report: none: lr chosen and reported on val_acc" in (d / "leaderboard_provenance.txt").read_text()


def test_report_is_a_checked_leaderboard_key_outside_the_spec_hash():
    from nas_stab.config import config_key, loads_spec, spec_hash
    from nas_stab.errors import SpecError

    base = """\
name: rk
seeds: 1
task: {dataset: {name: digits}}
model: {arch: mlp_resnet, depth: 2, width: 16}
space: {model.branches: [1, 2], train.lr: [0.01, 0.03, 0.1]}
leaderboard: {transfer: model.branches%s}
"""
    plain, named, off = (loads_spec(base % extra) for extra in ("", ", report: test_acc", ", report: none"))
    assert plain.leaderboard.report is None and named.leaderboard.report == "test_acc" and off.leaderboard.report == "none"
    assert spec_hash(plain) == spec_hash(named) == spec_hash(off)  # how the table is drawn is not the experiment
    assert config_key(plain, 0) == config_key(named, 0)
    with pytest.raises(SpecError, match="leaderboard.report"):
        loads_spec(base % ", report: test_accc")
    assert math.isnan(analyze(pd.DataFrame({"train.lr": [0.1], "val_acc": [0.5]}), metric="val_acc", n_boot=0).settings.report_m0)
