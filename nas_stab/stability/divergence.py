"""The divergence rule: it always runs, on top of whatever pruner is chosen.

A ranking pruner (median, ASHA) compares a NaN as false and lets a diverging
trial run on (docs/ray.md); this threshold rule on the latest value
does not.

When the run diverges on a non-finite value, `reason` (the trial's `error`)
names the first non-finite quantity when it can be found, for example
``non-finite gradient norm of blocks.3.branch.first (inf) at step 41; then
non-finite loss (nan) at step 42``. See `explain_nonfinite`.
"""
from __future__ import annotations

import math
from collections.abc import Callable

import torch

from nas_stab.stability.capture import first_nonfinite_block

# (quantity, its value, step offset relative to the step that detected it)
Explanation = tuple[str, float, int]


def reference_loss(task) -> float | None:
    """The loss of a uniform prediction: ln(classes) for classification, ln(vocabulary) for
    translation; None when the task says neither (then the first training loss serves)."""
    info = getattr(task, "info", None)
    n = getattr(info, "classes", 0) or (getattr(info, "extra", None) or {}).get("vocab", 0)
    return math.log(n) if n and n > 1 else None


class DivergenceRule:
    """diverged = non-finite loss, or loss > loss_factor x the reference loss.

    The reference is `reference_loss(task)` (the loss of a uniform
    prediction), so a badly scaled init cannot raise the threshold; without
    one, the first training loss."""

    def __init__(self, loss_factor: float, reference: float | None = None):
        self.loss_factor = loss_factor
        self.initial: float | None = reference
        self.step: int | None = None
        self.reason: str | None = None

    @property
    def threshold(self) -> float | None:
        return None if self.initial is None else self.loss_factor * max(self.initial, 1e-12)

    def check(self, loss: float, step: int, what: str = "loss",
              explain: Callable[[], Explanation | None] | None = None) -> bool:
        """Record `loss` at `step`; True (and remember why) if the run diverged.

        `explain`, called only when the value is non-finite, finds the first
        non-finite quantity behind it (see `explain_nonfinite`).
        """
        if self.reason is not None:
            return True
        if not math.isfinite(loss):
            return self.trip(step, self._nonfinite_reason(what, loss, step, explain))
        if self.initial is None:
            self.initial = loss
            return False
        threshold = self.threshold
        assert threshold is not None, "the reference loss (self.initial) is set"
        if what == "loss" and loss > threshold:
            return self.trip(step, f"loss {loss:.4g} > {self.loss_factor:g} x reference loss {self.initial:.4g}")
        return False

    def check_finite(self, value: float, step: int, what: str,
                     explain: Callable[[], Explanation | None] | None = None) -> bool:
        """Trip on a non-finite value of any other quantity (gradient norm, metric)."""
        if self.reason is None and not math.isfinite(value):
            return self.trip(step, self._nonfinite_reason(what, value, step, explain))
        return self.reason is not None

    @staticmethod
    def _nonfinite_reason(what: str, value: float, step: int, explain) -> str:
        plain = f"non-finite {what} ({value})"
        try:
            found = explain() if explain is not None else None
        except Exception:  # a diagnosis must never hide the divergence itself
            found = None
        if not found:
            return plain
        q, v, off = found
        if off == 0:
            return f"non-finite {q} ({_fmt(v)}) at step {step}, then {plain}"
        return f"non-finite {q} ({_fmt(v)}) at step {step + off}; then {plain} at step {step}"

    def trip(self, step: int, reason: str) -> bool:
        self.step, self.reason = step, reason
        return True

    def state_dict(self) -> dict:
        return {"initial": self.initial, "step": self.step, "reason": self.reason}

    def load_state_dict(self, d: dict) -> None:
        self.initial, self.step, self.reason = d["initial"], d["step"], d["reason"]


def _fmt(v: float) -> str:
    return str(v) if not math.isfinite(v) else f"{v:.4g}"


