"""`nas-stab probe SPEC [--steps K] [--seeds N]`: the stability metrics of every configuration, without training.

For every configuration of the space (the grid points; a continuous dimension
is probed at 3 points: its low end, middle -- geometric for a log scale -- and
high end; an integer range of more than 9 values at 5 spread points) and every
seed of `seeds:` (`--seeds N`: the first N): build the model at init, take one stability snapshot (docs/metrics.md:
forward norms, gradient norms, update ratio, sharpness when
`stability.hessian` is on), and with `--steps K` train K optimizer steps on the
fixed probe batch (muP's coordinate check) and take a second snapshot.

Writes into ``<out>/<name>/`` only ``probe.csv`` (one row per configuration and
seed: every metric, per-block forward norms and hidden-stream gradient norms
and per-BatchNorm sigmas included), ``probe_slopes.csv`` (with two or more sizes: each metric's log-log
slope against the size axis, with a 90% seed-bootstrap interval;
`probe_seeds.py`), ``probe.md`` (the table of per-configuration medians over
seeds, the slopes; also printed), ``probe_provenance.txt`` (spec hash, seeds,
commit, versions, hardware, time, command) and ``plots/probe_*.png`` -- never
the files of a `run` (trials.csv, study.db, spec.yaml), so it can share a
run's directory:

- ``probe_fwd_norm.png``: forward RMS norm per block at init (block 0 is the
  first block's input), one line per size (the `leaderboard.transfer` key's
  values), one panel per `leaderboard.compare` label; the muP coordinate check.
- ``probe_per_layer.png`` (models with BatchNorm): the Path-BN paper's
  Figure 4 form, `bn_sigma.<i>` and `grad_stream.<i>` against the layer index,
  one line per configuration (median over seeds, band: their range), at init
  and with --steps after them; probe.md lists the same values per layer.
- ``probe_init_metrics.png`` (and ``probe_final_metrics.png`` with --steps):
  the coordinate check of every stability metric: one panel per metric, the
  size axis on x, one line per row (a `leaderboard.compare` label, and the
  value of any other searched key, a learning rate say), log-scaled y where
  the values are positive; the line is the median over seeds, the band their
  range. Flat lines: the metric does not change with size.

Columns: ``init_<m>`` at init and, with --steps K, ``final_<m>`` after the K
steps, for every stability metric m of docs/metrics.md and probe_loss;
``status`` is ok, nonfinite (a metric overflowed: `error` names the first
non-finite quantity), invalid (the configuration breaks a rule) or failed (an
exception). An undefined metric (a 0 denominator) is an empty cell. Exit code
0, or 1 if any configuration failed.
"""
from __future__ import annotations

import dataclasses
import math
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas_stab.errors import NasStabError, SpecError
from nas_stab.probe.measure import TaskCache, probe_one
from nas_stab.probe.plots import write_plots
from nas_stab.probe.seeds import aggregate, slopes
from nas_stab.probe.table import axes, fmt, probe_markdown, provenance_text, write_csv, write_slopes
from nas_stab.search.plan import base_lookup
from nas_stab.space import GridTooLarge, Space

if TYPE_CHECKING:
    from nas_stab.config.schema import Spec

INT_MAX_VALUES = 9  # an integer range of more values is probed at 5 spread points


# ---------------------------------------------------------------- configurations


def probe_points(spec: Spec) -> tuple[list[dict[str, Any]], list[str]]:
    """The configurations to probe, and notes on how continuous dimensions were discretized."""
    from nas_stab.config.rules_space import GRID_CHECK_LIMIT  # deferred: loads PyYAML only when this runs

    if not spec.space.dims:
        return [{}], []
    notes = []
    dims = []
    for d in spec.space.dims:
        if d.kind in ("uniform", "loguniform") or (d.kind == "int" and _int_count(d) > INT_MAX_VALUES):
            vals = _spread(d)
            notes.append(f"{d.key} ({d.kind} [{fmt(d.low)}, {fmt(d.high)}]) probed at {', '.join(map(fmt, vals))}")
            d = dataclasses.replace(d, kind="values", values=tuple(vals))
        dims.append(d)
    try:
        return Space(tuple(dims)).grid(base_lookup(spec), limit=GRID_CHECK_LIMIT), notes
    except GridTooLarge as e:
        raise SpecError(f"{e}; probe fewer values", file=spec.source, key="space") from None


def _int_count(d) -> int:
    return len(range(int(d.low), int(d.high) + 1, d.step or 1))


