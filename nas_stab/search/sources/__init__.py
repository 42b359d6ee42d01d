"""Where the jobs of a search come from when Optuna's sampler does not ask: the job sources.

A `search.sampler` name registered in `JOB_SOURCES` is a job source (`protocols.JobSource`): the driver
(`search/driver.py`) asks it for jobs whenever a backend has a free slot.

- `grid.py`: every point x seed, at once (`search.sampler: grid`);
- `bracket.py`: each learning-rate optimum found, bracketed and resolved, decided as results come in
  (`search.sampler: bracket`);
- `adaptive.py`: more seeds where a verdict needs them (`search.adaptive_seeds`), around another source;
- `transfer.py` (with `transfer_objectives.py`): a search over configurations whose objective is a verdict
  (`search.transfer`).

A new source is a class taking `(spec, limit)` with a `pending` method, registered in `registry.JOB_SOURCES`
under the sampler name it answers to, in a module imported here.
"""
from __future__ import annotations

from nas_stab.search.sources import (  # importing a source module registers it
    adaptive,  # noqa: F401
    bracket,  # noqa: F401
    grid,  # noqa: F401
    transfer,  # noqa: F401
)
from nas_stab.search.sources.grid import GridSource
from nas_stab.search.sources.registry import JOB_SOURCES

__all__ = ["JOB_SOURCES", "GridSource"]
