"""The chaos benchmark, reduced (benchmarks/chaos.py): a 30-trial grid on a 3-node loopback Ray cluster, run
undisturbed and then with trial workers SIGKILLed, a worker node removed and the driver SIGKILLed and resumed: no run
lost or duplicated, every grid cell recorded exactly once, and the records and the leaderboard identical to the
undisturbed search's."""
from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec_ = importlib.util.spec_from_file_location("chaos", ROOT / "benchmarks" / "chaos.py")
chaos = importlib.util.module_from_spec(spec_)
sys.modules["chaos"] = chaos  # its dataclasses look their module up
spec_.loader.exec_module(chaos)


@pytest.mark.slow
def test_a_disturbed_search_loses_nothing_and_gives_the_same_leaderboard(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("runners/local_cluster.sh needs bash")
    got = chaos.run(trials=30, nodes=3, steps=60, kill_frac=0.1, seed=1, tmp=tmp_path)
    assert got["workers_killed"] >= 1 and got["node_removed"] and got["driver_killed_at"] > 0, got
    assert got["drivers"] == 2 and not got["problems"], got
    assert (got["lost"], got["duplicated"], got["not_once"]) == (0, 0, 0), got
    assert got["records_identical"] and got["leaderboard_identical"], got
