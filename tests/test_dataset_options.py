"""A dataset owns its options: the keys of `task.dataset` beyond the common ones are checked against the `options`
class of the named dataset's registry entry, composed into the schema, the JSON Schema and the reference; the hashes
of every experiment written before (one flat section for all datasets) do not change."""
import dataclasses
import json
from dataclasses import dataclass

import jsonschema
import pytest
import yaml
from conftest import ROOT

from nas_stab.config import config_key, loads_spec, spec_hash
from nas_stab.config.display import applicable_plain
from nas_stab.config.json_schema import json_schema
from nas_stab.config.keys import check_key, get_key
from nas_stab.config.load import load_spec
from nas_stab.config.reference import markdown_reference
from nas_stab.config.schema import DatasetConfig, option
from nas_stab.data import DATASETS
from nas_stab.data.catalog import SyntheticOptions, TextPairsOptions
from nas_stab.errors import SpecError, SpecErrors

MODEL = "model: {arch: mlp, width: 8}\n"
TRANSLATION = "model: {arch: transformer, d_model: 16}\ntrain: {optimizer: adam, lr: 0.001}\nsearch: {objective: val_loss}\n"

# the inline experiments of tests/data/spec_hashes.json (their hashes computed by the code of ee4f8ba, before the
# datasets owned their options): every option set, defaults, a retired key a dataset does not read
VARIANTS = {
    "synthetic-options": "name: v\ntask: {dataset: {name: synthetic, classes: 3, noise: 0.2, size: 300, shape: [12]}}\n" + MODEL,
    "synthetic-defaults": "name: v\ntask: {dataset: {name: synthetic}}\n" + MODEL,
    "digits-ignored-key": "name: v\ntask: {dataset: {name: digits, noise: 0.3}}\n" + MODEL,
    "mnist1d-size": "name: v\ntask: {dataset: {name: mnist1d, size: 4000}}\n" + MODEL,
    "translation-synthetic": "name: v\ntask: {kind: translation, dataset: {name: synthetic, size: 500, vocab_size: 64, "
                             "max_len: 20}}\n" + TRANSLATION,
    "text-pairs": "name: v\ntask: {kind: translation, dataset: {name: text_pairs, train_src: a.de, train_tgt: a.en, "
                  "tokenizer: unigram}}\n" + TRANSLATION,
}
HASHES = json.loads((ROOT / "tests" / "data" / "spec_hashes.json").read_text())


@pytest.mark.parametrize("name", sorted(HASHES))
def test_every_experiment_keeps_its_spec_hash_and_run_keys(name):
    """56 experiments (every shipped spec, the variants above): run directories made before resume, their runs'
    keys unchanged (a changed key would retrain every run of a resumed search)."""
    spec = loads_spec(VARIANTS[name.split(":", 1)[1]]) if name.startswith("variant:") else load_spec(ROOT / name)
    assert [spec_hash(spec), config_key(spec, 0)] == HASHES[name]


def test_a_dataset_s_options_are_its_own_typed_class():
    spec = loads_spec(VARIANTS["synthetic-options"])
    d = spec.task.dataset
    assert d.options == SyntheticOptions(classes=3, shape=(12,), size=300, noise=0.2)
    assert get_key(spec, "task.dataset.noise") == 0.2 and check_key(spec, "task.dataset.noise") is None
    assert loads_spec("name: v\ntask: {dataset: {name: digits}}\n" + MODEL).task.dataset.options is None
    tp = loads_spec(VARIANTS["text-pairs"]).task.dataset.options
    assert isinstance(tp, TextPairsOptions) and (tp.train_src, tp.tokenizer, tp.vocab_size) == ("a.de", "unigram", 8000)


def test_keys_a_dataset_does_not_have_are_refused_all_at_once_naming_line_and_key():
    text = "name: v\ntask:\n  dataset: {name: synthetic, nosie: 0.3, colour: 2, size: abc}\n" + MODEL
    with pytest.raises(SpecErrors) as e:
        loads_spec(text, file="x.yaml")
    lines = str(e.value).splitlines()
    assert lines == [
        "x.yaml:3: task.dataset.nosie: unknown key for dataset 'synthetic'; did you mean 'noise'?",
        "x.yaml:3: task.dataset.colour: unknown key for dataset 'synthetic'; valid: name, root, train, val, test, "
        "download, split_seed, augment, normalize, cache, classes, shape, size, noise",
        "x.yaml:3: task.dataset.size: must be an integer, got 'abc'",
    ]
    with pytest.raises(SpecError, match=r"task.dataset.vocab_size: must be >= 16, got 2"):
        loads_spec("name: v\ntask: {kind: translation, dataset: {name: multi30k, vocab_size: 2}}\n" + TRANSLATION)


