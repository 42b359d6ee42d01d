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

import contextlib
import dataclasses
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from nas_stab import metrics
from nas_stab.analysis.settings import settings as _settings
from nas_stab.analysis.table import Analysis, TableSettings, analyze
from nas_stab.analysis.values import fill_base, fmt_value
from nas_stab.config.rules_leaderboard import check_leaderboard, same_value
from nas_stab.config.schema import Spec
from nas_stab.errors import RunError, SpecError
from nas_stab.results import formats as _formats
from nas_stab.results import pareto as _pareto
from nas_stab.results import plots as _plots
from nas_stab.results.bracket_ends import adaptive_notes, with_bracket_ends
from nas_stab.results.provenance import provenance
from nas_stab.store.atomic import atomic_write, remove_stale_tmp
from nas_stab.store.reader import Run, read_run

__all__ = ["atomic_write", "build_leaderboard", "leaderboard_markdown", "load_analysis", "provenance"]

PLOTS = {
    "lr_transfer": "metric vs log2(lr), one line per size, each size's fitted optimum with its interval",
    "optimum_transfer": "transfer plot: fitted optimum log2(lr) vs log2(size), one line per row, interval band, fitted slope",
    "fwd_norm_init": "forward RMS norm per block at init, across sizes",
    "divergence": "divergence map: fraction of runs diverged (size x lr), hatched where a run was stuck (completed without learning)",
    "loss_curves": "training loss over steps at each size's best lr (median over seeds, min-max band)",
}


def _read(run_dir: Path) -> Run:
    """A run directory with its trials read (errors name the file, in the order they are met)."""
    run = read_run(run_dir)
    run.trials  # noqa: B018 - read now: a run without trials is an error here
    return run


def load_analysis(run_dirs: Iterable[str | Path], *, n_boot: int = 1000, command: str | None = None,
                  overrides: Mapping[str, Any] | None = None) -> tuple[Analysis, list[tuple[str, str]], list[Run]]:
    """Read and analyze one or more runs: (analysis, provenance, runs). `overrides` replace the
    stored ``leaderboard:`` settings (lr, transfer, compare, metric, reference, tolerance, report)."""
    unique = {Path(d).resolve(): Path(d) for d in run_dirs}  # a run named twice counts once
    runs = [_read(d) for d in unique.values()]
    if not runs:
        raise RunError("no run directory given")
    _check_flags(runs, overrides)
    cfg = _settings(runs[0].spec, overrides)
    _check_axes(cfg, runs)
    _check_same_setting(cfg, runs)
    keys = [cfg.lr, cfg.transfer, *cfg.compare]
    if len(runs) > 1:  # a key one run searches and another does not: the latter's base value
        keys += [c for r in runs for c in r.trials.columns if isinstance(c, str) and "." in c]
    frames = []
    for i, r in enumerate(runs):
        t = fill_base(r.trials, keys, r.spec.raw)  # a key a run does not search: its value as stored
        t = with_bracket_ends(r, t, cfg.lr)
        t["_run"] = str(i)
        frames.append(t)
    trials = pd.concat(frames, ignore_index=True, sort=False) if len(frames) > 1 else frames[0]
    if len(trials) >= 100_000:  # tens of seconds at 10^6 records: say so (the read said how large the file is)
        print(f"analysing {len(trials):,} records ({n_boot}-replicate bootstrap)...", file=sys.stderr, flush=True)
    try:
        a = analyze(trials, cfg, n_boot=n_boot)
    except RunError as e:
        where = ", ".join(str(r.path / "trials.csv") for r in runs)
        raise RunError(f"{where}: {e}") from None
    notes = {k: v for r in runs for k, v in adaptive_notes(r).items()}
    if notes and len(a.rows):
        a.rows["seeds_stop"] = [notes.get(str(lab), "") if t == "inconclusive" else ""
                                for lab, t in zip(a.rows["label"], a.rows["transfers"])]
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


