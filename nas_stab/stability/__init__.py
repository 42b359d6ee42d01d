"""Stability probes (SPEC 4): forward norms, gradient norms, update ratio, divergence.

All probes run on the task's fixed probe batch and leave the model, its
BatchNorm running statistics and the optimizer exactly as they found them.
"""
from nas_stab.stability.divergence import DivergenceRule
from nas_stab.stability.probes import Prober

__all__ = ["DivergenceRule", "Prober"]
