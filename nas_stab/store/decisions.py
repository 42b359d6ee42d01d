"""What a search decided, recorded as it decides it: ``decisions.jsonl`` in the run directory.

A job source that decides as results come in (`search.sampler: bracket`, `search.transfer` with
``inner: bracket``, adaptive seeds) says *why* its runs are what they are: where each learning-rate
sweep stands and how it ended, which runs an adaptive stage planned, which outer trials were scored.
The driver appends those decisions here (one JSON object per line, fsynced, after the trial's
records), so the leaderboard and `nas-stab status` read them instead of replaying the search; the
file is also what a reader of a published run queries to learn why a sweep stopped where it did.

Events (every one has ``event`` and ``time``, UTC ISO 8601):

- ``start``: a driver started. ``source`` (``bracket``, ``transfer``, ``adaptive``, ``grid``,
  ``sampler``), ``records`` (trials.csv rows already there), ``replayed`` (true: written by
  `search.replay.upgrade` from the records of a run directory made before decisions were recorded),
  ``complete`` (true: the source's decisions are a function of every record, so its first update covers
  the records made before it), and where known ``sweeps`` (per outer trial for a transfer search),
  ``outer_planned``.
- ``sweep``: a learning-rate sweep's state changed. ``outer`` (the outer trial, or null), ``sweep``
  (its index), ``params`` (its values of the keys other than the lr), ``end`` (``running``,
  ``bracketed``, ``divergence wall``, ``limit``, ``no lr trains``), ``lrs`` (tried, ascending),
  ``best_lr``, ``rounds``, and once it ended ``runs`` (the keys of its recorded runs).
- ``outer``: a transfer search's outer trial was scored: ``outer``, ``status`` (complete | failed).
- ``stage``: adaptive seeds planned a stage: ``stage`` (0: the inner search's runs), ``runs`` (the keys
  of every run of the stage); ``runs: []`` says the search is over, and then ``notes`` (row label -> why
  that row, still undecided, got no more seeds: "inconclusive at 6 seeds, the most allowed", "left
  inconclusive: its worst_regret interval ... would still straddle ... at 6").

The latest event of a sweep (or of the stage) is its state. `read_decisions` folds the file into
`Decisions`; `DecisionLog` appends what changed. A torn last line (a kill while writing) is ignored.
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas_stab.config.mode import search_mode
from nas_stab.safefiles import check_regular

if TYPE_CHECKING:
    from nas_stab.config.schema import Spec

DECISIONS = "decisions.jsonl"
FORMAT = 1  # the `format` of a start event; readers refuse a newer one

# how a sweep ended (BracketSource's SweepEnd.end) as the leaderboard's bracket column says it
END_TEXT = {"running": "unfinished", "bracketed": "bracketed", "divergence wall": "divergence wall",
            "limit": "limit", "no lr trains": "no lr trains"}


def needs_decisions(spec: Spec) -> bool:
    """Whether the leaderboard or `nas-stab status` of this experiment reads its decisions: a bracket search,
    a transfer search with inner: bracket, adaptive seeds."""
    mode = search_mode(spec)
    return mode.kind == "bracket" or mode.inner_bracket or mode.adaptive


def _plain(v: Any) -> Any:
    """`v` as JSON holds it (tuples as lists, non-finite floats as null)."""
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if hasattr(v, "item") and not isinstance(v, (str, bytes)):  # a NumPy scalar
        return _plain(v.item())
    return v


def sweep_event(outer: int | None, sweep: int, params: Mapping[str, Any], end: str, lrs: Iterable[float],
                best_lr: float | None, rounds: int, runs: Iterable[str] | None) -> dict[str, Any]:
    """A ``sweep`` event (`runs`: the keys of its recorded runs, once it ended; None while it runs)."""
    ev: dict[str, Any] = {"event": "sweep", "outer": outer, "sweep": sweep, "params": _plain(dict(params)), "end": end,
                          "lrs": _plain(list(lrs)), "best_lr": _plain(best_lr), "rounds": rounds}
    if runs is not None:
        ev["runs"] = sorted(runs)
    return ev


def _signature(ev: Mapping[str, Any]) -> str:
    return json.dumps({k: v for k, v in ev.items() if k != "time"}, sort_keys=True)


def _identity(ev: Mapping[str, Any]) -> tuple[Any, ...]:
    """What an event is the state of: a sweep, an outer trial, the adaptive stage, a start."""
    kind = ev.get("event")
    if kind == "sweep":
        return ("sweep", ev.get("outer"), ev.get("sweep"))
    if kind == "outer":
        return ("outer", ev.get("outer"))
    return (kind,)


@dataclass
class Decisions:
    """A run directory's decisions, folded: the latest state of each sweep, outer trial and stage."""

    complete: bool  # every record of the run is covered (the first driver started on an empty run, or a replay)
    source: str = ""
    sweeps_per_outer: int | None = None  # the sweeps of a bracket search, or of each outer trial
    outer_planned: int | None = None
    sweeps: dict[tuple[int | None, int], dict[str, Any]] = field(default_factory=dict)
    outers: dict[int, str] = field(default_factory=dict)  # outer trial -> complete | failed
    stage: dict[str, Any] | None = None  # the latest adaptive stage

    def run_ends(self) -> dict[str, str]:
        """Per key of a run in an ended sweep: how its sweep ended (`END_TEXT`)."""
        out: dict[str, str] = {}
        for ev in self.sweeps.values():
            for k in ev.get("runs") or ():
                out[str(k)] = END_TEXT.get(ev["end"], ev["end"])
        return out

    def open_sweeps(self, outer: int | None = None) -> int | None:
        """Sweeps not ended (of `outer`'s, or of a bracket search): None when the total is unknown."""
        if self.sweeps_per_outer is None:
            return None
        ended = sum(1 for (o, _), ev in self.sweeps.items() if o == outer and ev["end"] != "running")
        return self.sweeps_per_outer - ended

    def seeds_notes(self) -> dict[str, str]:
        """Adaptive seeds, once the search is over: row label -> why that undecided row got no more seeds ({}
        while it goes on, or for a search recorded before the notes were)."""
        if self.stage is None or self.stage.get("runs"):
            return {}
        return {str(k): str(v) for k, v in (self.stage.get("notes") or {}).items()}

    def stage_todo(self, recorded: Iterable[str]) -> int | None:
        """Adaptive seeds: runs of the current stage not recorded (0: the search is over); None: no stage yet."""
        if self.stage is None:
            return None
        done = set(recorded)
        return sum(1 for k in self.stage.get("runs") or () if k not in done)


