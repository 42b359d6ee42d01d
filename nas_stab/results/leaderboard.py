"""Build leaderboards from run directories (columns defined in docs/leaderboard.md).

``build_leaderboard([run_dir, ...], formats=("md", "csv", "tex", "html"))``
reads each run's ``spec.yaml`` and ``trials.csv``, concatenates the trials
(a key that a run does not search takes that run's base value), analyzes them
with the ``leaderboard:`` settings of the first run, and writes
``leaderboard.<ext>`` (with csv: ``leaderboard_cells.csv``, ``leaderboard_sizes.csv``
and the provenance sidecar ``leaderboard_provenance.txt``, so every CSV loads
with a plain ``pandas.read_csv``) and ``plots/*.png`` atomically into the
output directory. The provenance covers every run (see `provenance`).

The ``leaderboard:`` settings are read from the run's stored spec and may be
overridden per call (``overrides``: lr, transfer, compare, metric, reference,
tolerance), which is how ``nas-stab leaderboard --metric ...`` re-slices a run
without training.

Example:
    >>> from pathlib import Path
    >>> paths = build_leaderboard([Path("runs/quickstart")], formats=("md", "html"))  # doctest: +SKIP
    >>> sorted(paths)  # doctest: +SKIP
    ['html', 'md', 'plot:divergence', 'plot:fwd_norm_init', 'plot:loss_curves', 'plot:lr_transfer', 'plot:optimum_transfer']
"""
from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from nas_stab import metrics
from nas_stab.analysis.settings import settings as _settings
from nas_stab.analysis.table import Analysis, analyze
from nas_stab.analysis.values import fill_base, fmt_value
from nas_stab.config.mode import search_mode
from nas_stab.config.rules import check_leaderboard, same_value
from nas_stab.errors import RunError, SpecError
from nas_stab.results import formats as _formats
from nas_stab.results import pareto as _pareto
from nas_stab.results import plots as _plots
from nas_stab.results.reader import Run, read_run
from nas_stab.results.rundir import atomic_write, remove_stale_tmp
from nas_stab.search.bracket import BracketSource
from nas_stab.search.plan import base_lookup
from nas_stab.search.transfer import architecture, inner_sweeps, outer_dims
from nas_stab.textfmt import duration

__all__ = ["atomic_write", "build_leaderboard", "leaderboard_markdown", "load_analysis", "provenance"]

PLOTS = {
    "lr_transfer": "metric vs log2(lr), one line per size, each size's fitted optimum with its interval",
    "optimum_transfer": "transfer plot: fitted optimum log2(lr) vs log2(size), one line per row, interval band, fitted slope",
    "fwd_norm_init": "forward RMS norm per block at init, across sizes",
    "divergence": "divergence map: fraction of runs diverged (size x lr), hatched where a run was stuck (completed without learning)",
    "loss_curves": "training loss over steps at each size's best lr (median over seeds, min-max band)",
}


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
    seeds = [r.seeds for r in runs]
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
        ("trained by", per_run(lambda r: (f"{r.meta['command']} (commit {_meta(r, 'git_commit')})" if r.meta.get("command")
                                          else "unknown (the run did not record its command)"))),
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


def _read(run_dir: Path) -> Run:
    """A run directory with its trials read (errors name the file, in the order they are met)."""
    run = read_run(run_dir)
    run.trials  # noqa: B018 - read now: a run without trials is an error here
    return run


