"""`extends:`: an experiment file that starts from another one."""
import pytest
from conftest import run_cli

from nas_stab.config import load_spec, spec_hash
from nas_stab.errors import SpecError

BASE = """\
name: base
seeds: 2
task:
  dataset: {name: digits}
model: {arch: mlp_resnet, depth: 2, width: 16}
train: {lr: 0.05, steps: 20, batch_size: 32, momentum: 0.5}
space:
  model.branches: [1, 2]
  train.lr: {log_grid: [0.01, 0.1, 3]}
leaderboard: {transfer: model.branches}
"""


def write(p, text):
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def test_child_overrides_key_by_key_and_replaces_dimensions(tmp_path):
    write(tmp_path / "bases" / "base.yaml", BASE)
    child = write(tmp_path / "child.yaml", """\
extends: bases/base.yaml
name: child
train: {steps: 40}
space:
  train.lr: [0.02, 0.06, 0.2]
  model.width: [8, 16]
""")
    spec = load_spec(child)
    assert spec.name == "child" and spec.seeds == (0, 1)
    assert spec.train.steps == 40 and spec.train.momentum == 0.5 and spec.train.batch_size == 32  # merged, not replaced
    dims = {d.key: d for d in spec.space.dims}
    assert dims["train.lr"].kind == "values" and dims["train.lr"].values == (0.02, 0.06, 0.2)
    assert set(dims) == {"model.branches", "train.lr", "model.width"}
    assert "extends" not in spec.raw


def test_null_removes_a_base_dimension_and_chains_resolve(tmp_path):
    write(tmp_path / "base.yaml", BASE)
    write(tmp_path / "mid.yaml", "extends: base.yaml\nname: mid\nspace: {model.branches: null}\nleaderboard: {transfer: null}\n")
    leaf = write(tmp_path / "sub" / "leaf.yaml", "extends: ../mid.yaml\nname: leaf\nmodel: {width: 32}\n")
    spec = load_spec(leaf)
    assert spec.space.keys == ("train.lr",) and spec.model.width == 32 and spec.model.depth == 2
    # on the command line too, and editors' JSON Schema accepts the null
    assert load_spec(tmp_path / "base.yaml", ["space.model.branches=null", "leaderboard.transfer=null"]).space.keys == ("train.lr",)
    import jsonschema
    import yaml

    from nas_stab.config.json_schema import json_schema

    jsonschema.validate(yaml.safe_load((tmp_path / "mid.yaml").read_text()), json_schema())


def test_same_resolved_spec_same_hash(tmp_path):
    """A file rewritten as `extends:` of another is the same experiment (same hash)."""
    full = write(tmp_path / "full.yaml", BASE.replace("name: base", "name: variant").replace("steps: 20", "steps: 30"))
    write(tmp_path / "base.yaml", BASE)
    ext = write(tmp_path / "variant.yaml", "extends: base.yaml\nname: variant\ntrain: {steps: 30}\n")
    assert spec_hash(load_spec(full)) == spec_hash(load_spec(ext))


def test_errors_name_the_file_and_line_a_value_came_from(tmp_path):
    write(tmp_path / "base.yaml", BASE.replace("batch_size: 32", "batch_size: -3"))
    child = write(tmp_path / "child.yaml", "extends: base.yaml\nname: child\n\nmodel: {widht: 8}\n")
    with pytest.raises(SpecError) as e:
        load_spec(child)
    assert str(e.value).startswith(f"{child}:4: model.widht: unknown key")
    child.write_text("extends: base.yaml\nname: child\n")
    with pytest.raises(SpecError) as e:
        load_spec(child)
    assert str(e.value).startswith(f"{(tmp_path / 'base.yaml').resolve()}:6: train.batch_size: must be >= 1")


@pytest.mark.parametrize("files, needle", [
    ({"a.yaml": "extends: b.yaml\nname: a\n", "b.yaml": "extends: a.yaml\nname: b\n"}, "cycle"),
    ({"a.yaml": "extends: a.yaml\nname: a\n"}, "cycle"),
    ({"a.yaml": "extends: missing.yaml\nname: a\n"}, "file not found"),
    ({"a.yaml": "extends: [x.yaml]\nname: a\n"}, "must be the path"),
    ({"a.yaml": "extends: b.yaml\nname: a\n", "b.yaml": "- 1\n- 2\n"}, "must hold a mapping"),
])
def test_bad_extends_is_one_clear_error(tmp_path, files, needle):
    for name, text in files.items():
        write(tmp_path / name, text)
    r = run_cli("validate", tmp_path / "a.yaml", "--no-timing")
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    where = lines[0].split(": extends: ")[0]  # the file whose extends line is wrong (b.yaml closes a cycle)
    assert where in (f"error: {tmp_path / 'a.yaml'}:1", f"error: {(tmp_path / 'b.yaml').resolve()}:1") and needle in lines[0], lines[0]


def test_an_inherited_description_is_flagged(tmp_path):
    """A file that extends another and does not set its own description inherits the base's, which describes
    the base experiment and is printed with every table: a warning says so; setting it silences it."""
    write(tmp_path / "base.yaml", BASE.replace("name: base\n", "name: base\ndescription: the base sweep\n"))
    child = write(tmp_path / "child.yaml", "extends: base.yaml\nname: child\nmodel: {width: 32}\n")
    notes = load_spec(child).notes
    assert any("description is inherited from" in n and "the base sweep" in n for n in notes), notes
    own = write(tmp_path / "own.yaml", "extends: base.yaml\nname: own\ndescription: wider\nmodel: {width: 32}\n")
    assert not any("description is inherited" in n for n in load_spec(own).notes)
    assert not any("description is inherited" in n for n in load_spec(tmp_path / "base.yaml").notes)