def _check_same_setting(cfg: TableSettings, runs: list[Run]) -> None:
    """Runs merged into one table must train the same thing apart from what they search where they share a row:
    a fixed setting that differs between them (model.depth 4 in one run, 8 in another) would pool different
    models into the same cells. Refused with the differing keys named, unless each is a compare key (then it
    labels the rows); runs whose rows are disjoint (each its own aggregation, say) are shown side by side."""
    if len(runs) < 2:
        return
    searched = {k for r in runs for k in r.spec.space.keys} | {cfg.lr, cfg.transfer, *cfg.compare}
    fixed = [_fixed(r.spec.raw) for r in runs]
    keys = sorted(set().union(*fixed) - searched - _NOT_TRAINED)
    compare = list(cfg.compare)

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
                        "each differing key a row label (--compare " + ",".join([*cfg.compare, *(d.split(" ")[0] for d in differ)]) + ")",
                        key="leaderboard")


FLAGS = {"lr": "--lr", "transfer": "--transfer", "compare": "--compare", "metric": "--metric",
         "reference": "--reference", "tolerance_octaves": "--tolerance", "report": "--report"}


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
    over = {("tolerance_octaves" if k == "tolerance" else k): v for k, v in (overrides or {}).items() if v is not None}
    if not over:
        return
    if "compare" in over:
        c = over["compare"]
        over["compare"] = tuple(x.strip() for x in c.split(",") if x.strip()) if isinstance(c, str) else tuple(c)
    spec = runs[0].spec
    spec = dataclasses.replace(spec, leaderboard=dataclasses.replace(spec.leaderboard, **over))
    with contextlib.suppress(_Unchanged):  # the stored settings predate a rule; what the flags set was checked up to there
        check_leaderboard(spec, _FlagCtx(over), axes=len(runs) == 1)
    ref, key = spec.leaderboard.reference, spec.leaderboard.transfer
    if len(runs) > 1 and "reference" in over and key:
        sizes = {v for r in runs for v in (r.trials[key].dropna().tolist() if key in r.trials.columns else [r.stored(key)])}
        if not any(same_value(ref, v) for v in sizes):
            raise SpecError(f"{ref!r} is not a size of {key} in these runs: {', '.join(map(str, sorted(sizes, key=str)))}",
                            key="--reference")


def _check_axes(cfg: TableSettings, runs: Sequence[Run]) -> None:
    """A key the table slices by must be a column of some run's trials or a key of its spec."""
    for what, key in [("--lr", cfg.lr), ("--transfer", cfg.transfer)] + [("--compare", k) for k in cfg.compare]:
        if key and not any(key in r.trials.columns or r.stored(key) is not None for r in runs):
            searched = sorted({c for r in runs for c in r.trials.columns if isinstance(c, str) and "." in c})
            raise SpecError(f"{key!r} is neither a searched key of the run nor a key of its spec; searched: "
                            f"{', '.join(searched) or 'none'}", key=what)
    m = cfg.metric
    if not any(m in r.trials.columns for r in runs):
        have = sorted({c for r in runs for c in r.trials.columns if c in metrics.OBJECTIVES})
        raise SpecError(f"no run recorded the metric {m!r}; recorded: {', '.join(have) or 'none'}", key="--metric")
    rep = cfg.report
    if rep not in (None, "none") and not any(rep in r.trials.columns for r in runs):
        have = sorted({c for r in runs for c in r.trials.columns if c in metrics.REPORTS})
        raise SpecError(f"no run recorded the report metric {rep!r}; recorded: {', '.join(have) or 'none'} (or: none)", key="--report")


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
    dirs = [Path(d) for d in run_dirs]
    fmts = _parse_formats(formats)
    out = _out_dir(dirs, out_dir)
    command = _command(dirs, out, fmts, overrides)
    a, prov, runs = load_analysis(dirs, n_boot=n_boot, command=command, overrides=overrides)
    return write_leaderboard(a, prov, out, fmts, plots=plots, runs=runs)