def load_analysis(run_dirs: Iterable[str | Path], *, n_boot: int = 1000, command: str | None = None,
                  overrides: Mapping[str, Any] | None = None) -> tuple[Analysis, list[tuple[str, str]], list[Run]]:
    """Read and analyze one or more runs: (analysis, provenance, runs). `overrides` replace the
    stored ``leaderboard:`` settings (lr, transfer, compare, metric, reference, tolerance)."""
    unique = {Path(d).resolve(): Path(d) for d in run_dirs}  # a run named twice counts once
    runs = [_read(d) for d in unique.values()]
    if not runs:
        raise RunError("no run directory given")
    _check_flags(runs, overrides)
    cfg = _settings(runs[0].spec, overrides)
    _check_axes(cfg, runs)
    _check_same_setting(cfg, runs)
    keys = [cfg["lr"], cfg["transfer"], *cfg["compare"]]
    if len(runs) > 1:  # a key one run searches and another does not: the latter's base value
        keys += [c for r in runs for c in r.trials.columns if isinstance(c, str) and "." in c]
    frames = []
    for i, r in enumerate(runs):
        t = fill_base(r.trials, keys, r.spec.raw)  # a key a run does not search: its value as stored
        t = with_bracket_ends(r, t, cfg["lr"])
        t["_run"] = str(i)
        frames.append(t)
    trials = pd.concat(frames, ignore_index=True, sort=False) if len(frames) > 1 else frames[0]
    try:
        a = analyze(trials, n_boot=n_boot, **cfg)
    except RunError as e:
        where = ", ".join(str(r.path / "trials.csv") for r in runs)
        raise RunError(f"{where}: {e}") from None
    return a, provenance(runs, trials, command=command), runs


# the sections of a resolved experiment that decide what a run trains: runs merged into one table must agree on
# every key of them that is not searched (or be told apart by a compare column)
_TRAINED = ("task", "model", "train")
_TRAINED_ALSO = (("stability", "divergence"),)
_NOT_TRAINED = {"task.dataset.root", "train.device", "train.threads", "train.eval_every", "train.eval_batch"}  # where and how fast, not what


