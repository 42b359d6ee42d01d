"""The papers' claims about the stability metrics at init, at test size
(scripts/paper_checks_stability.py prints the full-size numbers)."""
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

from paper_checks_stability import slope, stam_fwd_ratios, tau_fwd_ratios, update_ratios  # noqa: E402


def test_stam_figure2_forward_norm_slopes_in_C():
    Cs = [1, 4, 16]
    r = stam_fwd_ratios(Cs, [0, 1], width=128, b=2, skip="none", probe=128)
    assert abs(slope(Cs, r["sum"]) - 0.5) < 0.08
    assert abs(slope(Cs, r["avg"]) + 0.5) < 0.08
    assert abs(slope(Cs, r["stam"])) < 0.08


def test_tau_forward_norm_grows_with_depth_only_for_L_to_the_minus_quarter():
    depths = [3, 30, 300]
    r = tau_fwd_ratios(depths, ["L^-0.25", "1/sqrt(L)", "1/L"], [0], width=64, probe=64)
    assert r["L^-0.25"][-1] > 100 * r["L^-0.25"][0]
    assert r["1/sqrt(L)"][-1] < 2 * r["1/sqrt(L)"][0] and r["1/sqrt(L)"][-1] < 4
    assert r["1/L"][-1] < 1.2 * r["1/L"][0]


def test_update_ratio_grows_with_depth_unless_tau_is_one_over_sqrt_L():
    depths = [2, 8, 32]
    r = update_ratios(depths, ["1", "1/sqrt(L)"], [0], lr=1e-4, width=64, probe=64)
    unscaled, scaled = r["1"], r["1/sqrt(L)"]
    assert unscaled[1] > 5 * unscaled[0] and (math.isinf(unscaled[2]) or unscaled[2] > unscaled[1])
    assert max(scaled) < 3 * min(scaled)