def test_a_retired_key_the_dataset_does_not_read_warns_and_stays_in_the_hash():
    """Before, every dataset's section had every key; a file setting one its dataset ignores still loads (a warning),
    at its old default silently (a stored spec.yaml of then lists them all)."""
    warned = loads_spec(VARIANTS["digits-ignored-key"], file="x.yaml")
    assert warned.task.dataset.ignored == (("noise", 0.3),)
    assert any("task.dataset.noise: has no effect: digits does not read noise" in n for n in warned.notes)
    silent = loads_spec("name: v\ntask: {dataset: {name: digits, noise: 0.5, vocab_size: 8000}}\n" + MODEL)
    plain = loads_spec("name: v\ntask: {dataset: {name: digits}}\n" + MODEL)
    assert silent.task.dataset.ignored == () and not silent.notes
    assert spec_hash(silent) == spec_hash(plain) != spec_hash(warned)


def test_the_stored_spec_lists_only_the_dataset_s_own_options_and_reloads_to_the_same_dataset():
    for text in VARIANTS.values():
        spec = loads_spec(text)
        stored = applicable_plain(spec)
        own = {f.name for f in dataclasses.fields(spec.task.dataset.options)} if spec.task.dataset.options else set()
        common = {f.name for f in dataclasses.fields(DatasetConfig)} - {"options", "ignored"}
        assert set(stored["task"]["dataset"]) == common | own | {k for k, _ in spec.task.dataset.ignored}
        again = loads_spec(yaml.safe_dump(stored), run_file=True)
        assert again.task == spec.task


def test_a_space_searches_an_own_option_and_refuses_one_the_dataset_lacks():
    spec = loads_spec("name: v\ntask: {dataset: {name: synthetic}}\n" + MODEL + "space: {task.dataset.noise: [0.1, 0.4]}\n")
    assert spec.space.keys == ("task.dataset.noise",)
    with pytest.raises(SpecError, match=r"unknown key 'task.dataset.noise'"):
        loads_spec("name: v\ntask: {dataset: {name: digits}}\n" + MODEL + "space: {task.dataset.noise: [0.1, 0.4]}\n")


@dataclass(frozen=True)
class _RingOptions:
    radius: float = option(1.0, "ring radius", gt=0, le=100)
    points: int = option(200, "points per class", ge=10)


@pytest.fixture
def ring():
    """A dataset declared as a plugin declares it (a registry entry with an options class), removed afterwards."""
    DATASETS.declare("ring", "nas_stab.data.tabular:load_digits", task="classification", classes=2,
                     options=_RingOptions, doc="test: a plugin's own options", plugin="test-ring")
    yield
    DATASETS._entries.pop("ring")


def test_a_plugin_s_own_options_are_checked_shown_and_in_the_json_schema(ring):
    spec = loads_spec("name: v\ntask: {dataset: {name: ring, radius: 2.5}}\n" + MODEL)
    assert spec.task.dataset.options == _RingOptions(radius=2.5, points=200)
    with pytest.raises(SpecErrors) as e:
        loads_spec("name: v\ntask: {dataset: {name: ring, radius: 0, pionts: 3}}\n" + MODEL, file="r.yaml")
    assert str(e.value).splitlines() == ["r.yaml:2: task.dataset.pionts: unknown key for dataset 'ring'; did you mean 'points'?",
                                         "r.yaml:2: task.dataset.radius: must be > 0, got 0.0"]
    schema = json_schema()
    validator = jsonschema.Draft202012Validator(schema)
    good = {"name": "v", "task": {"dataset": {"name": "ring", "radius": 2.5}}, "model": {}}
    assert not list(validator.iter_errors(good))
    bad = [{"name": "v", "task": {"dataset": {"name": "ring", "radius": -1}}, "model": {}},
           {"name": "v", "task": {"dataset": {"name": "digits", "radius": 2}}, "model": {}},  # not digits' option
           {"name": "v", "task": {"dataset": {"radius": 2}}, "model": {}}]  # digits by default
    assert all(list(validator.iter_errors(doc)) for doc in bad)
    assert "### task.dataset: ring (classification)" in markdown_reference(plugins=True)
    assert "task.dataset: ring" not in markdown_reference() and "\"ring\"" not in json.dumps(json_schema(plugins=False))
    assert "\"ring\"" in json.dumps(schema)


def test_the_json_schema_knows_each_built_in_dataset_s_options():
    validator = jsonschema.Draft202012Validator(json_schema(plugins=False))
    ok = {"name": "v", "task": {"dataset": {"name": "synthetic", "noise": 0.1, "shape": [4]}}, "model": {}}
    assert not list(validator.iter_errors(ok))
    assert list(validator.iter_errors({"name": "v", "task": {"dataset": {"name": "cifar10", "noise": 0.1}}, "model": {}}))
    assert list(validator.iter_errors({"name": "v", "task": {"dataset": {"name": "synthetic", "noise": -1}}, "model": {}}))
