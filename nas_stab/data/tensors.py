"""In-memory classification data and its deterministic splits."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from nas_stab.data.base import DataInfo
from nas_stab.errors import DataError


@dataclass
class TensorData:
    """Classification data as tensors on the training device.

    `x_*` are float32 (already standardized) or uint8 images (standardized
    per batch by `prepare`, with per-channel `mean`/`std`). `normalize: unit`
    then scales each example to L2 norm 1 (in `prepare`, so every batch the
    model sees -- training, evaluation, probes -- has ||x|| = 1). `augment`
    turns on random crop (pad 4) and horizontal flip, applied to whole batches.
    """

    info: DataInfo
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_val: torch.Tensor
    y_val: torch.Tensor
    x_test: torch.Tensor | None = None
    y_test: torch.Tensor | None = None
    mean: torch.Tensor | None = None
    std: torch.Tensor | None = None
    augment: bool = False
    note: str = ""  # how the splits were made, for provenance
    normalize: str = "standard"  # standard | unit (see `prepare`)

    def to(self, device) -> TensorData:
        for k in ("x_train", "y_train", "x_val", "y_val", "x_test", "y_test", "mean", "std"):
            v = getattr(self, k)
            if v is not None:
                setattr(self, k, v.to(device))
        return self

    def prepare(self, x: torch.Tensor) -> torch.Tensor:
        """uint8 images -> standardized float; float inputs pass through;
        then, with `normalize: unit`, each example divided by its L2 norm."""
        if x.dtype == torch.uint8:
            x = x.float().div_(255.0)
            if self.mean is not None:  # in place on the fresh float copy: no temporaries
                assert self.std is not None, "mean and std are set together"
                x.sub_(self.mean.view(1, -1, 1, 1)).div_(self.std.view(1, -1, 1, 1))
        if self.normalize == "unit":
            return unit_norm(x)
        return x

    def augment_batch(self, x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        """Random crop with 4-pixel padding and horizontal flip, for a whole batch at once."""
        n, _, h, w = x.shape
        pad = 4
        xp = torch.nn.functional.pad(x, (pad, pad, pad, pad))
        dx = torch.randint(0, 2 * pad + 1, (n,), generator=gen, device="cpu").to(x.device)
        dy = torch.randint(0, 2 * pad + 1, (n,), generator=gen, device="cpu").to(x.device)
        rows = (dy.view(n, 1) + torch.arange(h, device=x.device).view(1, h))  # [n, h]
        cols = (dx.view(n, 1) + torch.arange(w, device=x.device).view(1, w))  # [n, w]
        idx_r = rows.view(n, 1, h, 1).expand(n, x.shape[1], h, w + 2 * pad)
        xp = xp.gather(2, idx_r)
        idx_c = cols.view(n, 1, 1, w).expand(n, x.shape[1], h, w)
        out = xp.gather(3, idx_c)
        flip = (torch.rand(n, generator=gen, device="cpu") < 0.5).to(x.device)
        return torch.where(flip.view(n, 1, 1, 1), out.flip(3), out)


def unit_norm(x: torch.Tensor) -> torch.Tensor:
    """Each example (first axis) scaled to L2 norm 1 (an all-zero example stays zero)."""
    n = x.flatten(1).norm(dim=1).clamp_min(1e-12)
    return x / n.view(-1, *([1] * (x.ndim - 1)))


def split(x: torch.Tensor, y: torch.Tensor, sizes: dict[str, int | None], seed: int, *, fractions: dict[str, float], source: str):
    """Deterministically split (x, y) into named parts.

    `sizes[name]` is the requested count (None = `fractions[name]` of the
    data; the last part with None takes the rest).
    """
    n = len(x)
    g = torch.Generator().manual_seed(seed)
    perm = torch.randperm(n, generator=g)
    names = list(sizes)
    counts: dict[str, int] = {}
    for name in names:
        c = sizes[name]
        counts[name] = int(c) if c is not None else max(1, int(round(fractions.get(name, 0.0) * n)))
    rest_name = next((nm for nm in reversed(names) if sizes[nm] is None and nm not in fractions), None)
    if rest_name is not None:
        counts[rest_name] = n - sum(v for k, v in counts.items() if k != rest_name)
    if sum(counts.values()) > n or any(c <= 0 for c in counts.values()):
        want = ", ".join(f"{k}={v}" for k, v in counts.items())
        raise DataError(f"{source}: {n} examples cannot be split into {want}")
    out, start = {}, 0
    for name in names:
        idx = perm[start : start + counts[name]]
        out[name] = (x[idx], y[idx])
        start += counts[name]
    return out
