"""Every built-in dataset's registry entry (`DATASETS`, keyed by the YAML `task.dataset.name`): where its loader
lives, the task it serves, what `nas-stab list` says of it, its class count, its own options (a small typed class:
the keys of `task.dataset` beyond the ones every dataset takes, `schema.DatasetConfig`) and their check.

The loaders (torch, NumPy) are imported the first time a run loads the data (`Registry.declare`), so validating
an experiment reads these entries and nothing else. A plugin dataset declares itself the same way.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from nas_stab.config.schema import Spec, option
from nas_stab.data.base import DATASETS


@dataclass(frozen=True)
class SyntheticOptions:
    classes: int = option(10, "number of classes", ge=2, le=10_000)
    shape: tuple[int, ...] = option((1, 8, 8), "input shape (C, H, W) or (D,)")
    size: int = option(2000, "number of samples", ge=10, le=10_000_000)
    noise: float = option(0.5, "noise level: the standard deviation of the Gaussian noise around each class prototype", ge=0)


@dataclass(frozen=True)
class Mnist1dOptions:
    size: int = option(2000, "number of samples (the paper's data set is 5000, 4000 train / 1000 test); generating takes about "
                             "0.3 ms a sample the first time (then cached): at most 10^6, about 5 min", ge=10, le=1_000_000)


@dataclass(frozen=True)
class TranslationOptions:
    src: str = option("de", "source language suffix")
    tgt: str = option("en", "target language suffix")
    vocab_size: int = option(8000, "subword vocabulary size", ge=16, le=1_000_000)
    max_len: int = option(64, "longest sentence kept, in subword tokens", ge=4, le=4096)
    tokenizer: Literal["bpe", "unigram"] = option("bpe", "sentencepiece model type (joint, trained on the training split)")


@dataclass(frozen=True)
class TextPairsOptions(TranslationOptions):
    train_src: str | None = option(None, "path of the training source file")
    train_tgt: str | None = option(None, "path of the training target file")
    val_src: str | None = option(None, "validation source")
    val_tgt: str | None = option(None, "validation target")
    test_src: str | None = option(None, "test source")
    test_tgt: str | None = option(None, "test target")


@dataclass(frozen=True)
class SyntheticTranslationOptions(TranslationOptions):
    size: int = option(2000, "number of sentence pairs", ge=10, le=10_000_000)


def _check_synthetic(spec: Spec) -> tuple[tuple, str] | None:
    shape = spec.task.dataset.options.shape
    if len(shape) not in (1, 3) or any(v < 1 for v in shape) or math.prod(shape) > 10**7:
        return ("task", "dataset", "shape"), f"must be (C, H, W) or (D,) of positive sizes, at most 10^7 values; got {list(shape)}"
    return None


def _check_text_pairs(spec: Spec) -> tuple[tuple, str] | None:
    d = spec.task.dataset.options
    for a, b in (("train_src", "train_tgt"), ("val_src", "val_tgt"), ("test_src", "test_tgt")):
        if (getattr(d, a) is None) != (getattr(d, b) is None):
            missing = a if getattr(d, a) is None else b
            return ("task", "dataset", missing), f"text_pairs needs both {a} and {b}"
    if d.train_src is None:
        return ("task", "dataset", "train_src"), "text_pairs needs train_src and train_tgt (paths of aligned files)"
    return None


# classes: the class count (chance level, the no-learning loss); "option" when the dataset's own option `classes`
# sets it, absent when only the data says (imagefolder: its class directories). options: its own options' class
DATASETS.declare("digits", "nas_stab.data.tabular:load_digits", task="classification", classes=10,
                 doc="scikit-learn's bundled 8x8 digits (1,797 images)")
DATASETS.declare("synthetic", "nas_stab.data.tabular:load_synthetic", task="classification", classes="option",
                 options=SyntheticOptions, check=_check_synthetic,
                 doc="generated learnable classes: prototypes plus noise")
DATASETS.declare("mnist1d", "nas_stab.data.tabular:load_mnist1d", task="classification", classes=10,
                 options=Mnist1dOptions,
                 doc="MNIST-1D (Greydanus and Kobak, ICML 2024): 1-D digit signals of 40 samples, generated offline "
                     "by the mnist1d package; `size` examples, 80% train (val carved from it), 20% test")
DATASETS.declare("mnist", "nas_stab.data.tabular:load_mnist", task="classification", classes=10,
                 doc="MNIST from IDX files in root (plain, mnist/ or MNIST/raw/)")
DATASETS.declare("cifar10", "nas_stab.data.vision:load_cifar10", task="classification", classes=10,
                 doc="CIFAR-10 in torchvision's layout (cifar-10-batches-py) in root")
DATASETS.declare("cifar100", "nas_stab.data.vision:load_cifar100", task="classification", classes=100,
                 doc="CIFAR-100 in torchvision's layout (cifar-100-python) in root")
DATASETS.declare("imagefolder", "nas_stab.data.vision:load_imagefolder", task="classification",
                 doc="images in root/train/<class>/, root/test/<class>/ (a directory or a .tar.gz), decoded once and cached")
DATASETS.declare("multi30k", "nas_stab.data.text:load_multi30k", task="translation", options=TranslationOptions,
                 doc="Multi30k: {train,val,test_2016_flickr}.{src,tgt}[.gz] in root (or root/multi30k)")
DATASETS.declare("text_pairs", "nas_stab.data.text:load_text_pairs", task="translation", check=_check_text_pairs,
                 options=TextPairsOptions,
                 doc="explicit aligned files train_src/train_tgt (val_*, test_* optional; val is carved from train when absent)")
DATASETS.declare("translation/synthetic", "nas_stab.data.text:load_synthetic_translation", task="translation",
                 options=SyntheticTranslationOptions,
                 doc="`name: synthetic` with task.kind translation: generated from a small grammar with word-order changes "
                     "(size pairs; offline)")


def dataset_classes(spec: Spec) -> int | None:
    """The class count of a classification run's dataset, from its registry entry (None when unknown: imagefolder,
    translation, a dataset not registered)."""
    if spec.task.kind != "classification" or spec.task.dataset.name not in DATASETS:
        return None
    classes = DATASETS.entry(spec.task.dataset.name).info.get("classes")
    return spec.task.dataset.options.classes if classes == "option" else classes
