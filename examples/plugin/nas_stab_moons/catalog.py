"""The plugin's registry entries: what nas_stab reads when it validates an experiment (light: no torch)."""
from nas_stab.data.base import DATASETS

DATASETS.declare(
    "moons", "nas_stab_moons.data:load_moons",
    task="classification",
    classes=2,  # the chance level (1/2) and the no-learning loss (ln 2) the leaderboard judges against
    doc="scikit-learn's two moons: 2-D points on two interleaving half circles (task.dataset.size points, "
        "task.dataset.noise Gaussian noise), 2 classes",
)
