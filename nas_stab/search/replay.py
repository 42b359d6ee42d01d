"""The decisions of a search replayed from its records, for a run directory made before searches recorded them.

A search that decides as results come in writes ``decisions.jsonl`` as it goes (`store/decisions.py`). A run
directory made before that (or a published table rebuilt from its ``trials.csv``) has none; `upgrade` replays
the job source on the records, once, and writes the file with ``replayed: true``. The replay is the job
source itself (`BracketSource`, `AdaptiveSeeds`) run on the records; the only difficulty is the keys: a key
hashes the resolved configuration, and neither the stored spec (1.0 read back as 1) nor trials.csv (learning
rates to 6 digits) reproduce the search's exactly, so each record is matched to its job by its values (the
learning rate within 1e-4 octave) and seed, round by round, and the events name the records' own keys.

    nas-stab upgrade RUN_DIR     # or any command that reads decisions (leaderboard, status, claims): it upgrades
"""
from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from nas_stab.analysis.values import fmt_value
from nas_stab.config.mode import search_mode
from nas_stab.config.schema import Spec
from nas_stab.search.plan import Job, base_lookup
from nas_stab.search.sources.adaptive import AdaptiveSeeds
from nas_stab.search.sources.bracket import BracketSource
from nas_stab.search.sources.transfer import architecture, inner_sweeps, outer_dims, study_name
from nas_stab.space import Dimension
from nas_stab.store.decisions import DECISIONS, DecisionLog, needs_decisions, read_decisions

_MAX_ROUNDS = 10_000


def upgrade(run_dir: str | Path, spec: Spec, records: Sequence[dict[str, Any]]) -> bool:
    """Write the run directory's decisions replayed from `records` (its trials.csv rows) when it has none that
    cover its records; whether it wrote them. An incomplete file (resumed across the upgrade) is replaced."""
    d = Path(run_dir)
    if not needs_decisions(spec):
        return False
    have = read_decisions(d)
    if have is not None and have.complete:
        return False
    facts, events = replayed(spec, records, d)
    path = d / DECISIONS
    tmp = path.with_name(path.name + ".replay")
    tmp.unlink(missing_ok=True)
    log = DecisionLog(tmp)
    log.start(records=len(records), replayed=True, **facts)
    log.update(events)
    tmp.replace(path)
    return True


