"""benchmarks/bench_verdict.py's variants are valid experiments: each space x variant, with the
benchmark's own `--set` overrides, passes validation (the grid variant of tau-depth, published as a
bracket search, once failed here: search.bracket beside sampler grid)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from nas_stab.config import load_spec

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_verdict", ROOT / "benchmarks" / "bench_verdict.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["bench_verdict"] = bench  # dataclasses look their module up while the class is made
_spec.loader.exec_module(bench)


@pytest.mark.parametrize("variant", bench.VARIANTS)
@pytest.mark.parametrize("space", sorted(bench.SPACES))
def test_every_variant_of_every_space_validates(space, variant):
    sp = bench.SPACES[space]
    spec = load_spec(ROOT / sp.path, bench.variant_sets(sp, variant))
    grid = variant in ("grid", "grid5")
    assert spec.search.sampler == ("grid" if grid else "bracket")
    assert (spec.search.pruner.name if spec.search.pruner else "none") == ("sweep" if variant == "bracket+sweep" else "none")
    if variant in ("grid5", "bracket5"):
        assert spec.seeds == tuple(range(5)) and not spec.seeds_more
    if variant == "bracket+adaptive":
        assert spec.seeds == (0, 1, 2) and spec.seeds_more == tuple(range(3, 12))
    lrs = spec.space.values_of(spec.space.get("train.lr"))
    if grid:
        assert len(lrs) == sp.points and min(lrs) == pytest.approx(sp.lo) and max(lrs) == pytest.approx(sp.hi)
    else:
        assert sorted(lrs) == pytest.approx(sorted(sp.start))
