"""The plugin's registry entries: what nas_stab reads when it validates an experiment (light: no torch)."""
from dataclasses import dataclass
from typing import Literal

from nas_stab.config.schema import option
from nas_stab.data.base import DATASETS
from nas_stab.models.archs import ARCHS


@dataclass(frozen=True)
class MoonsOptions:
    """The dataset's own options: the keys of `task.dataset` beyond the ones every dataset takes (name, root,
    train, val, test, split_seed, ...). Types, defaults, bounds and docs are checked and shown like nas_stab's own."""

    size: int = option(1000, "number of points (both moons together)", ge=10, le=10_000_000)
    noise: float = option(0.1, "standard deviation of the Gaussian noise added to each point", ge=0, le=10)


DATASETS.declare(
    "moons", "nas_stab_moons.data:load_moons",
    task="classification",
    classes=2,  # the chance level (1/2) and the no-learning loss (ln 2) the leaderboard judges against
    options=MoonsOptions,
    doc="scikit-learn's two moons: 2-D points on two interleaving half circles, 2 classes",
)


@dataclass(frozen=True)
class MoonsMLPOptions:
    """The model's own options: keys of `model:` beyond nas_stab's (arch, width, depth, parametrization, ...)."""

    activation: Literal["relu", "tanh"] = option("relu", "the hidden layers' nonlinearity")


ARCHS.declare(
    "moons_mlp", "nas_stab_moons.model:build",
    task="classification",
    options=MoonsMLPOptions,
    # its parametrization roles: muP applies (the shapes against the model at base_width say which dims grow; the
    # weight of `head` is the readout), its width is model.width
    parametrizations=("mup",), readout="head", width_key="width",
    doc="the moons plugin's MLP: model.depth hidden layers of model.width, SP or muP",
)
