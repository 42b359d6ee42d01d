"""The seeds a compared claim needs (nas_stab/analysis/power.py): the issue's two figures, and the power
itself checked by simulating paired t-tests whose true effect is known."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from nas_stab.analysis.power import power_at, seeds_needed, seeds_needed_normal


@pytest.mark.parametrize("sd, effect, approx", [
    (0.0063, 0.0027, 34),  # skip-lambda, rSkip vs xSkip at depth 8: the paper's 0.27 points, per-seed sd 0.0063
    (1.09, 0.45, 37),  # multi30k, Table 5's +0.45 BLEU, per-seed sd 1.09
])
def test_the_published_claims_need_about_35_seeds(sd, effect, approx):
    assert seeds_needed_normal(sd, effect) == approx
    exact = seeds_needed(sd, effect)
    assert approx <= exact <= approx + 3  # the t quantile is wider than z: a seed or two more
    assert power_at(exact, sd, effect) >= 0.8 > power_at(exact - 1, sd, effect)


def _simulated_power(n: int, sd: float, effect: float, reps: int, rng: np.random.Generator) -> float:
    d = rng.normal(effect, sd, size=(reps, n))
    t = d.mean(axis=1) / (d.std(axis=1, ddof=1) / np.sqrt(n))
    return float(np.mean(t > stats.t.ppf(0.95, n - 1)))


@pytest.mark.parametrize("sd, effect", [(1.0, 0.5), (1.0, 1.0), (0.02, 0.01), (1.0, 0.3)])
def test_the_count_reaches_the_power_and_one_fewer_does_not(sd, effect):
    rng = np.random.default_rng(0)
    n = seeds_needed(sd, effect)
    reps = 40_000  # Monte Carlo sd of a power near 0.8: 0.002
    at_n = _simulated_power(n, sd, effect, reps, rng)
    assert at_n == pytest.approx(power_at(n, sd, effect), abs=0.01)
    assert at_n >= 0.8 - 0.01
    if n > 2:
        assert _simulated_power(n - 1, sd, effect, reps, rng) < 0.8 + 0.005


def test_without_an_effect_the_power_is_the_false_positive_rate():
    rng = np.random.default_rng(1)
    assert power_at(20, 1.0, 1e-12) == pytest.approx(0.05, abs=1e-6)
    assert _simulated_power(20, 1.0, 0.0, 40_000, rng) == pytest.approx(0.05, abs=0.005)  # and the simulation agrees


def test_more_noise_or_a_smaller_effect_needs_more_seeds():
    assert seeds_needed(1.0, 0.5) < seeds_needed(2.0, 0.5) and seeds_needed(1.0, 0.5) < seeds_needed(1.0, 0.25)
    assert seeds_needed(1.0, 0.5, two_sided=True) > seeds_needed(1.0, 0.5)
    assert seeds_needed(1.0, 10.0) == 2


@pytest.mark.parametrize("kwargs", [{"sd": 0.0, "effect": 1.0}, {"sd": 1.0, "effect": 0.0},
                                    {"sd": float("nan"), "effect": 1.0}, {"sd": 1.0, "effect": 1.0, "alpha": 1.5},
                                    {"sd": 1.0, "effect": 1.0, "power": 1.0}])
def test_bad_input_is_refused(kwargs):
    with pytest.raises(ValueError):
        seeds_needed(**kwargs)
