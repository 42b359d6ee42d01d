"""The JSON Schema for editors and the generated reference pages stay true to the schema."""
import json

import jsonschema
import pytest
import yaml
from conftest import ROOT, run_cli

from nas_stab.config.json_schema import json_schema
from nas_stab.config.reference import markdown_reference

SPACES = sorted((ROOT / "spaces").rglob("*.yaml"))


def _validator():
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


@pytest.mark.parametrize("path", SPACES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_space_validates_against_the_json_schema(path):
    errors = sorted(_validator().iter_errors(yaml.safe_load(path.read_text())), key=str)
    assert not errors, "\n".join(f"{'.'.join(map(str, e.path))}: {e.message}" for e in errors)


@pytest.mark.parametrize("doc, where", [
    ({"name": "x", "task": {}, "model": {"widht": 8}}, "model"),           # unknown key
    ({"name": "x", "task": {}, "model": {"depth": "deep"}}, "model.depth"),  # wrong type
    ({"name": "x", "task": {}, "model": {"depth": 0}}, "model.depth"),       # out of range
    ({"name": "X Y", "task": {}, "model": {}}, "name"),                      # pattern
    ({"name": "x", "task": {}, "model": {"skip": "xskp"}}, "model.skip"),    # not a choice
    ({"name": "x", "task": {}, "model": {}, "space": {"train.lr": {"log_grid": [1, 2]}}}, "space.train.lr"),
    ({"name": "x", "task": {}, "model": {}, "space": {"lr": [1, 2]}}, "space"),  # not a dotted key
    ({"task": {}, "model": {}}, ""),                                          # name required
])
def test_the_json_schema_rejects_what_validate_rejects(doc, where):
    errors = list(_validator().iter_errors(doc))
    assert errors, doc
    assert any(".".join(map(str, e.absolute_path)).startswith(where) for e in errors), [e.message for e in errors]


def test_shipped_schema_file_is_current():
    """docs/experiment.schema.json is what `nas-stab schema` prints (regenerate:
    nas-stab schema --builtin --out docs/experiment.schema.json)."""
    assert json.loads((ROOT / "docs" / "experiment.schema.json").read_text()) == json_schema(plugins=False)


def test_reference_page_is_current():
    """docs/experiment-file.md is generated (nas-stab schema --builtin --format markdown --out docs/experiment-file.md)."""
    assert (ROOT / "docs" / "experiment-file.md").read_text() == markdown_reference()


def test_reference_lists_every_key():
    from nas_stab.config import schema
    from nas_stab.config.build import public_fields

    text = markdown_reference()
    for section in ("task", "model", "train", "stability", "search", "runner", "leaderboard"):
        cls = {f.name: f.type for f in public_fields(schema.Spec)}[section]
        cls = getattr(schema, cls) if isinstance(cls, str) else cls
        for f in public_fields(cls):
            assert f"`{section}.{f.name}`" in text, f"{section}.{f.name}"


def test_schema_command_prints_the_schema():
    r = run_cli("schema")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == json_schema()