def _fixed(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The flattened settings of `_TRAINED` (dotted key -> value) of a resolved spec."""
    out: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        else:
            out[prefix] = tuple(node) if isinstance(node, list) else node

    for sec in _TRAINED:
        walk(sec, raw.get(sec) or {})
    for sec, sub in _TRAINED_ALSO:
        walk(f"{sec}.{sub}", (raw.get(sec) or {}).get(sub) or {})
    return out


def _check_same_setting(cfg: Mapping[str, Any], runs: list[Run]) -> None:
    """Runs merged into one table must train the same thing apart from what they search where they share a row:
    a fixed setting that differs between them (model.depth 4 in one run, 8 in another) would pool different
    models into the same cells. Refused with the differing keys named, unless each is a compare key (then it
    labels the rows); runs whose rows are disjoint (each its own aggregation, say) are shown side by side."""
    if len(runs) < 2:
        return
    searched = {k for r in runs for k in r.spec.space.keys} | {cfg["lr"], cfg["transfer"], *cfg["compare"]}
    fixed = [_fixed(r.spec.raw) for r in runs]
    keys = sorted(set().union(*fixed) - searched - _NOT_TRAINED)
    compare = list(cfg["compare"])

    def labels(r: Run) -> set:
        t = fill_base(r.trials, compare, r.spec.raw)
        return {tuple(fmt_value(v) for v in row) for row in t[compare].itertuples(index=False, name=None)} if compare else {()}

    rows = [labels(r) for r in runs]
    differ = []
    for k in keys:
        vals = [f.get(k) for f in fixed]
        # pooled only where two runs that differ in k put runs into the same row
        clash = [(i, j) for i in range(len(runs)) for j in range(i + 1, len(runs)) if vals[i] != vals[j] and rows[i] & rows[j]]
        if clash:
            at = sorted({i for pair in clash for i in pair})
            differ.append(f"{k} (" + ", ".join(f"{fmt_value(vals[i])} in {runs[i].path}" for i in at) + ")")
    if differ:
        raise SpecError(f"the runs train different models: {'; '.join(differ[:5])}" + (f"; and {len(differ) - 5} more" if len(differ) > 5 else "")
                        + ". Pooling them would mix models in the same cells: build their tables separately, or make "
                        "each differing key a row label (--compare " + ",".join([*cfg["compare"], *(d.split(" ")[0] for d in differ)]) + ")",
                        key="leaderboard")


# how a bracket sweep ended (nas_stab.search.bracket.SweepEnd.end) as the table says it
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


def _architecture(spec, record: dict, lr_key: str) -> dict:
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
                i = sweeps.get(tuple(fmt_value(r.get(k)) for k in names))
                if i is not None:
                    hit = (i, math.log2(float(lr)))
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


FLAGS = {"lr": "--lr", "transfer": "--transfer", "compare": "--compare", "metric": "--metric",
         "reference": "--reference", "tolerance_octaves": "--tolerance"}


class _Unchanged(SpecError):
    """A rule the stored settings break, not the flags (a run made before the rule): not reported."""

class _FlagCtx:
    """Names a broken rule of ``leaderboard:`` by the flag that set the value (`config.rules`' Ctx)."""
    def __init__(self, changed: Iterable[str]):
        self.changed = set(changed)

    def error(self, path: tuple, message: str) -> SpecError:
        field = path[1] if len(path) > 1 and path[0] == "leaderboard" else None
        return SpecError(message, key=FLAGS[field]) if field in self.changed else _Unchanged(message)


def _check_flags(runs: Sequence[Run], overrides: Mapping[str, Any] | None) -> None:
    """The values of `nas-stab leaderboard`'s flags pass the rules the same values pass in an experiment
    file (config/rules.py `check_leaderboard`), checked against the first run's spec; with several runs
    the reference is one of the sizes their trials hold.

    Raises:
        SpecError: naming the flag (exit 2, one line).
    """
    import dataclasses

    over = {("tolerance_octaves" if k == "tolerance" else k): v for k, v in (overrides or {}).items() if v is not None}
    if not over:
        return
    if "compare" in over:
        c = over["compare"]
        over["compare"] = tuple(x.strip() for x in c.split(",") if x.strip()) if isinstance(c, str) else tuple(c)
    spec = runs[0].spec
    spec = dataclasses.replace(spec, leaderboard=dataclasses.replace(spec.leaderboard, **over))
    try:
        check_leaderboard(spec, _FlagCtx(over), axes=len(runs) == 1)
    except _Unchanged:
        pass  # the stored settings predate a rule; what the flags set was checked up to there
    ref, key = spec.leaderboard.reference, spec.leaderboard.transfer
    if len(runs) > 1 and "reference" in over and key:
        sizes = {v for r in runs for v in (r.trials[key].dropna().tolist() if key in r.trials.columns else [r.stored(key)])}
        if not any(same_value(ref, v) for v in sizes):
            raise SpecError(f"{ref!r} is not a size of {key} in these runs: {', '.join(map(str, sorted(sizes, key=str)))}",
                            key="--reference")


def _check_axes(cfg: Mapping[str, Any], runs: Sequence[Run]) -> None:
    """A key the table slices by must be a column of some run's trials or a key of its spec."""
    for what, key in [("--lr", cfg["lr"]), ("--transfer", cfg["transfer"])] + [("--compare", k) for k in cfg["compare"]]:
        if key and not any(key in r.trials.columns or r.stored(key) is not None for r in runs):
            searched = sorted({c for r in runs for c in r.trials.columns if isinstance(c, str) and "." in c})
            raise SpecError(f"{key!r} is neither a searched key of the run nor a key of its spec; searched: "
                            f"{', '.join(searched) or 'none'}", key=what)
    m = cfg["metric"]
    if not any(m in r.trials.columns for r in runs):
        have = sorted({c for r in runs for c in r.trials.columns if c in metrics.OBJECTIVES})
        raise SpecError(f"no run recorded the metric {m!r}; recorded: {', '.join(have) or 'none'}", key="--metric")


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
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Path]:
    """Write the leaderboard of one or more runs; returns {kind: path}.

    Kinds: each format (``md``, ``csv``, ``tex``, ``html``), ``cells_csv`` (with
    csv), and ``plot:<name>`` for each PNG written under ``<out_dir>/plots/``.

    Args:
        run_dirs: run directories; the ``leaderboard:`` settings come from the first,
            the provenance lists every run.
        formats: any of ``md, csv, tex, html`` (a list or a comma-separated string).
        out_dir: where to write; default the run directory (required with several runs).
        plots: also draw the PNG figures (embedded in the HTML, linked from Markdown).
        n_boot: bootstrap replicates for the intervals.
        overrides: replace stored ``leaderboard:`` settings (lr, transfer, compare, metric,
            reference, tolerance) for this table only.

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
    for k, v in (overrides or {}).items():
        if v is not None:
            command += f" --{k} {','.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
    a, prov, runs = load_analysis(run_dirs, n_boot=n_boot, command=command, overrides=overrides)
    plots_dir = out / "plots"
    if plots and (plots_dir.is_symlink() or plots_dir.exists() and not plots_dir.is_dir()):
        raise RunError(f"{plots_dir}: a symbolic link or a file; the leaderboard writes its figures only into a "
                       "plots/ directory of its own: move it aside")
    remove_stale_tmp([out, plots_dir])  # left by a killed leaderboard
    written: dict[str, Path] = {}

    pngs: dict[str, bytes] = {}
    links: dict[str, str] = {}
    transfer_spec = runs[0].spec if _pareto.is_transfer(runs[0].spec) else None
    if plots and transfer_spec is not None:
        png = _pareto.pareto_plot(a, transfer_spec)
        if png is not None:
            written["plot:pareto"] = atomic_write(out / "plots" / "pareto.png", png)
            pngs[_pareto.CAPTION] = png
            links[_pareto.CAPTION] = "plots/pareto.png"
    if plots:
        history = {str(i): r.path / "history" for i, r in enumerate(runs)}
        figures = {
            "lr_transfer": lambda: _plots.transfer_plot(a),
            "optimum_transfer": lambda: _plots.optimum_plot(a),
            "fwd_norm_init": lambda: _plots.fwd_norm_plot(a, _plots.init_fwd_norms(a, history)),
            "divergence": lambda: _plots.divergence_plot(a, "diverged_why" if "diverged_why" in a.records.columns else None),
            "loss_curves": lambda: _plots.loss_curve_plot(a, _plots.loss_curves(a, history)),
        }
        for name, draw in figures.items():
            png = draw()
            if png is None:
                continue
            written[f"plot:{name}"] = atomic_write(out / "plots" / f"{name}.png", png)
            pngs[PLOTS[name]] = png
            links[PLOTS[name]] = f"plots/{name}.png"

    for fmt in fmts:
        sections: list[str] = []
        html_pngs = pngs
        if fmt == "html" and transfer_spec is not None:  # the Pareto section holds its plot (embedded once)
            sections = [_pareto.pareto_html(a, transfer_spec, png=pngs.get(_pareto.CAPTION))]
            html_pngs = {k: v for k, v in pngs.items() if k != _pareto.CAPTION}
        text = _formats.render(fmt, a, prov, plots_png=html_pngs, plots_paths=links, html_sections=sections)
        if fmt == "md" and transfer_spec is not None:
            text = _with_pareto(text, _pareto.pareto_markdown(a, transfer_spec, plot_path=links.get(_pareto.CAPTION)))
        written[fmt] = atomic_write(out / f"leaderboard.{fmt}", text)
        if fmt == "csv":
            written["cells_csv"] = atomic_write(out / "leaderboard_cells.csv", _formats.to_cells_csv(a, prov))
            written["sizes_csv"] = atomic_write(out / "leaderboard_sizes.csv", _formats.to_sizes_csv(a))
            written["provenance"] = atomic_write(out / "leaderboard_provenance.txt", _formats.provenance_text(a, prov))
            if transfer_spec is not None:
                written["pareto_csv"] = atomic_write(out / "pareto.csv", _pareto.pareto_csv(a, transfer_spec))
    return written


def leaderboard_markdown(run_dir: str | Path, *, n_boot: int = 1000, overrides: Mapping[str, Any] | None = None) -> str:
    """The Markdown leaderboard of one run (for the runner to print and save at the end of a run).

    Links the plots when ``<run_dir>/plots/`` already holds them.
    """
    a, prov, runs = load_analysis([run_dir], n_boot=n_boot, overrides=overrides)
    plots_dir = Path(run_dir) / "plots"
    links = {cap: f"plots/{name}.png" for name, cap in PLOTS.items() if (plots_dir / f"{name}.png").is_file()}
    text = _formats.to_markdown(a, prov, plots=links or None)
    if _pareto.is_transfer(runs[0].spec):
        plot = "plots/pareto.png" if (plots_dir / "pareto.png").is_file() else None
        text = _with_pareto(text, _pareto.pareto_markdown(a, runs[0].spec, plot_path=plot))
    return text


def _with_pareto(text: str, section: str) -> str:
    """The Pareto section of a transfer search, before the provenance."""
    at = text.find("\n## Provenance")
    return text + "\n" + section if at < 0 else text[:at + 1] + section + text[at:]
