"""The provenance of a leaderboard: which runs, commits, machines, seeds and commands made it, and their
compute (docs/leaderboard.md, Provenance). `provenance(runs, trials)` gives the (field, value) pairs every
output format prints."""
from __future__ import annotations

import datetime as _dt
from collections.abc import Iterable, Sequence

import pandas as pd

from nas_stab import metrics
from nas_stab.analysis.settings import settings as _settings
from nas_stab.store.reader import Run
from nas_stab.textfmt import duration


def _status_counts(trials: pd.DataFrame) -> str:
    if "status" not in trials.columns:
        return f"{len(trials)} runs (no status column)"
    counts = trials["status"].astype(str).value_counts()
    parts = [f"{int(counts.get(s, 0))} {s}" for s in metrics.STATUSES]
    parts += [f"{int(n)} {s}" for s, n in counts.items() if s not in metrics.STATUSES]
    return f"{len(trials)} runs: " + ", ".join(parts)


def _meta(run: Run, key: str) -> str:
    v = run.meta.get(key)
    return "unknown" if v is None or v == "" else str(v)


def _trained_by(run: Run) -> str:
    """The command that created the run, then each command that resumed it with more (``meta.resumed``)."""
    if not run.meta.get("command"):
        return "unknown (the run did not record its command)"
    first = f"{run.meta['command']} (commit {_meta(run, 'git_commit')})"
    more = [f"{e.get('command')} (commit {e.get('git_commit') or 'unknown'})" for e in run.meta.get("resumed") or []]
    return "; then ".join([first, *more])


def _seeds_run(run: Run) -> list:
    """The seeds the spec names and any its trials hold beyond them (adaptive seeds, a resume with more)."""
    if "seed" not in run.trials.columns:
        return list(run.seeds)
    have = pd.to_numeric(run.trials["seed"], errors="coerce").dropna().astype(int)
    return [*run.seeds, *sorted(set(have.tolist()) - set(run.seeds))]


def _seed_text(seeds: Iterable) -> str:
    def key(x):
        return (0, float(x), "") if isinstance(x, (int, float)) and not isinstance(x, bool) else (1, 0.0, str(x))

    return ", ".join(str(x) for x in sorted(dict.fromkeys(seeds), key=key)) or "unknown"


def _run_names(runs: Sequence[Run]) -> list[str]:
    """A name per run: the spec's name, or the directory when two runs share a name."""
    names = [r.name for r in runs]
    if len(set(names)) < len(names):
        names = [str(r.path) for r in runs]
    return names


def provenance(runs: Sequence[Run], trials: pd.DataFrame, *, command: str | None = None) -> list[tuple[str, str]]:
    """Provenance as ordered (field, value) pairs: spec name and hash, dataset and
    subset, seeds, nas_stab version and commit, torch, hardware, dates, trials by status,
    compute time.

    With several runs every field covers all of them: a value shared by every run is
    shown once, values that differ are listed per run (``name: value; name: value``),
    the seeds are the union of all runs', and a ``run`` line per run repeats its own
    hash, commit, seeds, trials by status and compute time.
    """
    names = _run_names(runs)

    def per_run(value) -> str:
        vals = [value(r) for r in runs]
        if len(set(vals)) == 1:
            return vals[0]
        return "; ".join(f"{n}: {str(v).rstrip('.')}" for n, v in zip(names, vals))  # no ".;" after a sentence

    def dataset(r: Run) -> str:
        ds = r.spec.task.dataset
        subset = ", ".join(f"{k}={getattr(ds, k)}" for k in ("train", "val", "test") if getattr(ds, k) is not None) or "full splits"
        how = _meta(r, "data")  # how the splits were made, as `nas-stab run` found the data (e.g. carved from one split)
        how = how.split(": ", 1)[1] if how.startswith(f"{ds.name}: ") else how
        return f"{ds.name} ({subset}" + (f"; {how})" if how and how != "unknown" else ")")

    items = []
    if len(runs) == 1:
        items.append(("spec", f"{names[0]} (hash {_meta(runs[0], 'spec_hash')})"))
    else:
        items.append(("spec", "; ".join(f"{n} (hash {_meta(r, 'spec_hash')})" for n, r in zip(names, runs))))
    descs = [r.spec.description for r in runs if r.spec.description]
    if descs:
        items.append(("description", descs[0] if len(set(descs)) == 1 else per_run(lambda r: r.spec.description or "none")))
    seeds = [_seeds_run(r) for r in runs]
    seed_text = _seed_text(x for ss in seeds for x in ss)
    if len(runs) > 1 and len({_seed_text(ss) for ss in seeds}) > 1:
        seed_text += " (" + "; ".join(f"{n}: {_seed_text(ss)}" for n, ss in zip(names, seeds)) + ")"
    items += [
        ("task", per_run(lambda r: r.spec.task.kind)),
        ("dataset", per_run(dataset)),
        ("seeds", seed_text),
        ("nas_stab", per_run(lambda r: f"{_meta(r, 'nas_stab_version')} (commit {_meta(r, 'git_commit')})")),
        ("torch", per_run(lambda r: _meta(r, "torch_version"))),
        ("python", per_run(lambda r: _meta(r, "python"))),
        ("hardware", per_run(lambda r: _meta(r, "hardware"))),
        ("run created", per_run(lambda r: _meta(r, "created"))),
        ("trained by", per_run(_trained_by)),
    ]
    if len(runs) > 1:
        first_cfg = _settings(runs[0].spec)
        differ = [n for n, r in zip(names[1:], runs[1:]) if _settings(r.spec) != first_cfg]
        if differ:
            items.append(("leaderboard settings", f"from {names[0]}; {', '.join(differ)} set different ones (ignored)"))
        for n, r, ss in zip(names, runs, seeds):
            items.append((
                "run",
                f"{n} ({r.path}): hash {_meta(r, 'spec_hash')}, commit {_meta(r, 'git_commit')}, "
                f"nas_stab {_meta(r, 'nas_stab_version')}, torch {_meta(r, 'torch_version')}, "
                f"hardware {_meta(r, 'hardware')}, created {_meta(r, 'created')}; seeds {_seed_text(ss)}; "
                f"{_status_counts(r.trials)}; compute {_compute(r.trials, total=False)}",
            ))
        shared = sorted({str(x) for i, a in enumerate(seeds) for b in seeds[i + 1:] for x in set(map(str, a)) & set(map(str, b))})
        if shared:
            items.append(("note", f"seed(s) {', '.join(shared)} appear in more than one run: where such runs share a cell, "
                                  "their values are averaged as one seed before the mean over seeds"))
    items += [
        ("trials", _status_counts(trials)),
        ("compute", _compute(trials)),
        ("built", _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()),
    ]
    if command:
        items.append(("command", command))
    return items


def _compute(trials: pd.DataFrame, *, total: bool = True) -> str:
    wall = pd.to_numeric(trials["wall_s"], errors="coerce") if "wall_s" in trials.columns else pd.Series(dtype=float)
    wall = wall[wall.notna() & (wall.abs() != float("inf"))]
    if not len(wall):
        return "unknown (no wall_s)"
    return duration(float(wall.sum()), exact=True) + (" total wall time of all runs" if total else "")
