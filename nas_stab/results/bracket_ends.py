"""Why each bracket sweep ended (bracketed, at a divergence wall, at an lr limit, unfinished), replayed from
a run directory's records as the search decided it (`search.bracket.BracketSource.report`), for the
leaderboard's bracket column and `nas-stab status`."""
from __future__ import annotations

import math

import pandas as pd

from nas_stab.analysis.values import fmt_value
from nas_stab.config.mode import search_mode
from nas_stab.config.schema import Spec
from nas_stab.results.reader import Run
from nas_stab.search.plan import base_lookup
from nas_stab.search.sources.bracket import BracketSource
from nas_stab.search.sources.transfer import architecture, inner_sweeps, outer_dims

# how a bracket sweep ended (nas_stab.search.sources.bracket.SweepEnd.end) as the table says it
BRACKET_END_TEXT = {"running": "unfinished", "bracketed": "bracketed", "divergence wall": "divergence wall",
                    "limit": "limit", "no lr trains": "no lr trains"}


def with_bracket_ends(run: Run, trials: pd.DataFrame, lr_key: str) -> pd.DataFrame:
    """`trials` with the column ``bracket_end``: for a run searched with ``search.sampler: bracket``,
    or a transfer search with ``search.transfer.inner: bracket`` (each outer trial's sweeps, one per
    size), tabled by the learning rate it bracketed, how each run's sweep ended: ``bracketed``,
    ``divergence wall``, ``limit``, ``no lr trains``, or ``unfinished`` (the search was stopped
    before the sweep ended). The ends are replayed from the records, as the search decided them
    (`BracketSource.report`); nothing else is read, so a run directory made before the marks were
    shown gets them too. Other runs: `trials` unchanged."""
    spec = run.spec
    if spec.leaderboard.lr != lr_key:
        return trials
    records = trials.to_dict("records")
    mode = search_mode(spec)
    if mode.kind == "bracket":
        ends = _replayed_ends(BracketSource(spec), records, lr_key)
    elif mode.inner_bracket and "outer_trial" in trials.columns:
        ends = [""] * len(records)
        outer = pd.to_numeric(trials["outer_trial"], errors="coerce").tolist()
        by_outer: dict[int, list[int]] = {}
        for i, n in enumerate(outer):
            if n == n:  # (not NaN)
                by_outer.setdefault(int(n), []).append(i)
        for n, idx in by_outer.items():
            mine = [records[i] for i in idx]
            # the outer trial's architecture as its runs recorded it; the replay only needs it to tell its
            # sweeps apart (one per size) and to key their runs consistently
            src = BracketSource(spec, sweeps=inner_sweeps(spec, _architecture(spec, mine[0], lr_key)), outer=n)
            for i, e in zip(idx, _replayed_ends(src, mine, lr_key)):
                ends[i] = e
    else:
        return trials
    out = trials.copy()
    out["bracket_end"] = ends
    return out


def _architecture(spec: Spec, record: dict, lr_key: str) -> dict:
    """A transfer search's outer trial as one of its runs recorded it: the searched keys other than the
    lr and the size that are active (as the search decided it: from these values and the base spec)."""
    return architecture(outer_dims(spec, lr_key), base_lookup(spec), lambda d: record.get(d.key))


def _replayed_ends(src, records: list[dict], lr_key: str) -> list[str]:
    """Per record, how its sweep of `src` (a BracketSource) ended, as the table says it ("" when the
    record is in none of its sweeps). `records` (trials.csv rows) get a "key" of src's."""
    # The records' keys as this spec computes them. A key hashes the resolved configuration, and neither
    # the stored spec (1.0 read back as 1) nor trials.csv (learning rates to 6 digits) reproduce the
    # search's exactly; so each record is matched to its sweep by its values, to the sweep's learning
    # rates (start, then each round the replay reaches) within 1e-4 octave, and to its seed.
    keysets: dict[tuple, dict[tuple, int]] = {}
    for i, (rest, _) in enumerate(src.sweeps):
        keysets.setdefault(tuple(sorted(rest)), {})[tuple(fmt_value(rest[k]) for k in sorted(rest))] = i
    where: list[tuple[int, float] | None] = []  # per record: (sweep, log2 lr)
    for r in records:
        lr = pd.to_numeric(r.get(lr_key), errors="coerce")
        hit = None
        if lr == lr and lr > 0:
            for names, sweeps in keysets.items():
                sweep = sweeps.get(tuple(fmt_value(r.get(k)) for k in names))
                if sweep is not None:
                    hit = (sweep, math.log2(float(lr)))
                    break
        where.append(hit)
    known: dict[int, set[float]] = {i: set(lrs) for i, (_, lrs) in enumerate(src.sweeps)}
    keys: list[str | None] = [None] * len(records)
    for _ in range(10_000):  # one pass per round of the longest sweep
        for n, (r, w) in enumerate(zip(records, where)):
            if w is None or keys[n] is not None:
                continue
            exact = next((x for x in known[w[0]] if abs(math.log2(x) - w[1]) < 1e-4), None)
            if exact is not None:
                keys[n] = next((j.key for j in src.all_jobs(w[0], exact, 0) if str(j.seed) == str(r.get("seed"))), None)
            r["key"] = keys[n] if keys[n] is not None else f"unmatched-{n}"
        ends = src.report(records)
        grew = False
        for i, e in enumerate(ends):
            grew |= not set(e.lrs) <= known[i]
            known[i] |= set(e.lrs)
        if not grew:
            break
    by_key: dict[str, str] = {}
    for i, end in enumerate(ends):
        for k, lr in enumerate(end.lrs):
            for job in src.all_jobs(i, lr, k):
                by_key[job.key] = BRACKET_END_TEXT.get(end.end, end.end)
    return [by_key.get(k, "") if k is not None else "" for k in keys]
