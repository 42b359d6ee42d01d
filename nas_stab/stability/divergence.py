"""The divergence rule: it always runs, on top of whatever pruner is chosen.

A ranking pruner (median, ASHA) compares a NaN as false and lets a diverging
trial run on (DESIGN.md section 3); this threshold rule on the latest value
does not.
"""
from __future__ import annotations

import math


class DivergenceRule:
    """diverged = non-finite loss, or loss > loss_factor x the initial loss."""

    def __init__(self, loss_factor: float):
        self.loss_factor = loss_factor
        self.initial: float | None = None
        self.step: int | None = None
        self.reason: str | None = None

    @property
    def threshold(self) -> float | None:
        return None if self.initial is None else self.loss_factor * max(self.initial, 1e-12)

    def check(self, loss: float, step: int, what: str = "loss") -> bool:
        """Record `loss` at `step`; True (and remember why) if the run diverged."""
        if self.reason is not None:
            return True
        if not math.isfinite(loss):
            return self.trip(step, f"non-finite {what} ({loss})")
        if self.initial is None:
            self.initial = loss
            return False
        if what == "loss" and loss > self.threshold:
            return self.trip(step, f"loss {loss:.4g} > {self.loss_factor:g} x initial loss {self.initial:.4g}")
        return False

    def check_finite(self, value: float, step: int, what: str) -> bool:
        """Trip on a non-finite value of any other quantity (gradient norm, metric)."""
        if self.reason is None and not math.isfinite(value):
            return self.trip(step, f"non-finite {what} ({value})")
        return self.reason is not None

    def trip(self, step: int, reason: str) -> bool:
        self.step, self.reason = step, reason
        return True

    def state_dict(self) -> dict:
        return {"initial": self.initial, "step": self.step, "reason": self.reason}

    def load_state_dict(self, d: dict) -> None:
        self.initial, self.step, self.reason = d["initial"], d["step"], d["reason"]
