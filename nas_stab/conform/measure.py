"""One model of a conformance check at one size and seed: what the parametrization's rules are about, measured on
the model as built (never read from nas_stab's own rule code).

At init, on a fixed training batch: the RMS of every layer's output (each module that owns parameters and returns a
tensor), the readout's effective output multiplier (its output over the plain linear map of its input, the input
captured before any hook of the model's), every parameter's init std. One optimizer step on a copy gives every
parameter's effective learning rate (Adam: the median |step| over entries whose gradient is not at eps's scale;
SGD: the median |step| / |gradient|) and Adam's eps; then `steps` optimizer steps on the same batch give the RMS
of every layer's output change (the coordinate check of Tensor Programs V, Figure 5) and of the logits'.
"""
from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from nas_stab.config.schema import Spec
from nas_stab.models import build_model
from nas_stab.models.parametrization_rules import readout
from nas_stab.training.loop import seed_everything
from nas_stab.training.optim import build_optimizer
from nas_stab.training.step import train_step

# mutate(model, spec, info, rebuild) -> the model to measure: a bug injected after the model is built (bugs.py);
# rebuild(spec) builds the model of another spec from the same seed
Mutate = Callable[[nn.Module, Spec, Any, Callable[[Spec], nn.Module]], nn.Module]


@dataclass
class Point:
    """The measurements of one model (one size, one seed)."""

    size: float
    seed: int
    act0: dict[str, float] = field(default_factory=dict)  # layer -> output RMS at init
    delta: dict[str, float] = field(default_factory=dict)  # layer -> RMS of its output's change after the steps
    init_std: dict[str, float] = field(default_factory=dict)  # parameter -> RMS at init (a weight's std; a gain's 1)
    lr: dict[str, float] = field(default_factory=dict)  # parameter -> effective lr / train.lr
    eps: dict[str, float] = field(default_factory=dict)  # parameter -> Adam eps / train.eps
    readout_mult: float = math.nan  # the readout's output / its plain linear map
    logits0: float = math.nan
    dlogits: float = math.nan
    branch: dict[str, float] = field(default_factory=dict)  # residual block -> RMS(out - in) / RMS(in) at init
    shapes: dict[str, tuple[int, ...]] = field(default_factory=dict)


def _rms(x: torch.Tensor) -> float:
    return float(x.detach().float().pow(2).mean().sqrt())


def _train_mode(model: nn.Module) -> None:
    """Training mode (BatchNorm on the batch's statistics), dropout off: the measurements are of the parametrization."""
    model.train()
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            m.eval()


def _layers(model: nn.Module) -> dict[str, nn.Module]:
    """The modules that own parameters directly (Linear, Conv, norms, embeddings, branch stacks)."""
    return {n: m for n, m in model.named_modules() if n and any(True for _ in m.parameters(recurse=False))}


def _attention_logits(name: str, got: dict[str, torch.Tensor]) -> Callable[..., None]:
    """A hook on an attention's logits tap (called with q, k, mask, causal, scale): its logits q.k x scale (SDPA's
    1/sqrt(head size) when the scale is None), recorded as `<attention>.logits`."""
    def hook(_m: nn.Module, args: tuple[Any, ...], _out: Any) -> None:
        q, k, scale = args[0], args[1], args[4] if len(args) > 4 else None
        s = scale if scale is not None else q.shape[-1] ** -0.5
        got[name.rsplit(".", 1)[0] + ".logits"] = (q @ k.transpose(-2, -1) * s).detach().clone()
    return hook


def _outputs(model: nn.Module, task: Any, batch: Any) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Every layer's output (and every attention's logits) and the model's logits, on `batch`, without gradients."""
    got: dict[str, torch.Tensor] = {}
    hooks = [m.register_forward_hook(lambda _m, _i, out, n=n: got.__setitem__(n, out.detach().clone())
                                     if isinstance(out, torch.Tensor) else None)
             for n, m in _layers(model).items()]
    hooks += [m.register_forward_hook(_attention_logits(n, got)) for n, m in model.named_modules() if n.endswith(".logits_tap")]
    try:
        with torch.no_grad():
            logits = task.forward(model, batch)
    finally:
        for h in hooks:
            h.remove()
    logits = logits[0] if isinstance(logits, tuple) else logits
    return got, logits.detach().clone()


