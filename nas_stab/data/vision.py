"""Image classification datasets: `cifar10`, `cifar100`, `imagefolder`.

All three end as `TensorData` with uint8 images `[N, C, H, W]` on the training
device, per-channel mean/std of the training pool (normalization happens per
batch in `TensorData.prepare`), and `augment` (random crop with 4-pixel
padding + horizontal flip on whole batches) from the dataset config. Subsets
and the train/validation split are deterministic given `split_seed`.

- cifar10 / cifar100: torchvision's layout (`cifar-10-batches-py/`,
  `cifar-100-python/`) in `root` (or `root` is that folder);
  `download: true` fetches it through torchvision.
- imagefolder: `root/train/<class>/*`, `root/test/<class>/*` (optionally
  `root/val/<class>/*`), or a `.tar.gz`/`.tgz`/`.tar` of that layout (a
  single top folder inside the archive is fine): put the archive or folder
  anywhere and point `task.dataset.root` at it (relative paths are taken from
  the experiment file's directory), e.g. `root: data/cifar10-jpeg.tar.gz`.
  Decoded once (torchvision's batched libjpeg decoder: ~2x faster than PIL; a
  process pool gained nothing on a 2-core machine) into `cache_dir()/imagefolder-<key>.pt`, keyed
  by the archive's path, size and mtime (for a directory: every file's).
"""
from __future__ import annotations

import hashlib
import os
import pickle
import tarfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from nas_stab.data.base import DataInfo, cache_dir, resolve_root
from nas_stab.data.safeio import load_array_pickle, read_capped
from nas_stab.data.tensors import TensorData, split
from nas_stab.errors import DataError

CACHE_VERSION = 1
IMAGE_EXT = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".ppm", ".pgm", ".tif", ".tiff", ".webp")


# ---------------------------------------------------------------- common


def image_data(cfg, name: str, train: tuple, test: tuple | None, classes: int, *, val: tuple | None = None,
               source: str = "", stats: tuple | None = None) -> TensorData:
    """Deterministic splits of uint8 images into a `TensorData`.

    Validation (and test, when there is no test set) is carved from the
    training pool; `train`/`val`/`test` sizes take deterministic subsets.
    """
    x, y = train
    seed = cfg.split_seed
    sizes: dict = {}
    fractions: dict = {}
    if test is None:
        sizes["test"], fractions["test"] = cfg.test, 0.2
    else:
        test = _subset(test, cfg.test, seed, f"{source} (test)")
    if val is None:
        sizes["val"], fractions["val"] = cfg.val, (0.1 if test is not None else 0.2)
    else:
        val = _subset(val, cfg.val, seed, f"{source} (val)")
    sizes["train"] = cfg.train
    parts = split(x, y, sizes, seed, fractions=fractions, source=source)
    test, val = parts.get("test", test), parts.get("val", val)
    (xtr, ytr) = parts["train"]
    mean, std = stats if stats is not None else channel_stats(x)
    info = DataInfo(name, tuple(x.shape[1:]), classes)
    note = f"{len(xtr)} train / {len(val[0])} val / {len(test[0])} test from {source}"
    return TensorData(info, xtr, ytr, val[0], val[1], test[0], test[1], mean=mean, std=std, augment=cfg.augment, note=note,
                      normalize=cfg.normalize)


def _subset(pair: tuple, n: int | None, seed: int, source: str) -> tuple:
    if n is None:
        return pair
    return split(pair[0], pair[1], {"part": n}, seed, fractions={}, source=source)["part"]


