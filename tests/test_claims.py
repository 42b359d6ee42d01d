"""Declared claims, sized by power (nas_stab/analysis/claims.py, claim_verdicts.py; docs/leaderboard.md, "Claims").

The verdicts are tested like a statistic: on simulated runs whose answer is known, the rate of a false
"replicates" (no true difference), the power at the seed count the calculation asks for, the rate of a
false "equivalent" at the margin's edge, and that the reported value is the held-out one at the lr chosen
on validation.
"""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
import pytest

from nas_stab.analysis.claim_verdicts import evaluate
from nas_stab.analysis.claims import Claim, load_claims
from nas_stab.analysis.power import seeds_needed
from nas_stab.errors import SpecError

LRS = (0.025, 0.05, 0.1)


def _runs(rng, n, *, gap=0.0, sd=0.01, lrs=LRS, curve=(0.0, 0.01, 0.0), seed_sd=0.0):
    """Trials of two rows (model.skip a / b) over `lrs` and `n` seeds: val_acc and test_acc around 0.9 plus the
    lr's `curve` (b's curve shifted by `gap` for a), with independent per-run noise `sd` and a per-seed
    effect `seed_sd` shared by every run of a seed."""
    rows = []
    shared = rng.normal(0, seed_sd, n)
    for row, g in (("a", gap), ("b", 0.0)):
        for lr, bump in zip(lrs, curve):
            for s in range(n):
                base = 0.9 + bump + g + shared[s]
                rows.append({"model.skip": row, "train.lr": lr, "seed": s, "status": "complete",
                             "val_acc": base + rng.normal(0, sd), "test_acc": base + rng.normal(0, sd)})
    return pd.DataFrame(rows)


def _claim(**kw) -> Claim:
    args = {"id": "c", "paper": "p", "says": "a beats b", "kind": "difference", "a": {"model.skip": "a"},
            "b": {"model.skip": "b"}, "effect": 0.01}
    args.update(kw)
    return Claim(**args)


def _judge(claim, trials, classes=10):
    return evaluate([claim], {"trials": trials}, classes=classes).iloc[0]


@pytest.mark.slow  # over 15 s: CI runs it in its slow stage (pytest -m slow)
def test_no_true_difference_rarely_replicates_even_when_each_side_picks_its_lr():
    """Null: a and b have the same curve; each side's lr is chosen on val. A one-sided test at 5% (the 90%
    interval's lower end above 0) must not say "replicates" more often than about 5%."""
    rng = np.random.default_rng(0)
    hits = sum(_judge(_claim(), _runs(rng, 5, sd=0.01))["verdict"] == "replicates" for _ in range(150))
    assert hits / 150 <= 0.08, hits


def test_at_the_seeds_the_calculation_asks_for_the_paper_effect_is_found_about_80_percent_of_the_time():
    """Fixed lrs (a confirmation run): the t-interval's one-sided test at the seed count `seeds_needed`
    gives for (sd of the per-seed difference sqrt(2) * sd_run, the paper's effect) has power about 0.8."""
    rng = np.random.default_rng(1)
    sd_run, effect = 0.01, 0.01
    n = seeds_needed(np.sqrt(2) * sd_run, effect)
    claim = _claim(lr={"a": 0.05, "b": 0.05}, effect=effect)
    hits = [_judge(claim, _runs(rng, n, gap=effect, sd=sd_run, lrs=(0.05,), curve=(0.0,)))["verdict"] == "replicates"
            for _ in range(300)]
    assert 0.72 <= np.mean(hits) <= 0.9, (n, np.mean(hits))


def test_too_few_seeds_is_labelled_underpowered_with_the_count_needed():
    rng = np.random.default_rng(2)
    r = _judge(_claim(lr={"a": 0.05, "b": 0.05}, effect=0.003),
               _runs(rng, 4, gap=0.0, sd=0.01, lrs=(0.05,), curve=(0.0,)))
    assert r["verdict"] == f"underpowered: needs {seeds_needed(r['sd'], 0.003)} seeds"
    assert r["needed"] > r["seeds"] == 4 and r["lo"] < 0 < r["hi"]


