"""Probes on the fixed probe batch: forward norms, gradient norms, update ratio.

`Prober.snapshot()` is called at init, every `stability.every` steps and at
the end. It never changes training: parameters, optimizer state, gradients
and BatchNorm running statistics are restored afterwards.
"""
from __future__ import annotations

import contextlib
import copy
import math

import torch
from torch import nn


def _rms(t: torch.Tensor) -> float:
    """Root mean square; inf if the tensor holds a non-finite value (overflow)."""
    v = float(t.detach().float().pow(2).mean().sqrt())
    return math.inf if math.isnan(v) else v


@contextlib.contextmanager
def probe_mode(model: nn.Module):
    """Training mode (BatchNorm uses batch statistics) with dropout off; restores
    the modes and every buffer (BatchNorm running statistics) afterwards."""
    modes = {m: m.training for m in model.modules()}
    buffers = {n: b.detach().clone() for n, b in model.named_buffers()}
    model.train()
    for m in model.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) or getattr(m, "is_dropout", False):
            m.eval()
    try:
        yield
    finally:
        with torch.no_grad():
            for n, b in model.named_buffers():
                if n in buffers:
                    b.copy_(buffers[n])
        for m, t in modes.items():
            m.training = t


class Prober:
    """Stability metrics of one model on one task's probe batch."""

    def __init__(self, model: nn.Module, task, spec):
        self.model = model
        self.task = task
        self.spec = spec
        self.batch = task.probe_batch

    # -- forward -------------------------------------------------------------
    def forward_norms(self) -> tuple[list[float], float]:
        """RMS of each residual block's output, and the first block's input RMS."""
        blocks = list(getattr(self.model, "blocks", []))
        outs: list[float] = [math.nan] * len(blocks)
        first_in: list[float] = [math.nan]
        hooks = []
        for i, b in enumerate(blocks):
            def hook(mod, inp, out, i=i):
                if i == 0 and inp and torch.is_tensor(inp[0]):
                    first_in[0] = _rms(inp[0])
                o = out[0] if isinstance(out, tuple) else out
                outs[i] = _rms(o)
            hooks.append(b.register_forward_hook(hook))
        try:
            with torch.no_grad(), probe_mode(self.model):
                self.task.forward(self.model, self.batch)
        finally:
            for h in hooks:
                h.remove()
        return outs, first_in[0]

    # -- gradients -------------------------------------------------------------
    def grad_norms(self) -> list[tuple[str, float]]:
        """Gradient norm of each residual-branch weight on the probe batch."""
        params = dict(self.model.branch_weights()) if hasattr(self.model, "branch_weights") else {}
        saved = {p: (None if p.grad is None else p.grad.detach().clone()) for p in self.model.parameters()}
        try:
            self.model.zero_grad(set_to_none=True)
            with probe_mode(self.model):
                loss = self.task.loss(self.model, self.batch)
                loss.backward()
            return [(n, float(p.grad.norm()) if p.grad is not None else 0.0) for n, p in params.items()]
        finally:
            for p, g in saved.items():
                p.grad = g

    # -- update ratio -----------------------------------------------------------
    def update_ratio(self, optimizer: torch.optim.Optimizer) -> float:
        """||f(theta') - f(theta)|| / ||f(theta)|| for one optimizer step on the probe batch.

        The step is taken and then undone: parameters, optimizer state and
        gradients are restored exactly.
        """
        model = self.model
        params = [p for p in model.parameters()]
        saved_params = [p.detach().clone() for p in params]
        saved_grads = [None if p.grad is None else p.grad.detach().clone() for p in params]
        saved_opt = copy.deepcopy(optimizer.state_dict())
        try:
            with probe_mode(model):
                with torch.no_grad():
                    before = self.task.forward(model, self.batch).detach().float()
                optimizer.zero_grad(set_to_none=True)
                self.task.loss(model, self.batch).backward()
                optimizer.step()
                with torch.no_grad():
                    after = self.task.forward(model, self.batch).detach().float()
            if not (torch.isfinite(before).all() and torch.isfinite(after).all()):
                return math.inf
            denom = float(before.norm())
            return float((after - before).norm()) / denom if denom > 0 else math.nan
        finally:
            with torch.no_grad():
                for p, v, g in zip(params, saved_params, saved_grads):
                    p.copy_(v)
                    p.grad = g
            optimizer.load_state_dict(saved_opt)

    # -- all at once --------------------------------------------------------------
    def snapshot(self, optimizer: torch.optim.Optimizer | None) -> dict[str, float]:
        """Every metric, as a flat {name: value} dict (per-block values as `fwd_norm.i`)."""
        out: dict[str, float] = {}
        norms, first_in = self.forward_norms()
        for i, v in enumerate(norms):
            out[f"fwd_norm.{i}"] = v
        if norms and math.isinf(max(norms)):
            out["fwd_ratio"] = math.inf
        else:
            out["fwd_ratio"] = norms[-1] / first_in if norms and first_in and first_in > 0 else math.nan
        grads = self.grad_norms()
        for n, v in grads:
            out[f"grad_norm.{n}"] = v
        gvals = [v for _, v in grads]
        if gvals:
            lo = min(gvals)
            out["grad_ratio"] = max(gvals) / lo if lo > 0 else math.inf
        else:
            out["grad_ratio"] = math.nan
        if optimizer is not None:
            out["update_ratio"] = self.update_ratio(optimizer)
        return out
