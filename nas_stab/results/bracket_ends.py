"""Why each bracket sweep ended (bracketed, at a divergence wall, at an lr limit, unfinished), as the search
recorded it in the run directory's ``decisions.jsonl`` (`store/decisions.py`), for the leaderboard's bracket
column and its verdicts."""
from __future__ import annotations

import pandas as pd

from nas_stab.config.mode import search_mode
from nas_stab.errors import RunError
from nas_stab.store.decisions import DECISIONS, Decisions, read_decisions
from nas_stab.store.reader import Run


def run_decisions(run: Run) -> Decisions:
    """The run directory's decisions, covering every record; an error naming the file and the one command that
    writes them when the directory was made before searches recorded them."""
    path = run.path / DECISIONS
    try:
        d = read_decisions(run.path)
    except ValueError as e:
        raise RunError(f"{path}: {e}") from None
    if d is None or not d.complete:
        why = "missing" if d is None else "covers only the runs after a resume"
        raise RunError(f"{path}: {why} (a run directory made before nas_stab recorded a search's decisions): run "
                       f"`nas-stab upgrade {run.path}` once; it replays them from trials.csv")
    return d


def with_bracket_ends(run: Run, trials: pd.DataFrame, lr_key: str) -> pd.DataFrame:
    """`trials` with the column ``bracket_end``: for a run searched with ``search.sampler: bracket``, or a
    transfer search with ``search.transfer.inner: bracket`` (each outer trial's sweeps, one per size), tabled by
    the learning rate it bracketed, how each run's sweep ended: ``bracketed``, ``divergence wall``, ``limit``,
    ``no lr trains``, or ``unfinished`` (the search was stopped before the sweep ended), as the search recorded
    it (`run_decisions`). Other runs: `trials` unchanged."""
    spec = run.spec
    mode = search_mode(spec)
    inner = mode.inner_bracket and "outer_trial" in trials.columns
    if spec.leaderboard.lr != lr_key or not (mode.kind == "bracket" or inner):
        return trials
    ends = run_decisions(run).run_ends()
    keys = trials["key"].astype(str).tolist() if "key" in trials.columns else [""] * len(trials)
    in_sweep = pd.to_numeric(trials["outer_trial"], errors="coerce").notna().tolist() if inner else [True] * len(trials)
    out = trials.copy()
    out["bracket_end"] = [ends.get(k, "unfinished") if s else "" for k, s in zip(keys, in_sweep)]
    return out


def adaptive_notes(run: Run) -> dict[str, str]:
    """For a search with adaptive seeds that is over: row label -> why that row, still undecided, got no more
    seeds, as the search recorded it; {} otherwise (another search, one still going, or no decisions to read)."""
    if not search_mode(run.spec).adaptive:
        return {}
    try:
        d = read_decisions(run.path)
    except ValueError:
        return {}
    return d.seeds_notes() if d is not None else {}
