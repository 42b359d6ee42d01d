"""Where the jobs of a search come from when Optuna's sampler does not ask: the job sources.

A `search.sampler` name registered in `JOB_SOURCES` is a job source (`protocols.JobSource`):
the driver (`search/driver.py`) asks it for jobs whenever a backend has a free slot. `grid`
(every point x seed, at once) is here; `bracket` (each learning-rate optimum found, bracketed
and resolved, decided as results come in) is in `search/bracket.py`. A new source is a class
taking `(spec, limit)` with a `pending` method, registered under the sampler name it answers to.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence

from nas_stab.config.schema import Spec
from nas_stab.registry import Registry
from nas_stab.search import plan
from nas_stab.search.plan import Job
from nas_stab.search.protocols import JobSource

__all__ = ["JOB_SOURCES", "GridSource", "JobSource"]

JOB_SOURCES = Registry("job source")  # search.sampler names whose jobs come from a job source


@JOB_SOURCES.register("grid")
class GridSource(JobSource):
    """Every (grid point, seed) of the space, in grid order, all pending at once (`search.sampler: grid`).

    `limit` keeps the first `limit` jobs (`nas-stab run --trials`).
    """

    def __init__(self, spec: Spec, limit: int | None = None):
        self.jobs = plan.grid_jobs(spec)[:limit] if limit is not None else plan.grid_jobs(spec)
        self.total = len(self.jobs)
        self._todo = self.jobs

    def pending(self, records: Sequence[dict], running: Collection[str]) -> list[Job] | None:
        done = {r["key"] for r in records}
        self._todo = [j for j in self._todo if j.key not in done]
        return [j for j in self._todo if j.key not in running] if self._todo else None


from nas_stab.search import bracket as _bracket  # noqa: E402,F401  (registers "bracket")