def channel_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-channel mean and std of uint8 images, in [0, 1] units."""
    xs = x[:: max(1, len(x) // 10000)].float().div_(255.0)
    return xs.mean((0, 2, 3)), xs.std((0, 2, 3)).clamp_min(1e-3)
# ---------------------------------------------------------------- CIFAR (torchvision layout)

_CIFAR = {
    10: ("cifar-10-batches-py", [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], b"labels"),
    100: ("cifar-100-python", ["train"], ["test"], b"fine_labels"),
}


def _read_cifar_batch(path: Path, label_key: bytes) -> tuple[np.ndarray, np.ndarray]:
    try:
        d = load_array_pickle(path)  # restricted: arrays, lists and numbers only, never code
        data = np.asarray(d[b"data"], dtype=np.uint8)
        labels = np.asarray(d[label_key], dtype=np.int64)
    except (OSError, EOFError, pickle.UnpicklingError, KeyError, ValueError, TypeError, IndexError, AttributeError) as e:
        raise DataError(f"{path}: not a readable CIFAR batch ({type(e).__name__}: {e})") from None
    if data.ndim != 2 or data.shape[1] != 3072 or len(data) != len(labels):
        raise DataError(f"{path}: expected N x 3072 images with N labels, got {data.shape} and {labels.shape} (truncated?)")
    return data.reshape(-1, 3, 32, 32), labels


def _find_cifar(root: Path, classes: int) -> Path | None:
    folder, train, test, _ = _CIFAR[classes]
    for d in (root / folder, root):
        if all((d / f).is_file() for f in train + test):
            return d
    return None


def load_cifar(cfg, device, classes: int):
    root = resolve_root(cfg.root)
    folder, train_files, test_files, key = _CIFAR[classes]
    d = _find_cifar(root, classes)
    if d is None and cfg.download:
        import torchvision  # deferred: loads torchvision only when this runs

        cls = torchvision.datasets.CIFAR10 if classes == 10 else torchvision.datasets.CIFAR100
        cls(str(root), train=True, download=True)
        d = _find_cifar(root, classes)
    if d is None:
        missing = next(f for f in train_files + test_files
                       if not (root / folder / f).is_file() and not (root / f).is_file())
        raise DataError(f"cifar{classes} file {missing!r} not found; looked in {root / folder} and {root} "
                        "(torchvision's layout; set download: true to fetch it)")
    tr = [_read_cifar_batch(d / f, key) for f in train_files]
    te = [_read_cifar_batch(d / f, key) for f in test_files]
    x, y = torch.from_numpy(np.concatenate([a for a, _ in tr])), torch.from_numpy(np.concatenate([b for _, b in tr]))
    tx, ty = torch.from_numpy(np.concatenate([a for a, _ in te])), torch.from_numpy(np.concatenate([b for _, b in te]))
    if int(y.max()) >= classes or int(y.min()) < 0:
        raise DataError(f"{d}: labels outside 0..{classes - 1}")
    return image_data(cfg, f"cifar{classes}", (x, y), (tx, ty), classes, source=str(d)).to(device)


def load_cifar10(cfg, device):
    return load_cifar(cfg, device, 10)


def load_cifar100(cfg, device):
    return load_cifar(cfg, device, 100)


# ---------------------------------------------------------------- imagefolder


def _fingerprint(root: Path) -> str:
    """Cache key: the archive's path, size and mtime; for a directory every file's."""
    h = hashlib.sha256(f"v{CACHE_VERSION}:{root.resolve()}".encode())
    if root.is_file():
        st = root.stat()
        h.update(f"{st.st_size}:{st.st_mtime_ns}".encode())
    else:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for fn in sorted(filenames):
                st = os.stat(os.path.join(dirpath, fn))
                h.update(f"{os.path.relpath(os.path.join(dirpath, fn), root)}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()[:20]


def _place(name: str) -> tuple[str, str] | None:
    """(split, class) of an archive member or relative path `.../<split>/<class>/<file>`."""
    parts = name.replace("\\", "/").strip("/").split("/")
    if len(parts) < 3 or parts[-3] not in ("train", "val", "test") or parts[-1].startswith("."):
        return None
    if not parts[-1].lower().endswith(IMAGE_EXT):
        return None
    return parts[-3], parts[-2]


def _iter_files(root: Path):
    """(display name, split, class, bytes) for every image of a directory or archive."""
    if root.is_file():
        try:
            with tarfile.open(root, "r:*") as tf:
                for m in tf:
                    where = _place(m.name) if m.isfile() else None
                    if where:
                        f = tf.extractfile(m)
                        data = read_capped(f, f"{root}:{m.name}") if f is not None else b""
                        if len(data) != m.size:
                            raise DataError(f"{root}: member {m.name} is truncated ({len(data)} of {m.size} bytes)")
                        yield f"{root}:{m.name}", where[0], where[1], data
        except (tarfile.TarError, EOFError, OSError, ValueError) as e:
            raise DataError(f"{root}: cannot read the archive ({type(e).__name__}: {e}); truncated or not a tar file") from None
        return
    for split_name in ("train", "val", "test"):
        d = root / split_name
        if not d.is_dir():
            continue
        for cls_dir in sorted(p for p in d.iterdir() if p.is_dir()):
            for fp in sorted(cls_dir.iterdir()):
                if fp.is_file() and _place(f"{split_name}/{cls_dir.name}/{fp.name}"):
                    try:
                        data = fp.read_bytes()
                    except OSError as e:
                        raise DataError(f"{fp}: cannot read ({e})") from None
                    yield str(fp), split_name, cls_dir.name, data


def _check_bytes(name: str, data: bytes) -> None:
    if not data:
        raise DataError(f"{name}: empty file")
    if data[:2] == b"\xff\xd8" and b"\xff\xd9" not in data[-16:].rstrip(b"\x00"):
        raise DataError(f"{name}: truncated JPEG (no end-of-image marker)")


def _decode_all(names: list[str], blobs: list[bytes]) -> torch.Tensor:
    """Decode images to one uint8 tensor [N, C, H, W] (all the same size)."""
    from torchvision.io import ImageReadMode, decode_image, decode_jpeg  # deferred: loads torchvision only when this runs

    tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in blobs]
    is_jpeg = [b[:2] == b"\xff\xd8" for b in blobs]
    out: list = [None] * len(blobs)
    jpeg_idx = [i for i, j in enumerate(is_jpeg) if j]

    def one(i: int, mode) -> torch.Tensor:
        try:
            return decode_image(tensors[i], mode=mode)
        except (RuntimeError, ValueError) as e:
            raise DataError(f"{names[i]}: cannot decode the image ({e})") from None

    if jpeg_idx:
        try:
            decoded = decode_jpeg([tensors[i] for i in jpeg_idx], mode=ImageReadMode.UNCHANGED)
        except (RuntimeError, ValueError):
            decoded = [one(i, ImageReadMode.UNCHANGED) for i in jpeg_idx]  # find the culprit
        for i, t in zip(jpeg_idx, decoded):
            out[i] = t
    for i, j in enumerate(is_jpeg):
        if not j:
            out[i] = one(i, ImageReadMode.UNCHANGED)
    channels = {t.shape[0] for t in out}
    if channels != {1}:  # colour (or mixed, RGBA, CMYK): decode everything that is not RGB as RGB
        for i, t in enumerate(out):
            if t.shape[0] != 3:
                out[i] = one(i, ImageReadMode.RGB)
    shape = out[0].shape
    for i, t in enumerate(out):
        if t.shape != shape:
            raise DataError(f"{names[i]}: image of shape {tuple(t.shape)} differs from {tuple(shape)} ({names[0]}); "
                            "imagefolder needs images of one size")
    return torch.stack(out)


def decode_folder(root: Path) -> dict:
    """Read and decode every image of an imagefolder directory or archive."""
    found: dict[str, tuple[list, list, list]] = {}
    for name, split_name, cls, data in _iter_files(root):
        _check_bytes(name, data)
        names, blobs, labels = found.setdefault(split_name, ([], [], []))
        names.append(name)
        blobs.append(data)
        labels.append(cls)
    if "train" not in found:
        raise DataError(f"imagefolder: no images under {root}/train/<class>/ "
                        f"(looked for {', '.join(IMAGE_EXT[:3])}... files in {'the archive' if root.is_file() else 'the directory'} {root})")
    classes = sorted(set(found["train"][2]))
    index = {c: i for i, c in enumerate(classes)}
    out: dict[str, Any] = {"classes": classes, "version": CACHE_VERSION, "source": str(root)}
    for split_name, (names, blobs, labels) in found.items():
        unknown = sorted(set(labels) - set(index))
        if unknown:
            raise DataError(f"imagefolder: {split_name}/ has class {unknown[0]!r} that train/ does not have ({root})")
        out[split_name] = (_decode_all(names, blobs), torch.tensor([index[c] for c in labels], dtype=torch.long))
    out["stats"] = channel_stats(out["train"][0])
    return out


def load_folder_cached(root: Path, cfg=None) -> dict:
    """`decode_folder`, cached once per machine (atomic write)."""
    if not root.exists():
        raise DataError(f"imagefolder: {root} not found (root is a directory with train/<class>/* and test/<class>/*, "
                        "or a .tar.gz of that layout)")
    path = cache_dir(cfg) / f"imagefolder-{_fingerprint(root)}.pt"
    if path.exists():
        try:
            data = torch.load(path, weights_only=True)
            if data.get("version") == CACHE_VERSION:
                return data
        except Exception:  # a stale or damaged cache is rebuilt
            pass
    data = decode_folder(root)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    torch.save(data, tmp)
    os.replace(tmp, path)
    return data


def load_imagefolder(cfg, device):
    root = resolve_root(cfg.root)
    data = load_folder_cached(root, cfg)
    classes = len(data["classes"])
    return image_data(cfg, "imagefolder", data["train"], data.get("test"), classes, val=data.get("val"),
                      source=str(root), stats=data["stats"]).to(device)
