"""How many seeds a compared claim needs: the power calculation behind "underpowered: needs N seeds".

A claim compares two configurations at their chosen learning rates over the same seeds (paired): the
per-seed difference has a standard deviation `sd` (from a pilot: the runs already made), and the paper
says the effect is `effect` (in the metric's units). With `n` seeds a one-sided paired t-test at level
`alpha` detects the effect with probability

    power(n) = P(T_{n-1, delta} > t_{n-1}(1 - alpha)),   delta = effect / (sd / sqrt(n)),

where T_{n-1, delta} is the noncentral t distribution. `seeds_needed` is the smallest n with power(n) >=
`power`. `seeds_needed_normal` is the textbook normal approximation n = ((z_{1-alpha} + z_{power}) sd /
effect)^2, which the exact count exceeds by a seed or two at these sizes (the t quantile is wider than z).

Both are one-sided (the paper says which configuration should win); `two_sided=True` uses alpha / 2.
"""
from __future__ import annotations

import math

from scipy import stats

MAX_SEEDS = 10_000


def power_at(n: int, sd: float, effect: float, *, alpha: float = 0.05, two_sided: bool = False) -> float:
    """The probability that a paired t-test over `n` seeds detects a true mean difference `effect`."""
    if n < 2:
        return 0.0
    _check(sd, effect, alpha)
    a = alpha / 2 if two_sided else alpha
    df = n - 1
    crit = stats.t.ppf(1 - a, df)
    delta = abs(effect) / (sd / math.sqrt(n))
    return float(stats.nct.sf(crit, df, delta))


def seeds_needed(sd: float, effect: float, *, alpha: float = 0.05, power: float = 0.8, two_sided: bool = False) -> int:
    """The fewest seeds (at least 2) whose paired t-test reaches `power` against `effect` (see the module)."""
    _check(sd, effect, alpha)
    if not 0 < power < 1:
        raise ValueError(f"power must be in (0, 1), got {power}")
    start = max(2, seeds_needed_normal(sd, effect, alpha=alpha, power=power, two_sided=two_sided) - 2)
    lo = 2 if power_at(start, sd, effect, alpha=alpha, two_sided=two_sided) >= power else start
    for n in range(lo, MAX_SEEDS + 1):  # power(n) increases with n: the first n that reaches it
        if power_at(n, sd, effect, alpha=alpha, two_sided=two_sided) >= power:
            return n
    return MAX_SEEDS


def seeds_needed_normal(sd: float, effect: float, *, alpha: float = 0.05, power: float = 0.8, two_sided: bool = False) -> int:
    """The normal approximation ceil(((z_{1-alpha} + z_power) sd / effect)^2), at least 2."""
    _check(sd, effect, alpha)
    a = alpha / 2 if two_sided else alpha
    z = stats.norm.ppf(1 - a) + stats.norm.ppf(power)
    return max(2, math.ceil((z * sd / abs(effect)) ** 2))


def _check(sd: float, effect: float, alpha: float) -> None:
    if not (math.isfinite(sd) and sd > 0):
        raise ValueError(f"sd must be a positive number, got {sd}")
    if not (math.isfinite(effect) and effect != 0):
        raise ValueError(f"effect must be a nonzero number, got {effect}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
