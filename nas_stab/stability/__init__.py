"""Stability probes (docs/metrics.md): forward norms, gradient norms, update ratios,
Hessian sharpness (`sharpness`), divergence. The `nas-stab probe` application that uses them is `nas_stab.probe`.

All probes run on the task's fixed probe batch and leave the model, its
BatchNorm running statistics, the gradients and the optimizer exactly as they
found them.
"""
from nas_stab.stability.divergence import DivergenceRule, diverged_why, explain_nonfinite, reference_loss
from nas_stab.stability.mode import probe_mode
from nas_stab.stability.probes import Prober

__all__ = ["DivergenceRule", "Prober", "diverged_why", "explain_nonfinite", "probe_mode", "reference_loss"]
