"""Plugins through entry points (docs/plugins.md): an installed package's datasets and architectures join the
registries with their metadata and their own options, so a run on them validates, trains (muP included, through the
model's declared parametrization roles) and is judged against the right chance level; a broken plugin never stops
nas_stab, and the name a spec gives then says why. The example plugin (examples/plugin) is installed with pip (into a
target directory, offline, with the host's setuptools)."""
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
    """`pip install examples/plugin` into a directory of its own (a copy of the example is built: the build leaves
    nothing in the repository)."""
    src = tmp_path_factory.mktemp("src") / "plugin"
    shutil.copytree(EXAMPLE, src)
    site = tmp_path_factory.mktemp("site")
    r = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index",
                        "--target", str(site), str(src)], capture_output=True, text=True, timeout=600)
    if r.returncode != 0 and "No module named pip" in r.stderr:
        pytest.skip("pip is not installed in this environment")
    assert r.returncode == 0, r.stderr
    meta = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())
    assert (site / "nas_stab_moons").is_dir() and meta["project"]["entry-points"]["nas_stab.models"]
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


def test_the_plugin_model_trains_under_sp_and_mup_through_its_declared_roles(site, tmp_path):
    spec = EXAMPLE / "moons-mup.yaml"
    small = ["--set", "train.steps=20", "--set", "seeds=2", "--set", "task.dataset.size=400",
             "--set", "space.train.lr=[0.003, 0.01, 0.03]"]
    r = nas_stab(site, "run", str(spec), "--out", str(tmp_path / "runs"), *small, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    import pandas as pd

    t = pd.read_csv(tmp_path / "runs" / "moons-mup" / "trials.csv")
    assert sorted(set(t["model.parametrization"])) == ["mup", "sp"] and len(t) == 24
    assert "SP init kept" not in (tmp_path / "runs" / "moons-mup" / "log.txt").read_text()  # its init is recorded
    # muP on the plugin's model, relative to width 32: the readout keeps the base width's init and reads its input
    # times 1/r; the hidden weights train at Adam lr x 1/r (the roles its entry declares: readout "head", width)
    code = (
        "import torch\n"
        "from nas_stab.config import loads_spec\n"
        "from nas_stab.data import load_dataset\n"
        "from nas_stab.models import build_model\n"
        f"spec = loads_spec(open({str(spec)!r}).read(), file={str(spec)!r}, overrides=['model.width=128', "
        "'model.parametrization=mup', 'task.dataset.size=400'])\n"
        "torch.manual_seed(0)\n"
        "m = build_model(spec, load_dataset(spec, 'cpu').info)\n"
        "print(round(m.head.weight.std().item() * 32 ** 0.5, 2), m.head._nas_output_mult, "
        "m.hidden[0].weight._nas_lr_mult, m.inp.weight._nas_lr_mult)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    std32, mult, lr_hidden, lr_input = out.stdout.split()
    assert abs(float(std32) - 1.0) < 0.1 and float(mult) == 0.25 and float(lr_hidden) == 0.25 and float(lr_input) == 1.0


def test_the_plugin_model_s_own_options_and_roles_are_checked_at_validation(site, tmp_path):
    spec = EXAMPLE / "moons-mup.yaml"
    r = nas_stab(site, "validate", str(spec), "--no-timing", "--set", "model.activaton=tanh", cwd=tmp_path)
    assert r.returncode == 2 and "model.activaton: unknown key for model 'moons_mlp'; did you mean 'activation'?" in r.stderr
    r = nas_stab(site, "validate", str(spec), "--no-timing", "--set", "model.activation=gelu", cwd=tmp_path)
    assert r.returncode == 2 and "model.activation: invalid value 'gelu'" in r.stderr, r.stderr
    r = nas_stab(site, "validate", str(spec), "--no-timing", "--set", "space.model.parametrization=[depth_mup]",
                 "--set", "model.base_depth=2", cwd=tmp_path)
    assert r.returncode == 2 and "depth_mup is implemented for mlp, mlp_resnet, resnet; not yet for 'moons_mlp'" in r.stderr, r.stderr
    r = nas_stab(site, "schema", cwd=tmp_path)
    assert r.returncode == 0 and '"activation"' in r.stdout and '"moons_mlp"' in r.stdout


def test_nas_stab_conform_checks_the_plugin_model_through_its_declared_roles(site, tmp_path):
    """The plugin's model gets the same conformance checks as a built-in one, with no change to nas_stab: under muP it
    is not failed, in SP it fails naming the hidden weights' lr and the readout."""
    spec = EXAMPLE / "moons-mup.yaml"
    r = nas_stab(site, "conform", str(spec), "--expect", "mup", "--set", "model.parametrization=mup", "--out", str(tmp_path),
                 "--no-plots", cwd=tmp_path)
    assert r.returncode in (0, 3) and "FAIL" not in r.stdout, r.stdout + r.stderr
    assert "pass         lr             hidden" in r.stdout and "at head.weight" in r.stdout
    r = nas_stab(site, "conform", str(spec), "--expect", "mup", "--set", "model.parametrization=sp", "--out", str(tmp_path),
                 "--no-plots", cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "failing: hidden.0.weight, hidden.1.weight" in r.stdout and "failing: head.weight" in r.stdout
