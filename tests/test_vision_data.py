"""Vision datasets: imagefolder (directory and .tar.gz), cifar10/100 in
torchvision's layout, the decode cache, and DataError on bad files."""
from __future__ import annotations

import io
import os
import pickle
import tarfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from nas_stab.config import loads_spec
from nas_stab.data import load_dataset, vision
from nas_stab.errors import DataError

SHARED_CIFAR = Path(__file__).resolve().parents[2] / "shared" / "data" / "cifar10-jpeg.tar.gz"
CLASSES = ("cat", "dog", "emu")


def _image_bytes(seed: int, red: int = 0, fmt: str = "JPEG", size=(8, 8), mode="RGB") -> bytes:
    rng = np.random.default_rng(seed)
    arr = rng.integers(0, 256, size=(size[1], size[0], 3), dtype=np.uint8)
    arr[..., 0] = red  # the class, readable after decoding
    im = Image.fromarray(arr).convert(mode)
    buf = io.BytesIO()
    im.save(buf, format=fmt, quality=95)
    return buf.getvalue()


def make_folder(root: Path, *, train=4, test=2, fmt="JPEG", mode="RGB") -> Path:
    for split, n in (("train", train), ("test", test)):
        for c, cls in enumerate(CLASSES):
            d = root / split / cls
            d.mkdir(parents=True, exist_ok=True)
            for i in range(n):
                ext = "jpg" if fmt == "JPEG" else "png"
                (d / f"{i:03d}.{ext}").write_bytes(_image_bytes(100 * c + i, 40 * c + 20, fmt, mode=mode))
    return root


def make_tar(folder: Path, out: Path, prefix: str = "") -> Path:
    with tarfile.open(out, "w:gz") as tf:
        for split in ("train", "test"):
            tf.add(folder / split, arcname=f"{prefix}{split}")
    return out


def load(root, cache, **opts):
    extra = "".join(f", {k}: {v}" for k, v in opts.items())
    spec = loads_spec(f"name: t\ntask: {{dataset: {{name: imagefolder, root: '{root}', cache: '{cache}'{extra}}}}}\n"
                      "model: {arch: resnet, depth: 8}\n")
    return load_dataset(spec, "cpu")


@pytest.fixture
def folder(tmp_path):
    return make_folder(tmp_path / "imgs")


@pytest.mark.parametrize("as_tar", [False, True])
def test_imagefolder_directory_and_tarball(folder, tmp_path, as_tar):
    root = make_tar(folder, tmp_path / "imgs.tar.gz", prefix="top/" if as_tar else "") if as_tar else folder
    d = load(root, tmp_path / "cache", val=2)
    assert d.info.in_shape == (3, 8, 8) and d.info.classes == 3
    assert d.x_train.dtype == torch.uint8 and len(d.x_train) == 10 and len(d.x_val) == 2 and len(d.x_test) == 6
    assert sorted(torch.cat([d.y_train, d.y_val]).tolist()) == [0] * 4 + [1] * 4 + [2] * 4
    assert sorted(d.y_test.tolist()) == [0, 0, 1, 1, 2, 2]
    # the red channel encodes the class: labels and pixels stay together (JPEG: within a few levels)
    for x, y in ((d.x_train, d.y_train), (d.x_val, d.y_val), (d.x_test, d.y_test)):
        red = x[:, 0].float().mean((1, 2))
        assert ((red - (40 * y + 20)).abs() < 16).all(), (red, y)  # classes are 40 levels apart
    assert d.mean.shape == (3,) and d.std.shape == (3,) and (d.std > 0).all()
    assert d.augment is True
    x = d.prepare(d.x_train[:4])
    assert x.dtype == torch.float32 and x.shape == (4, 3, 8, 8)
    aug = d.augment_batch(x, torch.Generator().manual_seed(0))
    assert aug.shape == x.shape


def test_same_images_from_directory_and_tarball(folder, tmp_path):
    a = load(folder, tmp_path / "c1")
    b = load(make_tar(folder, tmp_path / "x.tar.gz"), tmp_path / "c2")
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)


def test_splits_are_deterministic(folder, tmp_path):
    a = load(folder, tmp_path / "c", train=6, val=3, test=3)
    b = load(folder, tmp_path / "c", train=6, val=3, test=3)
    c = load(folder, tmp_path / "c", train=6, val=3, test=3, split_seed=1)
    assert (len(a.x_train), len(a.x_val), len(a.x_test)) == (6, 3, 3)
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.x_test, b.x_test)
    assert not torch.equal(a.x_train, c.x_train)


