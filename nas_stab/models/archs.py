"""The architecture registry, `ARCHS`, keyed by the YAML `model.arch`: a leaf every model module registers into
(`nas_stab.models` imports those modules, so they import this, never the package)."""
from __future__ import annotations

from nas_stab.registry import Registry

ARCHS = Registry("arch")
