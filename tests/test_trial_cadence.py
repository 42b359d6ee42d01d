"""Default cadences of a run's stability snapshots and validations, and run directories made with
the earlier default (`stability.every: 50`) resuming unchanged."""
from __future__ import annotations

import pytest

from nas_stab.config import loads_spec, spec_hash
from nas_stab.config.load import with_earlier_defaults
from nas_stab.store.rundir import RunDir
from nas_stab.training import budget, train_run
from nas_stab.training.loop import cadences

BASE = """\
name: cadence
task: {{dataset: {{name: synthetic, size: 600, shape: [8], classes: 3}}}}
model: {{arch: mlp_resnet, depth: 2, width: 8}}
train: {{lr: 0.01, steps: {steps}, batch_size: 16{train}}}
stability: {{hessian: false{stability}}}
search: {{pruner: {pruner}}}
"""


def spec(steps=40, train="", stability="", pruner="none"):
    return loads_spec(BASE.format(steps=steps, train=train, stability=stability, pruner=pruner))


def test_default_cadences_without_a_budget():
    """stability.budget: null: the defaults before the budget, 10 per run whatever they cost."""
    nob = ", budget: null"
    assert cadences(spec(stability=nob), 1500) == (150, 150)  # 10 validations, 10 snapshots
    assert cadences(spec(stability=nob, pruner="median"), 1500) == (150, 150)
    assert cadences(spec(stability=nob), 7) == (1, 1)
    assert cadences(spec(train=", eval_every: 30", stability=", every: 50" + nob), 1500) == (30, 50)
    assert cadences(spec(stability=", every: 0" + nob), 1500) == (150, 0)


def test_default_cadences_within_the_budget():
    """The budget's cadences (training/budget.py; tests/test_budget.py tests the choice itself): cheap
    measurements in a long run get the 10 per run, a short run only its init and end snapshots, and the
    cadences the experiment sets are kept whatever they cost."""
    cheap = budget.MeasureCosts(snapshot=2.0, hessian=10.0, validation=1.0)
    assert cadences(spec(), 1500, cheap) == (150, 150)  # 2 x 2 + 9 x 3 = 31 <= 45 steps
    assert cadences(spec(), 40, cheap) == (0, 0)  # 1.2 steps of budget: init and end only
    assert cadences(spec(train=", eval_every: 30", stability=", every: 50"), 40, cheap) == (30, 50)
    assert cadences(spec(stability=", every: 0"), 1500, cheap) == (150, 0)
    assert cadences(spec(pruner="median"), 40, cheap) == (4, 0)  # the pruner's reports: 10 per run


def test_run_history_follows_the_cadences():
    r = train_run(spec(steps=40, stability=", budget: null"), 0)
    assert r.status == "complete", r.error
    snaps = [h["step"] for h in r.history if "fwd_ratio" in h]
    vals = [h["step"] for h in r.history if "val_acc" in h]
    assert snaps == [0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40]
    assert vals == [4, 8, 12, 16, 20, 24, 28, 32, 36, 40]
    short = train_run(spec(steps=40), 0)  # the default budget: 3% of 40 steps buys nothing during training
    assert [h["step"] for h in short.history if "fwd_ratio" in h] == [0, 40]
    assert [h["step"] for h in short.history if "val_acc" in h] == [40]
    assert short.metrics["val_acc"] == r.metrics["val_acc"] and short.metrics["final_fwd_ratio"] == r.metrics["final_fwd_ratio"]


def test_earlier_default_keeps_the_hash_of_an_earlier_run_directory(tmp_path):
    now = spec()  # every left unset: the new default
    then = spec(stability=", every: 50")  # what the same file resolved to before the default changed
    assert spec_hash(now) != spec_hash(then)
    earlier = with_earlier_defaults(now)
    assert earlier.stability.every == 50 and spec_hash(earlier) == spec_hash(then)
    assert with_earlier_defaults(then) is None  # the file sets it: nothing to adopt

    RunDir.open(tmp_path, then).close()  # a run directory made with every: 50
    adopted = RunDir.adopt_earlier_defaults(tmp_path, now)
    assert adopted.stability.every == 50 and spec_hash(adopted) == spec_hash(then)
    RunDir.open(tmp_path, adopted).close()  # resumes: no "different spec" error
    other = spec(stability=", every: 25")  # a real change is still refused
    assert RunDir.adopt_earlier_defaults(tmp_path, other) is other
    with pytest.raises(Exception, match="different spec") as e:
        RunDir.open(tmp_path, other)
    assert "changed: stability.every: 50 -> 25)" in str(e.value)  # the key that changed, not only two hashes
    assert RunDir.adopt_earlier_defaults(tmp_path / "elsewhere", now) is now  # no run directory: the new default


def test_spec_changes_names_each_changed_key():
    from nas_stab.store.rundir_meta import spec_changes

    old = {"meta": {"spec_hash": "a"}, "train": {"lr": 0.1, "steps": 10}, "space": {"model.width": [8, 16]}}
    new = {"train": {"lr": 0.1, "steps": 20}, "space": {"model.width": [8, 32]}, "seeds": [0, 1]}
    assert spec_changes(old, new) == ("seeds: '(unset)' -> [0, 1], space.model.width: [8, 16] -> [8, 32], "
                                      "train.steps: 10 -> 20")
    many = {"train": {f"k{i}": i for i in range(9)}}
    assert spec_changes({}, many, limit=2).endswith(" and 7 more")
