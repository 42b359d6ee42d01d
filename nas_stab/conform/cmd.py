"""`nas-stab conform SPEC --expect P`: does the spec's model implement the parametrization P it claims?

The model is built at each size of an axis (width for sp, mup and umup; the residual block count for depth_mup and
completep, and width too when the spec searches it), from several seeds, measured (`measure.py`) and judged
against P's prescriptions (`expect.py`) by slopes with intervals (`checks.py`). Writes `conform.csv` (one row
per check and parameter or layer), `points.csv` (the measurements) and a coordinate-check plot per axis.
"""
from __future__ import annotations

import csv
import dataclasses
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import torch

from nas_stab.config.schema import Spec
from nas_stab.conform.checks import Result, judge
from nas_stab.conform.expect import DEPTH_FORMS, EXPECTS, depth_expectations, width_expectations
from nas_stab.conform.measure import Mutate, Point, measure_point
from nas_stab.models import build_model
from nas_stab.models.parametrization_rules import readout, width_key
from nas_stab.tasks import load_task
from nas_stab.training.loop import pick_device, seed_everything

EXIT = {"conforms": 0, "fails": 1, "undecided": 3}
BATCH = 256  # the fewest examples a classification check measures on


@dataclass
class Axis:
    name: str  # width | depth
    key: str  # the model key varied (model.width, model.d_model, model.depth)
    values: list[int]  # the key's values
    sizes: list[float]  # the size each value gives (the width; the residual block count L)
    points: list[Point] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _ladder(start: int, n: int = 4) -> list[int]:
    return [start * 2 ** i for i in range(n)]


def _searched(spec: Spec, key: str) -> list[int]:
    d = spec.space.get(key)
    if d is None or not d.discrete:
        return []
    return sorted({int(v) for v in spec.space.values_of(d)})


def _block_count(spec: Spec, depth: int, info: Any) -> float:
    """L, the residual block count of the model at `depth` (the resnet's 3n of depth 6n + 2)."""
    s = dataclasses.replace(spec, model=dataclasses.replace(spec.model, depth=depth, parametrization="weight"))
    with torch.device("meta"):
        model = build_model(s, info)
    tau = getattr(model, "tau", None)
    return float(getattr(tau, "L", depth))


def axes(spec: Spec, expect: str, info: Any) -> list[Axis]:
    """The axes `expect` is judged over, with their values: the spec's own searched sizes (at least 3), else a
    doubling ladder from the model's size."""
    m = spec.model
    out = []
    wkey = width_key(m.arch)
    widths = _searched(spec, f"model.{wkey}")
    depth_form = expect in DEPTH_FORMS
    if not depth_form or len(widths) >= 2:
        base = int(getattr(m, wkey))
        vals = widths if len(widths) >= 3 else _ladder(min(widths) if widths else base)
        out.append(Axis("width", f"model.{wkey}", vals, [float(v) for v in vals]))
    if depth_form or expect == "sp" and len(_searched(spec, "model.depth")) >= 3:
        depths = _searched(spec, "model.depth")
        if len(depths) < 3:
            depths = [6 * n + 2 for n in (1, 2, 4)] if m.arch in ("resnet", "resnext") else _ladder(max(1, int(m.depth)), 3)
        out.append(Axis("depth", "model.depth", depths, [_block_count(spec, d, info) for d in depths]))
    return out


def _at(spec: Spec, key: str, value: int) -> Spec:
    changes: dict[str, Any] = {key.split(".", 1)[1]: value}
    return dataclasses.replace(spec, model=dataclasses.replace(spec.model, **changes))


def measure_axis(spec: Spec, axis: Axis, seeds: Iterable[int], steps: int, task: Any, batch: Any, mutate: Mutate | None = None) -> None:
    for value, size in zip(axis.values, axis.sizes):
        for seed in seeds:
            axis.points.append(measure_point(_at(spec, axis.key, value), size, seed, steps, task, batch, mutate))


STEPS, SEEDS = 1, 8  # one optimizer step: the update's first-order scaling, before a small batch saturates (k > 1 allowed)


def conform(spec: Spec, expect: str, *, steps: int = STEPS, seeds: int = SEEDS, first_seed: int = 0,
            mutate: Mutate | None = None) -> list[Axis]:
    """Measure and judge `spec`'s model against `expect` over each of its axes (see the module docstring): models
    from seeds first_seed .. first_seed + seeds - 1, a bug injected by `mutate` (bugs.py) if given."""
    if expect not in EXPECTS:
        raise ValueError(f"--expect {expect!r}: one of {', '.join(EXPECTS)}")
    device = pick_device(spec.train.device)
    seed_everything(0)
    if spec.task.kind == "classification":  # a larger measurement batch: the logits' RMS varies less from seed to seed
        spec = dataclasses.replace(spec, train=dataclasses.replace(spec.train, batch_size=max(spec.train.batch_size, BATCH)))
    task = load_task(spec, 0, device)
    batch = next(iter(task.train_batches(torch.Generator().manual_seed(0))))
    adam = spec.train.optimizer in ("adam", "adamw")
    out = axes(spec, expect, task.info)
    for axis in out:
        measure_axis(spec, axis, range(first_seed, first_seed + seeds), steps, task, batch, mutate)
        if axis.name == "width":
            width_form = "mup" if expect in DEPTH_FORMS else expect
            zero = spec.model.readout_zero_init and width_form != "sp"
            exps = width_expectations(width_form, spec.train.optimizer, zero_readout=zero)
            if _tied(spec, task.info) and width_form != "sp":
                exps = [e for e in exps if e.check != "logits_update"]
                axis.notes.append("logits_update not judged: the readout is tied to the input embedding, whose gradient "
                                  "shares the readout's Adam step (TP-V's update rule is stated for an untied readout)")
        else:
            exps = depth_expectations(expect, spec.train.optimizer)
        axis.results = judge(exps, axis.points, readout(spec.model.arch), adam, axis.name)
    return out