def test_a_clear_reversal_is_reported_whatever_the_power():
    rng = np.random.default_rng(3)
    r = _judge(_claim(effect=0.001), _runs(rng, 5, gap=-0.05, sd=0.005))
    assert r["verdict"] == "reversed" and r["hi"] < 0


def test_a_powered_null_result_does_not_replicate():
    """Enough seeds for the paper's effect, and the interval's upper end below it: the effect is not there."""
    rng = np.random.default_rng(4)
    r = _judge(_claim(lr={"a": 0.05, "b": 0.05}, effect=0.02), _runs(rng, 40, gap=0.0, sd=0.01, lrs=(0.05,), curve=(0.0,)))
    assert r["seeds"] >= r["needed"] and r["verdict"] == "does not replicate"


def test_the_reported_value_is_the_held_out_one_at_the_lr_chosen_on_validation():
    """Validation prefers lr 0.05 for both rows; on test, a is best at 0.1. The claim reports test_acc at
    0.05 (never re-optimised on test): a - b = 0 there, not a's test peak."""
    rows = []
    for row in ("a", "b"):
        for lr, v, t in ((0.025, 0.90, 0.90), (0.05, 0.95, 0.93), (0.1, 0.91, 0.99 if row == "a" else 0.90)):
            rows += [{"model.skip": row, "train.lr": lr, "seed": s, "val_acc": v + 1e-3 * s, "test_acc": t + 1e-3 * s}
                     for s in range(5)]
    r = _judge(_claim(), pd.DataFrame(rows))
    assert (r["lr_a"], r["lr_b"], r["report"]) == (0.05, 0.05, "test_acc")
    assert abs(r["estimate"]) < 1e-12


def test_carried_lr_and_diverged_runs_count_at_the_no_learning_value():
    """lr: a puts b at a's chosen lr; a diverged run counts as chance (0.1), as in the leaderboard."""
    rows = []
    for s in range(5):
        rows += [{"model.branches": 1, "train.lr": lr, "seed": s, "status": "complete", "val_acc": v, "test_acc": v}
                 for lr, v in ((0.03, 0.90), (0.06, 0.95))]
        rows += [{"model.branches": 16, "train.lr": 0.03, "seed": s, "status": "complete", "val_acc": 0.96, "test_acc": 0.96},
                 {"model.branches": 16, "train.lr": 0.06, "seed": s, "status": "diverged", "val_acc": np.nan, "test_acc": np.nan}]
    c = _claim(a={"model.branches": 1}, b={"model.branches": 16}, lr="a", effect=0.4)
    r = _judge(c, pd.DataFrame(rows))
    assert r["lr_b"] == r["lr_a"] == 0.06
    assert r["estimate"] == pytest.approx(0.95 - 0.1) and r["verdict"] == "replicates"


def test_equivalence_at_the_margin_is_rarely_called_equivalent():
    """TOST at 5% per side: with the true difference exactly at the margin, "equivalent" at most ~5%;
    with no difference and the seeds planned, mostly equivalent."""
    rng = np.random.default_rng(5)
    claim = _claim(kind="equivalence", effect=None, margin=0.01, lr={"a": 0.05, "b": 0.05})
    one = {"lrs": (0.05,), "curve": (0.0,)}
    edge = [_judge(claim, _runs(rng, 10, gap=0.01, sd=0.01, **one))["verdict"].startswith("equivalent") for _ in range(200)]
    assert np.mean(edge) <= 0.08, np.mean(edge)
    n = seeds_needed(np.sqrt(2) * 0.01, 0.01, power=0.9)
    same = [_judge(claim, _runs(rng, n, gap=0.0, sd=0.01, **one))["verdict"].startswith("equivalent") for _ in range(150)]
    assert np.mean(same) >= 0.7, (n, np.mean(same))
    far = _judge(claim, _runs(rng, 20, gap=0.05, sd=0.005, **one))
    assert far["verdict"] == "not equivalent"


