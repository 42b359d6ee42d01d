"""Probes on the fixed probe batch: the stability metrics of docs/metrics.md.

`Prober.snapshot()` is called at init, every `stability.every` steps and at
the end. One snapshot costs: one forward pass on the probe batch with hooks
(each block's stream before its Norm, its scaled branch sum, the attention
logits, the model output "before") and its backward pass (parameter gradients
and the gradients with respect to each block's output); one forward and
backward pass on the update batch (a fixed training batch); one optimizer step
with those gradients, one forward pass on the probe batch (the output and loss
"after"), and the step undone. When the Hessian is due, Lanczos runs on the
loss of the first `stability.hessian_batch` examples of the probe batch
(default 64 of 256): one more forward and a backward that keeps the gradient
graph (create_graph=True), which every Hessian-vector product reuses. With
`hessian_batch: 0` (or at least the probe batch's size) the snapshot's own
backward keeps its graph.

A snapshot never changes training: parameters, gradients (`.grad`), optimizer
state, BatchNorm running statistics and the global RNG are exactly as before.

Values: nan means undefined (a 0 denominator), inf an overflow; the training
loop leaves both out of its records. Probe mode (mode.py), the forward hooks
(capture.py) and the Hessian's Lanczos (sharpness.py) are modules of their own.
"""
from __future__ import annotations

import contextlib
import math
from typing import cast

import torch
from torch import nn

from nas_stab.config.schema import Spec, StabilityConfig
from nas_stab.stability.capture import Capture, rms_t
from nas_stab.stability.mode import math_attention, probe_mode, probe_modes
from nas_stab.stability.sharpness import eos_factor, preconditioner, top_eigenvalue

_DEFAULTS = StabilityConfig()  # the schema's defaults, for a Prober built without a spec


def update_batch(task, seed: int = 0):
    """The training batch whose optimizer step `update_ratio`, `update_norm` and `loss_drop` measure:
    the first batch of the task's training stream under its own generator (seeded from `seed`,
    so the run's batch order and the global RNG are untouched). None for a task without a
    training stream (then the step is taken on the probe batch itself)."""
    batches = getattr(task, "train_batches", None)
    if batches is None:
        return None
    return next(iter(batches(torch.Generator().manual_seed(7919 + seed))))


def slice_batch(batch, k: int):
    """The first `k` examples of a batch (a tensor, or a tuple/list of tensors
    sharing their first dimension); None when the batch has at most `k`
    examples or another structure (then the whole batch is used)."""
    ts = [batch] if torch.is_tensor(batch) else list(batch) if isinstance(batch, (tuple, list)) else []
    if not ts or not all(torch.is_tensor(t) and t.dim() >= 1 for t in ts):
        return None
    n = ts[0].shape[0]
    if k <= 0 or k >= n or any(t.shape[0] != n for t in ts):
        return None
    parts = [t[:k] for t in ts]
    return parts[0] if torch.is_tensor(batch) else type(batch)(parts)


def _norms(ts: list[torch.Tensor]) -> list[float]:
    """L2 norm of each tensor, in one batched call."""
    if not ts:
        return []
    return torch.stack([n.float() for n in torch._foreach_norm([t.detach() for t in ts])]).tolist()