def fold(events: Iterable[Mapping[str, Any]]) -> Decisions:
    """The state the events leave (see the module docstring)."""
    d = Decisions(complete=False)
    first = True
    for ev in events:
        kind = ev.get("event")
        if kind == "start":
            if int(ev.get("format", FORMAT)) > FORMAT:
                raise ValueError(f"decisions written by a newer nas_stab (format {ev.get('format')})")
            if first:  # a source whose decisions are a function of every record covers them from its first start
                d.complete = int(ev.get("records") or 0) == 0 or bool(ev.get("replayed")) or bool(ev.get("complete"))
            d.source = str(ev.get("source") or d.source)
            d.sweeps_per_outer = ev.get("sweeps", d.sweeps_per_outer)
            d.outer_planned = ev.get("outer_planned", d.outer_planned)
            first = False
        elif kind == "sweep":
            d.sweeps[(ev.get("outer"), int(ev["sweep"]))] = dict(ev)
        elif kind == "outer":
            d.outers[int(ev["outer"])] = str(ev.get("status"))
        elif kind == "stage":
            d.stage = dict(ev)
    return d


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events of a decisions file, in order ([] when there is none); a torn last line is dropped."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1 and not text.endswith("\n"):
                break  # a kill while appending: the event is written again by the next driver
            raise ValueError(f"{path}:{i + 1}: not a JSON object") from None
    return out


def read_decisions(run_dir: str | Path) -> Decisions | None:
    """The run directory's decisions folded (None: it has no decisions file)."""
    path = Path(run_dir) / DECISIONS
    check_regular(path, "decisions.jsonl")
    if not path.is_file():
        return None
    return fold(read_events(path))


class DecisionLog:
    """Appends a search's decisions to ``decisions.jsonl``: only what changed since the file's last state."""

    def __init__(self, path: Path):
        self.path = path
        self._last: dict[tuple[Any, ...], str] = {}
        _drop_torn_end(path)
        for ev in read_events(path):
            self._last[_identity(ev)] = _signature(ev)

    @property
    def empty(self) -> bool:
        return not self._last

    def start(self, source: str, records: int, *, replayed: bool = False, **known: Any) -> None:
        ev = {"event": "start", "format": FORMAT, "source": source, "records": records, "replayed": replayed,
              **{k: v for k, v in known.items() if v is not None}}
        self._append([ev], force=True)

    def update(self, events: Iterable[Mapping[str, Any]]) -> int:
        """Append the events whose state is new; how many."""
        return self._append(events)

    def _append(self, events: Iterable[Mapping[str, Any]], force: bool = False) -> int:
        lines = []
        now = datetime.now(UTC).isoformat(timespec="seconds")
        changed: dict[tuple[Any, ...], str] = {}
        for raw in events:
            ev = _plain(dict(raw))
            sig = _signature(ev)
            ident = _identity(ev)
            if not force and changed.get(ident, self._last.get(ident)) == sig:
                continue
            changed[ident] = sig
            lines.append(json.dumps({**ev, "time": now}) + "\n")
        if not lines:
            return 0
        with open(self.path, "a", encoding="utf-8") as f:  # an error leaves `_last` as it was: the next call writes them
            f.write("".join(lines))
            f.flush()
            os.fsync(f.fileno())
        self._last.update(changed)
        return len(lines)


def _drop_torn_end(path: Path) -> None:
    """Cut a torn last line (a kill while appending: no newline at the end) so that the next append starts a line."""
    try:
        with open(path, "rb+") as f:
            data = f.read()
            if data and not data.endswith(b"\n"):
                f.truncate(data.rfind(b"\n") + 1)
    except FileNotFoundError:
        pass
