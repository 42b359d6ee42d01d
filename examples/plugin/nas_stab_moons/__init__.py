"""An example nas_stab plugin: scikit-learn's two interleaving half circles ("two moons") as a classification
dataset, `task.dataset.name: moons` (docs/plugins.md)."""
