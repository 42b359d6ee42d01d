"""Cross-field rules, checked once at load (and on every grid point).

`check_config` holds the rules of one trainable configuration; `check_spec`
those of the whole experiment (search, runner, leaderboard, space). Support of
a knob by an architecture or dataset is asked of their registries, so a knob
that does not work yet fails here with "not supported yet", never silently.
"""
from __future__ import annotations

import math

from nas_stab import metrics
from nas_stab.config import hooks
from nas_stab.config.build import Ctx
from nas_stab.config.knobs import parse_aggregation, parse_tau
from nas_stab.config.schema import Spec
from nas_stab.errors import SpecErrors


def check_config(spec: Spec, ctx: Ctx) -> None:
    """Rules of one configuration (task, model, train, stability)."""
    t, m = spec.train, spec.model
    if t.steps is not None and t.epochs is not None:
        raise ctx.error(("train", "epochs"), "give exactly one of train.steps and train.epochs, not both")
    knob_errors = []
    for key, parse in (("tau", parse_tau), ("aggregation", parse_aggregation)):  # independent: both reported
        try:
            parse(getattr(m, key))
        except ValueError as e:
            knob_errors.append(ctx.error(("model", key), str(e)))
    if knob_errors:
        raise knob_errors[0] if len(knob_errors) == 1 else SpecErrors(knob_errors)
    if m.aggregation_exponent is not None and m.aggregation != "sum":
        raise ctx.error(("model", "aggregation_exponent"), f"sets alpha = (C/C0)^-p in place of aggregation, which says "
                        f"{m.aggregation!r}: give one of them (leave aggregation at sum)")
    if m.tau_exponent is not None and (m.tau.get("init") if isinstance(m.tau, dict) else m.tau) != 1:
        raise ctx.error(("model", "tau_exponent"), f"sets tau = L^-p in place of tau, which says {m.tau!r}: give one of "
                        "them (leave tau at 1; tau_learnable: true makes L^-p the learnable tau's init)")
    if m.skip == "rskip_ln" and (not float(m.skip_lambda).is_integer() or m.skip_lambda < 1):
        raise ctx.error(("model", "skip_lambda"), f"rskip_ln needs an integer skip_lambda >= 1, got {m.skip_lambda!r}")
    if not math.isfinite(m.skip_lambda) or m.skip_lambda <= 0:
        raise ctx.error(("model", "skip_lambda"), f"must be > 0, got {m.skip_lambda!r}")
    if len(t.betas) != 2 or not all(0 <= b < 1 for b in t.betas):
        raise ctx.error(("train", "betas"), f"needs two numbers in [0, 1), got {list(t.betas)}")
    if t.warmup_steps and t.steps is not None and t.warmup_steps > t.steps:
        raise ctx.error(("train", "warmup_steps"), f"{t.warmup_steps} warmup steps exceed the {t.steps} training steps")
    st = spec.stability
    if st.hessian_every:
        if st.every is None:
            raise ctx.error(("stability", "hessian_every"),
                            "sharpness estimates are taken at the stability snapshots, whose default cadence depends on the "
                            f"run's length; set stability.every to a divisor of {st.hessian_every}")
        if not st.every:
            raise ctx.error(("stability", "hessian_every"),
                            f"sharpness estimates are taken at the stability snapshots, and stability.every is 0 (none during training); "
                            f"set stability.every to a divisor of {st.hessian_every} or hessian_every to 0")
        if st.hessian_every % st.every:
            lo = st.hessian_every // st.every * st.every
            near = " or ".join(str(v) for v in (lo, lo + st.every) if v > 0)
            raise ctx.error(("stability", "hessian_every"),
                            f"must be a multiple of stability.every ({st.every}): sharpness estimates are taken at the "
                            f"stability snapshots; got {st.hessian_every}, try {near}")
    if spec.task.kind != "classification" and spec.task.dataset.normalize != "standard":
        raise ctx.error(("task", "dataset", "normalize"), f"normalize: {spec.task.dataset.normalize} scales classification "
                        f"inputs; a {spec.task.kind} task reads tokens")
    dev = t.device
    if not (dev in ("auto", "cpu", "cuda") or (dev.startswith("cuda:") and dev[5:].isdigit())):
        raise ctx.error(("train", "device"), f"must be auto, cpu, cuda or cuda:N, got {dev!r}")
    check_run_time_values(spec, ctx)

    problem = hooks.first_problem("config", spec)  # the dataset's and the model's own rules (nas_stab.data, nas_stab.models)
    if problem:
        where, msg = problem
        raise ctx.error(where, msg)
    task_metrics = metrics.TASK_METRICS[spec.task.kind]
    known = metrics.TASK_METRICS["classification"] + metrics.TASK_METRICS["translation"]
    if spec.search.objective in known and spec.search.objective not in task_metrics:
        raise ctx.error(("search", "objective"), f"{spec.search.objective!r} is not a {spec.task.kind} metric; use one of {', '.join(task_metrics)}")


def check_run_time_values(spec: Spec, ctx: Ctx) -> None:
    """The device exists."""
    dev = spec.train.device
    if dev.startswith("cuda"):
        import torch  # deferred: loads torch only when this runs

        n = torch.cuda.device_count() if torch.cuda.is_available() else 0
        index = int(dev[5:]) if dev.startswith("cuda:") else 0
        if index >= n:
            have = f"{n} CUDA device(s)" if n else "no CUDA (torch.cuda.is_available() is False)"
            raise ctx.error(("train", "device"), f"{dev} asked, this machine has {have}; use auto or cpu")
