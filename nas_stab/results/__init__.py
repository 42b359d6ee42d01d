"""Results: the learning-rate transfer leaderboard of run directories (docs/leaderboard.md), its formats and plots,
and `nas-stab status`. The run directory itself is `nas_stab.store`; the views kept beside its records
(TensorBoard, MLflow, W&B) are `nas_stab.trackers`.

Public API (loaded on first use, so ``import nas_stab.results.status`` stays free of matplotlib):

- `analyze(trials, ...)` -> `Analysis` (``rows``: the ranked leaderboard,
  ``cells``: per row label x size x lr);
- `build_leaderboard(run_dirs, formats, out_dir)` -> ``{kind: path}``;
- `leaderboard_markdown(run_dir)` -> Markdown text;
- `load_analysis(run_dirs)` -> ``(analysis, provenance, runs)``.
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Analysis": "nas_stab.analysis.table",
    "Settings": "nas_stab.analysis.table",
    "analyze": "nas_stab.analysis.table",
    "build_leaderboard": "nas_stab.results.leaderboard",
    "leaderboard_markdown": "nas_stab.results.leaderboard",
    "load_analysis": "nas_stab.results.leaderboard",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'nas_stab.results' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