def explain_nonfinite(model, task=None, batch=None, offset: int = -1) -> Explanation | None:
    """The first non-finite quantity behind a non-finite training loss.

    Called when the loss of step s is non-finite, before that step's backward
    pass, so `.grad` still holds step s-1's gradients. In computation order:

    1. a gradient of step s-1 (the parameter nearest the output first, as the
       backward pass produces them): ``gradient norm of <param>``, offset -1;
    2. a parameter after step s-1's update (finite gradients but a non-finite
       optimizer state or an overflowing update): ``parameter <param>``, offset -1;
    3. the forward pass of step s on `batch`: ``forward output of blocks.<i>``
       (the first residual block whose output is non-finite) or ``model output``,
       offset 0.

    None when nothing is found (the loss itself overflowed). `offset=0` when
    called after step s's update (a non-finite validation metric): the
    gradients and parameters are then step s's own.
    """
    named = [(n, p) for n, p in model.named_parameters()]
    for n, p in reversed(named):
        g = p.grad
        if g is not None and not bool(torch.isfinite(g).all()):
            return f"gradient norm of {n}", float(g.detach().float().norm()), offset
    for n, p in named:
        if not bool(torch.isfinite(p.detach()).all()):
            return f"parameter {n}", float(p.detach().float().norm()), offset
    if task is not None and batch is not None:
        found = first_nonfinite_block(model, lambda: task.forward(model, batch))
        if found:
            return found[0], found[1], 0
    return None


# ---------------------------------------------------------------- why a run diverged

FWD_EXPLOSION_AT_INIT = 100.0  # init fwd_ratio above this: a forward explosion at init
ATTN_GROWTH = 2.0  # attn_logit_max above this x its init value ...
ATTN_MIN = 20.0  # ... and above this absolute value: attention-logit growth


def diverged_why(history: list[dict], reason: str, spike_step: int | None, diverged_step: int | None,
                 init_loss: float | None = None, threshold: float | None = None) -> str:
    """A short label of what the metrics showed first before a divergence (docs/metrics.md).

    In order of the step at which each sign first appeared (ties: this order):

    - ``forward_explosion_at_init``: at init (step 0) the forward pass overflowed
      (a block's stream, the model output or the probe loss), `fwd_ratio`
      exceeded FWD_EXPLOSION_AT_INIT, or the initial loss was above the
      divergence threshold;
    - ``eos_above_1``: a snapshot before the divergence had `eos_ratio` > 1;
    - ``loss_spike``: a training loss above mean + 6 std of the previous 128;
    - ``attn_logit_growth``: a snapshot's `attn_logit_max` above ATTN_GROWTH x
      its init value and above ATTN_MIN;

    and when none of those came first, from the divergence itself:
    ``nonfinite_gradient`` (the first non-finite quantity was a gradient, or
    a parameter after an update with finite gradients, or the sharpness),
    ``nonfinite_forward`` (a block's output, the model output, a parameter,
    an attention logit), ``nonfinite_loss`` (the loss itself), or
    ``loss_above_threshold`` (a finite loss above loss_factor x the reference).
    """
    end = diverged_step if diverged_step is not None else math.inf
    signs: list[tuple[float, int, str]] = []
    init = next((h for h in history if h.get("step") == 0), {})
    fr = init.get("fwd_ratio")
    blew = any(isinstance(v, float) and math.isinf(v) for k, v in init.items() if k.startswith("fwd_norm."))
    r = reason or ""
    at_init_forward = diverged_step == 0 and any(w in r for w in ("forward output", "non-finite model output (", "probe loss"))
    if blew or at_init_forward or (fr is not None and (math.isinf(fr) or fr > FWD_EXPLOSION_AT_INIT)) or \
            (init_loss is not None and threshold is not None and not init_loss <= threshold):
        signs.append((0, 0, "forward_explosion_at_init"))
    a0 = init.get("attn_logit_max")
    for h in history:
        s = h.get("step", 0)
        if s > end:
            continue
        e = h.get("eos_ratio")
        if e is not None and e > 1:
            signs.append((s, 1, "eos_above_1"))
        a = h.get("attn_logit_max")
        if s > 0 and a is not None and a0 is not None and math.isfinite(a0) and a > ATTN_GROWTH * a0 and a > ATTN_MIN:
            signs.append((s, 3, "attn_logit_growth"))
    if spike_step is not None and spike_step <= end:
        signs.append((spike_step, 2, "loss_spike"))
    if signs:
        return min(signs)[2]
    if r.startswith(("non-finite gradient", "non-finite parameter", "non-finite sharpness")):
        return "nonfinite_gradient"
    if r.startswith("non-finite loss") or r.startswith("non-finite probe loss"):
        return "nonfinite_loss"
    if r.startswith("non-finite"):
        return "nonfinite_forward"
    return "loss_above_threshold"
