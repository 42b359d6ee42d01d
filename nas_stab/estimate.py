"""The cost estimate printed by `nas-stab validate`.

A grid's configurations can differ in cost by orders of magnitude (depth,
width, branches, batch size), so timing the base configuration alone misleads.
The estimate ranks the distinct configurations by a cost proxy (parameters x
examples per batch), times a few real training steps of the cheapest and the
most expensive, each in several rounds (the spread across rounds is printed:
a busy machine shows up there), and interpolates every run's step time
linearly in the proxy between the two.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass

from nas_stab.textfmt import duration

PLANNED = ("grid", "bracket")  # samplers whose configurations are known before the run (bracket: its start grid)
MAX_CONFIGS = 256  # distinct model configurations sized (a larger grid: evenly spaced sample)
ROUNDS = 3
STEPS_PER_ROUND = 4


@dataclass(frozen=True)
class Timed:
    label: str
    proxy: float
    ms: tuple[float, ...]  # median ms/step of each round

    @property
    def median(self) -> float:
        return sorted(self.ms)[len(self.ms) // 2]


def estimate_cost(spec, runs: int, *, timed: bool = True) -> str:
    """Total optimizer steps and, when `timed`, the training time extrapolated from a few
    timed steps of the cheapest and the most expensive configuration."""
    t = spec.train
    if t.steps is not None and not timed:
        return f"cost: {runs} runs x {t.steps} steps = {runs * t.steps:,} optimizer steps"
    import torch

    from nas_stab.tasks import load_task
    from nas_stab.training.loop import pick_device
    from nas_stab.training.malloc import keep_freed_memory

    torch.set_num_threads(run_threads(spec))  # each run's threads, as the runner will set them
    keep_freed_memory()  # as train_run does: timing without it overstates CNN steps by 15-30%
    device = pick_device(t.device)
    torch.manual_seed(0)
    task = load_task(spec, 0, device)
    configs = _configs(spec)  # [(resolved spec, runs of it)]
    steps_of = [_steps(c, task) for c, _ in configs]
    total_steps = sum(s * n for s, (_, n) in zip(steps_of, configs))
    planned = spec.search.sampler in PLANNED
    if not planned:
        total_steps = runs * _steps(spec, task)
    line = f"cost: {runs} runs, {total_steps:,} optimizer steps"
    if not timed:
        return line
    proxies = [_proxy(c, task.info) for c, _ in configs]
    lo_i = min(range(len(configs)), key=lambda i: proxies[i])
    hi_i = max(range(len(configs)), key=lambda i: proxies[i])
    picks = [lo_i] if proxies[lo_i] == proxies[hi_i] else [lo_i, hi_i]
    timings = [_time_steps(configs[i][0], task, device, _label(spec, configs[i][0]), proxies[i]) for i in picks]
    lo, hi = timings[0], timings[-1]

    def ms_at(proxy: float, pick=lambda x: x.median) -> float:
        if hi.proxy == lo.proxy:
            return pick(lo)
        f = (proxy - lo.proxy) / (hi.proxy - lo.proxy)
        return pick(lo) + f * (pick(hi) - pick(lo))

    if planned:
        secs = [sum(ms_at(p, pick) * s * n for p, s, (_, n) in zip(proxies, steps_of, configs)) / 1000
                for pick in (lambda x: min(x.ms), lambda x: x.median, lambda x: max(x.ms))]
    else:  # sampled: the configurations are not known yet; bound by the cheapest and the dearest
        per_run = _steps(spec, task)
        secs = [runs * per_run * lo.median / 1000, runs * per_run * (lo.median + hi.median) / 2000, runs * per_run * hi.median / 1000]
    at_once = min(spec.runner.concurrency, runs)
    threads = run_threads(spec)
    out = [line + f"; timed on {device.type}, {threads} torch thread(s) per run, {ROUNDS} rounds of {STEPS_PER_ROUND} steps:"]
    for x in timings:
        spread = f"{min(x.ms):.1f}-{max(x.ms):.1f}"
        out.append(f"  {'cheapest' if x is lo else 'dearest '} {x.label}: {x.median:.1f} ms/step (rounds {spread})")
    rng = f"{duration(secs[0])}-{duration(secs[2])}"
    wall = f"; ~{duration(secs[1] / at_once)} wall at {at_once} runs at once" if at_once > 1 else ""
    kind = {"grid": "", "bracket": " (the bracket's start grid: extending and refining each sweep adds runs)"}.get(
        spec.search.sampler, " (sampled configurations: between the cheapest and the dearest)")
    out.append(f"  -> ~{duration(secs[1])} of training (range {rng} over the rounds){wall}{kind}; probes and evaluation extra")
    return "\n".join(out)


def _configs(spec) -> list[tuple[object, int]]:
    """The distinct configurations that cost differently (model, batch, steps), with their run counts."""
    from nas_stab.search.plan import base_lookup
    from nas_stab.config import resolve

    if spec.search.sampler not in PLANNED or not spec.space.dims:
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


def _steps(spec, task) -> int:
    from nas_stab.training.optim import total_steps

    return total_steps(spec.train, task.steps_per_epoch)


def _proxy(spec, info) -> float:
    """Parameters x examples (or tokens) per batch: a model's step cost, up to a constant."""
    import torch

    from nas_stab.models import build_model

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


def _label(base, spec) -> str:
    keys = [d.key for d in base.space.dims] if base.space else []
    from nas_stab.config import get_key

    shown = [f"{k.split('.')[-1]}={get_key(spec, k)}" for k in keys
             if k.startswith(("model.", "train.batch_size", "train.max_tokens"))]
    return ", ".join(shown) or "base configuration"


def _time_steps(spec, task, device, label: str, proxy: float) -> Timed:
    import torch

    from nas_stab.models import build_model
    from nas_stab.training.optim import build_optimizer

    torch.manual_seed(0)
    model = build_model(spec, task.info).to(device)
    opt = build_optimizer(model, spec.train)
    batches = task.train_batches(torch.Generator().manual_seed(0))

    def step() -> float:
        t0 = time.perf_counter()
        loss = task.loss(model, next(batches))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        return time.perf_counter() - t0

    step(), step()  # warm-up: allocator, kernels, caches
    rounds = []
    for _ in range(ROUNDS):
        ts = sorted(step() for _ in range(STEPS_PER_ROUND))
        rounds.append(1000 * ts[len(ts) // 2])
    return Timed(label, proxy, tuple(rounds))


def run_threads(spec) -> int:
    """torch threads of one run, as the runner sets them: `train.threads`, else the local runner's
    cpus shared by `runner.concurrency` runs, or the Ray runner's `runner.resources.cpu` per trial."""
    if spec.runner.kind == "ray":
        from nas_stab.search.ray_runner import trial_threads

        return trial_threads(spec)
    from nas_stab.search.local_pool import worker_threads

    return worker_threads(spec, spec.runner.concurrency)
