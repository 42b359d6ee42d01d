"""nas_stab: a declarative benchmark for stability-aware neural architecture search.

Write an experiment in YAML (see `spaces/quickstart.yaml`), then
``nas-stab run SPEC``. Importing this package is cheap: torch, Optuna and Ray
load only where they are used.
"""
__version__ = "0.1.0"
__all__ = ["__version__"]
