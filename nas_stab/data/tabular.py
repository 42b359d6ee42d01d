"""Small offline classification datasets: `digits`, `synthetic`, `mnist`, `mnist1d`."""
from __future__ import annotations

import gzip
import os
import random
import struct
from pathlib import Path

import numpy as np
import torch

from nas_stab.config.schema import DatasetConfig
from nas_stab.data.base import DataInfo, cache_dir, resolve_root
from nas_stab.data.safeio import read_capped
from nas_stab.data.tensors import TensorData, split
from nas_stab.errors import DataError


def _parts(cfg, x, y, source: str, test: tuple | None = None):
    """train/val(/test) splits from one pool, or train/val from a train pool plus a given test set."""
    if test is None:
        parts = split(x, y, {"test": cfg.test, "val": cfg.val, "train": cfg.train}, cfg.split_seed,
                      fractions={"test": 0.2, "val": 0.2}, source=source)
        return parts["train"], parts["val"], parts["test"]
    parts = split(x, y, {"val": cfg.val, "train": cfg.train}, cfg.split_seed, fractions={"val": 0.1}, source=source)
    tx, ty = test
    if cfg.test is not None:
        tx, ty = tx[: cfg.test], ty[: cfg.test]
    return parts["train"], parts["val"], (tx, ty)


def _make(cfg, name, x, y, classes, source, test=None, note=""):
    (xtr, ytr), (xva, yva), (xte, yte) = _parts(cfg, x, y, source, test)
    info = DataInfo(name, tuple(x.shape[1:]), classes)
    return TensorData(info, xtr, ytr, xva, yva, xte, yte, note=note or f"{len(xtr)} train / {len(xva)} val / {len(xte)} test",
                      normalize=cfg.normalize)


def from_arrays(cfg: DatasetConfig, name: str, x: torch.Tensor, y: torch.Tensor, classes: int, source: str) -> TensorData:
    """A classification dataset from its inputs `x` [N, ...] (float) and labels `y` [N] (int64 in 0..classes-1),
    split deterministically into train / val / test by `task.dataset` (train, val, test, split_seed) and normalized
    by `task.dataset.normalize`, as the built-in datasets are: what a plugin dataset's loader returns
    (docs/plugins.md). `source` names the data in errors."""
    return _make(cfg, name, x, y, classes, source)


def load_digits(cfg, device):
    from sklearn.datasets import load_digits as sk_digits  # deferred: loads scikit-learn only when this runs

    d = sk_digits()
    x = torch.tensor(d.images, dtype=torch.float32).unsqueeze(1) / 16.0
    x = (x - x.mean()) / x.std()
    y = torch.tensor(d.target, dtype=torch.long)
    return _make(cfg, "digits", x, y, 10, "digits").to(device)


def load_synthetic(cfg, device):
    o = cfg.options  # catalog.SyntheticOptions
    g = torch.Generator().manual_seed(1000 + cfg.split_seed)
    shape = tuple(o.shape)
    dim = int(np.prod(shape))
    protos = torch.randn(o.classes, dim, generator=g)
    y = torch.randint(0, o.classes, (o.size,), generator=g)
    x = protos[y] + o.noise * torch.randn(o.size, dim, generator=g) * np.sqrt(1.0)
    x = x / x.std()
    return _make(cfg, "synthetic", x.view(o.size, *shape), y, o.classes, "synthetic").to(device)


MNIST1D_SEED = 42  # the generator seed of the published MNIST-1D (its default): size 5000 gives the paper's data set


def load_mnist1d(cfg, device):
    """MNIST-1D made procedurally by the `mnist1d` package (no download): ten 1-D templates padded, translated,
    sheared, scaled and noised into `size` signals of length 40. The generator seeds Python's and numpy's global
    random state; both are restored afterwards so a run's own randomness does not depend on whether the data was
    made. Unlike MNIST it is not saturated: an MLP reaches roughly 70% (the paper's Table 1). Making it takes
    ~0.6 ms per signal (12 s for 20,000): the arrays are cached (`cache_dir`), keyed by size, seed and the
    package's version, so a search, and `nas-stab validate`, make them once."""
    d = _mnist1d_arrays(int(cfg.options.size), cache_dir(cfg))  # catalog.Mnist1dOptions
    x = torch.tensor(d["x"], dtype=torch.float32)
    y = torch.tensor(d["y"], dtype=torch.long)
    test = (torch.tensor(d["x_test"], dtype=torch.float32), torch.tensor(d["y_test"], dtype=torch.long))
    return _make(cfg, "mnist1d", x, y, 10, "mnist1d", test=test).to(device)


_MNIST1D_KEYS = ("x", "y", "x_test", "y_test")


