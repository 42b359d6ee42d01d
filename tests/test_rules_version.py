"""Frozen rules: the verdict rules carry a version, a change that moves a verdict bumps it, and each version stores
its calibration tables (nas_stab/analysis/rules.py; docs/leaderboard.md, "Rules versions" and "Never on an open end")."""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from nas_stab.analysis.calibration import FAMILIES, Setting, fingerprint, simulate
from nas_stab.analysis.rules import HISTORY, KNOWN_MISSES, RULES_VERSION, calibration_file, fingerprint_file, real_calibration_file
from nas_stab.analysis.table import analyze
from nas_stab.analysis.verdicts import CARRIED_SEEDS

REPO = Path(__file__).resolve().parents[1]


def _bench(name: str):
    import sys

    if str(REPO / "benchmarks") not in sys.path:
        sys.path.insert(0, str(REPO / "benchmarks"))  # as `python benchmarks/NAME.py` runs them: beside each other
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod


def test_the_version_is_described_and_its_files_are_stored():
    assert RULES_VERSION in HISTORY
    for f in (calibration_file(), real_calibration_file(), fingerprint_file()):
        assert (REPO / f).is_file(), f"{f} is missing: store the rules version's calibration (docs/leaderboard.md, Rules versions)"
    for f in (calibration_file(), real_calibration_file()):
        assert set(pd.read_csv(REPO / f, dtype={"rules": str})["rules"]) == {RULES_VERSION}, f"{f} was not written by rules {RULES_VERSION}"


def test_a_verdict_does_not_move_under_an_unchanged_version():
    stored = pd.read_csv(REPO / fingerprint_file())
    now = fingerprint()
    assert len(now) == len(stored)
    moved = now[now["transfers"].to_numpy() != stored["transfers"].to_numpy()]
    assert moved.empty, (f"{len(moved)} verdicts of the fixed simulated tables moved under rules {RULES_VERSION}: bump RULES_VERSION in "
                         "nas_stab/analysis/rules.py, say what changed in HISTORY, and store the new version's calibration "
                         "(bench_calibration.py --seeds 3,5 --write, bench_calibration_real.py --write, bench_calibration.py "
                         "--fingerprint):\n" + moved.assign(was=stored.loc[moved.index, "transfers"]).head(20).to_string())


def test_the_stored_calibration_meets_its_targets_or_names_the_cause():
    """Every target the stored tables miss is listed in KNOWN_MISSES with its measured cause; the targets
    themselves are the benchmarks' (`check`)."""
    missed = _bench("bench_calibration").check(pd.read_csv(REPO / calibration_file()).fillna({"adaptive": ""}))
    missed += _bench("bench_calibration_real").check(pd.read_csv(REPO / real_calibration_file()))
    unknown = [m for m in missed if m.split(":")[0] not in KNOWN_MISSES]
    assert not unknown, "targets missed that rules " + RULES_VERSION + " does not list in KNOWN_MISSES:\n" + "\n".join(unknown)
    stale = set(KNOWN_MISSES) - {m.split(":")[0] for m in missed}
    assert not stale, f"KNOWN_MISSES lists settings the stored tables no longer miss: {sorted(stale)}"


def _rows(trials: pd.DataFrame, **kw) -> pd.DataFrame:
    return analyze(trials, transfer="model.width", compare=["setting", "table"], metric="val_acc", classes=10,
                   n_boot=200, boot_seed=0, **kw).rows


@pytest.fixture(scope="module")
def families() -> pd.DataFrame:
    settings = [Setting(f, d, 3, k, 0.01, "half") for f in FAMILIES for d in (0.0, 1.0, 2.0) for k in (3, 5)]
    trials, _ = simulate(settings, 30, seed=5)
    return _rows(trials)


def test_never_yes_on_an_open_upper_end_nor_no_on_an_open_lower_end(families):
    """Over every simulated family: a `yes` has a finite worst_regret interval, a `no` decided by the interval a
    finite lower end (a `no` for a size without any lr that trains rests on no interval)."""
    r = families
    yes = r[r["transfers"] == "yes"]
    assert len(yes) > 50
    assert np.isfinite(yes["worst_regret_hi"]).all() and np.isfinite(yes["worst_regret_lo"]).all()
    by_interval = r[(r["transfers"] == "no") & r["why"].str.contains("> epsilon")]
    assert len(by_interval) > 50
    assert np.isfinite(by_interval["worst_regret_lo"]).all()
    opened = r[np.isinf(r["worst_regret_hi"])]
    assert len(opened) > 0 and (opened["transfers"] != "yes").all()


def _hand_table(values: dict[int, dict[float, list[float]]]) -> pd.DataFrame:
    """A trials table of one row from {size: {lr: [per-seed val_acc, NaN = diverged]}}."""
    recs = []
    for size, cells in values.items():
        for lr, seeds in cells.items():
            for k, v in enumerate(seeds):
                recs.append({"setting": 0, "table": 0, "seed": k, "model.width": size, "train.lr": lr,
                             "status": "diverged" if math.isnan(v) else "complete", "val_acc": v})
    return pd.DataFrame(recs)