class Prober:
    """Stability metrics of one model on one task's probe batch.

    `spec` supplies `stability.hessian`, `hessian_iters`, `hessian_tol`,
    `hessian_every` and `hessian_batch`; keyword arguments override them
    (tests, `nas-stab probe`). Without a spec the schema's defaults apply.
    """

    def __init__(self, model: nn.Module, task, spec: Spec | None = None, *, hessian: bool | None = None,
                 hessian_iters: int | None = None, hessian_tol: float | None = None,
                 hessian_every: int | None = None, hessian_batch: int | None = None, seed: int = 0):
        st = getattr(spec, "stability", None)
        self.model = model
        self.task = task
        self.spec = spec
        self.batch = task.probe_batch
        self.hessian = bool(getattr(st, "hessian", False)) if hessian is None else hessian
        self.hessian_iters = hessian_iters if hessian_iters else getattr(st, "hessian_iters", _DEFAULTS.hessian_iters)
        self.hessian_tol = hessian_tol if hessian_tol else getattr(st, "hessian_tol", _DEFAULTS.hessian_tol)
        self.hessian_every = getattr(st, "hessian_every", 0) if hessian_every is None else hessian_every
        hb = getattr(st, "hessian_batch", _DEFAULTS.hessian_batch) if hessian_batch is None else hessian_batch
        self.hessian_batch = int(hb or 0)
        # the Hessian's batch: the first `hessian_batch` examples of the probe batch (None: all of it)
        self.hessian_sub_batch = slice_batch(self.batch, self.hessian_batch) if self.hessian_batch else None
        self.seed = seed
        self.eigvec: list[torch.Tensor] | None = None  # warm start of the Lanczos iteration
        self.nonfinite: tuple[str, float] | None = None  # (quantity, value) of the last snapshot
        self.n_snapshots = 0
        self._modes = probe_modes(model)
        self._names = {p: n for n, p in model.named_parameters()}
        self.update_batch = update_batch(task, seed)

    # -------------------------------------------------------------- checkpoint
    def state_dict(self) -> dict:
        """What later snapshots depend on: the Lanczos iteration's warm start
        (the last eigenvector) and the snapshot count. Plain tensors and ints,
        for a training checkpoint (`torch.save`, loadable with weights_only)."""
        return {"eigvec": None if self.eigvec is None else [t.detach().cpu().clone() for t in self.eigvec],
                "n_snapshots": self.n_snapshots}

    def load_state_dict(self, state: dict) -> None:
        dev = next((p.device for p in self.model.parameters()), None)
        ev = state.get("eigvec")
        self.eigvec = None if ev is None else [t.to(dev) if dev is not None else t for t in ev]
        self.n_snapshots = int(state.get("n_snapshots", 0))

    # -------------------------------------------------------------- pieces
    def _blocks(self) -> list[nn.Module]:
        return list(getattr(self.model, "blocks", []))

    def _branch(self) -> list[tuple[str, nn.Parameter]]:
        branch_weights = getattr(self.model, "branch_weights", None)  # a StableModel's (models/base.py)
        return list(branch_weights()) if branch_weights is not None else []

    def _flag(self, what: str, value: float) -> None:
        """Remember the first non-finite quantity of this snapshot (in computation order)."""
        if self.nonfinite is None and not math.isfinite(value):
            self.nonfinite = (what, value)

    # -------------------------------------------------------------- snapshot
    def hessian_due(self, step: int | None, final: bool) -> bool:
        if not self.hessian:
            return False
        if final or step == 0 or (step is None and self.n_snapshots == 0):
            return True
        return bool(self.hessian_every) and step is not None and step % self.hessian_every == 0

    def snapshot(self, optimizer: torch.optim.Optimizer | None, step: int | None = None, *,
                 final: bool = False, hessian: bool | None = None) -> dict[str, float]:
        """Every metric, as a flat {name: value} dict (docs/metrics.md defines each).

        Keys: `fwd_norm.<i>` (RMS of block i's stream before its Norm),
        `fwd_ratio` (Transformer: also `enc_fwd_ratio`, `dec_fwd_ratio`),
        `branch_ratio`, `grad_norm`, `branch_grad_norm`, `grad_norm.<name>`
        (per branch weight), `grad_stream.<i>` (gradient norm with respect to
        block i's output), `bn_sigma.<j>` (the batch standard deviation the
        j-th BatchNorm divides by, averaged over its channels), `grad_ratio`, `probe_loss`; with an optimizer
        `update_ratio`, `update_norm`, `loss_drop`, `dw_ratio.<name>`; when
        the Hessian is due `sharpness`, `sharpness_iters`,
        `sharpness_converged`, and with an optimizer `lr_sharpness`,
        `eos_ratio`; Transformer: `attn_logit_max`, `output_logit_rms`.

        nan means undefined (a 0 denominator), inf an overflow. Afterwards
        `self.nonfinite` names the first non-finite quantity, in computation
        order, or is None.
        """
        do_hessian = self.hessian_due(step, final) if hessian is None else hessian
        self.nonfinite = None
        model = self.model
        blocks = self._blocks()
        branch = self._branch()
        params = [p for p in model.parameters() if p.requires_grad]
        out: dict[str, float] = {}
        transformer = getattr(model, "enc_blocks", None) is not None

        cap = Capture(model, blocks, grads=True, logits=transformer, bn_sigma=True)
        attn = math_attention() if do_hessian else contextlib.nullcontext()
        try:
            with probe_mode(model, self._modes), attn:
                # one forward on the probe batch: streams, branch sums, the output before the update, the loss
                with torch.enable_grad():
                    loss = self.task.loss(model, self.batch)
                cap.remove()
                loss_value = float(loss.detach())
                before = cap.outputs[0].float() if len(cap.outputs) == 1 else None
                if before is None:  # the task's loss did not call the model exactly once
                    with torch.no_grad():
                        before = self.task.forward(model, self.batch).detach().float()
                self._forward_metrics(out, cap, transformer, before)
                out["probe_loss"] = loss_value
                self._flag("probe loss", loss_value)

                # one backward: parameter gradients and the hidden stream's gradients (with their graph
                # when the Hessian is due on this very batch: every Hessian-vector product reuses it)
                keep_graph = bool(params) and do_hessian and self.hessian_sub_batch is None and math.isfinite(loss_value)
                grads = list(torch.autograd.grad(loss, params, create_graph=keep_graph, allow_unused=True)) if params else []
                del loss
                detached = [None if g is None else g.detach() for g in grads]
                self._grad_metrics(out, params, detached, branch)
                self._stream_grad_metrics(out, cap.grad_values())

                # the gradient of the update batch (a training batch): the step, and Adam's first preconditioner
                step_grads = None
                if optimizer is not None and params:
                    step_grads = self._update_batch_grads(params) if self.update_batch is not None else detached

                if do_hessian:
                    self._hessian_metrics(out, params, grads if keep_graph else None, optimizer, step_grads, loss_value)
                del grads

                if optimizer is not None:
                    self._update_metrics(out, optimizer, params, step_grads or [], branch, before, loss_value)
        finally:
            cap.remove()
        self.n_snapshots += 1
        return out

    def _forward_metrics(self, out: dict, cap: Capture, transformer: bool, before: torch.Tensor) -> None:
        for j, v in enumerate(cap.bn_sigma):  # nan: the BatchNorm did not run; inf: its input overflowed
            out[f"bn_sigma.{j}"] = v
        for i, v in enumerate(cap.block_rms):  # nan: the block did not run; inf: it overflowed
            out[f"fwd_norm.{i}"] = v
            if math.isinf(v):
                self._flag(f"forward output of blocks.{i}", v)
        out["fwd_ratio"] = _ratio(cap.block_rms[-1], cap.in_rms[0]) if cap.n else math.nan
        if any(math.isinf(v) for v in cap.block_rms):
            out["fwd_ratio"] = math.inf
        if transformer:
            ne = 2 * cast(int, self.model.n_enc)  # the transformer's encoder layers
            enc, dec = cap.block_rms[:ne], cap.block_rms[ne:]
            out["enc_fwd_ratio"] = math.inf if any(map(math.isinf, enc)) else (_ratio(enc[-1], cap.in_rms[0]) if enc else math.nan)
            out["dec_fwd_ratio"] = math.inf if any(map(math.isinf, dec)) else (_ratio(dec[-1], cap.in_rms[ne]) if dec else math.nan)
            pair = [v for v in (out["enc_fwd_ratio"], out["dec_fwd_ratio"]) if not math.isnan(v)]
            out["fwd_ratio"] = max(pair) if pair else math.nan
            out["attn_logit_max"] = cap.logit_max
            self._flag("attention logit", cap.logit_max)
        # the RMS of the model's output (logits): the muP coordinate check's last layer, every model
        out["output_logit_rms"] = float(rms_t(before))
        self._flag("model output", out["output_logit_rms"])
        ratios = [_ratio(b, x) for b, x in zip(cap.branch_rms, cap.in_rms) if not math.isnan(b)]
        ratios = [r for r in ratios if not math.isnan(r)]
        out["branch_ratio"] = math.fsum(ratios) / len(ratios) if ratios else math.nan

    def _stream_grad_metrics(self, out: dict, gs: list[float]) -> None:
        for i, v in enumerate(gs):
            out[f"grad_stream.{i}"] = v
        vals = [v for v in gs if not math.isnan(v)]
        if len(vals) < 2:
            out["grad_ratio"] = math.nan
        elif not all(map(math.isfinite, vals)):
            out["grad_ratio"] = math.inf
        else:
            out["grad_ratio"] = _ratio(max(vals), min(vals))

    def _grad_metrics(self, out: dict, params: list, grads: list, branch: list) -> None:
        pos = {p: i for i, p in enumerate(params)}
        names = self._names
        # the first non-finite gradient in backward order: from the output side
        gnorms = _norms([p.new_zeros(()) if g is None else g for p, g in zip(params, grads)])
        for p, v in reversed(list(zip(params, gnorms))):
            if not math.isfinite(v):
                self._flag(f"gradient norm of {names.get(p, '?')}", v)
                break
        out["grad_norm"] = _l2(gnorms)
        vals = []
        for n, p in branch:
            i = pos.get(p)
            v = 0.0 if i is None or grads[i] is None else gnorms[i]
            out[f"grad_norm.{n}"] = v
            vals.append(v)
        out["branch_grad_norm"] = _l2(vals) if vals else math.nan

    def _update_batch_grads(self, params: list) -> list | None:
        """Gradients of the training loss on the update batch (probe mode, BatchNorm statistics restored)."""
        with torch.enable_grad():
            loss = self.task.loss(self.model, self.update_batch)
        return [None if g is None else g.detach() for g in torch.autograd.grad(loss, params, allow_unused=True)]

    def _update_metrics(self, out: dict, optimizer, params: list, grads: list, branch: list,
                        before: torch.Tensor, loss_before: float) -> None:
        """One optimizer step with the update batch's gradients, measured on the probe batch, then undone exactly."""
        model = self.model
        opt_params = [p for g in optimizer.param_groups for p in g["params"]]
        saved_params = [p.detach().clone() for p in opt_params]
        gmap = dict(zip(params, grads))
        saved_grads = [(p, p.grad) for p in opt_params]
        # the step mutates copies of the optimizer state; the originals are put back untouched
        state = optimizer.state
        orig_state = {p: state[p] for p in opt_params if p in state}
        for p, s in orig_state.items():
            state[p] = {k: (v.clone() if torch.is_tensor(v) else v) for k, v in s.items()}
        try:
            for p in opt_params:
                p.grad = gmap.get(p)
            optimizer.step()
            outs: list[torch.Tensor] = []
            hook = model.register_forward_hook(lambda m, i, o: outs.append(o.detach()) if torch.is_tensor(o) else None)
            try:
                with torch.no_grad():
                    loss_after = float(self.task.loss(model, self.batch))
            finally:
                hook.remove()
            with torch.no_grad():
                after = outs[0].float() if len(outs) == 1 else self.task.forward(model, self.batch).detach().float()
                idx = {p: i for i, p in enumerate(opt_params)}
                bw = [(n, p) for n, p in branch if p in idx]
                old = [saved_params[idx[p]] for _, p in bw]
                norms = _norms([*torch._foreach_sub([p.detach() for _, p in bw], old), *old]) if bw else []
                dws, ws = norms[: len(bw)], norms[len(bw):]
                for (n, _), dw, w in zip(bw, dws, ws):
                    out[f"dw_ratio.{n}"] = dw / w if w > 0 else (0.0 if dw == 0 else math.inf)
            if not torch.isfinite(before).all():
                self._flag("model output", math.inf)
                out["update_ratio"] = out["update_norm"] = out["loss_drop"] = math.inf
            elif not torch.isfinite(after).all():
                self._flag("model output after one update step", math.inf)
                out["update_ratio"] = out["update_norm"] = out["loss_drop"] = math.inf
            else:
                before, after = before.double(), after.double()  # no overflow in the norms of finite outputs
                n = math.sqrt(max(before.numel(), 1))
                num = float((after - before).norm()) / n
                out["update_norm"] = num
                out["update_ratio"] = _ratio(num, float(before.norm()) / n)
                out["loss_drop"] = loss_before - loss_after if math.isfinite(loss_after) else math.inf
        finally:
            with torch.no_grad():
                torch._foreach_copy_(opt_params, saved_params)
            for p, g in saved_grads:
                p.grad = g
            for p in opt_params:
                if p in orig_state:
                    state[p] = orig_state[p]
                elif p in state:
                    del state[p]

    # -------------------------------------------------------------- Hessian
    def _hessian_metrics(self, out: dict, params: list, grads: list | None, optimizer, step_grads, loss_value: float) -> None:
        scale = preconditioner(optimizer, params, step_grads) if optimizer is not None else None
        if not math.isfinite(loss_value):
            lam, iters, converged = math.inf, 0, False
        elif not params:
            lam, iters, converged = 0.0, 0, True
        else:
            sub = self.hessian_sub_batch
            graph = grads if grads is not None else self._graph_grads(params, self.batch if sub is None else sub)
            if graph is None:
                lam, iters, converged = math.inf, 0, False
            else:
                lam, iters, converged, vec = top_eigenvalue(params, graph, scale, self.eigvec, self.seed,
                                                             self.hessian_iters, self.hessian_tol)
                if vec is not None:
                    self.eigvec = vec  # the next estimate's warm start
            del graph
        out["sharpness"] = lam
        self._flag("sharpness", lam)
        out["sharpness_iters"] = float(iters)
        out["sharpness_converged"] = float(converged)
        if optimizer is not None:
            lr = optimizer.param_groups[0]["lr"]
            out["lr_sharpness"] = lr * lam
            factor = eos_factor(optimizer)
            out["eos_ratio"] = lam * factor if factor is not None else math.nan

    def _graph_grads(self, params: list, batch) -> list | None:
        """Gradients of the loss on `batch` with their graph (create_graph=True);
        None if that loss is not finite."""
        with torch.enable_grad():
            loss = self.task.loss(self.model, batch)
        if not math.isfinite(float(loss.detach())):
            return None
        return list(torch.autograd.grad(loss, params, create_graph=True, allow_unused=True))


def _ratio(a: float, b: float) -> float:
    """a / b; nan (undefined) when b is 0 or either is undefined; inf when either overflowed."""
    if math.isnan(a) or math.isnan(b):
        return math.nan
    if math.isinf(a) or math.isinf(b):
        return math.inf
    return a / b if b > 0 else math.nan


def _l2(vals: list[float]) -> float:
    return math.sqrt(math.fsum(v * v for v in vals)) if all(map(math.isfinite, vals)) else math.inf
