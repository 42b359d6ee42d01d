"""Every built-in dataset's registry entry (`DATASETS`, keyed by the YAML `task.dataset.name`): where its loader
lives, the task it serves, what `nas-stab list` says of it, its class count, and the check of its options.

The loaders (torch, NumPy) are imported the first time a run loads the data (`Registry.declare`), so validating
an experiment reads these entries and nothing else. A plugin dataset declares itself the same way.
"""
from __future__ import annotations

from nas_stab.config.schema import Spec
from nas_stab.data.base import DATASETS


def _check_text_pairs(spec: Spec) -> tuple[tuple, str] | None:
    d = spec.task.dataset
    for a, b in (("train_src", "train_tgt"), ("val_src", "val_tgt"), ("test_src", "test_tgt")):
        if (getattr(d, a) is None) != (getattr(d, b) is None):
            missing = a if getattr(d, a) is None else b
            return ("task", "dataset", missing), f"text_pairs needs both {a} and {b}"
    if d.train_src is None:
        return ("task", "dataset", "train_src"), "text_pairs needs train_src and train_tgt (paths of aligned files)"
    return None


# classes: the class count (chance level, the no-learning loss); "option" when `task.dataset.classes` sets it,
# absent when only the data says (imagefolder: its class directories)
DATASETS.declare("digits", "nas_stab.data.tabular:load_digits", task="classification", classes=10,
                 doc="scikit-learn's bundled 8x8 digits (1,797 images)")
DATASETS.declare("synthetic", "nas_stab.data.tabular:load_synthetic", task="classification", classes="option",
                 doc="generated learnable classes: prototypes plus noise")
DATASETS.declare("mnist1d", "nas_stab.data.tabular:load_mnist1d", task="classification", classes=10,
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
DATASETS.declare("multi30k", "nas_stab.data.text:load_multi30k", task="translation",
                 doc="Multi30k: {train,val,test_2016_flickr}.{src,tgt}[.gz] in root (or root/multi30k)")
DATASETS.declare("text_pairs", "nas_stab.data.text:load_text_pairs", task="translation", check=_check_text_pairs,
                 doc="explicit aligned files train_src/train_tgt (val_*, test_* optional; val is carved from train when absent)")
DATASETS.declare("translation/synthetic", "nas_stab.data.text:load_synthetic_translation", task="translation",
                 doc="`name: synthetic` with task.kind translation: generated from a small grammar with word-order changes "
                     "(size pairs; offline)")


def dataset_classes(spec: Spec) -> int | None:
    """The class count of a classification run's dataset, from its registry entry (None when unknown: imagefolder,
    translation, a dataset not registered)."""
    if spec.task.kind != "classification" or spec.task.dataset.name not in DATASETS:
        return None
    classes = DATASETS.entry(spec.task.dataset.name).info.get("classes")
    return spec.task.dataset.classes if classes == "option" else classes
