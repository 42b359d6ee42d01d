"""Build leaderboards from run directories (SPEC 3 and 5).

``build_leaderboard([run_dir, ...], formats=("md", "csv", "tex", "html"))``
reads each run's ``spec.yaml`` and ``trials.csv``, concatenates the trials
(a key that a run does not search takes that run's base value), analyzes them
with the ``leaderboard:`` settings and provenance of the first run, and writes
``leaderboard.<ext>`` (plus ``leaderboard_cells.csv`` with csv) and
``plots/*.png`` atomically into the output directory.

Example:
    >>> from pathlib import Path
    >>> paths = build_leaderboard([Path("runs/quickstart")], formats=("md", "html"))  # doctest: +SKIP
    >>> sorted(paths)  # doctest: +SKIP
    ['html', 'md', 'plot:divergence', 'plot:fwd_norm_init', 'plot:lr_transfer']
"""
from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from nas_stab import metrics
from nas_stab.errors import RunError, SpecError
from nas_stab.results.rundir import atomic_write
from nas_stab.results import formats as _formats
from nas_stab.results.analysis import Analysis, analyze, fill_base, lookup

__all__ = ["RunData", "atomic_write", "build_leaderboard", "leaderboard_markdown", "load_analysis", "load_run", "provenance"]

PLOTS = {
    "lr_transfer": "metric vs log2(lr), one line per size",
    "fwd_norm_init": "forward RMS norm per block at init, across sizes",
    "divergence": "divergence map: fraction of runs diverged (size x lr)",
}


@dataclass
class RunData:
    """One run directory, read."""

    path: Path
    spec: dict
    trials: pd.DataFrame


# ---------------------------------------------------------------- reading


def load_run(run_dir: str | Path) -> RunData:
    """Read ``spec.yaml`` and ``trials.csv`` of a run directory.

    Raises:
        RunError: naming the file, when it is missing, unreadable, malformed or has no trials.
    """
    from nas_stab.spec.yamlio import load_yaml, read_text

    d = Path(run_dir)
    if not d.is_dir():
        raise RunError(f"{d}: not a run directory")
    spec_path = d / "spec.yaml"
    if not spec_path.is_file():
        raise RunError(f"{spec_path}: missing; a run directory holds the resolved spec.yaml")
    try:
        spec, _ = load_yaml(read_text(spec_path), file=str(spec_path))
    except SpecError as e:
        raise RunError(str(e)) from None
    if not isinstance(spec, dict):
        raise RunError(f"{spec_path}: expected a mapping of the experiment's keys")
    tpath = d / "trials.csv"
    if not tpath.is_file():
        raise RunError(f"{tpath}: missing; no trial has been recorded in this run yet")
    try:
        trials = pd.read_csv(tpath)
    except pd.errors.EmptyDataError:
        raise RunError(f"{tpath}: empty file; no trial has been recorded") from None
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as e:
        raise RunError(f"{tpath}: not a readable CSV table ({str(e).splitlines()[0]})") from None
    except OSError as e:
        raise RunError(f"{tpath}: cannot read ({e.strerror})") from None
    if trials.empty:
        raise RunError(f"{tpath}: has a header but no trials")
    return RunData(path=d, spec=spec, trials=trials)


def _settings(spec: Mapping[str, Any]) -> dict[str, Any]:
    lb = spec.get("leaderboard") or {}
    if not isinstance(lb, Mapping):
        lb = {}
    compare = lb.get("compare") or ()
    if isinstance(compare, str):
        compare = (compare,)
    metric = lb.get("metric") or lookup(spec, "search.objective") or "val_acc"
    loss_factor = lookup(spec, "stability.divergence.loss_factor", 10.0)
    try:
        loss_factor = float(loss_factor)
    except (TypeError, ValueError):
        loss_factor = 10.0
    return {
        "lr": lb.get("lr") or "train.lr",
        "transfer": lb.get("transfer") or None,
        "compare": tuple(str(c) for c in compare),
        "metric": str(metric),
        "reference": lb.get("reference"),
        "loss_factor": loss_factor,
    }


