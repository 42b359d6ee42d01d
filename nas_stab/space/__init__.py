"""Search dimensions (docs/experiment-file.md): parsing, grid enumeration and Optuna define-by-run.

A `Space` is an ordered tuple of `Dimension`s, each keyed by a dotted path
into the base configuration. The same `Space` compiles two ways:

- `Space.grid(base)`: every combination (conditions respected, duplicates
  removed), as a list of ``{key: value}`` dicts;
- `Space.suggest(trial, base)`: an Optuna define-by-run function.

A dimension with ``when: {key: value or [values]}`` is only sampled when the
condition holds against the values chosen so far (or the base value of a key
that is not searched); otherwise the base value stands and the key is absent
from the trial's parameters.

`dimensions.py` holds `Dimension` and `Space`; `parse.py` reads the `space:` section into them.
"""
from nas_stab.space.dimensions import DISCRETE, KINDS, Dimension, GridTooLarge, Space, is_log_spaced, product_size
from nas_stab.space.parse import MAX_BOUND, MAX_GRID_COUNT, parse_space

__all__ = ["DISCRETE", "KINDS", "MAX_BOUND", "MAX_GRID_COUNT", "Dimension", "GridTooLarge", "Space", "is_log_spaced", "parse_space",
           "product_size"]
