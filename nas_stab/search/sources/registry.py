"""The job-source registry, `JOB_SOURCES`: `search.sampler` names whose jobs come from a job source
(`protocols.JobSource`). A leaf every source module registers into (`nas_stab.search.sources` imports those
modules, so they import this, never the package)."""
from __future__ import annotations

from nas_stab.registry import Registry

JOB_SOURCES = Registry("job source")
