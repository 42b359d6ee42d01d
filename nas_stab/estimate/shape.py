"""What a search trains, for its cost estimate: its distinct configurations and how many runs of each."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass

import torch

from nas_stab.config import get_key, resolve
from nas_stab.config.mode import JOB_SOURCES, search_mode
from nas_stab.config.schema import Spec
from nas_stab.models import build_model
from nas_stab.search.plan import base_lookup, try_resolve
from nas_stab.search.sources.transfer import inner_points, inner_sweeps
from nas_stab.training.optim import total_steps

PLANNED = JOB_SOURCES  # searches whose configurations are known before the run (bracket: its start grid)
MAX_CONFIGS = 256  # distinct model configurations sized (a larger grid: evenly spaced sample)


@dataclass(frozen=True)
class Shape:
    """What a search trains (`search_shape`)."""

    configs: list  # [(resolved spec, runs of it)] of one outer trial (transfer) or of the search
    runs: int  # runs in all (bracket: its start grid)
    scale: float = 1.0  # configs' runs x scale = the runs in all (transfer: outer trials)
    outer: int = 0  # outer trials (transfer)
    bracket: tuple[int, int, int] | None = None  # runs (fewest, expected, most)
    bracket_note: str = ""
    bound_note: str = ""


def search_shape(spec: Spec, runs: int) -> Shape:
    """The configurations a search trains and how many runs: grid and bracket (its start grid, and its
    expected and most runs), a transfer search (outer trials x its inner grid), a sampler (`runs`)."""
    n_seeds = len(spec.seeds)
    mode = search_mode(spec)
    if mode.transfer:
        configs = _transfer_configs(spec)
        inner = sum(n for _, n in configs)
        outer = spec.search.trials
        assert outer is not None, "a transfer search has search.trials (validated)"
        shape = Shape(configs, inner * outer, float(outer), outer)
        if mode.inner_bracket:
            from nas_stab.search.sources.bracket import points_range  # deferred: bracket imports pandas (~0.5 s)

            b = spec.search.bracket
            sweeps = inner_sweeps(spec, {})
            rng = [sum(points_range(start, float(b.step_octaves), float(b.resolution_octaves), tuple(b.lr_limits))[k]
                       for _, start in sweeps) * n_seeds * outer for k in range(3)]
            shape = dataclasses.replace(shape, bracket=(rng[0], rng[1], rng[2]), bracket_note=_EXPECTED_NOTE, bound_note=_BOUND_NOTE)
        return shape
    if not mode.job_source or not spec.space.dims:
        return Shape([(spec, n_seeds)], runs, runs / n_seeds)
    configs = _configs(spec)
    if mode.kind == "bracket":
        from nas_stab.search.sources.bracket import BracketSource, points_range  # deferred: pandas (~0.5 s)

        b = spec.search.bracket
        src = BracketSource(spec)
        rng = [sum(points_range(start, float(b.step_octaves), float(b.resolution_octaves), tuple(b.lr_limits))[k]
                   for _, start in src.sweeps) * n_seeds for k in range(3)]
        return Shape(configs, runs, 1.0, 0, (rng[0], rng[1], rng[2]), _EXPECTED_NOTE, _BOUND_NOTE)
    return Shape(configs, runs)


_EXPECTED_NOTE = "each sweep: its start lrs, the extension steps to an optimum anywhere within lr_limits, two resolution points, a plateau step"
_BOUND_NOTE = "every lr step_octaves apart within lr_limits, plus the resolution points"


def _transfer_configs(spec: Spec) -> list[tuple[object, int]]:
    """A transfer search's inner grid (sizes x learning rates) with the base architecture, runs per outer trial."""
    n_seeds = len(spec.seeds)
    groups: dict[str, list] = {}
    for pt in inner_points(spec):
        cost = {k: v for k, v in pt.items() if k != spec.leaderboard.lr}
        groups.setdefault(json.dumps(cost, sort_keys=True, default=str), [cost, 0])[1] += n_seeds
    out: list[tuple[object, int]] = []
    for params, n in groups.values():
        r = try_resolve(spec, params)
        out.append((r if r is not None else spec, n))
    return out


def _configs(spec: Spec) -> list[tuple[object, int]]:
    """The distinct configurations that cost differently (model, batch, steps), with their run counts."""
    if not search_mode(spec).job_source or not spec.space.dims:
        return [(spec, len(spec.seeds))]
    points = spec.space.grid(base_lookup(spec))
    groups: dict[str, list] = {}
    for params in points:
        cost_params = {k: v for k, v in params.items() if k.startswith(("model.", "task.", "train.batch_size",
                                                                         "train.max_tokens", "train.steps", "train.epochs"))}
        sig = json.dumps(cost_params, sort_keys=True, default=str)
        groups.setdefault(sig, [cost_params, 0])[1] += len(spec.seeds)
    items = list(groups.values())
    if len(items) > MAX_CONFIGS:
        step = len(items) / MAX_CONFIGS
        scale = len(points) * len(spec.seeds) / MAX_CONFIGS
        items = [[items[int(i * step)][0], scale] for i in range(MAX_CONFIGS)]
    return [(resolve(spec, params), n) for params, n in items]


def run_steps(spec: Spec, task) -> int:
    """Optimizer steps of one run of `spec`."""
    return total_steps(spec.train, task.steps_per_epoch)


def cost_proxy(spec: Spec, info) -> float:
    """Parameters x examples (or tokens) per batch: a model's step cost, up to a constant."""
    with torch.device("meta"):
        try:
            model = build_model(spec, info)
        except Exception:  # an init that needs real tensors: build it on the CPU
            model = None
    if model is None:
        model = build_model(spec, info)
    params = sum(p.numel() for p in model.parameters())
    per_batch = spec.train.max_tokens or spec.train.batch_size
    return float(params) * per_batch


def config_label(base, spec: Spec) -> str:
    """`spec`'s values of the searched keys that set its cost (model, batch), e.g. "width=64, depth=4"."""
    keys = [d.key for d in base.space.dims] if base.space else []
    shown = [f"{k.split('.')[-1]}={get_key(spec, k)}" for k in keys
             if k.startswith(("model.", "train.batch_size", "train.max_tokens"))]
    return ", ".join(shown) or "base configuration"