def _readout_mult(model: nn.Module, head_name: str, task: Any, batch: Any) -> float:
    """The readout's effective output multiplier: its output over F.linear of its input as given to it (captured
    by a pre-hook run before the model's own); nan where the readout is not a module with a weight."""
    try:
        head = model.get_submodule(head_name)
    except AttributeError:
        return math.nan
    weight = getattr(head, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.ndim != 2:
        return math.nan
    if isinstance(head, nn.Embedding):  # a tied readout: the embedding is read by F.linear in the model's forward
        return _tied_mult(model, head, task, batch)
    seen: dict[str, torch.Tensor] = {}
    pre = head.register_forward_pre_hook(lambda _m, args: seen.__setitem__("x", args[0].detach()), prepend=True)
    post = head.register_forward_hook(lambda _m, _i, out: seen.__setitem__("y", out.detach()))
    try:
        with torch.no_grad():
            task.forward(model, batch)
    finally:
        pre.remove()
        post.remove()
    if "x" not in seen or "y" not in seen:
        return _tied_mult(model, head, task, batch)
    plain = torch.nn.functional.linear(seen["x"], weight)
    den = _rms(plain)
    bias = getattr(head, "bias", None)
    out = seen["y"] - bias if isinstance(bias, torch.Tensor) else seen["y"]
    return _rms(out) / den if den > 0 else math.nan


def _tied_mult(model: nn.Module, head: nn.Module, task: Any, batch: Any) -> float:
    """A tied readout (the transformer's embedding, read by F.linear in the model's forward): the logits over the
    plain linear map of the decoder's final features (the module feeding it: `dec_norm`, else the last layer)."""
    feeder = getattr(model, "dec_norm", None)
    blocks = getattr(model, "dec_blocks", None)
    if feeder is None and isinstance(blocks, nn.ModuleList) and len(blocks):
        feeder = blocks[-1]
    if not isinstance(feeder, nn.Module):
        return math.nan
    seen: dict[str, torch.Tensor] = {}
    h = feeder.register_forward_hook(lambda _m, _i, out: seen.__setitem__("x", out.detach()))
    try:
        with torch.no_grad():
            logits = task.forward(model, batch)
    finally:
        h.remove()
    logits = logits[0] if isinstance(logits, tuple) else logits
    weight = getattr(head, "weight", None)
    if "x" not in seen or not isinstance(weight, torch.Tensor):
        return math.nan
    plain = torch.nn.functional.linear(seen["x"], weight)
    den = _rms(plain)
    return _rms(logits) / den if den > 0 else math.nan


def _branch_ratios(model: nn.Module, task: Any, batch: Any) -> dict[str, float]:
    """Every residual block (`blocks.i`): RMS(its output - its input) / RMS(its input) at init."""
    blocks = getattr(model, "blocks", None)
    if not isinstance(blocks, nn.ModuleList | nn.Sequential):
        return {}
    got: dict[str, float] = {}

    def hook(name: str) -> Callable[..., None]:
        def f(_m: nn.Module, args: tuple[Any, ...], out: Any) -> None:
            if isinstance(out, torch.Tensor) and isinstance(args[0], torch.Tensor) and args[0].shape == out.shape:
                den = _rms(args[0])
                got[name] = _rms(out - args[0]) / den if den > 0 else math.nan
        return f

    hooks = [b.register_forward_hook(hook(f"blocks.{i}")) for i, b in enumerate(blocks)]
    try:
        with torch.no_grad():
            task.forward(model, batch)
    finally:
        for h in hooks:
            h.remove()
    return got


def _step_sizes(model: nn.Module, spec: Spec, task: Any, batch: Any) -> tuple[dict[str, float], dict[str, float]]:
    """(parameter -> effective lr / train.lr, parameter -> Adam eps / train.eps) of one optimizer step, taken and
    undone (parameters and buffers restored: a copy would lose the attributes the optimizer reads on them)."""
    t = spec.train
    saved = copy.deepcopy(model.state_dict())
    opt = build_optimizer(model, t)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss = task.loss(model, batch)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    grads = {n: (p.grad.detach().clone() if p.grad is not None else None) for n, p in model.named_parameters()}
    eps_of = {id(p): g.get("eps", math.nan) for g in opt.param_groups for p in g["params"]}
    opt.step()
    lrs, eps = {}, {}
    adam = t.optimizer in ("adam", "adamw")
    for n, p in model.named_parameters():
        g = grads[n]
        eps[n] = float(eps_of.get(id(p), math.nan)) / t.eps if adam else math.nan
        if g is None or p.ndim == 0:
            continue
        step = (p.detach() - before[n]).abs().flatten()
        g = g.abs().flatten()
        if adam:
            keep = g > 1e3 * max(float(eps_of.get(id(p), t.eps)), 1e-30)
            lrs[n] = float(step[keep].median()) / t.lr if keep.any() else math.nan
        else:
            keep = g > 0
            lrs[n] = float((step[keep] / g[keep]).median()) / t.lr if keep.any() else math.nan
    model.load_state_dict(saved)
    model.zero_grad(set_to_none=True)
    return lrs, eps


def measure_point(spec: Spec, size: float, seed: int, steps: int, task: Any, batch: Any, mutate: Mutate | None = None) -> Point:
    """Build `spec`'s model (from `seed`), apply `mutate`, and measure it (see the module docstring)."""
    t = dataclasses.replace(spec.train, schedule="constant", warmup_steps=0, grad_clip=None, weight_decay=0.0)
    spec = dataclasses.replace(spec, train=t)

    def rebuild(other: Spec) -> nn.Module:
        seed_everything(seed)
        return build_model(other, task.info)

    model = rebuild(spec)
    if mutate is not None:
        model = mutate(model, spec, task.info, rebuild)
    _train_mode(model)
    p = Point(size, seed)
    p.shapes = {n: tuple(q.shape) for n, q in model.named_parameters()}
    p.init_std = {n: _rms(q) for n, q in model.named_parameters() if q.numel() > 1}
    p.readout_mult = _readout_mult(model, readout(spec.model.arch), task, batch)
    p.branch = _branch_ratios(model, task, batch)
    p.lr, p.eps = _step_sizes(model, spec, task, batch)
    acts0, logits0 = _outputs(model, task, batch)
    optimizer = build_optimizer(model, t)
    for i in range(steps):
        train_step(model, task, optimizer, t, batch, i + 1, max(steps, 1))
    acts1, logits1 = _outputs(model, task, batch)
    p.act0 = {n: _rms(a) for n, a in acts0.items()}
    p.delta = {n: _rms(acts1[n] - a) for n, a in acts0.items() if n in acts1 and acts1[n].shape == a.shape}
    p.logits0, p.dlogits = _rms(logits0), _rms(logits1 - logits0)
    return p