def _slopes(slope, lo, hi, seeds=10):
    return pd.DataFrame([{"model.skip": "plain", "metric": "init_update_norm", "slope": slope, "lo": lo, "hi": hi,
                          "sizes": 4, "seeds": seeds}])


@pytest.mark.parametrize("bound, slope, lo, hi, want", [
    ({"at_most": 0.25}, 0.07, -0.03, 0.18, "holds"),
    ({"at_most": 0.25}, 1.34, 1.28, 1.40, "fails"),
    ({"at_least": 0.5}, 1.34, 1.28, 1.40, "holds"),
    ({"margin": 0.1, "expect": 0.5}, 0.54, 0.53, 0.55, "holds"),
    ({"margin": 0.1, "expect": 0.0}, 0.54, 0.53, 0.55, "fails"),
])
def test_slope_claims_against_their_bound(bound, slope, lo, hi, want):
    c = Claim(id="s", paper="p", says="bounded", kind="slope", a={"model.skip": "plain", "metric": "init_update_norm"}, **bound)
    assert evaluate([c], {"probe_slopes": _slopes(slope, lo, hi)}).iloc[0]["verdict"] == want


def test_a_slope_interval_on_its_bound_says_how_many_seeds_would_resolve_it():
    c = Claim(id="s", paper="p", says="bounded", kind="slope", a={"model.skip": "plain"}, at_most=0.25)
    r = evaluate([c], {"probe_slopes": _slopes(0.19, -0.05, 0.47)}).iloc[0]
    assert r["verdict"].startswith("underpowered: needs") and r["needed"] > 100


def test_transfer_claims_read_the_leaderboard_row_and_extrapolate_the_seeds():
    board = pd.DataFrame([{"label": "x", "transfers": "inconclusive", "min_seeds": 5, "seeds": 5, "worst_regret": 0.01,
                           "worst_regret_lo": 0.0, "worst_regret_hi": 0.03, "epsilon": 0.026, "plateaus": 0, "sizes": 3},
                          {"label": "y", "transfers": "yes", "min_seeds": 5, "seeds": 5, "worst_regret": 0.0,
                           "worst_regret_lo": 0.0, "worst_regret_hi": 0.01, "epsilon": 0.026, "plateaus": 2, "sizes": 3}])
    cs = [Claim(id=i, paper="p", says="t", kind="transfer", a={"label": i}) for i in ("x", "y")]
    out = evaluate(cs, {"leaderboard": board})
    need = int(out["needed"].iloc[0])
    assert list(out["verdict"]) == [f"underpowered: needs {need} seeds",
                                    "yes (2 of 3 optima on a plateau: where the optimum lies is not resolved)"]
    assert 5 < need < 20 and out["needed"].iloc[1] == 5


def test_a_preregistered_transfer_claim_says_whether_its_prediction_held():
    from nas_stab.analysis.rules import RULES_VERSION

    board = pd.DataFrame([{"label": lab, "transfers": v, "min_seeds": n, "seeds": n, "worst_regret": 0.0, "worst_regret_lo": 0.0,
                           "worst_regret_hi": 0.01, "epsilon": 0.026, "plateaus": 0, "sizes": 3}
                          for lab, v, n in (("x", "yes", 10), ("y", "yes", 10), ("z", "no", 5))])
    cs = [Claim(id="x", paper="p", says="t", kind="transfer", a={"label": "x"}, predicts="yes", seeds=10, rules=RULES_VERSION),
          Claim(id="y", paper="p", says="t", kind="transfer", a={"label": "y"}, predicts="no", rules="2026.11"),
          Claim(id="z", paper="p", says="t", kind="transfer", a={"label": "z"}, predicts="no", seeds=10)]
    out = list(evaluate(cs, {"leaderboard": board})["verdict"])
    assert out == ["yes (as predicted)",
                   f"yes (predicted no: contradicted; declared under rules 2026.11, judged under {RULES_VERSION})",
                   "no (as predicted; ran 5 of the 10 seeds declared)"]