def _mnist1d_arrays(size: int, cache: Path) -> dict[str, np.ndarray]:
    """The arrays of MNIST-1D at `size` signals: from the cache when it holds them, else made and cached (written
    to a temporary file, then renamed: a killed run leaves no torn cache; a torn or foreign file is made again)."""
    try:
        import mnist1d
        from mnist1d.data import get_dataset_args, make_dataset  # deferred: loads mnist1d only when this runs
    except ImportError as e:  # a declared dependency: only a broken environment lacks it
        raise DataError(f"mnist1d: the mnist1d package is not importable ({e}); pip install mnist1d") from None
    version = str(getattr(mnist1d, "__version__", "unknown")).replace("/", "_")
    path = cache / f"mnist1d-n{size}-seed{MNIST1D_SEED}-v{version}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as z:
                return {k: z[k] for k in _MNIST1D_KEYS}
        except (OSError, ValueError, KeyError):
            pass  # made again below
    args = get_dataset_args()
    args.num_samples = size
    args.seed = MNIST1D_SEED
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        made = make_dataset(args)
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
    d = {k: np.asarray(made[k]) for k in _MNIST1D_KEYS}
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.npz")
    try:
        np.savez(tmp, x=d["x"], y=d["y"], x_test=d["x_test"], y_test=d["y_test"])
        os.replace(tmp, path)
    except OSError:  # a read-only cache: the data is still made, only not kept
        tmp.unlink(missing_ok=True)
    return d


def _idx_candidates(root: Path, stem: str) -> list[Path]:
    dirs = [root, root / "mnist", root / "MNIST" / "raw"]
    return [d / (stem + ext) for d in dirs for ext in ("", ".gz")]


def read_idx(path: Path) -> np.ndarray:
    """Read an IDX file (optionally gzipped); DataError on truncation or a bad header."""
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as f:
                raw = read_capped(f, str(path))
        else:
            raw = path.read_bytes()
    except (OSError, EOFError) as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    if len(raw) < 4:
        raise DataError(f"{path}: truncated IDX file ({len(raw)} bytes)")
    zero, dtype_code, ndim = raw[0:2], raw[2], raw[3]
    if zero != b"\x00\x00" or dtype_code != 0x08 or ndim < 1:
        raise DataError(f"{path}: not an IDX file of unsigned bytes (header {raw[:4].hex()})")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise DataError(f"{path}: truncated IDX header")
    dims = struct.unpack(">" + "I" * ndim, raw[4:header])
    need = int(np.prod(dims))
    if len(raw) - header != need:
        raise DataError(f"{path}: expected {need} bytes of data for shape {dims}, found {len(raw) - header} (truncated or corrupt)")
    return np.frombuffer(raw, dtype=np.uint8, offset=header).reshape(dims)


def _find_idx(root: Path, stem: str, required: bool) -> Path | None:
    for p in _idx_candidates(root, stem):
        if p.exists():
            return p
    if required:
        looked = ", ".join(str(p) for p in _idx_candidates(root, stem)[::2])
        raise DataError(f"MNIST file {stem}[.gz] not found; looked in {looked}")
    return None


def _mnist_pair(root: Path, prefix: str, required: bool):
    ip = _find_idx(root, f"{prefix}-images-idx3-ubyte", required)
    lp = _find_idx(root, f"{prefix}-labels-idx1-ubyte", required)
    if ip is None or lp is None:
        return None
    xi, yl = read_idx(ip), read_idx(lp)
    if xi.ndim != 3 or yl.ndim != 1 or len(xi) != len(yl):
        raise DataError(f"{ip}: images {xi.shape} do not match labels {yl.shape} in {lp}")
    if len(xi) == 0:
        raise DataError(f"{ip}: empty split")
    if int(yl.max()) > 9:
        raise DataError(f"{lp}: label {int(yl.max())} outside MNIST's classes 0..9")
    return xi, yl


def load_mnist(cfg, device):
    root = resolve_root(cfg.root)
    train = _mnist_pair(root, "train", required=False)
    test = _mnist_pair(root, "t10k", required=train is None and not cfg.download)
    if train is None and test is None and cfg.download:
        import torchvision  # deferred: loads torchvision only when this runs

        torchvision.datasets.MNIST(str(root), train=True, download=True)
        torchvision.datasets.MNIST(str(root), train=False, download=True)
        train, test = _mnist_pair(root, "train", True), _mnist_pair(root, "t10k", True)

    def tens(pair):
        x = torch.tensor(pair[0], dtype=torch.float32).unsqueeze(1) / 255.0
        return (x - 0.1307) / 0.3081, torch.tensor(pair[1], dtype=torch.long)

    if train is None:
        x, y = tens(test)
        note = "only the MNIST test split was found: it was split into train/val/test"
        data = _make(cfg, "mnist", x, y, 10, "mnist t10k", note=note)
    else:
        x, y = tens(train)
        data = _make(cfg, "mnist", x, y, 10, "mnist train", test=tens(test) if test else None)
    return data.to(device)