def replayed(spec: Spec, records: Sequence[dict[str, Any]], run_dir: Path | None = None
             ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the start event's facts, the events) of the search of `spec` replayed from `records`."""
    mode = search_mode(spec)
    lr_key = spec.leaderboard.lr
    recs = list(records)  # (never changed here: each replay below works on copies of its own)
    if mode.adaptive:
        src = AdaptiveSeeds(spec)
        events = _adaptive(src, recs, lr_key)
        return src.decision_facts, events
    if mode.kind == "bracket":
        b = BracketSource(spec)
        return b.decision_facts, _bracket(b, recs, lr_key)
    if mode.inner_bracket:
        return _transfer(spec, recs, lr_key, run_dir)
    return {"source": mode.kind}, []


def _bracket(src: BracketSource, records: Sequence[dict[str, Any]], lr_key: str) -> list[dict[str, Any]]:
    """`src`'s sweep events, replayed round by round on `records` matched to its jobs; `runs` name the
    records' own keys."""
    own = [str(r.get("key")) for r in records]
    rs = [dict(r) for r in records]
    keys = _match_bracket(src, rs, lr_key)
    mine = {k: own[n] for n, k in enumerate(keys) if k is not None}
    out = []
    for e in src.decisions(rs):
        if "runs" in e:
            e["runs"] = sorted(mine[k] for k in e["runs"] if k in mine)
        out.append(e)
    return out


def _match_bracket(src: BracketSource, records: list[dict[str, Any]], lr_key: str) -> list[str | None]:
    """Each record's key among `src`'s jobs (None: in none of its sweeps); the records get it as "key"."""
    keysets: dict[tuple, dict[tuple, int]] = {}
    for i, (rest, _) in enumerate(src.sweeps):
        keysets.setdefault(tuple(sorted(rest)), {})[tuple(fmt_value(rest[k]) for k in sorted(rest))] = i
    where: list[tuple[int, float] | None] = []  # per record: (sweep, log2 lr)
    for r in records:
        lr = _log2(r.get(lr_key))
        hit = None
        if lr is not None:
            for names, sweeps in keysets.items():
                sweep = sweeps.get(tuple(fmt_value(r.get(k)) for k in names))
                if sweep is not None:
                    hit = (sweep, lr)
                    break
        where.append(hit)
    known: dict[int, set[float]] = {i: set(lrs) for i, (_, lrs) in enumerate(src.sweeps)}
    keys: list[str | None] = [None] * len(records)
    for _ in range(_MAX_ROUNDS):  # one pass per round of the longest sweep
        for n, (r, w) in enumerate(zip(records, where)):
            if w is None or keys[n] is not None:
                continue
            exact = next((x for x in known[w[0]] if abs(math.log2(x) - w[1]) < 1e-4), None)
            if exact is not None:
                keys[n] = next((j.key for j in src.all_jobs(w[0], exact, 0) if str(j.seed) == str(r.get("seed"))), None)
            r["key"] = keys[n] if keys[n] is not None else f"unmatched-{n}"
        grew = False
        for i, e in enumerate(src.report(records)):
            grew |= not set(e.lrs) <= known[i]
            known[i] |= set(e.lrs)
        if not grew:
            break
    return keys


def _adaptive(src: AdaptiveSeeds, records: Sequence[dict[str, Any]], lr_key: str) -> list[dict[str, Any]]:
    """Adaptive seeds' events replayed stage by stage: each record matched to the job of the same values and
    seed (the lr within 1e-4 octave) as the stages reach it."""
    own = [str(r.get("key")) for r in records]
    recs = [{**r, "key": f"unmatched-{i}"} for i, r in enumerate(records)]
    searched = src.spec.space.keys
    for _ in range(_MAX_ROUNDS):
        src.pending(recs, ())
        by: dict[tuple, list[tuple[float, Job]]] = {}
        for j in src._index.values():
            rest = tuple(sorted((k, fmt_value(v)) for k, v in j.params.items() if k != lr_key))
            by.setdefault((str(j.seed), rest), []).append((math.log2(float(j.params[lr_key])), j))
        grew = False
        for r in recs:
            if not str(r["key"]).startswith("unmatched-"):
                continue
            rest = tuple(sorted((k, fmt_value(r.get(k))) for k in searched if k != lr_key and k in r))
            x = _log2(r.get(lr_key))
            hit = None if x is None else next((j for xj, j in by.get((str(r.get("seed")), rest), ()) if abs(xj - x) < 1e-4), None)
            if hit is not None:
                r["key"], grew = hit.key, True
        if not grew:
            break
    mine = {str(r["key"]): own[n] for n, r in enumerate(recs)}
    out = []
    for e in src.decisions(recs):
        if e.get("runs"):
            e["runs"] = sorted(mine.get(k, k) for k in e["runs"])
        out.append(e)
    return out


def _transfer(spec: Spec, records: Sequence[dict[str, Any]], lr_key: str, run_dir: Path | None
              ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A transfer search with inner: bracket: each outer trial's sweeps (one per size) replayed on its runs, and
    the outer trials its study scored."""
    by_outer: dict[int, list[dict[str, Any]]] = {}
    for r in records:
        try:
            n = int(float(r.get("outer_trial", "")))
        except (TypeError, ValueError):
            continue
        by_outer.setdefault(n, []).append(r)
    dims, base = outer_dims(spec, lr_key), base_lookup(spec)
    events: list[dict[str, Any]] = []
    for n, mine in sorted(by_outer.items()):
        # the outer trial's architecture as its runs recorded it: the replay only needs it to tell its sweeps apart
        # (one per size) and to key their runs consistently
        arch = architecture(dims, base, functools.partial(_recorded, mine[0]))
        events += _bracket(BracketSource(spec, sweeps=inner_sweeps(spec, arch), outer=n), mine, lr_key)
    events += _scored_outer_trials(spec, run_dir)
    sizes = spec.space.values_of(spec.space.get(spec.leaderboard.transfer))
    return {"source": "transfer", "sweeps": len(list(sizes)), "outer_planned": spec.search.trials}, events


def _scored_outer_trials(spec: Spec, run_dir: Path | None) -> list[dict[str, Any]]:
    """``outer`` events of the outer trials the study `<name>/transfer` holds as told ([] if it cannot be read)."""
    try:
        import optuna  # deferred: loads Optuna only when this runs

        from nas_stab.search.optuna_study import make_storage

        db = Path(run_dir).resolve() / "study.db" if run_dir is not None else None
        if spec.search.storage is None and (db is None or not db.is_file()):
            return []
        url = spec.search.storage or f"sqlite:///{db}"
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.load_study(study_name=study_name(spec), storage=make_storage(url))
        return [{"event": "outer", "outer": t.number, "status": t.user_attrs.get("status") or t.state.name.lower()}
                for t in study.get_trials(deepcopy=False)
                if t.state.name in ("COMPLETE", "FAIL") and t.user_attrs.get("status") != "interrupted"]
    except Exception:
        return []


def _recorded(record: dict[str, Any], d: Dimension) -> Any:
    return record.get(d.key)


def _log2(v: Any) -> float | None:
    try:
        x = float(v)
    except (TypeError, ValueError):
        return None
    return math.log2(x) if x == x and x > 0 else None
