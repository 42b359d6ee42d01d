"""Plugins through entry points (docs/plugins.md): an installed package's datasets join the registry with their
metadata, so a run on them validates, trains and is judged against the right chance level; a broken plugin never
stops nas_stab, and the name a spec gives then says why. The example plugin (examples/plugin) is installed here as
pip lays it out: its package on the path and a dist-info with its entry points, read from its pyproject.toml."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python 3.11+ (the example's pyproject.toml is read with it)

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "plugin"


def install(site: Path, package: Path, name: str, entry_points: dict[str, dict[str, str]]) -> None:
    """`package` into `site` with a dist-info naming `entry_points` ({group: {name: value}}), as pip installs it."""
    shutil.copytree(package, site / package.name)
    info = site / f"{name.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for group, eps in entry_points.items()))


def nas_stab(site: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    return subprocess.run([sys.executable, "-m", "nas_stab.cli", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=600)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    meta = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())
    install(site, EXAMPLE / "nas_stab_moons", meta["project"]["name"], meta["project"]["entry-points"])
    return site


def test_the_example_plugin_is_validated_trained_and_judged_against_its_chance_level(site, tmp_path):
    r = nas_stab(site, "list", cwd=tmp_path)
    assert r.returncode == 0 and "moons" in r.stdout, r.stderr
    spec = EXAMPLE / "moons.yaml"
    small = ["--set", "train.steps=20", "--set", "seeds=2", "--set", "task.dataset.size=400",
             "--set", "space.train.lr=[0.05, 0.1, 0.2]"]
    r = nas_stab(site, "run", str(spec), "--out", str(tmp_path / "runs"), *small, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    md = (tmp_path / "runs" / "moons" / "leaderboard.md").read_text()
    assert "m0 = 0.5" in md, md  # chance of 2 classes: the leaderboard knows the plugin's class count
    import pandas as pd

    t = pd.read_csv(tmp_path / "runs" / "moons" / "trials.csv")
    assert len(t) == 12 and not (t["status"] == "failed").any() and t["val_acc"].max() > 0.7  # it learns the moons


def test_without_the_plugin_the_dataset_is_unknown(tmp_path):
    r = nas_stab(tmp_path, "validate", str(EXAMPLE / "moons.yaml"), cwd=tmp_path)
    assert r.returncode == 2 and "unknown dataset 'moons'" in r.stderr, r.stderr


def test_a_broken_plugin_is_skipped_and_named_where_its_dataset_is_asked_for(tmp_path):
    pkg = tmp_path / "src" / "broken_plugin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "catalog.py").write_text("raise RuntimeError('a bug in the plugin')\n")
    site = tmp_path / "site"
    install(site, pkg, "broken-plugin", {"nas_stab.datasets": {"moons": "broken_plugin.catalog"}})
    r = nas_stab(site, "validate", str(EXAMPLE / "moons.yaml"), cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "unknown dataset 'moons'" in r.stderr and "did not load: RuntimeError: a bug in the plugin" in r.stderr
    r = nas_stab(site, "validate", str(ROOT / "spaces" / "quickstart.yaml"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr  # every other experiment is untouched


def test_a_plugin_cannot_take_a_built_in_name(tmp_path):
    pkg = tmp_path / "src" / "clash_plugin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "catalog.py").write_text("from nas_stab.data.base import DATASETS\n"
                                    "DATASETS.declare('digits', 'clash_plugin.x:load', task='classification')\n")
    site = tmp_path / "site"
    install(site, pkg, "clash-plugin", {"nas_stab.datasets": {"digits": "clash_plugin.catalog"}})
    code = ("from nas_stab.data import DATASETS\n"
            "print(DATASETS.entry('digits').target, DATASETS.failed)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout
    assert out.startswith("nas_stab.data.tabular:load_digits") and "registered twice" in out, out
