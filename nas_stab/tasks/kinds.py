"""The task registry, `TASKS`, keyed by the YAML `task.kind`: a leaf every task module registers into
(`nas_stab.tasks` imports those modules, so they import this, never the package)."""
from __future__ import annotations

from nas_stab.registry import Registry

TASKS = Registry("task")