def test_preregistration_fields_are_checked(tmp_path):
    p = _write(tmp_path, "claims:\n  - {id: a, paper: p, says: s, kind: transfer, a: {label: x}, predicts: maybe, seeds: 0}\n"
                         "  - {id: b, paper: p, says: s, kind: difference, a: {x: 1}, b: {x: 2}, effect: 0.1, predicts: yes}\n")
    with pytest.raises(SpecError) as e:
        load_claims(p)
    text = str(e.value)
    assert "claims[0].predicts" in text and "claims[0].seeds" in text and "claims[1].predicts" in text


def test_a_claim_can_read_a_confirmation_run_and_a_list_of_runs():
    rng = np.random.default_rng(6)
    pilot, confirm = _runs(rng, 3, gap=0.02, sd=0.01, curve=(0.0, 0.05, 0.0)), _runs(rng, 20, gap=0.02, sd=0.01, lrs=(0.05,), curve=(0.05,))
    c = _claim(runs=("confirm",), lr={"a": 0.05, "b": 0.05})
    r = evaluate([c], {"trials": pilot, "confirm": confirm}).iloc[0]
    assert r["seeds"] == 20 and r["verdict"] == "replicates"
    both = evaluate([_claim(runs=("trials", "confirm"))], {"trials": pilot, "confirm": confirm}).iloc[0]
    assert both["seeds"] == 20 and both["lr_a"] == 0.05  # pooled: seeds 0-2 of both files average per seed and lr


def _write(tmp_path, text):
    p = tmp_path / "claims.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def test_claims_file_loads():
    cs = load_claims(_write_ok())
    assert [c.id for c in cs] == ["d", "e"] and cs[1].runs == ("confirm",) and cs[0].a == {"model.skip": "a"}


def _write_ok():
    import tempfile
    from pathlib import Path
    d = Path(tempfile.mkdtemp())
    return _write(d, "claims:\n  - {id: d, paper: P, says: a beats b, kind: difference, a: {model.skip: a}, b: {model.skip: b}, "
                     "effect: 0.01}\n  - {id: e, paper: P, says: same, kind: equivalence, a: {x: 1}, b: {x: 2}, margin: 0.1, "
                     "runs: confirm, lr: {a: 0.1, b: 0.2}}\n")


@pytest.mark.parametrize("body, line, key, words", [
    ("claims:\n  - id: d\n    paper: P\n    says: s\n    kind: difference\n    a: {x: 1}\n    b: {x: 2}\n", 2,
     "claims[0].effect", "paper's effect"),
    ("claims:\n  - id: d\n    paper: P\n    says: s\n    kind: differnce\n    a: {x: 1}\n", 5, "claims[0].kind", "unknown kind"),
    ("claims:\n  - id: d\n    paper: P\n    says: s\n    kind: slope\n    a: {x: 1}\n    at_most: 1\n    bogus: 2\n", 8,
     "claims[0].bogus", "unknown key"),
    ("claims:\n  - id: d\n    paper: P\n    says: s\n    kind: equivalence\n    a: {x: 1}\n    b: {x: 2}\n    margin: -1\n", 8,
     "claims[0].margin", "margin"),
    ("claims:\n  - id: d\n    paper: P\n    says: s\n    kind: difference\n    a: {x: 1}\n    b: {x: 2}\n    effect: 1\n"
     "    lr: fast\n", 9, "claims[0].lr", "positive number"),
    ("claims: []\n", 1, None, "non-empty list"),
])
def test_a_bad_claims_file_names_file_line_and_key(tmp_path, body, line, key, words):
    with pytest.raises(SpecError) as e:
        load_claims(_write(tmp_path, body))
    err = e.value
    assert err.file and err.file.endswith("claims.yaml") and words in str(err), str(err)
    assert err.key == key and err.line == line, (err.key, err.line)


