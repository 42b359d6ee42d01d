"""search.pruner: sweep, on in-memory Optuna studies with synthetic intermediate values."""
from __future__ import annotations

import optuna
from optuna.distributions import CategoricalDistribution, FloatDistribution
from optuna.trial import TrialState, create_trial

from nas_stab.search.optuna_study import check_pruner, make_pruner
from nas_stab.search.sweep_pruner import SweepPruner

LRS = [2.0 ** k for k in range(-8, 0)]  # 8 learning rates, one octave apart
BEST = 2.0 ** -4
DIST = {"train.lr": FloatDistribution(2.0 ** -10, 1.0, log=True), "model.width": CategoricalDistribution([16, 32, 64]),
        "model.skip": CategoricalDistribution(["plain", "xskip"])}
STEPS = (10, 20, 30)


def acc(lr: float, peak: float = 0.9, best: float = BEST) -> float:
    import math

    return peak - 0.05 * (math.log2(lr) - math.log2(best)) ** 2


def study_with(sweeps, pruner=None, seeds=2):
    """A study holding, for each (width, skip, curve) in `sweeps`, finished runs at every lr of LRS
    (one trial per seed, as grid and bracket runs are)."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", pruner=pruner or SweepPruner())
    for width, skip, curve, lrs in sweeps:
        for lr in lrs:
            for seed in range(seeds):
                v = curve(lr) + 0.001 * seed
                study.add_trial(create_trial(params={"train.lr": lr, "model.width": width, "model.skip": skip},
                                             distributions=DIST, intermediate_values={s: v for s in STEPS},
                                             value=v, state=TrialState.COMPLETE))
    return study


def pruned(study, lr, width=16, skip="plain", value=None) -> bool:
    """Whether a new run at `lr` (reporting `value`, default its curve's) is pruned at its first report."""
    study.enqueue_trial({"train.lr": lr, "model.width": width, "model.skip": skip})
    t = study.ask()
    t.suggest_float("train.lr", 2.0 ** -10, 1.0, log=True)
    t.suggest_categorical("model.width", [16, 32, 64])
    t.suggest_categorical("model.skip", ["plain", "xskip"])
    t.report(acc(lr) if value is None else value, STEPS[0])
    out = t.should_prune()
    study.tell(t, state=TrialState.FAIL)
    return out


def test_never_prunes_the_optimum_or_its_neighbours():
    study = study_with([(16, "plain", acc, LRS)])
    i = LRS.index(BEST)
    for lr in LRS[i - 1: i + 2]:
        assert not pruned(study, lr)
        assert not pruned(study, lr, value=0.0)  # not even a run that reports nothing useful yet


def test_prunes_a_clearly_bad_learning_rate():
    study = study_with([(16, "plain", acc, LRS)])
    assert pruned(study, LRS[0])  # 4 octaves below the optimum: 0.1 against 0.9
    assert pruned(study, LRS[-1])


def test_does_not_compare_across_sizes_or_rows():
    slow = lambda lr: acc(lr, peak=0.3)  # noqa: E731  (a size or row that is simply slower)
    study = study_with([(16, "plain", acc, LRS), (32, "plain", slow, LRS[2:7]), (16, "xskip", slow, LRS[2:7])])
    # at its own best lr, a slow size is far below the fast size's runs, yet its sweep decides
    assert not pruned(study, BEST, width=32, value=slow(BEST))
    assert not pruned(study, BEST, skip="xskip", value=slow(BEST))
    # a size with too few other learning rates is never pruned, however bad against other sizes
    study = study_with([(16, "plain", acc, LRS), (64, "plain", acc, LRS[3:5])])
    assert not pruned(study, LRS[0], width=64)


def test_needs_three_better_lrs_by_the_margin():
    study = study_with([(16, "plain", acc, LRS)])
    # LRS[1] = 2^-7 reports 0.45: 2^-6 .. 2^-2 are better by more than the margin
    assert pruned(study, LRS[1])
    near = study_with([(16, "plain", lambda lr: 0.5, LRS)])  # a flat sweep: nobody is better by the margin
    assert not pruned(near, LRS[0], value=0.495)
    strict = study_with([(16, "plain", acc, LRS)], pruner=SweepPruner(margin=10.0))
    assert not pruned(strict, LRS[0])
    assert pruned(study_with([(16, "plain", acc, LRS)], pruner=SweepPruner(min_better=7)), LRS[0])  # 7 are better
    assert not pruned(study_with([(16, "plain", acc, LRS)], pruner=SweepPruner(min_better=8)), LRS[0])


def test_registered_and_checked_like_the_other_pruners():
    assert isinstance(make_pruner("sweep", {}), SweepPruner)
    assert make_pruner("sweep", {}, lr_key="train.lr_x").lr_key == "train.lr_x"
    assert make_pruner("sweep", {"lr_key": "a"}, lr_key="b").lr_key == "a"
    assert check_pruner("sweep", {"margin": 0.05, "min_better": 4, "n_warmup_steps": 2}) is None
    assert "no option 'margn'" in check_pruner("sweep", {"margn": 0.1})
    assert "margin" in check_pruner("sweep", {"margin": -1})
    assert "min_better" in check_pruner("sweep", {"min_better": 0})


def test_lr_transfer_experiment_with_another_pruner_is_warned():
    from nas_stab.config import loads_spec
    from nas_stab.config.rules_leaderboard import leaderboard_warnings

    text = """\
name: w
seeds: 3
task: {dataset: {name: digits}}
model: {arch: mlp_resnet, width: 16}
train: {lr: 0.1, steps: 10}
space: {model.depth: [2, 4], train.lr: [0.05, 0.1, 0.2]}
leaderboard: {transfer: model.depth}
search: {pruner: %s}
"""
    assert any("pruner sweep" in w for w in leaderboard_warnings(loads_spec(text % "median")))
    assert not any("pruner" in w for w in leaderboard_warnings(loads_spec(text % "sweep")))


def test_warmup():
    study = study_with([(16, "plain", acc, LRS)], pruner=SweepPruner(n_warmup_steps=STEPS[0] + 1))
    assert not pruned(study, LRS[0])  # the first report is before the warm-up ends
