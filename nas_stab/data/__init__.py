"""Datasets, one registry: `DATASETS` keyed by the YAML `task.dataset.name`.

A loader takes (dataset config, device) and returns a data object held in
memory as tensors (on the training device); subsets and splits are
deterministic given `dataset.split_seed`, so every trial sees the same data.
Missing or malformed files raise `DataError` naming the file.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nas_stab.config import hooks
from nas_stab.config.schema import DatasetConfig, Spec, TaskConfig
from nas_stab.data import catalog  # noqa: F401 - the built-in datasets' entries (their loaders load on first use)
from nas_stab.data.base import DATASETS, DataInfo, cache_dir, resolve_root

DATASETS.load_plugins("nas_stab.datasets")  # installed packages' datasets (docs/plugins.md)

__all__ = ["DATASETS", "DataInfo", "check_dataset", "load_dataset", "resolve_root", "reuse_loaded", "cache_dir"]


def dataset_key(spec: Spec) -> str:
    """The registry key of `spec.task.dataset.name`: "<kind>/<name>" when a
    task-qualified entry exists (e.g. "translation/synthetic"), else the name."""
    name = spec.task.dataset.name
    qualified = f"{spec.task.kind}/{name}"
    return qualified if qualified in DATASETS else name


def dataset_options(section: Mapping[str, Any], task: Mapping[str, Any]) -> type | None:
    """The options class of the dataset `section` (a `task.dataset` mapping) names; KeyError when none is registered."""
    name = section.get("name", DatasetConfig.name)
    qualified = f"{task.get('kind', TaskConfig.kind)}/{name}"
    key = qualified if qualified in DATASETS else name
    if not isinstance(key, str) or key not in DATASETS:
        raise KeyError(name)
    return DATASETS.entry(key).info.get("options")


def dataset_option_classes(plugins: bool) -> list[tuple[str, str, type | None]]:
    """Every dataset's (YAML name, task kind, options class): "translation/synthetic" is `name: synthetic`."""
    return [(name.rpartition("/")[2], e.info.get("task", "classification"), e.info.get("options"))
            for name, e in DATASETS.items() if plugins or "plugin" not in e.info]


hooks.register_options("dataset", dataset_options, dataset_option_classes)


@hooks.register("config", "dataset")
def check_dataset(spec: Spec) -> tuple[tuple, str] | None:
    d = spec.task.dataset
    key = dataset_key(spec)
    if key not in DATASETS:
        return ("task", "dataset", "name"), DATASETS.unknown(d.name)
    entry = DATASETS.entry(key)
    task = entry.info.get("task", "classification")
    if task != spec.task.kind:
        return ("task", "dataset", "name"), f"{d.name!r} is a {task} dataset; task.kind is {spec.task.kind!r}"
    check = entry.info.get("check")
    return check(spec) if check else None


_MEMO: dict | None = None  # set while a `reuse_loaded()` block runs


@contextlib.contextmanager
def reuse_loaded():
    """Within this block, `load_dataset` loads each dataset (config and device) once.

    A search trains many runs on the same data; a hand-written search script
    loads it once, outside its objective, and so do the runners inside this
    block (MNIST: ~0.3 s per trial otherwise; digits ~15 ms). Only the most
    recently loaded dataset is kept. Training never modifies a data object
    (batches are indexed copies), so sharing one between runs is safe; outside
    the block every call reads the files again (a test that rewrites a file
    sees the change).
    """
    global _MEMO
    outer = _MEMO
    if outer is None:
        _MEMO = {}
    try:
        yield
    finally:
        if outer is None:
            _MEMO = None


PATH_KEYS = ("root",)  # text_pairs' file names stay relative to the root (then the working directory), as documented


def spec_dir(spec: Spec) -> Path | None:
    """The directory of the experiment file `spec` was loaded from (None: text, a test, --set)."""
    src = getattr(spec, "source", None) or ""
    if not src or src.startswith("<"):
        return None
    return Path(os.path.expanduser(src)).resolve().parent


def dataset_paths(spec: Spec):
    """`spec.task.dataset` with its root absolute: '~' expanded, and a relative root taken
    relative to the experiment file's directory (the working directory for a spec that
    is not a file, and for `--set task.dataset.root=...`), so a spec finds its data
    wherever it is run from; errors then name the absolute path."""
    cfg = spec.task.dataset
    base = spec_dir(spec) or Path.cwd()
    updates: dict[str, Any] = {}  # DatasetConfig fields (dataclasses.replace)
    for k in PATH_KEYS:
        v = getattr(cfg, k, None)
        if isinstance(v, str) and v:
            updates[k] = str(resolve_root(v, base))
    return dataclasses.replace(cfg, **updates) if updates else cfg


def load_dataset(spec: Spec, device):
    """Load `spec.task.dataset` onto `device` (once per `reuse_loaded()` block)."""
    cfg = dataset_paths(spec)
    key = (dataset_key(spec), repr(cfg), str(device))
    memo = _MEMO
    if memo is not None and key in memo:
        return memo[key]
    data = DATASETS.get(key[0])(cfg, device)
    if memo is not None:
        memo.clear()  # one dataset at a time: MNIST in float32 is ~190 MB
        memo[key] = data
    return data


