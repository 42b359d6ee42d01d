"""The analysis settings of a run: its ``leaderboard:`` section with the schema's defaults, and the class
count of its dataset (chance level and the no-learning loss). The search (a bracket's sweeps, adaptive
seeds, a transfer search's objectives) and the leaderboard read them from here, so both judge a table
with the same settings."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nas_stab.analysis.table import TableSettings
from nas_stab.config.mode import search_mode
from nas_stab.config.schema import LeaderboardConfig, Spec
from nas_stab.data.catalog import dataset_classes
from nas_stab.errors import SpecError

_DEFAULTS = LeaderboardConfig()


def settings(spec: Spec, overrides: Mapping[str, Any] | None = None) -> TableSettings:
    """The analysis settings of a run: its typed ``leaderboard:`` section (defaults from the schema) and its
    dataset's class count, then `overrides` (lr, transfer, compare, metric, reference, tolerance:
    ``tolerance_octaves``, report)."""
    lb = spec.leaderboard
    over = {("tolerance_octaves" if k == "tolerance" else k): v for k, v in (overrides or {}).items() if v is not None}

    def pick(key: str) -> Any:
        return over[key] if key in over else getattr(lb, key)

    compare = pick("compare") or ()
    if not compare and search_mode(spec).transfer:  # a transfer search: one row per architecture
        compare = tuple(k for k in spec.space.keys if k not in (pick("lr") or _DEFAULTS.lr, pick("transfer")))
    if isinstance(compare, str):
        compare = tuple(c.strip() for c in compare.split(",") if c.strip())
    try:
        tolerance = float(pick("tolerance_octaves"))
    except (TypeError, ValueError):
        raise SpecError(f"must be a number of octaves, got {pick('tolerance_octaves')!r}", key="leaderboard.tolerance_octaves") from None
    if not tolerance > 0:
        raise SpecError(f"must be > 0 octaves, got {tolerance!r}", key="leaderboard.tolerance_octaves")
    return TableSettings(
        lr=pick("lr") or _DEFAULTS.lr,
        transfer=pick("transfer") or None,
        compare=tuple(str(c) for c in compare),
        metric=str(pick("metric") or spec.search.objective),
        reference=pick("reference"),
        tolerance=tolerance,
        criterion=str(pick("criterion") or "regret"),
        epsilon=pick("epsilon"),
        report=pick("report"),
        classes=dataset_classes(spec),
    )
