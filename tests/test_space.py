"""Search-space compilation: grid enumeration and Optuna define-by-run agree."""
import math

import optuna
import pytest

from nas_stab.config import loads_spec
from nas_stab.errors import SpecError
from nas_stab.search.plan import base_lookup

BASE = """\
name: demo
task: {dataset: {name: digits}}
model: {arch: mlp_resnet, width: 16}
train: {lr: 0.1, steps: 10}
"""


def spec(space, extra=""):
    return loads_spec(BASE + "space:\n" + space + extra)


def test_product_size():
    s = spec("  model.branches: [1, 2, 4]\n  model.aggregation: [sum, avg, stam]\n  train.lr: {log_grid: [0.01, 1.0, 5]}\n")
    assert len(s.space.grid(base_lookup(s))) == 45


def test_log_grid_and_grid_values():
    s = spec("  train.lr: {log_grid: [0.001, 1.0, 4]}\n  model.depth: {grid: [2, 8, 4]}\n  model.branches: {int: [1, 5], step: 2}\n")
    assert s.space.get("train.lr").values == pytest.approx((0.001, 0.01, 0.1, 1.0))
    assert s.space.get("model.depth").values == (2, 4, 6, 8)
    assert len(s.space.grid(base_lookup(s))) == 4 * 4 * 3


def test_duplicates_removed():
    s = spec("  model.branches: [1, 2, 2, 1.0]\n")
    assert len(s.space.grid(base_lookup(s))) == 2


def test_condition_limits_grid_and_base_value_stands():
    s = spec(
        "  model.aggregation: [sum, stam]\n"
        "  model.alpha_scale: {values: [0.3, 1.0], when: {model.aggregation: stam}}\n"
    )
    pts = s.space.grid(base_lookup(s))
    # sum: alpha_scale inactive (1 point); stam: 2 points
    assert len(pts) == 3
    assert {"model.aggregation": "sum"} in pts
    assert all("model.alpha_scale" not in p for p in pts if p["model.aggregation"] == "sum")


def test_condition_on_unsearched_key_uses_base():
    s = spec("  model.branches: {values: [2, 4], when: {model.arch: mlp}}\n")
    assert s.space.grid(base_lookup(s)) == [{}]


def test_conditions_are_ordered_and_cycles_refused():
    s = spec("  model.alpha_scale: {values: [0.5, 1], when: {model.aggregation: stam}}\n  model.aggregation: [sum, stam]\n")
    assert s.space.keys == ("model.aggregation", "model.alpha_scale")
    with pytest.raises(SpecError) as e:
        spec("  model.depth: {values: [2, 3], when: {model.width: 16}}\n  model.width: {values: [16, 32], when: {model.depth: 2}}\n")
    assert "cycle" in e.value.message


def test_bad_dimension_forms():
    for bad, word in [
        ("{log_grid: [0, 1, 3]}", "low > 0"),
        ("{uniform: [1, 0.5]}", "below"),
        ("{grid: [1, 2]}", "3 numbers"),
        ("{between: [1, 2]}", "exactly one"),
        ("[]", "non-empty"),
        ("{int: [1, 4], step: 0}", ">= 1"),
    ]:
        with pytest.raises(SpecError) as e:
            spec(f"  train.lr: {bad}\n", "search: {sampler: random, trials: 2}\n")
        assert word in e.value.message, (bad, e.value.message)


def test_define_by_run_matches_conditions():
    s = spec(
        "  model.aggregation: [sum, stam]\n"
        "  model.alpha_scale: {uniform: [0.2, 1.0], when: {model.aggregation: stam}}\n"
        "  train.lr: {loguniform: [0.001, 0.5]}\n"
        "  model.depth: {int: [1, 8], log: true}\n",
        "search: {sampler: random, trials: 4}\n",
    )
    study = optuna.create_study(sampler=optuna.samplers.RandomSampler(seed=0))
    seen = set()
    for _ in range(40):
        t = study.ask()
        p = s.space.suggest(t, base_lookup(s))
        seen.add(p["model.aggregation"])
        assert ("model.alpha_scale" in p) == (p["model.aggregation"] == "stam")
        assert 0.001 <= p["train.lr"] <= 0.5 and 1 <= p["model.depth"] <= 8
        study.tell(t, 0.0)
    assert seen == {"sum", "stam"}


def test_grid_points_replay_through_optuna_enqueue():
    s = spec("  model.aggregation: [sum, stam]\n  train.lr: {log_grid: [0.01, 1, 3]}\n")
    study = optuna.create_study()
    for p in s.space.grid(base_lookup(s)):
        study.enqueue_trial(p)
        t = study.ask()
        assert s.space.suggest(t, base_lookup(s)) == p
        study.tell(t, 1.0)
    assert len(study.trials) == 6 and all(not math.isnan(t.value) for t in study.trials)
