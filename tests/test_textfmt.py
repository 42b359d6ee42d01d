"""The two shared text helpers: durations and 'did you mean'."""
import math

from nas_stab.textfmt import did_you_mean, duration, nearest


def test_duration_prose_exact_and_clock():
    assert duration(36) == "36.0 s" and duration(119.94) == "119.9 s"
    assert duration(185) == "3.1 min" and duration(185, exact=True) == "3.1 min (185 s)"
    assert duration(3 * 3600) == "3.0 h" and duration(3 * 3600, exact=True) == "3.00 h (10800 s)"
    assert duration(45, clock=True) == "45s" and duration(185, clock=True) == "3m05s"
    assert duration(3720, clock=True) == "1h02m"
    assert duration(math.nan) == "unknown" and duration(math.nan, clock=True) == "unknown"


def test_did_you_mean_near_miss_and_list():
    assert nearest("lerning_rate", ["lr", "learning_rate"]) == "learning_rate"
    assert did_you_mean("tpee", ["tpe", "grid"]) == "; did you mean 'tpe'?"
    assert did_you_mean("zzz", ["tpe", "grid"]) == "; valid: tpe, grid"