def test_decoded_once_then_cached(folder, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    load(folder, cache)
    files = list(cache.glob("imagefolder-*.pt"))
    assert len(files) == 1

    def boom(root):
        raise AssertionError("decoded again")

    monkeypatch.setattr(vision, "decode_folder", boom)
    d = load(folder, cache)  # from the cache
    assert len(d.x_train) + len(d.x_val) == 12
    # a changed file changes the key: decoded again
    f = folder / "train" / "cat" / "000.jpg"
    f.write_bytes(_image_bytes(7, 20))
    os.utime(f, ns=(1, 1))
    with pytest.raises(AssertionError, match="decoded again"):
        load(folder, cache)


def test_png_and_grayscale(tmp_path):
    root = make_folder(tmp_path / "gray", fmt="PNG", mode="L")
    d = load(root, tmp_path / "c")
    assert d.info.in_shape == (1, 8, 8) and d.mean.shape == (1,)
    # lossless PNG: exact pixels
    im = np.array(Image.open(root / "test" / "cat" / "000.png"))
    assert any(torch.equal(torch.from_numpy(im), x[0]) for x in d.x_test)


# --------------------------------------------------------------- bad input


def test_missing_root_names_it(tmp_path):
    with pytest.raises(DataError, match="nowhere"):
        load(tmp_path / "nowhere", tmp_path / "c")


def test_no_train_folder(tmp_path):
    (tmp_path / "empty" / "test" / "a").mkdir(parents=True)
    with pytest.raises(DataError, match="train"):
        load(tmp_path / "empty", tmp_path / "c")


def test_truncated_jpeg_names_the_file(folder, tmp_path):
    f = folder / "train" / "dog" / "001.jpg"
    f.write_bytes(f.read_bytes()[:-40])
    with pytest.raises(DataError, match="dog/001.jpg") as e:
        load(folder, tmp_path / "c")
    assert "truncated" in str(e.value)


def test_garbage_image_names_the_file(folder, tmp_path):
    (folder / "train" / "emu" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"not really a png" * 4)
    with pytest.raises(DataError, match="emu/bad.png"):
        load(folder, tmp_path / "c")


def test_truncated_archive_names_it(folder, tmp_path):
    tar = make_tar(folder, tmp_path / "x.tar.gz")
    raw = tar.read_bytes()
    tar.write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DataError, match="x.tar.gz"):
        load(tar, tmp_path / "c")


def test_mixed_sizes_and_unknown_test_class(folder, tmp_path):
    (folder / "train" / "cat" / "big.png").write_bytes(_image_bytes(1, 20, "PNG", size=(9, 8)))
    with pytest.raises(DataError, match="big.png"):
        load(folder, tmp_path / "c")
    (folder / "train" / "cat" / "big.png").unlink()
    (folder / "test" / "yak").mkdir()
    (folder / "test" / "yak" / "0.jpg").write_bytes(_image_bytes(1, 20))
    with pytest.raises(DataError, match="yak"):
        load(folder, tmp_path / "c2")


# --------------------------------------------------------------- CIFAR layout


def _cifar_batch(path: Path, n: int, label_key: str, classes: int, seed: int):
    rng = np.random.default_rng(seed)
    d = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), label_key.encode(): list(rng.integers(0, classes, n))}
    path.write_bytes(pickle.dumps(d))


def _cifar_spec(name, root, **opts):
    extra = "".join(f", {k}: {v}" for k, v in opts.items())
    return loads_spec(f"name: t\ntask: {{dataset: {{name: {name}, root: '{root}'{extra}}}}}\nmodel: {{arch: resnet, depth: 8}}\n")


def test_cifar10_torchvision_layout(tmp_path):
    d = tmp_path / "cifar-10-batches-py"
    d.mkdir()
    for i in range(1, 6):
        _cifar_batch(d / f"data_batch_{i}", 20, "labels", 10, i)
    _cifar_batch(d / "test_batch", 30, "labels", 10, 9)
    data = load_dataset(_cifar_spec("cifar10", tmp_path, val=10), "cpu")
    assert data.info.in_shape == (3, 32, 32) and data.info.classes == 10
    assert (len(data.x_train), len(data.x_val), len(data.x_test)) == (90, 10, 30)
    raw = pickle.loads((d / "test_batch").read_bytes())[b"data"].reshape(-1, 3, 32, 32)
    assert any(torch.equal(torch.from_numpy(raw[0]), x) for x in data.x_test)


def test_cifar100_and_missing_files(tmp_path):
    d = tmp_path / "cifar-100-python"
    d.mkdir()
    _cifar_batch(d / "train", 40, "fine_labels", 100, 1)
    with pytest.raises(DataError, match="'test' not found") as e:
        load_dataset(_cifar_spec("cifar100", tmp_path), "cpu")
    assert "cifar-100-python" in str(e.value) and "download" in str(e.value)
    _cifar_batch(d / "test", 10, "fine_labels", 100, 2)
    data = load_dataset(_cifar_spec("cifar100", tmp_path), "cpu")
    assert data.info.classes == 100 and len(data.x_test) == 10
    (d / "test").write_bytes(b"\x80\x04truncated")
    with pytest.raises(DataError, match="test"):
        load_dataset(_cifar_spec("cifar100", tmp_path), "cpu")


@pytest.mark.slow
@pytest.mark.skipif(not SHARED_CIFAR.exists(), reason="the shared CIFAR-10 JPEG archive is not here")
def test_real_cifar10_jpeg_archive(tmp_path):
    d = load(SHARED_CIFAR, tmp_path, val=5000)  # a fresh cache: decoding the 60,000 JPEGs is part of the test
    assert d.info.in_shape == (3, 32, 32) and d.info.classes == 10
    assert (len(d.x_train), len(d.x_val), len(d.x_test)) == (45000, 5000, 10000)
    assert torch.bincount(d.y_test).tolist() == [1000] * 10
    # CIFAR-10's well-known channel statistics (JPEG re-encoding moves them by < 0.01)
    torch.testing.assert_close(d.mean, torch.tensor([0.4914, 0.4822, 0.4465]), atol=0.01, rtol=0)
    torch.testing.assert_close(d.std, torch.tensor([0.2470, 0.2435, 0.2616]), atol=0.01, rtol=0)