def _tied(spec: Spec, info: Any) -> bool:
    """Whether the architecture's readout is its input embedding (the transformer's tied readout)."""
    with torch.device("meta"):
        model = build_model(dataclasses.replace(spec, model=dataclasses.replace(spec.model, parametrization="weight")), info)
    try:
        return isinstance(model.get_submodule(readout(spec.model.arch)), torch.nn.Embedding)
    except AttributeError:
        return False


def verdict(axes_: list[Axis]) -> str:
    statuses = [r.status for a in axes_ for r in a.results]
    if "fail" in statuses:
        return "fails"
    return "undecided" if "inconclusive" in statuses else "conforms"


def _fmt(x: float) -> str:
    return f"{x:+.2f}" if x == x else "-"


def report(spec: Spec, expect: str, axes_: list[Axis], stream: TextIO = sys.stdout) -> None:
    """One line per check and group (its worst series), then the failing series by name, then the verdict."""
    for axis in axes_:
        print(f"{axis.name} axis ({axis.key} = {', '.join(map(str, axis.values))}"
              + (f"; L = {', '.join(f'{s:g}' for s in axis.sizes)}" if axis.name == "depth" else "") + "):", file=stream)
        groups: dict[tuple[str, str], list[Result]] = {}
        for r in axis.results:
            groups.setdefault((r.check, r.what), []).append(r)
        for (check, what), rs in groups.items():
            if all(r.status == "not measured" for r in rs):
                print(f"  {'n/a':<12} {check:<14} {what:<16} not measured ({len(rs)} tensor(s), each zero at init or not "
                      "finite)", file=stream)
                continue
            worst = max(rs, key=lambda r: (r.status == "fail", r.status == "inconclusive", abs(r.slope - r.expected) if r.slope == r.slope else -1))
            counts = {s: sum(r.status == s for r in rs) for s in ("pass", "fail", "inconclusive", "not measured")}
            state = "FAIL" if counts["fail"] else "inconclusive" if counts["inconclusive"] else "pass" if counts["pass"] else "not measured"
            print(f"  {state:<12} {check:<14} {what:<16} expected {worst.expected:+.2f} +- {worst.tol:.2f}; "
                  f"slope {_fmt(worst.slope)} (90% {_fmt(worst.lo)} to {_fmt(worst.hi)})"
                  + (f" at {worst.series}" if len(rs) > 1 or worst.series not in (what, "-") else "")
                  + f"; {counts['pass']} of {len(rs)} pass", file=stream)
            bad = [r.series for r in rs if r.status == "fail"]
            if bad:
                print(f"               failing: {', '.join(bad[:8])}" + (f" and {len(bad) - 8} more" if len(bad) > 8 else ""), file=stream)
        for note in axis.notes:
            print(f"  note: {note}", file=stream)
    v = verdict(axes_)
    words = {"conforms": f"conforms to {expect}", "fails": f"does not conform to {expect}: the FAIL lines name the checks and layers",
             "undecided": f"no check fails, some are inconclusive: not shown to conform to {expect} (more --seeds decide them)"}
    print(f"{spec.name}: {words[v]}", file=stream)


def write_outputs(out: Path, axes_: list[Axis]) -> list[Path]:
    """conform.csv, points.csv and a coordinate-check plot per axis."""
    written = write_csvs(out, axes_)
    from nas_stab.conform.plots import coord_plot  # deferred: loads matplotlib only when this runs

    return written + [coord_plot(a.points, a.name, a.key, out / f"coord_{a.name}.png") for a in axes_]


def write_csvs(out: Path, axes_: list[Axis]) -> list[Path]:
    """conform.csv (one row per check and series) and points.csv (every measurement)."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "conform.csv", out / "points.csv"]
    with open(written[0], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["axis", "check", "what", "series", "expected", "slope", "lo", "hi", "tol", "status"])
        for a in axes_:
            for r in a.results:
                w.writerow([a.name, r.check, r.what, r.series, r.expected, r.slope, r.lo, r.hi, r.tol, r.status])
    with open(written[1], "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["axis", "size", "seed", "quantity", "name", "value"])
        for a in axes_:
            for p in a.points:
                for q in ("act0", "delta", "init_std", "lr", "eps", "branch"):
                    for name, v in getattr(p, q).items():
                        w.writerow([a.name, p.size, p.seed, q, name, v])
                for q in ("readout_mult", "logits0", "dlogits"):
                    w.writerow([a.name, p.size, p.seed, q, "", getattr(p, q)])
    return written
