"""The plugin's registry entries: what nas_stab reads when it validates an experiment (light: no torch)."""
from dataclasses import dataclass

from nas_stab.config.schema import option
from nas_stab.data.base import DATASETS


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
