"""Forward hooks that read a model's hidden values during one probe forward pass."""
from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from nas_stab.stability.mode import probe_mode


def rms_t(t: torch.Tensor) -> torch.Tensor:
    """Root mean square as a 0-d float32 tensor (no host sync; one fused reduction);
    inf or nan if the tensor holds a non-finite value (overflow)."""
    return torch.linalg.vector_norm(t.detach(), dtype=torch.float32) / math.sqrt(max(t.numel(), 1))


def batch_norms(model: nn.Module) -> list[nn.Module]:
    """The model's BatchNorm modules in module (definition) order: `bn_sigma.<j>` is the j-th. In
    mlp and plainnet the norm of layer j (BN or Path-BN: both are a BatchNorm on what they normalize)."""
    return [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def bn_sigma_t(x: torch.Tensor, eps: float) -> torch.Tensor:
    """The divisor a BatchNorm in training mode applies to each channel of its input `x`
    ([N, C] or [N, C, ...]): sqrt(biased batch variance over every dimension but the channels + eps),
    averaged over the channels; a 0-d float32 tensor (no host sync). The Path-BN paper's sigma of a
    hidden node, averaged over the nodes of the layer (its Figure 4, left)."""
    x = x.detach().float()
    dims = [0, *range(2, x.dim())]
    var = x.var(dim=dims, unbiased=False)
    return torch.sqrt(var + eps).mean()


def _taps(block: nn.Module, name: str) -> list[nn.Module]:
    """The block's probe taps called `name` (see `models.base.Tap`)."""
    return [m for n, m in block.named_modules() if n.rsplit(".", 1)[-1] == name]


class Capture:
    """Forward hooks for one probe forward pass.

    With `bn_sigma`, per BatchNorm module j (`batch_norms`): the batch standard
    deviation its input is divided by, averaged over channels (`bn_sigma_t`).
    Per block i: the RMS of its input, of its residual stream before the
    Norm that follows the addition (its `stream_tap`; a block without one,
    such as a plain layer, gives its output), of its scaled branch sum (its
    `branch_tap`), and with `grads` the L2 norm of the loss gradient with
    respect to its output (the hidden stream it hands on), filled in by the
    backward pass. Also the model's output and, for attention layers, the
    largest attention logit. The hooks keep 0-d tensors; `values()` turns
    them into floats in one transfer (one host sync per pass).
    """

    def __init__(self, model: nn.Module, blocks: list[nn.Module], *, grads: bool = False, logits: bool = False,
                 bn_sigma: bool = False):
        n = len(blocks)
        self.n = n
        self.block_rms: list[float] = [math.nan] * n  # the stream of each block (pre-norm)
        self.in_rms: list[float] = [math.nan] * n
        self.branch_rms: list[float] = [math.nan] * n
        self.grad_out: list[float] = [math.nan] * n
        self.logit_max = math.nan
        self.first_in = math.nan
        self._t: dict[tuple[str, int], torch.Tensor] = {}
        self._g: dict[int, torch.Tensor] = {}
        self._logits: list[torch.Tensor] = []
        self.outputs: list[torch.Tensor] = []
        self.hooks = []
        self.grads = grads
        for i, b in enumerate(blocks):
            self.hooks.append(b.register_forward_hook(self._block_hook(i)))
            for t in _taps(b, "stream_tap"):
                self.hooks.append(t.register_forward_hook(self._tap_hook("stream", i)))
            for t in _taps(b, "branch_tap"):
                self.hooks.append(t.register_forward_hook(self._tap_hook("branch", i)))
        if logits:
            for t in _taps(model, "logits_tap"):
                self.hooks.append(t.register_forward_hook(self._logits_hook))
        self.bn_sigma: list[float] = []
        if bn_sigma:
            bns = batch_norms(model)
            self.bn_sigma = [math.nan] * len(bns)
            for j, m in enumerate(bns):
                self.hooks.append(m.register_forward_hook(self._bn_hook(j)))
        self.hooks.append(model.register_forward_hook(self._model_hook))

    def _block_hook(self, i: int):
        def hook(mod, inp, out):
            if inp and torch.is_tensor(inp[0]):
                self._t[("in", i)] = rms_t(inp[0])
            o = out[0] if isinstance(out, tuple) else out
            if torch.is_tensor(o):
                self._t[("out", i)] = rms_t(o)
                if self.grads and o.requires_grad:
                    o.register_hook(lambda g, i=i: self._g.__setitem__(i, torch.linalg.vector_norm(g.detach(), dtype=torch.float32)))

        return hook

    def _bn_hook(self, j: int):
        def hook(mod, inp, out):
            if inp and torch.is_tensor(inp[0]):
                self._t[("bn", j)] = bn_sigma_t(inp[0], mod.eps)

        return hook

    def _tap_hook(self, kind: str, i: int):
        def hook(mod, inp, out):
            if torch.is_tensor(out):
                self._t[(kind, i)] = rms_t(out)

        return hook

    def _logits_hook(self, mod, inp, out):
        q, k = inp[0], inp[1]
        mask = inp[2] if len(inp) > 2 else None
        causal = bool(inp[3]) if len(inp) > 3 else False
        scale = inp[4] if len(inp) > 4 else None  # the attention's own (muP: sqrt(dh0) / dh); None: 1/sqrt(dh)
        with torch.no_grad():
            lg = q.detach().float() @ k.detach().float().transpose(-2, -1)
            lg = lg / math.sqrt(q.shape[-1]) if scale is None else lg * scale
            if mask is not None:
                lg = lg.masked_fill(~mask if mask.dtype == torch.bool else mask == float("-inf"), float("-inf"))
            if causal:
                T, S = lg.shape[-2], lg.shape[-1]
                lg = lg.masked_fill(torch.ones(T, S, dtype=torch.bool, device=lg.device).triu(1), float("-inf"))
            self._logits.append(lg.amax())

    def _model_hook(self, mod, inp, out):
        if torch.is_tensor(out):
            self.outputs.append(out.detach())

    def remove(self) -> None:
        """Remove the forward hooks and read the forward values (gradient hooks stay on their tensors)."""
        for h in self.hooks:
            h.remove()
        self.hooks = []
        if self._t:
            keys = list(self._t)
            vals = torch.stack([self._t[k] for k in keys]).tolist()
            self._t = {}
            have_stream = set()
            for (kind, i), v in zip(keys, vals):
                v = math.inf if math.isnan(v) else v  # nan: a non-finite value (overflow)
                if kind == "bn":
                    self.bn_sigma[i] = v
                elif kind == "in":
                    self.in_rms[i] = v
                elif kind == "branch":
                    self.branch_rms[i] = v
                elif kind == "stream":
                    self.block_rms[i] = v
                    have_stream.add(i)
                elif i not in have_stream and not any(k == ("stream", i) for k in keys):
                    self.block_rms[i] = v  # no stream tap: the block's output is the stream
            self.first_in = self.in_rms[0] if self.n else math.nan
        if self._logits:
            v = float(torch.stack(self._logits).amax())
            self.logit_max = math.inf if math.isnan(v) else v
            self._logits = []

    def grad_values(self) -> list[float]:
        """The gradient norms with respect to each block's output, after the backward pass."""
        if self._g:
            keys = list(self._g)
            vals = torch.stack([self._g[k] for k in keys]).tolist()
            for i, v in zip(keys, vals):
                self.grad_out[i] = math.inf if math.isnan(v) else v
            self._g = {}
        return self.grad_out


def first_nonfinite_block(model: nn.Module, run: Callable[[], object]) -> tuple[str, float] | None:
    """Run `run()` (a forward pass) with hooks; the first block whose output is non-finite."""
    blocks = list(getattr(model, "blocks", []))
    cap = Capture(model, blocks)
    try:
        with torch.no_grad(), probe_mode(model):
            run()
    finally:
        cap.remove()
    for i, v in enumerate(cap.block_rms):
        if not math.isfinite(v):
            return f"forward output of blocks.{i}", v
    if cap.outputs and not torch.isfinite(cap.outputs[0]).all():
        return "model output", math.inf
    return None
