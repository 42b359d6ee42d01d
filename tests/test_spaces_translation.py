"""The shipped Multi30k spaces validate, search what they claim, and stay small."""
from __future__ import annotations

from pathlib import Path

import pytest

from nas_stab.config import load_spec

SPACES = Path(__file__).resolve().parents[1] / "spaces"
FILES = sorted(SPACES.glob("multi30k_*.yaml"))


def test_all_three_spaces_exist():
    assert {f.name for f in FILES} >= {"multi30k_base.yaml", "multi30k_stam_heads.yaml", "multi30k_rskip.yaml"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_space_validates_and_is_a_translation_experiment(path):
    spec = load_spec(path)
    assert spec.task.kind == "translation" and spec.task.dataset.name == "multi30k"
    assert (spec.task.dataset.options.src, spec.task.dataset.options.tgt) == ("de", "en")
    assert spec.model.arch == "transformer"
    assert spec.search.objective == "bleu" and spec.leaderboard.lr == "train.lr"
    assert spec.train.optimizer == "adam" and spec.train.schedule == "inverse_sqrt" and spec.train.max_tokens
    assert spec.train.threads == 1  # one core per trial: no oversubscription on 2 shared cores
    runs = len(spec.space.grid(lambda k: None)) if spec.space.dims else 1
    # sized to finish in under an hour: the local runner trains runs one after another, and these
    # models take about 0.15-0.35 s/step on one quiet core (the base d=256 model about 1.5 s/step)
    assert runs * spec.train.steps <= 12_000 and spec.train.steps * spec.model.d_model <= 600_000


def test_stam_heads_space():
    spec = load_spec(SPACES / "multi30k_stam_heads.yaml")
    dims = {d.key: d for d in spec.space}
    assert set(dims["model.aggregation"].values) == {"sum", "stam"}
    assert sorted(dims["model.branches"].values) == [2, 4, 8]
    assert spec.model.aggregation_base == 4 and spec.model.heads_per_branch == 1
    assert spec.leaderboard.transfer == "model.branches" and spec.leaderboard.compare == ("model.aggregation",)
    assert len(dims["train.lr"].values) >= 2


def test_rskip_space():
    spec = load_spec(SPACES / "multi30k_rskip.yaml")
    dims = {d.key: d for d in spec.space}
    assert set(dims["model.skip"].values) == {"plain", "rskip_ln"}
    assert spec.model.norm == "ln" and spec.model.norm_position == "post"  # plain + post LN = the post-LN baseline
    grid = spec.space.grid(lambda k: getattr(spec.model, k.split(".")[1]) if k.startswith("model.") else None)
    combos = {(p["model.skip"], p.get("model.skip_lambda")) for p in grid}
    assert combos == {("plain", None), ("rskip_ln", 2), ("rskip_ln", 3)}
    assert "model.skip" in spec.leaderboard.compare


def test_base_config_is_one_run():
    spec = load_spec(SPACES / "multi30k_base.yaml")
    assert not spec.space.dims
    assert spec.task.beam >= 1 and spec.model.d_model >= 128