def _spread(d) -> list:
    lo, hi = float(d.low), float(d.high)
    if d.kind == "int":
        n = 5
        raw = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)] if d.log and lo > 0 else [lo + (hi - lo) * i / (n - 1) for i in range(n)]
        step = d.step or 1
        vals = sorted({int(lo + round((v - lo) / step) * step) for v in raw})
        return [v for v in vals if lo <= v <= hi]
    log = d.log or d.kind == "loguniform"
    mid = math.sqrt(lo * hi) if log and lo > 0 else (lo + hi) / 2
    return [lo, mid, hi]


# ---------------------------------------------------------------- the command


def run_probe(spec: Spec, steps: int = 0, out_root: Path | str = Path("runs"), *, stream=None,
              seeds: int | None = None, command: str | None = None) -> int:
    """Probe every configuration of `spec`'s space at each seed; write probe.csv, probe_slopes.csv,
    probe.md, probe_provenance.txt and plots/probe_*.png. `seeds`: the first N seeds of `seeds:` (default all)."""
    import torch  # deferred: loads torch only when this runs

    stream = stream or sys.stdout
    if steps is None:
        steps = 0
    if not isinstance(steps, int) or steps < 0:
        raise SpecError(f"must be an integer >= 0, got {steps!r}", key="--steps")
    all_seeds = list(spec.seeds) if spec.seeds else [0]
    if seeds is not None and (not isinstance(seeds, int) or isinstance(seeds, bool) or not 1 <= seeds <= len(all_seeds)):
        raise SpecError(f"must be an integer from 1 to {len(all_seeds)} (the seeds of the experiment file), got {seeds!r}",
                        key="--seeds")
    use_seeds = all_seeds[:seeds] if seeds else all_seeds
    from nas_stab.config import resolve  # deferred: loads PyYAML only when this runs

    points, notes = probe_points(spec)
    out = Path(out_root).expanduser() / spec.name
    out.mkdir(parents=True, exist_ok=True)
    if spec.train.threads:
        torch.set_num_threads(spec.train.threads)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"probing {len(points)} configuration(s) x {len(use_seeds)} seed(s), "
          f"{'at init' if not steps else f'at init and after {steps} step(s) on the probe batch'} -> {out}",
          file=sys.stderr, flush=True)

    tasks = TaskCache()
    rows = []
    t_all = time.perf_counter()
    started = datetime.now(timezone.utc)
    n = len(points) * len(use_seeds)
    for seed in use_seeds:  # seed-major: the data (and its probe batch) is loaded once per seed
        for i, params in enumerate(points):
            t0 = time.perf_counter()
            row: dict[str, Any] = {"config": i, "seed": seed, **params}
            try:
                resolved = resolve(spec, params)
            except SpecError as e:
                row.update(status="invalid", error=getattr(e, "message", str(e)))
            else:
                try:
                    row.update(probe_one(resolved, seed, steps, tasks))
                except (KeyboardInterrupt, NasStabError):
                    raise  # a missing dataset file is bad input for every configuration: exit 2
                except Exception as e:  # one configuration's bug must not stop the others
                    row.update(status="failed", error=f"{type(e).__name__}: {e}")
            row["seconds"] = round(time.perf_counter() - t0, 3)
            rows.append(row)
            shown = ", ".join(f"{k.split('.')[-1]}={fmt(v)}" for k, v in params.items()) or "base configuration"
            status = row["status"] if row["status"] != "ok" else f"fwd_ratio {fmt(row.get('init_fwd_ratio'))}"
            print(f"[{len(rows)}/{n}] {shown} seed {seed}: {status} ({row['seconds']:.1f}s)", file=sys.stderr, flush=True)

    keys = list(spec.space.keys)
    size_key, line_keys = axes(spec)
    summary = aggregate(rows)
    slope_rows = slopes(rows, size_key, line_keys)
    write_csv(out / "probe.csv", rows, keys)
    write_slopes(out / "probe_slopes.csv", slope_rows, line_keys)
    seconds = time.perf_counter() - t_all
    md = probe_markdown(spec, summary, keys, steps, use_seeds, notes, seconds, slope_rows=slope_rows,
                        size_key=size_key, line_keys=line_keys)
    (out / "probe.md").write_text(md)
    (out / "probe_provenance.txt").write_text(provenance_text(spec, use_seeds, steps, started, seconds, len(rows), command))
    print(md, file=stream)
    written = write_plots(spec, summary, out / "plots", steps)
    for p in written:
        print(f"wrote {p}", file=sys.stderr)
    return 1 if any(r["status"] == "failed" for r in rows) else 0
