"""Warnings: settings that are valid but have no effect, or cannot give what they seem to ask.

Each is `file:line: key: message`, printed by `nas-stab validate` and `nas-stab run`
as `warning: ...`; nothing stops. Errors are for what cannot run (`rules.py`).
"""
from __future__ import annotations

import dataclasses

from nas_stab.config.build import Ctx
from nas_stab.config.mode import search_mode
from nas_stab.config.schema import Spec


def advice(spec: Spec, ctx: Ctx) -> tuple[str, ...]:
    raw = spec.raw or {}
    train_raw = raw["train"] if isinstance(raw.get("train"), dict) else {}
    space = {d.key: d for d in spec.space.dims}
    out: list[str] = []

    def warn(path: tuple, message: str) -> None:
        out.append(str(ctx.error(path, message)))

    optimizers = set(space["train.optimizer"].values) if "train.optimizer" in space else {spec.train.optimizer}
    if optimizers <= {"adam", "adamw"}:
        for key in ("momentum", "nesterov"):
            if key in train_raw:
                warn(("train", key), f"has no effect with {spec.train.optimizer} (Adam's momentum is train.betas[0])")
            if f"train.{key}" in space:
                warn(("space", f"train.{key}"), f"searching train.{key} has no effect with {spec.train.optimizer}")
    s = spec.search
    if s.sampler == "nsga2" and s.population_size is not None and s.trials is not None and s.population_size >= s.trials:
        warn(("search", "population_size"), f"{s.population_size} individuals per generation and {s.trials} trials: the "
             "first generation is the whole budget, so NSGA-II samples at random and never evolves; leave it unset "
             f"(default {s.trials} // 4, at least 2) or lower it")
    if search_mode(spec).kind == "grid":
        for d in spec.space.dims:
            if d.kind == "int" and d.log:
                n = len(range(int(d.low), int(d.high) + 1, d.step or 1))
                warn(("space", d.key, "log"),
                     f"has no effect in a grid: every integer from {int(d.low)} to {int(d.high)} is a point ({n} values); "
                     f"list the values you want, e.g. [{', '.join(str(v) for v in _powers(int(d.low), int(d.high)))}]")
    d = spec.task.dataset
    for key, value in d.ignored:
        if value != d.RETIRED[key]:  # (build keeps only the keys away from their old default)
            warn(("task", "dataset", key), f"has no effect: {d.name} does not read {key} (its own options: "
                 f"{', '.join(f.name for f in dataclasses.fields(d.options)) if d.options else 'none'})")
    size = getattr(d.options, "size", None) if d.name == "mnist1d" else None
    if isinstance(size, int) and size > MNIST1D_ANNOUNCE:
        warn(("task", "dataset", "size"), f"generating {size:,} MNIST-1D examples takes about "
             f"{size * MNIST1D_S_PER_SAMPLE / 60:.0f} min the first time (about {MNIST1D_S_PER_SAMPLE * 1e3:.1f} ms a "
             "sample on a 2-core machine; then cached: a rerun reads them)")
    base = ctx.files.get(("description",))
    if spec.description and base and base != ctx.file and ("description",) not in ctx.overrides:
        out.append(f"{ctx.file}: description is inherited from {base} (\"{spec.description[:60]}\"): it describes that "
                   "experiment; set description: in this file if this one differs (it is printed with every table)")
    return tuple(out)


MNIST1D_ANNOUNCE = 100_000  # examples beyond which generating MNIST-1D is announced with its cost
MNIST1D_S_PER_SAMPLE = 3e-4  # the mnist1d package's generation, measured on this project's 2-core machine (20,000 in 5 s)


def _powers(lo: int, hi: int) -> list[int]:
    out: list[int] = []
    v = max(lo, 1)
    while v <= hi and len(out) < 8:
        out.append(v)
        v *= 2
    return out
