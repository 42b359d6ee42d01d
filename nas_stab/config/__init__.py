"""Experiment files: YAML -> a validated, frozen `Spec` (docs/experiment-file.md).

    >>> from nas_stab.config import loads_spec
    >>> spec = loads_spec("name: demo\\ntask: {dataset: {name: digits}}\\nmodel: {arch: mlp}")
    >>> spec.model.arch, spec.train.lr
    ('mlp', 0.1)

Where things live: `schema.py` (every key, its type, default and range),
`load.py` (the loader), `keys.py` (dotted keys), `resolve.py` (a searched
point made concrete), `rules.py` (the rules of one configuration),
`rules_spec.py` (of the whole experiment; with `rules_space.py` and
`rules_leaderboard.py`), `yamlio.py` (safe YAML with line numbers), `compose.py` (`extends:`),
`knobs.py` (the papers' scale formulas), `advice.py` (warnings),
`json_schema.py` / `reference.py` / `display.py` (generated documents).
"""
from nas_stab.config.load import (
    SEARCHABLE,
    Spec,
    check_key,
    config_key,
    config_keys,
    from_data,
    get_key,
    load_run_spec,
    load_spec,
    loads_spec,
    resolve,
    spec_hash,
    to_plain,
)

__all__ = [
    "Spec", "SEARCHABLE", "load_spec", "loads_spec", "load_run_spec", "from_data", "get_key", "check_key",
    "resolve", "spec_hash", "config_key", "config_keys", "to_plain",
]
