"""The version of the verdict and claims rules (docs/leaderboard.md, "Rules versions").

Every leaderboard's provenance and every ``claims.csv`` names the version that judged it. A change that can move
a verdict (the verdict rules, the intervals they rest on, the claims' rules) bumps `RULES_VERSION`, adds a line to
`HISTORY` and regenerates the version's calibration table (``python benchmarks/bench_calibration.py --write``,
stored as ``docs/calibration/rules-<version>.csv``) and its verdict fingerprint
(``python benchmarks/bench_calibration.py --fingerprint``, ``docs/calibration/rules-<version>-fingerprint.csv``):
``tests/test_rules_version.py`` fails when the fingerprint's verdicts move under an unchanged version, or when the
stored calibration table misses a target that the version does not list as known.
"""
from __future__ import annotations

__all__ = ["HISTORY", "KNOWN_MISSES", "RULES_VERSION", "calibration_file", "fingerprint_file", "real_calibration_file", "rules_line"]

RULES_VERSION = "2026.12"

HISTORY = {
    "2026.11": "the rules every table published up to 2026-11-28 was judged by (before versions were recorded)",
    "2026.12": "no yes on an open upper end and no no on an open lower end (why says what closes it); a yes where "
               "a cell within 2 octaves of the carried lr partly failed needs 10 seeds that learn in the carried lr's "
               "cells, and no yes where a run of those cells failed; the printed x* interval of a refined optimum spans "
               "3/4 of the local step on each side; a row whose carried lr fails at some size ranks below every row "
               "whose carried lr trains everywhere; claims carry p-values, Benjamini-Hochberg q-values, their "
               "declaration and freshness",
}

# targets of the stored calibration table this version misses, each with its cause (docs/leaderboard.md,
# "Calibration"): a miss not listed here fails tests/test_rules_version.py
_UNSEEN = ("a failure regime the drawn seeds do not show: in 'bimodal' up to 40% of the largest size's seeds get stuck "
           "above its optimum, 20% at it; a table whose seeds near the carried lr all learned has no evidence of it, and "
           "its interval, built from those seeds, cannot cover the cost (its verdict is guarded: P(yes | costly) <= 1%)")
_REAL = ("a cell where 1 of 5 real seeds fails (tau-depth 1/L: lr 2 at depth 3, lr 4 at depths 3 and 10; 1/sqrt(L): "
         "lr 2-2.8 at depths 10-100) and resampled seeds that show none of its failures: a 3-seed yes does not exclude "
         "a 20% failure rate at the carried lr (0.51 chance to miss it per cell); with 5 seeds one setting, 1 in 18")
KNOWN_MISSES: dict[str, str] = {
    "regret bimodal drift 0 seeds 3": _UNSEEN,
    "regret bimodal drift 0.5 seeds 3": _UNSEEN,
    "regret bimodal drift 0 seeds 5": _UNSEEN,
    "drift bimodal drift 0 seeds 3": _UNSEEN,
    "real tau-depth 1/L shift 0 seeds 3": _REAL,
    "real tau-depth 1/L shift 0.5 seeds 3": _REAL,
    "real tau-depth 1/L shift 2 seeds 5": _REAL,
    "real tau-depth 1/sqrt(L) shift 0.5 seeds 3": _REAL,
    "real tau-depth 1/sqrt(L) shift 1 seeds 3": _REAL,
    "real tau-depth 1/sqrt(L) shift 2 seeds 3": _REAL,
}


def calibration_file(version: str = RULES_VERSION) -> str:
    """The stored calibration table of a rules version, relative to the repository root."""
    return f"docs/calibration/rules-{version}.csv"


def real_calibration_file(version: str = RULES_VERSION) -> str:
    """The stored calibration table on published real curves of a rules version (benchmarks/bench_calibration_real.py)."""
    return f"docs/calibration/rules-{version}-real.csv"


def fingerprint_file(version: str = RULES_VERSION) -> str:
    """The stored verdicts of the fixed simulated tables of a rules version, relative to the repository root."""
    return f"docs/calibration/rules-{version}-fingerprint.csv"


def rules_line() -> str:
    """The provenance line naming the rules version."""
    return f"{RULES_VERSION} (docs/leaderboard.md, Rules versions; calibration table {calibration_file()})"
