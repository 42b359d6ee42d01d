"""Progress of a search, as the driver sees it.

On a terminal: a live display (rich) that keeps one status line (runs done,
pruned, diverged, failed, best so far, elapsed and time left) and a table of
the configurations training now with their current step, and prints one line
per finished run above it. Anywhere else (CI, a log file, a pipe): the same
per-run lines, plain, one each, nothing redrawn.

The driver calls `started` when it hands a run to a worker, `step` when a run
reports (each evaluation), `update` when its record is written, and `note` for
anything the user must see (a resume, trials closed after an interruption).
"""
from __future__ import annotations

import math
import sys
import time
from typing import TYPE_CHECKING, Any, TextIO

from nas_stab import metrics
from nas_stab.textfmt import duration

if TYPE_CHECKING:
    from rich.console import Group

    from nas_stab.config.schema import Spec


def describe(params: dict[str, Any], seed: Any = None) -> str:
    """`branches=4 aggregation=stam lr=0.01 seed 0`: a configuration in one short line."""
    parts = [f"{k.split('.')[-1]}={_short(v)}" for k, v in params.items()]
    if seed is not None and seed != "":
        parts.append(f"seed {seed}")
    return " ".join(parts) or "base configuration"


def _short(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    try:
        f = float(v)
        if isinstance(v, str) and "." in v:
            return f"{f:.4g}"
    except (TypeError, ValueError):
        pass
    return str(v)


class Progress:
    """Counts by status, best so far, time left; live on a terminal, plain lines otherwise."""

    def __init__(self, spec: Spec, total: int | None, done_before: int = 0, stream: TextIO | None = None,
                 live: bool | None = None):
        self.spec = spec
        self.total = total
        # a search whose runs are decided as results come in (bracket, adaptive seeds): its expected runs in
        # all, shown as `~N` (`>=N`: a lower bound), with the time left at the rate so far; None: unknown
        self.expected: int | None = None
        self.expected_mark = "~"
        self.expected_why = ""
        self.counts = {s: 0 for s in metrics.STATUSES}
        self.best: tuple[float, str] | None = None
        self.t0 = time.perf_counter()
        self.done_now = 0
        self.done_before = done_before
        self.stream = stream or sys.stderr
        self.maximize = (metrics.direction(spec.search.objective) == "maximize" if spec.search.direction == "auto"
                         else spec.search.direction == "maximize")
        self.searched = list(spec.space.keys) if spec.space else []
        self.running: dict[str, dict] = {}  # run id -> {label, step, total, t0}
        if live is None:
            live = bool(getattr(self.stream, "isatty", lambda: False)())
        self._live = None
        if live:
            from rich.console import Console  # deferred: loads rich only when this runs
            from rich.live import Live  # deferred: loads rich only when this runs

            self._console = Console(file=self.stream)
            self._live = Live(self._render(), console=self._console, refresh_per_second=4, transient=True)
            self._live.start()

    # -- what the driver tells ------------------------------------------------------
    def add_existing(self, row: dict) -> None:
        self.counts[row["status"]] = self.counts.get(row["status"], 0) + 1
        self._best(row)

    def expect(self, n: int | None, mark: str = "~", why: str = "") -> None:
        """The expected runs in all of a search that decides its runs as it goes (`total` unknown): `mark`
        "~" (an estimate) or ">=" (at least), `why` said once in the line when the time left is a guess."""
        self.expected, self.expected_mark, self.expected_why = n, mark, why
        self._refresh()

    def note(self, message: str) -> None:
        """A message for the user (resume, interruption): on the terminal, above the live display."""
        self._print(message)

    def started(self, run_id: str, params: dict, seed: Any, total_steps: int | None) -> None:
        total = total_steps if total_steps and total_steps < 10**7 else None  # 10**7: an epoch budget, steps unknown
        self.running[run_id] = {"label": describe(params, seed), "step": 0, "total": total, "t0": time.perf_counter()}
        self._refresh()

    def step(self, run_id: str, step: int) -> None:
        r = self.running.get(run_id)
        if r is not None:
            r["step"] = step
            self._refresh()

    def update(self, row: dict) -> str:
        """A run's record is written: count it and print its line (returned for the log)."""
        self.running.pop(str(row.get("run_id")), None)
        self.done_now += 1
        self.counts[row["status"]] = self.counts.get(row["status"], 0) + 1
        self._best(row)
        label = describe({k: row.get(k) for k in self.searched}, row.get("seed"))
        obj = row.get("objective")
        value = f" {self.spec.search.objective} {_short(obj)}" if obj not in (None, "") else ""
        wall = row.get("wall_s")
        took = f" in {duration(float(wall), clock=True)}" if wall not in (None, "") and _finite(wall) else ""
        head = f"{row['status']}: {label}{value}{took}"
        line = f"{head} | {self.summary()}"
        self._print(head if self._live is not None else line)  # live: the counts are on the status line below
        return line

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    # -- rendering ---------------------------------------------------------------------
    def summary(self) -> str:
        done = sum(self.counts.values())
        elapsed = time.perf_counter() - self.t0
        left = ""
        shown: object = self.total or "?"
        if self.total and self.done_now:
            rate = elapsed / self.done_now
            left = f", ~{duration(rate * max(0, self.total - done), clock=True)} left"
        elif not self.total and self.expected:
            n = max(self.expected, done + len(self.running))  # never fewer than what is done or training
            shown = f"{self.expected_mark}{n}"
            if self.done_now:
                rate = elapsed / self.done_now
                more = " or more" if self.expected_mark == ">=" else ""
                left = f", ~{duration(rate * max(0, n - done), clock=True)}{more} left"
                if self.expected_why:
                    left += f" ({self.expected_why})"
        best = (f"best single run {self.spec.search.objective} {self.best[0]:.4g} ({self.best[1]})" if self.best
                else "best single run: none yet")  # one seed; the leaderboard ranks seed means
        c = self.counts
        return (f"[{done}/{shown}] complete {c['complete']}  pruned {c['pruned']}  diverged {c['diverged']}  "
                f"failed {c['failed']} | {best} | {duration(elapsed, clock=True)} elapsed{left}")

    def _render(self) -> Group:
        from rich.console import Group  # deferred: loads rich only when this runs
        from rich.table import Table  # deferred: loads rich only when this runs
        from rich.text import Text  # deferred: loads rich only when this runs

        table = Table(box=None, show_header=bool(self.running), pad_edge=False)
        table.add_column("training now", overflow="ellipsis", no_wrap=True)
        table.add_column("step", justify="right")
        table.add_column("", justify="right")
        now = time.perf_counter()
        for r in self.running.values():
            total = r["total"]
            frac = f"{r['step']}/{total}" if total else str(r["step"])
            table.add_row(r["label"], frac, duration(now - r["t0"], clock=True))
        return Group(Text(self.summary(), style="bold"), table)

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._render())

    def _print(self, line: str) -> None:
        if self._live is not None:
            self._console.print(line, markup=False, highlight=False)
            self._refresh()
        else:
            print(line, file=self.stream, flush=True)

    def _best(self, row: dict) -> None:
        try:
            v = float(row.get("objective", ""))
        except (TypeError, ValueError):
            return
        if row.get("status") != "complete" or not math.isfinite(v):
            return
        if self.best is None or (v > self.best[0] if self.maximize else v < self.best[0]):
            self.best = (v, f"trial {row['trial']} seed {row['seed']}")


def _finite(v: Any) -> bool:
    try:
        return math.isfinite(float(v))
    except (TypeError, ValueError):
        return False