def _status_counts(trials: pd.DataFrame) -> str:
    if "status" not in trials.columns:
        return f"{len(trials)} runs (no status column)"
    counts = trials["status"].astype(str).value_counts()
    parts = [f"{int(counts.get(s, 0))} {s}" for s in metrics.STATUSES]
    parts += [f"{int(n)} {s}" for s, n in counts.items() if s not in metrics.STATUSES]
    return f"{len(trials)} runs: " + ", ".join(parts)


def _duration(seconds: float) -> str:
    if seconds != seconds:
        return "unknown"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min ({seconds:.0f} s)"
    return f"{seconds / 3600:.2f} h ({seconds:.0f} s)"


def provenance(runs: Sequence[RunData], trials: pd.DataFrame, *, command: str | None = None) -> list[tuple[str, str]]:
    """SPEC 5 provenance as ordered (field, value) pairs: spec name and hash, dataset and
    subset, nas_stab version and commit, torch, hardware, dates, trials by status, compute time."""
    first = runs[0].spec
    meta = first.get("meta") if isinstance(first.get("meta"), Mapping) else {}

    def m(key: str) -> str:
        v = meta.get(key)
        return "unknown" if v is None or v == "" else str(v)

    ds = lookup(first, "task.dataset", {}) or {}
    ds = ds if isinstance(ds, Mapping) else {}
    subset = ", ".join(f"{k}={ds[k]}" for k in ("train", "val", "test") if ds.get(k) is not None) or "full splits"
    items = [
        ("spec", f"{first.get('name', runs[0].path.name)} (hash {m('spec_hash')})"),
    ]
    if first.get("description"):
        items.append(("description", str(first["description"])))
    items += [
        ("task", str(lookup(first, "task.kind", "unknown"))),
        ("dataset", f"{ds.get('name', 'unknown')} ({subset})"),
        ("seeds", ", ".join(str(s) for s in first.get("seeds") or []) or "unknown"),
        ("nas_stab", f"{m('nas_stab_version')} (commit {m('git_commit')})"),
        ("torch", m("torch_version")),
        ("python", m("python")),
        ("hardware", m("hardware")),
        ("run created", m("created")),
    ]
    if len(runs) > 1:
        for r in runs:
            rm = r.spec.get("meta") if isinstance(r.spec.get("meta"), Mapping) else {}
            items.append((
                "run",
                f"{r.spec.get('name', r.path.name)}: hash {rm.get('spec_hash', 'unknown')}, commit {rm.get('git_commit', 'unknown')}, "
                f"nas_stab {rm.get('nas_stab_version', 'unknown')}, torch {rm.get('torch_version', 'unknown')}, "
                f"hardware {rm.get('hardware', 'unknown')}, created {rm.get('created', 'unknown')}, {len(r.trials)} runs",
            ))
    wall = pd.to_numeric(trials["wall_s"], errors="coerce") if "wall_s" in trials.columns else pd.Series(dtype=float)
    wall = wall[wall.notna() & (wall.abs() != float("inf"))]
    items += [
        ("trials", _status_counts(trials)),
        ("compute", _duration(float(wall.sum())) + " total wall time of all runs" if len(wall) else "unknown (no wall_s)"),
        ("built", _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()),
    ]
    if command:
        items.append(("command", command))
    return items


def load_analysis(run_dirs: Iterable[str | Path], *, n_boot: int = 1000, command: str | None = None) -> tuple[Analysis, list[tuple[str, str]], list[RunData]]:
    """Read and analyze one or more runs: (analysis, provenance, runs)."""
    unique = {Path(d).resolve(): Path(d) for d in run_dirs}  # a run named twice counts once
    runs = [load_run(d) for d in unique.values()]
    if not runs:
        raise RunError("no run directory given")
    cfg = _settings(runs[0].spec)
    keys = [cfg["lr"], cfg["transfer"], *cfg["compare"]]
    if len(runs) > 1:  # a key one run searches and another does not: the latter's base value
        keys += [c for r in runs for c in r.trials.columns if isinstance(c, str) and "." in c]
    frames = []
    for i, r in enumerate(runs):
        t = fill_base(r.trials, keys, r.spec)
        t["_run"] = str(i)
        frames.append(t)
    trials = pd.concat(frames, ignore_index=True, sort=False) if len(frames) > 1 else frames[0]
    try:
        a = analyze(trials, n_boot=n_boot, **cfg)
    except RunError as e:
        where = ", ".join(str(r.path / "trials.csv") for r in runs)
        raise RunError(f"{where}: {e}") from None
    return a, provenance(runs, trials, command=command), runs


