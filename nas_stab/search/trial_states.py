"""The Optuna study of a run: opened and reconciled with trials.csv, and each trial told its final state.

Only public Optuna API: `Study.ask`/`tell`/`get_trials`/`enqueue_trial`, `Trial`'s methods, and for
trials left RUNNING by a killed driver (no `Trial` object to hand) the public `BaseStorage` methods of
a storage built by `optuna_study.make_storage` on the same URL.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nas_stab.errors import RunError
from nas_stab.search.study_lock import StudyLock

if TYPE_CHECKING:
    import optuna

    from nas_stab.config.schema import Spec
    from nas_stab.store.protocol import RunStore

INTERRUPTED = "interrupted"


class _TrialAttrs:
    """Sets user attributes of a trial by number, through a storage handle of our own (public API)."""

    def __init__(self, study: optuna.Study, url: str):
        from nas_stab.search.optuna_study import make_storage  # deferred: loads PyYAML only when this runs

        self.storage = make_storage(url)  # the same database as the study's: only RUNNING trials are written
        self.study_id = self.storage.get_study_id_from_name(study.study_name)

    def set(self, number: int, key: str, value: Any) -> None:
        trial_id = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)
        self.storage.set_trial_user_attr(trial_id, key, value)


def open_study(spec: Spec, rd: RunStore) -> tuple[optuna.Study, dict[str, dict], StudyLock | None]:
    """The run's Optuna study, reconciled with trials.csv, the runs it records by key, and the study's
    lock (`study_lock.StudyLock`, None for the run directory's own study.db: the run directory's lock
    covers it).

    Records are written (fsynced) before Optuna is told a trial finished
    (`records.write_records`), so a driver killed between the two leaves a RUNNING trial
    whose rows are all on disk: it is told now, from its rows. Trials left running
    without all their rows are closed as FAIL (status interrupted) and trained again.
    """
    from optuna.trial import TrialState  # deferred: loads Optuna only when this runs

    from nas_stab.search.optuna_study import create_study  # deferred: loads PyYAML only when this runs

    url = spec.search.storage or rd.storage_url
    try:
        study = create_study(spec, url)
    except Exception as e:  # a damaged study.db, a database that refuses us: one line, not a traceback
        msg = " ".join(str(e).split())[:300]
        if "disk is full" in msg or "No space left" in msg:
            raise RunError(f"cannot open the Optuna storage {url}: the disk is full ({msg[:120]}); free space and "
                           "rerun the same command to resume") from None
        raise RunError(f"cannot open the Optuna storage {url}: {type(e).__name__}: {msg}; "
                       "move the run directory aside or rerun with --fresh") from None
    lock = None
    if spec.search.storage:  # shared beyond this run directory: hold the study before touching its trials

        lock = StudyLock(study, rd.path, url).acquire()
    try:
        rows = {r["key"]: r for r in rd.read_trials()}
        left = study.get_trials(deepcopy=False, states=(TrialState.RUNNING, TrialState.WAITING))
        attrs = _TrialAttrs(study, url) if left else None  # a second handle only when a killed driver left trials open
        told = tell_recorded(spec, study, rows, attrs) if attrs is not None else 0
        if told:
            rd.log(f"told Optuna {told} trial(s) whose rows were recorded before a kill")
        closed = cleanup_study(study, attrs) if attrs is not None else 0
        reconciled = reconcile_interrupted(spec, study, rows) if rows else 0
        if reconciled:
            rd.log(f"told Optuna {reconciled} trial(s) closed as interrupted after their rows were recorded "
                   "(a new trial each, user attr reconciles)")
        if closed:
            msg = f"closed {closed} trial(s) left running by an interrupted run; they are trained again"
            rd.log(msg)
            print(msg, file=sys.stderr, flush=True)
    except BaseException:
        if lock is not None:
            lock.release()
        raise
    return study, rows, lock


def tell_recorded(spec: Spec, study: optuna.Study, rows: dict, attrs: _TrialAttrs) -> int:
    """Tell each RUNNING trial whose rows are all in trials.csv the state its rows give."""
    from optuna.trial import TrialState  # deferred: loads Optuna only when this runs

    by_trial = _by_trial(spec, rows)
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        mine = by_trial.get(str(t.number), [])
        if not mine:
            continue
        if "key" not in t.user_attrs and len(mine) < len(spec.seeds) and mine[-1]["status"] == "complete":
            continue  # a sampled trial (one per configuration, not per job) with seeds missing: trained again
        tell(study, t.number, *_state_of(mine), set_attr=lambda k, v, n=t.number: attrs.set(n, k, v))
        n += 1
    return n


def _by_trial(spec: Spec, rows: dict) -> dict[str, list[dict]]:
    """The recorded rows of each Optuna trial (by its number as text), in the spec's seed order."""
    seeds = [str(s) for s in spec.seeds]
    by_trial: dict[str, list] = {}
    for r in rows.values():
        by_trial.setdefault(str(r.get("optuna_trial")), []).append(r)
    for mine in by_trial.values():
        mine.sort(key=lambda r: seeds.index(r["seed"]) if r["seed"] in seeds else 1 << 30)
    return by_trial


def _state_of(mine: list[dict]) -> tuple[str, float | None, str]:
    """The (status, value, error) a trial's recorded rows give (`tell`'s arguments)."""
    statuses = [r["status"] for r in mine]
    status = next((s for s in ("failed", "diverged", "pruned") if s in statuses), "complete")
    value = None
    if status == "complete":
        try:
            vals = [float(r["objective"]) for r in mine]
            value = sum(vals) / len(vals)
        except (TypeError, ValueError):
            value = None
    return status, value, "; ".join(r.get("error") or "" for r in mine).strip("; ")