def write_leaderboard(a: Analysis, prov: list[tuple[str, str]], out: Path, formats: str | Iterable[str] = ("md",), *,
                      plots: bool = True, runs: Sequence[Run] = ()) -> dict[str, Path]:
    """Write the files of an analysis into `out` (`build_leaderboard`'s; `nas-stab judge`'s, without `runs`: no
    run directory, so no figure that reads the runs' histories); returns {kind: path}."""
    fmts = _parse_formats(formats)
    plots_dir = out / "plots"
    if plots and (plots_dir.is_symlink() or plots_dir.exists() and not plots_dir.is_dir()):
        raise RunError(f"{plots_dir}: a symbolic link or a file; the leaderboard writes its figures only into a "
                       "plots/ directory of its own: move it aside")
    remove_stale_tmp([out, plots_dir])  # left by a killed leaderboard
    transfer_spec = runs[0].spec if runs and _pareto.is_transfer(runs[0].spec) else None
    written: dict[str, Path] = {}
    pngs: dict[str, bytes] = {}  # caption -> PNG
    links: dict[str, str] = {}  # caption -> path under out_dir
    if plots:
        _write_figures(a, runs, transfer_spec, out, written, pngs, links)
    for fmt in fmts:
        _write_format(fmt, a, prov, transfer_spec, out, written, pngs, links)
    if fmts and "sizes_csv" not in written:  # every format's text cites it (the report's and the plateaus' lines)
        written["sizes_csv"] = atomic_write(out / "leaderboard_sizes.csv", _formats.to_sizes_csv(a))
    return written


def _out_dir(run_dirs: list[Path], out_dir: str | Path | None) -> Path:
    if not run_dirs:
        raise RunError("no run directory given")
    if out_dir is None:
        if len(run_dirs) > 1:
            raise RunError("several run directories given: say where the combined leaderboard goes with --out DIR")
        return run_dirs[0]
    return Path(out_dir)


def _command(run_dirs: list[Path], out: Path, fmts: list[str], overrides: Mapping[str, Any] | None) -> str:
    """The `nas-stab leaderboard` command that rebuilds this table (the provenance prints it)."""
    command = "nas-stab leaderboard " + " ".join(str(d) for d in run_dirs) + f" --format {','.join(fmts)}"
    if len(run_dirs) > 1 or out != run_dirs[0]:
        command += f" --out {out}"
    for k, v in (overrides or {}).items():
        if v is not None:
            command += f" --{k} {','.join(map(str, v)) if isinstance(v, (list, tuple)) else v}"
    return command


def _write_figures(a: Analysis, runs: Sequence[Run], transfer_spec: Spec | None, out: Path, written: dict[str, Path],
                   pngs: dict[str, bytes], links: dict[str, str]) -> None:
    """plots/*.png (the Pareto front first for a transfer search), recorded in `written`, `pngs` and `links`."""
    if transfer_spec is not None:
        png = _pareto.pareto_plot(a, transfer_spec)
        if png is not None:
            written["plot:pareto"] = atomic_write(out / "plots" / "pareto.png", png)
            pngs[_pareto.CAPTION] = png
            links[_pareto.CAPTION] = "plots/pareto.png"
    history = {str(i): r.path / "history" for i, r in enumerate(runs)}
    figures = {
        "lr_transfer": lambda: _plots.transfer_plot(a),
        "optimum_transfer": lambda: _plots.optimum_plot(a),
        "fwd_norm_init": lambda: _plots.fwd_norm_plot(a, _plots.init_fwd_norms(a, history)) if runs else None,
        "divergence": lambda: _plots.divergence_plot(a, "diverged_why" if "diverged_why" in a.records.columns else None),
        "loss_curves": lambda: _plots.loss_curve_plot(a, _plots.loss_curves(a, history)) if runs else None,
    }
    for name, draw in figures.items():
        png = draw()
        if png is None:
            continue
        written[f"plot:{name}"] = atomic_write(out / "plots" / f"{name}.png", png)
        pngs[PLOTS[name]] = png
        links[PLOTS[name]] = f"plots/{name}.png"


def _write_format(fmt: str, a: Analysis, prov: list[tuple[str, str]], transfer_spec: Spec | None, out: Path,
                  written: dict[str, Path], pngs: dict[str, bytes], links: dict[str, str]) -> None:
    """leaderboard.<fmt> (with csv: the cells, sizes and provenance sidecars, and pareto.csv)."""
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
        written["edges_csv"] = atomic_write(out / "leaderboard_edges.csv", _formats.to_edges_csv(a))
        written["provenance"] = atomic_write(out / "leaderboard_provenance.txt", _formats.provenance_text(a, prov))
        if transfer_spec is not None:
            written["pareto_csv"] = atomic_write(out / "pareto.csv", _pareto.pareto_csv(a, transfer_spec))


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
