"""Probe mode: the training flags and buffers of a model while a probe runs.

Every module with batch statistics (BatchNorm) and its ancestors in training
mode -- batch statistics, as in training -- every other module in eval mode
(dropout, head dropout off); buffers restored afterwards (docs/metrics.md).
"""
from __future__ import annotations

import contextlib

import torch
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel


def _has_batch_stats(m: nn.Module) -> bool:
    """True for BatchNorm-like modules: their forward depends on training mode through batch statistics."""
    if isinstance(m, nn.modules.batchnorm._BatchNorm):
        return True
    return any(n in ("running_mean", "running_var") for n, _ in m.named_buffers(recurse=False))


def probe_modes(model: nn.Module) -> dict[nn.Module, bool]:
    """The training flag of every module in probe mode: True for modules with
    batch statistics (BatchNorm) and their ancestors, False for everything else
    (dropout, head dropout and any other train-only randomness off)."""
    keep = set()
    for name, m in model.named_modules():
        if _has_batch_stats(m):
            parts = name.split(".") if name else []
            for k in range(len(parts) + 1):
                keep.add(".".join(parts[:k]))
    return {m: (name in keep and not isinstance(m, nn.modules.dropout._DropoutNd))
            for name, m in model.named_modules()}


@contextlib.contextmanager
def probe_mode(model: nn.Module, modes: dict[nn.Module, bool] | None = None):
    """BatchNorm (and every module that contains one) in training mode, every
    other module in eval mode (dropout, head dropout off); restores the modes
    and every buffer (BatchNorm running statistics, batch counters) afterwards.
    `modes`: a precomputed `probe_modes(model)`."""
    modes = modes if modes is not None else probe_modes(model)
    saved = [(m, m.training) for m in modes]
    buffers = [(b, b.detach().clone()) for b in model.buffers()]
    for m, t in modes.items():
        m.training = t
    try:
        yield
    finally:
        with torch.no_grad():
            for b, v in buffers:
                # only what the forward passes wrote (running statistics, which batch_norm updates
                # without bumping the version counter): copying into a constant buffer (an
                # aggregation weight, positional encodings) would invalidate graphs that saved it
                if not torch.equal(b, v):
                    b.copy_(v)
        for m, t in saved:
            m.training = t


@contextlib.contextmanager
def math_attention():
    """PyTorch's math attention kernel: fused kernels have no double backward."""
    with sdpa_kernel(SDPBackend.MATH):
        yield
