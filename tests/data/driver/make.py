"""Writes grid.csv and sampled.csv: trials.csv of tests/test_driver.py's GRID and SAMPLED specs, run by the
local runner (concurrency 1) of the code before the one driver (commit b4ffd97). Rerun only to record a
deliberate change of behaviour:  PYTHONPATH=<checkout>:tests python tests/data/driver/make.py"""
import shutil
import tempfile
from pathlib import Path

from conftest_ray import run_local_text
from test_driver import SPECS

here = Path(__file__).parent
for name, text in SPECS.items():
    with tempfile.TemporaryDirectory() as tmp:
        d = run_local_text(text, Path(tmp))
        shutil.copy(d / "trials.csv", here / f"{name}.csv")
