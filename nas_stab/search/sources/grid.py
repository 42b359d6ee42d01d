"""`search.sampler: grid`: every point x seed of the space, at once."""
from __future__ import annotations

from collections.abc import Collection, Sequence

from nas_stab.config.schema import Spec
from nas_stab.search import plan
from nas_stab.search.plan import Job
from nas_stab.search.protocols import JobSource
from nas_stab.search.sources.registry import JOB_SOURCES

__all__ = ["GridSource"]


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