def test_duplicate_ids_are_refused(tmp_path):
    body = "claims:\n" + "".join(
        f"  - {{id: d, paper: P, says: s, kind: slope, a: {{x: {i}}}, at_most: 1}}\n" for i in range(2))
    with pytest.raises(SpecError, match="duplicate claim id 'd'"):
        load_claims(_write(tmp_path, body))


def test_nas_stab_claims_judges_a_run_directory(tmp_path, capsys):
    """The command a user runs: a run directory's claims.yaml judged into claims.csv (the spec's base values
    fill the keys it does not search: model.aggregation here), a confirmation file beside trials.csv read
    with runs:, and a bad claims file reported with its line and key (exit 2)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent / "data"))
    from lb_fixtures import make_run, spec_dict

    from nas_stab.cli import main
    from nas_stab.results.formats import to_csv
    from nas_stab.results.leaderboard import load_analysis

    rng = np.random.default_rng(7)
    peak = {0.1: -0.05, 0.2: 0.0, 0.4: -0.05}  # every size's optimum at lr 0.2: its lr transfers
    rows = [{"seed": s, "model.branches": b, "train.lr": lr, "val_acc": 0.9 + peak[lr] + (0.02 if b == 4 else 0) + rng.normal(0, 0.003),
             "test_acc": 0.9 + peak[lr] + (0.02 if b == 4 else 0) + rng.normal(0, 0.003)}
            for s in range(6) for b in (1, 4) for lr in (0.1, 0.2, 0.4)]
    run = make_run(tmp_path, rows, spec=spec_dict(space={"model.branches": [1, 4], "train.lr": [0.1, 0.2, 0.4]}, seeds=range(6)),
                   history=False)
    pd.DataFrame([{**r, "seed": r["seed"] + 10} for r in rows if r["train.lr"] == 0.2]).to_csv(run / "confirm.csv", index=False)
    (run / "claims.yaml").write_text(
        "claims:\n"
        "  - {id: more-branches, paper: P, says: C = 4 beats C = 1, kind: difference, a: {model.branches: 4, model.aggregation: sum},"
        " b: {model.branches: 1}, effect: 0.01}\n"
        "  - {id: confirmed, paper: P, says: the same, kind: difference, runs: confirm, a: {model.branches: 4},"
        " b: {model.branches: 1}, lr: {a: 0.2, b: 0.2}, effect: 0.01}\n")
    import yaml
    label = pd.read_csv(io.StringIO(to_csv(load_analysis([run])[0])))["label"].iloc[0]
    with open(run / "claims.yaml", "a") as f:  # a transfer claim: the leaderboard computed from the run (no leaderboard.csv)
        f.write("  - " + yaml.safe_dump({"id": "lr-carries", "paper": "P", "says": "C = 1's lr serves C = 4", "kind": "transfer",
                                          "a": {"label": str(label)}}, default_flow_style=True))
    assert main(["claims", str(run)]) == 0
    out = pd.read_csv(run / "claims.csv")
    assert list(out["verdict"][:2]) == ["replicates", "replicates"] and list(out["seeds"]) == [6, 6, 6]
    assert out["kind"].iloc[2] == "transfer" and out["verdict"].iloc[2].split(" (")[0] == "yes", out.iloc[2].to_dict()
    assert not (run / "leaderboard.csv").exists()
    assert "more-branches: replicates" in capsys.readouterr().out
    (run / "claims.yaml").write_text("claims:\n  - {id: x, paper: P, says: s, kind: difference, a: {x: 1}, b: {x: 2}}\n")
    assert main(["claims", str(run)]) == 2
    assert "claims.yaml:2: claims[0].effect" in capsys.readouterr().err


def test_a_given_lr_that_was_not_run_is_an_error_not_the_nearest_one():
    """A mistyped lr in claims.yaml must not silently judge the claim at another lr."""
    from nas_stab.errors import RunError

    rng = np.random.default_rng(8)
    with pytest.raises(RunError, match=r"side b has no runs at lr 0.07 \(its lrs: 0.025, 0.05, 0.1\)"):
        _judge(_claim(lr={"a": 0.05, "b": 0.07}), _runs(rng, 3))