def reconcile_interrupted(spec: Spec, study: optuna.Study, rows: dict) -> int:
    """Trials closed as interrupted (FAIL) whose rows are all in trials.csv -- a Ctrl-C that stopped the telling after
    the rows were saved, by a nas_stab that did not yet tell them from their rows -- get a trial in the state their rows
    give (`Study.add_trial`, user attr `reconciles`: the interrupted trial's number), so that the sampler learns what
    the records hold. A finished trial's state cannot change in Optuna; the interrupted one stays, superseded. How many."""
    import optuna  # deferred: loads Optuna only when this runs
    from optuna.trial import TrialState

    done = {t.user_attrs["reconciles"] for t in study.get_trials(deepcopy=False) if "reconciles" in t.user_attrs}
    by_trial = _by_trial(spec, rows)
    n = 0
    for t in study.get_trials(deepcopy=False, states=(TrialState.FAIL,)):
        mine = by_trial.get(str(t.number), [])
        if t.user_attrs.get("status") != INTERRUPTED or t.number in done or not mine:
            continue
        if "key" not in t.user_attrs and len(mine) < len(spec.seeds) and mine[-1]["status"] == "complete":
            continue  # seeds missing: trained again
        status, value, error = _state_of(mine)
        state = {"complete": TrialState.COMPLETE, "pruned": TrialState.PRUNED, "diverged": TrialState.PRUNED}.get(status, TrialState.FAIL)
        if state == TrialState.COMPLETE and (value is None or not math.isfinite(value)):
            state = TrialState.FAIL
        attrs = {**t.user_attrs, "status": status, "reconciles": t.number, **({"error": error[:2000]} if error else {})}
        study.add_trial(optuna.trial.create_trial(state=state, value=value if state == TrialState.COMPLETE else None,
                                                  params=t.params, distributions=t.distributions, user_attrs=attrs))
        n += 1
    return n


def sampled_remaining(spec: Spec, study: optuna.Study, rows: dict, target: int, log: Callable[[str], None]) -> int:
    """How many trials a sampler still asks for; finished trials without rows are trained again.

    A trial finished in the study whose rows never reached trials.csv (an older
    nas_stab told Optuna first, then was killed or hit a full disk) is not counted
    as done: its parameters are enqueued (user attr `retrains`: its number), so the
    next trial asked trains that configuration again.
    """
    from optuna.trial import TrialState  # deferred: loads Optuna only when this runs

    finished = [
        t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL))
        if t.user_attrs.get("status") != INTERRUPTED
    ]
    recorded = {str(r.get("optuna_trial")) for r in rows.values()}
    numbers = {t.number for t in finished}
    superseded = {int(t.user_attrs["retrains"]) for t in finished if "retrains" in t.user_attrs} & numbers
    recorded |= {str(t.number) for t in finished if str(t.user_attrs.get("reconciles")) in recorded}  # reconcile_interrupted
    orphans = [t for t in finished if str(t.number) not in recorded and t.number not in superseded]
    remaining = max(0, target - (len(finished) - len(superseded) - len(orphans)))
    for t in orphans[:remaining]:
        study.enqueue_trial(t.params, user_attrs={"retrains": t.number})
    if orphans:
        log(f"{len(orphans)} finished trial(s) had no rows in trials.csv "
            f"({', '.join(str(t.number) for t in orphans)}); their configurations are trained again")
    return remaining


def cleanup_study(study: optuna.Study, attrs: _TrialAttrs) -> int:
    """No trial is ever left running: trials a killed driver left RUNNING or
    WAITING are closed as FAIL (user attr status=interrupted). Returns how many."""
    from optuna.trial import TrialState  # deferred: loads Optuna only when this runs

    n = 0
    t: optuna.trial.FrozenTrial | optuna.trial.Trial  # the trials left RUNNING, then those asked to close the WAITING
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        attrs.set(t.number, "status", INTERRUPTED)
        study.tell(t.number, state=TrialState.FAIL)
        n += 1
    while study.get_trials(deepcopy=False, states=(TrialState.WAITING,)):
        t = study.ask()
        t.set_user_attr("status", INTERRUPTED)
        study.tell(t, state=TrialState.FAIL)
        n += 1
    return n


def tell(study: optuna.Study, trial: optuna.trial.Trial | int, status: str, value: float | None, error: str = "", *,
         set_attr: Callable[..., None] | None = None) -> None:
    """Close an Optuna trial (a `Trial`, or a trial number with `set_attr(key, value)`) with the
    state matching the run's status.

    complete -> COMPLETE (FAIL if the objective is not finite); pruned ->
    PRUNED; diverged -> PRUNED with user attr status=diverged (the sampler
    learns it was stopped early, not that it finished); failed, interrupted -> FAIL.
    """
    from optuna.trial import TrialState  # deferred: loads Optuna only when this runs

    if set_attr is None:
        assert not isinstance(trial, int), "a trial number comes with its set_attr"
        set_attr = trial.set_user_attr
    set_attr("status", status)
    if error:
        set_attr("error", error[:2000])
    if status == "complete":
        if value is not None and math.isfinite(value):
            study.tell(trial, value)
            return
        set_attr("error", "objective is not finite")
        study.tell(trial, state=TrialState.FAIL)
    elif status in ("pruned", "diverged"):
        study.tell(trial, state=TrialState.PRUNED)
    else:
        study.tell(trial, state=TrialState.FAIL)
