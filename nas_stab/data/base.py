"""What every dataset module needs, below the package's entry points: the registry `DATASETS` (keyed by the YAML
`task.dataset.name`), `DataInfo` (what a model needs to know about its data) and where files live. The dataset
modules import this, never `nas_stab.data` itself (which imports them to fill the registry)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from nas_stab.registry import Registry

DATASETS = Registry("dataset")


@dataclass(frozen=True)
class DataInfo:
    """What a model needs to know about its data."""

    name: str
    in_shape: tuple = ()
    classes: int = 0
    extra: dict = field(default_factory=dict)


def resolve_root(root: str, base: str | os.PathLike | None = None) -> Path:
    """Expand '~'; a relative root is taken relative to `base` (default: the working directory)."""
    p = Path(os.path.expanduser(root))
    return p if p.is_absolute() else (Path(base) if base is not None else Path.cwd()).joinpath(p).resolve()


def cache_dir(cfg=None) -> Path:
    d = (cfg.cache if cfg is not None and cfg.cache else None) or os.environ.get("NAS_STAB_CACHE") or "~/.cache/nas_stab"
    p = Path(os.path.expanduser(d))
    p.mkdir(parents=True, exist_ok=True)
    return p