# ---------------------------------------------------------------- writing


def _parse_formats(formats: str | Iterable[str]) -> list[str]:
    items = formats.split(",") if isinstance(formats, str) else list(formats)
    out = []
    for f in items:
        f = str(f).strip().lower().lstrip(".")
        f = {"markdown": "md", "latex": "tex", "htm": "html"}.get(f, f)
        if not f:
            continue
        if f not in _formats.FORMATS:
            raise SpecError(f"unknown leaderboard format {f!r}; choose from {', '.join(_formats.FORMATS)}", key="--format")
        if f not in out:
            out.append(f)
    if not out:
        raise SpecError(f"no leaderboard format given; choose from {', '.join(_formats.FORMATS)}", key="--format")
    return out


def build_leaderboard(
    run_dirs: Sequence[str | Path],
    formats: str | Iterable[str] = ("md",),
    out_dir: str | Path | None = None,
    *,
    plots: bool = True,
    n_boot: int = 1000,
) -> dict[str, Path]:
    """Write the leaderboard of one or more runs; returns {kind: path}.

    Kinds: each format (``md``, ``csv``, ``tex``, ``html``), ``cells_csv`` (with
    csv), and ``plot:<name>`` for each PNG written under ``<out_dir>/plots/``.

    Args:
        run_dirs: run directories; settings and provenance come from the first.
        formats: any of ``md, csv, tex, html`` (a list or a comma-separated string).
        out_dir: where to write; default the run directory (required with several runs).
        plots: also draw the PNG figures (embedded in the HTML, linked from Markdown).
        n_boot: bootstrap replicates for the ``lr_drift`` interval.

    Raises:
        RunError: a run directory is missing, malformed or empty.
        SpecError: an unknown format.
    """
    run_dirs = [Path(d) for d in run_dirs]
    fmts = _parse_formats(formats)
    if not run_dirs:
        raise RunError("no run directory given")
    if out_dir is None:
        if len(run_dirs) > 1:
            raise RunError("several run directories given: say where the combined leaderboard goes with --out DIR")
        out_dir = run_dirs[0]
    out = Path(out_dir)
    command = "nas-stab leaderboard " + " ".join(str(d) for d in run_dirs) + f" --format {','.join(fmts)}"
    if len(run_dirs) > 1 or out != run_dirs[0]:
        command += f" --out {out}"
    a, prov, runs = load_analysis(run_dirs, n_boot=n_boot, command=command)
    written: dict[str, Path] = {}

    pngs: dict[str, bytes] = {}
    links: dict[str, str] = {}
    if plots:
        from nas_stab.results import plots as _plots

        history = {str(i): r.path / "history" for i, r in enumerate(runs)}
        figures = {
            "lr_transfer": lambda: _plots.transfer_plot(a),
            "fwd_norm_init": lambda: _plots.fwd_norm_plot(a, _plots.init_fwd_norms(a, history)),
            "divergence": lambda: _plots.divergence_plot(a),
        }
        for name, draw in figures.items():
            png = draw()
            if png is None:
                continue
            written[f"plot:{name}"] = atomic_write(out / "plots" / f"{name}.png", png)
            pngs[PLOTS[name]] = png
            links[PLOTS[name]] = f"plots/{name}.png"

    for fmt in fmts:
        text = _formats.render(fmt, a, prov, plots_png=pngs, plots_paths=links)
        written[fmt] = atomic_write(out / f"leaderboard.{fmt}", text)
        if fmt == "csv":
            written["cells_csv"] = atomic_write(out / "leaderboard_cells.csv", _formats.to_cells_csv(a, prov))
    return written


def leaderboard_markdown(run_dir: str | Path, *, n_boot: int = 1000) -> str:
    """The Markdown leaderboard of one run (for the runner to print and save at the end of a run).

    Links the plots when ``<run_dir>/plots/`` already holds them.
    """
    a, prov, _ = load_analysis([run_dir], n_boot=n_boot)
    plots_dir = Path(run_dir) / "plots"
    links = {cap: f"plots/{name}.png" for name, cap in PLOTS.items() if (plots_dir / f"{name}.png").is_file()}
    return _formats.to_markdown(a, prov, plots=links or None)
