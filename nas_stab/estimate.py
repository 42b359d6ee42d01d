"""The cost estimate printed by `nas-stab validate`."""
from __future__ import annotations

import time


def estimate_cost(spec, runs: int, *, timed: bool = True) -> str:
    """Total optimizer steps and, when `timed`, wall time extrapolated from a few
    timed steps of the base configuration (search dimensions change it: larger
    models or more branches cost more)."""
    t = spec.train
    if t.steps is not None and not timed:
        return f"cost: {runs} runs x {t.steps} steps = {runs * t.steps:,} optimizer steps"
    import torch

    from nas_stab.models import build_model
    from nas_stab.tasks import load_task
    from nas_stab.training.loop import pick_device
    from nas_stab.training.malloc import keep_freed_memory
    from nas_stab.training.optim import build_optimizer, total_steps

    torch.set_num_threads(run_threads(spec))  # each run's threads, as the runner will set them
    keep_freed_memory()  # as train_run does: timing without it overstates CNN steps by 15-30%
    device = pick_device(t.device)
    torch.manual_seed(0)
    task = load_task(spec, 0, device)
    steps = total_steps(t, task.steps_per_epoch)
    line = f"cost: {runs} runs x {steps} steps = {runs * steps:,} optimizer steps"
    if not timed:
        return line
    model = build_model(spec, task.info).to(device)
    opt = build_optimizer(model, t)
    batches = task.train_batches(torch.Generator().manual_seed(0))
    times = []
    for i in range(7):
        t0 = time.perf_counter()
        loss = task.loss(model, next(batches))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    per_step = sorted(times)[len(times) // 2]
    total = per_step * steps * runs
    at_once = min(spec.runner.concurrency, runs)
    wall = f", ~{_fmt(total / at_once)} wall at {at_once} runs at once" if at_once > 1 else ""
    return (f"{line}; ~{per_step * 1000:.1f} ms/step ({run_threads(spec)} torch thread(s)) on {device.type} for the base "
            f"configuration -> ~{_fmt(total)} of training{wall} (probes and evaluation extra)")


def run_threads(spec) -> int:
    """torch threads of one run, as the runner sets them: `train.threads`, else the local runner's
    cpus shared by `runner.concurrency` runs, or the Ray runner's `runner.resources.cpu` per trial."""
    if spec.runner.kind == "ray":
        from nas_stab.search.ray_runner import trial_threads

        return trial_threads(spec)
    from nas_stab.search.local_pool import worker_threads

    return worker_threads(spec, spec.runner.concurrency)


def _fmt(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.1f} h"
