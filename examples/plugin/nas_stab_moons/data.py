"""The loader: imported the first time a run loads `moons`."""
from __future__ import annotations

import torch
from sklearn.datasets import make_moons

from nas_stab.config.schema import DatasetConfig
from nas_stab.data.tabular import from_arrays
from nas_stab.data.tensors import TensorData


def load_moons(cfg: DatasetConfig, device: torch.device | str) -> TensorData:
    """`size` points with Gaussian noise `noise` (the plugin's own options, `cfg.options`), the same for every trial
    (`cfg.split_seed`)."""
    x, y = make_moons(n_samples=cfg.options.size, noise=cfg.options.noise, random_state=cfg.split_seed)
    return from_arrays(cfg, "moons", torch.tensor(x, dtype=torch.float32), torch.tensor(y, dtype=torch.int64), 2,
                       source="moons (scikit-learn make_moons)")