def _peak(x: float, xs: float) -> float:
    return max(0.9 - 0.05 * (x - xs) ** 2, 0.1)


def test_an_isolated_optimum_is_open_above_and_why_says_what_closes_it():
    """The largest size trains only at one grid lr: below it stuck at chance, above it diverged. The regret's upper
    end is open (what the optimum hides between it and its untrained neighbours has no bound): no `yes`."""
    rng = np.random.default_rng(0)
    grid = [0.001 * 2 ** (i / 2) for i in range(11)]
    vals: dict[int, dict[float, list[float]]] = {}
    for size in (1, 2, 4):
        vals[size] = {}
        for i, lr in enumerate(grid):
            if size == 4 and i != 5:
                vals[size][lr] = [math.nan] * 5 if i > 5 else list(0.1 + rng.normal(0, 0.002, 5))
            else:
                vals[size][lr] = list(_peak(i / 2, 2.5) + rng.normal(0, 0.003, 5))
    r = _rows(_hand_table(vals)).iloc[0]
    assert r["transfers"] != "yes"
    assert np.isinf(r["worst_regret_hi"])
    assert "open above" in r["why"] and "4 (" in r["why"] and "would bound it" in r["why"]


def test_a_yes_beside_a_partly_failing_cell_needs_the_carried_lrs_seeds():
    """Every size the same peak; at the largest size the lr above the optimum lost 1 of its seeds to divergence. With
    5 seeds at the carried lr the verdict is inconclusive and why asks for CARRIED_SEEDS; with that many, all of
    which learned, the same curves say yes."""
    def table(n: int) -> pd.DataFrame:
        rng = np.random.default_rng(1)
        grid = [0.001 * 2 ** (i / 2) for i in range(11)]
        vals: dict[int, dict[float, list[float]]] = {}
        for size in (1, 2, 4):
            vals[size] = {lr: list(_peak(i / 2, 2.5) + rng.normal(0, 0.003, n)) for i, lr in enumerate(grid)}
        vals[4][grid[7]][0] = math.nan  # one seed of the cell a step above the optimum diverged
        return _hand_table(vals)

    few = _rows(table(5)).iloc[0]
    assert few["transfers"] == "inconclusive"
    assert f"need {CARRIED_SEEDS} seeds" in few["why"]
    many = _rows(table(CARRIED_SEEDS)).iloc[0]
    assert many["transfers"] == "yes", many["why"]


def test_never_yes_when_a_run_of_the_carried_lrs_cells_failed():
    """Every size the same peak with CARRIED_SEEDS seeds; at the largest size one seed of the optimum's own cell (the
    carried lr's) diverged: the row is not a yes, it ranks as a row whose carried lr fails, and if inconclusive its
    why says the carried lr's runs there would show whether it trains."""
    rng = np.random.default_rng(3)
    grid = [0.001 * 2 ** (i / 2) for i in range(11)]
    vals: dict[int, dict[float, list[float]]] = {}
    for size in (1, 2, 4):
        vals[size] = {lr: list(_peak(i / 2, 2.5) + rng.normal(0, 0.003, CARRIED_SEEDS)) for i, lr in enumerate(grid)}
    vals[4][grid[5]][0] = math.nan
    r = _rows(_hand_table(vals)).iloc[0]
    assert r["carried_fails"] and r["transfers"] != "yes"
    assert r["transfers"] == "no" or "runs at the carried lr there would show whether it trains" in r["why"]


def test_a_row_whose_carried_lr_fails_ranks_below_one_whose_carried_lr_trains_everywhere():
    """Row "healthy" diverges only 2.5 octaves above its optimum, at every size (many divergences); row "fails" has
    one divergence, at the carried lr of its largest size, and a better best value. The healthy row ranks first."""
    rng = np.random.default_rng(2)
    grid = [0.001 * 2 ** (i / 2) for i in range(11)]
    recs = []
    for row in ("healthy", "fails"):
        for size in (1, 2, 4):
            for i, lr in enumerate(grid):
                for k in range(5):
                    v = _peak(i / 2, 2.5) + (0.01 if row == "fails" else 0.0) + rng.normal(0, 0.002)
                    div = (row == "healthy" and i >= 10) or (row == "fails" and size == 4 and i == 5 and k == 0)
                    recs.append({"row": row, "seed": k, "model.width": size, "train.lr": lr, "status": "diverged" if div else "complete",
                                 "val_acc": math.nan if div else v})
    r = analyze(pd.DataFrame(recs), transfer="model.width", compare=["row"], metric="val_acc", classes=10, n_boot=200).rows
    ranks = dict(zip(r["row"], r["rank"]))
    flags = dict(zip(r["row"], r["carried_fails"]))
    assert flags == {"healthy": False, "fails": True}
    assert ranks["healthy"] < ranks["fails"]


def test_provenance_names_the_rules_version():
    from nas_stab.results.tables import settings_items

    trials, _ = simulate([Setting("peak", 0.0, 3, 3, 0.01, "half")], 1, seed=0)
    a = analyze(trials, transfer="model.width", compare=["setting", "table"], metric="val_acc", classes=10, n_boot=50)
    items = dict(settings_items(a))
    assert items["rules"].startswith(RULES_VERSION + " ")
