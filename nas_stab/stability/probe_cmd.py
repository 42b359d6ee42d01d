"""`nas-stab probe SPEC [--steps K]`: the stability metrics of every configuration, without training.

For every configuration of the space (the grid points; a continuous dimension
is probed at 3 points: its low end, middle -- geometric for a log scale -- and
high end; an integer range of more than 9 values at 5 spread points), with the
first seed only: build the model at init, take one stability snapshot (docs/metrics.md:
forward norms, gradient norms, update ratio, sharpness when
`stability.hessian` is on), and with `--steps K` train K optimizer steps on the
fixed probe batch (muP's coordinate check) and take a second snapshot.

Writes into ``<out>/<name>/`` only ``probe.csv`` (every metric, per-block
forward norms included), ``probe.md`` (the table, also printed) and
``plots/probe_*.png`` -- never the files of a `run` (trials.csv, study.db,
spec.yaml), so it can share a run's directory:

- ``probe_fwd_norm.png``: forward RMS norm per block at init (block 0 is the
  first block's input), one line per size (the `leaderboard.transfer` key's
  values), one panel per `leaderboard.compare` label; the muP coordinate check.
- ``probe_init_metrics.png`` (and ``probe_final_metrics.png`` with --steps):
  the coordinate check of every stability metric: one panel per metric, the
  size axis on x, one line per row (a `leaderboard.compare` label, and the
  value of any other searched key, a learning rate say), log-scaled y where
  the values are positive. Flat lines: the metric does not change with size.

Columns: ``init_<m>`` at init and, with --steps K, ``final_<m>`` after the K
steps, for every stability metric m of docs/metrics.md and probe_loss;
``status`` is ok, nonfinite (a metric overflowed: `error` names the first
non-finite quantity), invalid (the configuration breaks a rule) or failed (an
exception). An undefined metric (a 0 denominator) is an empty cell. Exit code
0, or 1 if any configuration failed.
"""
from __future__ import annotations

import dataclasses
import json
import math
import platform
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from nas_stab.errors import NasStabError, SpecError
from nas_stab.metrics import STABILITY_METRICS

METRICS = STABILITY_METRICS
EXTRA = ("probe_loss", "sharpness_iters", "sharpness_converged")
# the columns of the printed table (probe.csv holds every metric)
TABLE = ("fwd_ratio", "enc_fwd_ratio", "dec_fwd_ratio", "branch_ratio", "grad_norm", "grad_ratio", "update_norm",
         "loss_drop", "eos_ratio", "attn_logit_max")
CONTINUOUS_POINTS = 3
INT_MAX_VALUES = 9


# ---------------------------------------------------------------- configurations


def probe_points(spec) -> tuple[list[dict[str, Any]], list[str]]:
    """The configurations to probe, and notes on how continuous dimensions were discretized."""
    from nas_stab.search.plan import base_lookup
    from nas_stab.space import Space

    if not spec.space.dims:
        return [{}], []
    notes = []
    dims = []
    for d in spec.space.dims:
        if d.kind in ("uniform", "loguniform") or (d.kind == "int" and _int_count(d) > INT_MAX_VALUES):
            vals = _spread(d)
            notes.append(f"{d.key} ({d.kind} [{_fmt(d.low)}, {_fmt(d.high)}]) probed at {', '.join(map(_fmt, vals))}")
            d = dataclasses.replace(d, kind="values", values=tuple(vals))
        dims.append(d)
    from nas_stab.errors import SpecError
    from nas_stab.space import GridTooLarge
    from nas_stab.config.rules import GRID_CHECK_LIMIT

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
        if d.log and lo > 0:
            raw = [lo * (hi / lo) ** (i / (n - 1)) for i in range(n)]
        else:
            raw = [lo + (hi - lo) * i / (n - 1) for i in range(n)]
        step = d.step or 1
        vals = sorted({int(lo + round((v - lo) / step) * step) for v in raw})
        return [v for v in vals if lo <= v <= hi]
    log = d.log or d.kind == "loguniform"
    mid = math.sqrt(lo * hi) if log and lo > 0 else (lo + hi) / 2
    return [lo, mid, hi]


# ---------------------------------------------------------------- one configuration


class _TaskCache:
    """Data is loaded once per distinct (task, probe batch, batch settings), not once per configuration."""

    def __init__(self):
        self.key = None
        self.task = None

    def get(self, spec, seed, device):
        from nas_stab.config import to_plain
        from nas_stab.tasks import load_task

        t = spec.train
        key = json.dumps([to_plain(spec.task), spec.stability.probe_batch, t.batch_size, t.label_smoothing,
                          getattr(t, "max_tokens", None), seed, str(device)], sort_keys=True, default=str)
        if key != self.key:
            self.task, self.key = load_task(spec, seed, device), key
        return self.task


def probe_one(spec, seed: int, steps: int, tasks: _TaskCache | None = None) -> dict[str, Any]:
    """Snapshot at init, then K optimizer steps on the probe batch and a second snapshot."""
    import torch

    from nas_stab.models import build_model
    from nas_stab.stability.divergence import explain_nonfinite
    from nas_stab.stability.probes import Prober
    from nas_stab.training.loop import pick_device, seed_everything
    from nas_stab.training.optim import build_optimizer, lr_factor, set_lr, total_steps

    t = spec.train
    device = pick_device(t.device)
    seed_everything(seed)
    task = (tasks or _TaskCache()).get(spec, seed, device)
    seed_everything(seed)  # the model's init does not depend on whether the data was cached
    model = build_model(spec, task.info).to(device)
    optimizer = build_optimizer(model, t)
    total = total_steps(t, task.steps_per_epoch)
    prober = Prober(model, task, spec)
    row: dict[str, Any] = {"status": "ok", "error": "", "n_params": sum(p.numel() for p in model.parameters()),
                           "blocks": len(getattr(model, "blocks", []))}

    def snap(prefix: str, step: int, final: bool) -> None:
        s = prober.snapshot(optimizer, step, final=final)
        row[f"{prefix}lr"] = optimizer.param_groups[0]["lr"]
        for k in METRICS + EXTRA:
            if k in s:
                row[prefix + k] = s[k]
        for k, v in s.items():
            if k.startswith("fwd_norm."):
                row[prefix + k] = v
        if prober.nonfinite and row["status"] == "ok":
            what, value = prober.nonfinite
            row["status"], row["error"] = "nonfinite", f"{prefix.rstrip('_')}: non-finite {what} ({value})"

    set_lr(optimizer, t.lr, lr_factor(t, 0, total))
    snap("init_", 0, final=False)
    if steps:
        model.train()
        for k in range(1, steps + 1):
            set_lr(optimizer, t.lr, lr_factor(t, k - 1, total))
            loss = task.loss(model, task.probe_batch)
            if not math.isfinite(float(loss.detach())):
                found = explain_nonfinite(model, task, task.probe_batch)
                what = f"{found[0]} ({found[1]}) at step {k + found[2]}" if found else f"loss ({float(loss)}) at step {k}"
                row["status"], row["error"] = "nonfinite", f"training on the probe batch: non-finite {what}"
                break
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if t.grad_clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), t.grad_clip)
            optimizer.step()
        else:
            snap("final_", steps, final=True)
    return row


# ---------------------------------------------------------------- the command


def run_probe(spec, steps: int = 0, out_root: Path | str = Path("runs"), *, stream=None) -> int:
    """Probe every configuration of `spec`'s space; write probe.csv, probe.md and plots/probe_*.png."""
    import torch

    stream = stream or sys.stdout
    if steps is None:
        steps = 0
    if not isinstance(steps, int) or steps < 0:
        raise SpecError(f"must be an integer >= 0, got {steps!r}", key="--steps")
    from nas_stab.config import resolve

    points, notes = probe_points(spec)
    seed = spec.seeds[0] if spec.seeds else 0
    out = Path(out_root).expanduser() / spec.name
    out.mkdir(parents=True, exist_ok=True)
    if spec.train.threads:
        torch.set_num_threads(spec.train.threads)
    for n in notes:
        print(f"note: {n}", file=sys.stderr)
    print(f"probing {len(points)} configuration(s), seed {seed}, "
          f"{'at init' if not steps else f'at init and after {steps} step(s) on the probe batch'} -> {out}",
          file=sys.stderr, flush=True)

    tasks = _TaskCache()
    rows = []
    t_all = time.perf_counter()
    for i, params in enumerate(points):
        t0 = time.perf_counter()
        row: dict[str, Any] = {"config": i, **params}
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
        shown = ", ".join(f"{k.split('.')[-1]}={_fmt(v)}" for k, v in params.items()) or "base configuration"
        status = row["status"] if row["status"] != "ok" else f"fwd_ratio {_fmt(row.get('init_fwd_ratio'))}"
        print(f"[{i + 1}/{len(points)}] {shown}: {status} ({row['seconds']:.1f}s)", file=sys.stderr, flush=True)

    keys = list(spec.space.keys)
    _write_csv(out / "probe.csv", rows, keys)
    md = probe_markdown(spec, rows, keys, steps, seed, notes, time.perf_counter() - t_all)
    (out / "probe.md").write_text(md)
    print(md, file=stream)
    written = write_plots(spec, rows, out / "plots", steps)
    for p in written:
        print(f"wrote {p}", file=sys.stderr)
    return 1 if any(r["status"] == "failed" for r in rows) else 0


# ---------------------------------------------------------------- tables


def _columns(rows: list[dict], keys: list[str]) -> list[str]:
    head = ["config", *keys, "status"]
    metric_cols = []
    for prefix in ("init_", "final_"):
        for m in ("lr",) + METRICS + EXTRA:
            if any(prefix + m in r for r in rows):
                metric_cols.append(prefix + m)
    tail = ["n_params", "blocks", "seconds", "error"]
    norms = sorted({k for r in rows for k in r if k.startswith(("init_fwd_norm.", "final_fwd_norm."))},
                   key=lambda k: (k.split("fwd_norm.")[0], int(k.rsplit(".", 1)[1])))
    return head + metric_cols + tail + norms


def _write_csv(path: Path, rows: list[dict], keys: list[str]) -> None:
    import csv
    import io

    cols = _columns(rows, keys)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=cols, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _csv(r.get(k)) for k in cols})
    path.write_text(buf.getvalue())


def _csv(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, float):  # nan: undefined, an empty cell; inf: an overflow (status nonfinite)
        return repr(v) if math.isfinite(v) else ("" if math.isnan(v) else str(v))
    if isinstance(v, (list, tuple, dict)):
        return json.dumps(v)
    from nas_stab.results.csvsafe import escape_cell

    return escape_cell(v)  # no spreadsheet formula from a value


def probe_markdown(spec, rows: list[dict], keys: list[str], steps: int, seed: int, notes: list[str], seconds: float) -> str:
    import torch

    import nas_stab

    shown = ["init_" + m for m in TABLE] + (["final_" + m for m in TABLE] if steps else [])
    shown = [c for c in shown if any(c in r for r in rows)]
    head = ["#", *keys, "status", *shown]
    lines = [
        f"# Stability probe: {spec.name}",
        "",
        f"{len(rows)} configuration(s), seed {seed}; metrics on the fixed probe batch "
        f"({spec.stability.probe_batch} examples) at init"
        + (f" (`init_`) and after {steps} optimizer step(s) on it (`final_`)." if steps else " (`init_`)."),
        "`sharpness` is the top eigenvalue of the Hessian (Adam: preconditioned) of the loss on "
        + (f"the probe batch's first {spec.stability.hessian_batch} examples"
           if 0 < spec.stability.hessian_batch < spec.stability.probe_batch else "the probe batch")
        + "; `eos_ratio` = sharpness / the optimizer's stability threshold (above 1: unstable along the top "
        "direction). probe.csv has every metric; docs/metrics.md defines them.",
        "",
    ]
    for n in notes:
        lines.append(f"- {n}")
    if notes:
        lines.append("")
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join("---:" if h not in ("status",) else "---" for h in head) + "|")
    for r in rows:
        cells = [str(r["config"]), *[_fmt(r.get(k)) for k in keys], r["status"], *[_fmt(r.get(c)) for c in shown]]
        lines.append("| " + " | ".join(cells) + " |")
    errors = [r for r in rows if r.get("error")]
    if errors:
        lines.append("")
        for r in errors:
            lines.append(f"- config {r['config']} ({r['status']}): {r['error']}")
    lines += ["", f"nas_stab {nas_stab.__version__}, torch {torch.__version__}, {platform.machine()}, "
                  f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, {seconds:.1f}s"]
    return "\n".join(lines) + "\n"


def _fmt(v: Any) -> str:
    if v is None or v == "":
        return ""
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, float):
        if math.isnan(v):
            return "nan"
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        if v == int(v) and abs(v) < 1e6:
            return str(int(v))
        return f"{v:.4g}"
    return str(v)


# ---------------------------------------------------------------- plots


def write_plots(spec, rows: list[dict], plots_dir: Path, steps: int) -> list[Path]:
    """The muP-style figures; returns the files written."""
    ok = [r for r in rows if r["status"] in ("ok", "nonfinite")]
    if not ok:
        return []
    import matplotlib

    matplotlib.use("Agg", force=True)
    plots_dir.mkdir(parents=True, exist_ok=True)
    lb = spec.leaderboard
    keys = list(spec.space.keys)
    size_key = lb.transfer if lb.transfer in keys else next(
        (k for k in keys if all(isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool) for r in ok)), None)
    compare = [k for k in lb.compare if k in keys]
    others = [k for k in keys if k != size_key and k not in compare]
    written = []
    p = _fwd_norm_plot(ok, size_key, compare, others, plots_dir / "probe_fwd_norm.png")
    if p:
        written.append(p)
    prefixes = ["init_"] + (["final_"] if steps else [])
    for prefix in prefixes:
        p = _coordinate_check(ok, prefix, size_key, compare, others, plots_dir / f"probe_{prefix}metrics.png", steps)
        if p:
            written.append(p)
    return written


def _coordinate_check(rows, prefix: str, size_key, compare, others, path: Path, steps: int) -> Path | None:
    """One panel per metric against the size axis, one line per row (compare label and other keys' values)."""
    if size_key is None:
        return None
    names = [m for m in METRICS if any(isinstance(r.get(prefix + m), (int, float)) for r in rows)]
    if not names:
        return None
    import matplotlib

    line_keys = compare + others
    labels = sorted({tuple(r.get(k) for k in line_keys) for r in rows}, key=lambda t: tuple(_sort_key(v) for v in t))
    cmap = matplotlib.colormaps["tab10"]
    colors = {lab: cmap(i % 10) for i, lab in enumerate(labels)}
    sizes = [r.get(size_key) for r in rows]
    numeric = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in sizes)
    log_x = numeric and all(v > 0 for v in sizes) and max(sizes) / min(sizes) >= 4
    cats = sorted(set(sizes), key=_sort_key)
    fig, axes = _figure(len(names), w=3.6, h=2.8, cols=4)
    for ax, m in zip(axes, names):
        key = prefix + m
        finite = [float(r[key]) for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r[key])]
        for lab in labels:
            pts = sorted(((r.get(size_key), float(r[key])) for r in rows
                          if tuple(r.get(k) for k in line_keys) == lab and isinstance(r.get(key), (int, float))),
                         key=lambda p: _sort_key(p[0]))
            if not pts:
                continue
            xs = [p[0] if numeric else cats.index(p[0]) for p in pts]
            ys = [p[1] if math.isfinite(p[1]) else math.nan for p in pts]
            ax.plot(xs, ys, marker="o", ms=3, lw=1.4, color=colors[lab], label=_label(dict(zip(line_keys, lab)), line_keys))
        if finite and all(v > 0 for v in finite):
            _log_y(ax, finite)
        if m == "eos_ratio":
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        if log_x:
            ax.set_xscale("log", base=2)
            ax.set_xticks(cats)
            ax.set_xticklabels([_fmt(c) for c in cats])
        elif not numeric:
            ax.set_xticks(range(len(cats)))
            ax.set_xticklabels([_fmt(c) for c in cats])
        ax.set_title(m, fontsize=9)
        ax.set_xlabel(size_key, fontsize=8)
        ax.grid(alpha=0.3, which="major")
    axes[0].legend(fontsize=6, loc="best")
    when = "at init" if prefix == "init_" else f"after {steps} step(s) on the probe batch"
    fig.suptitle(f"stability metrics {when} against {size_key} (coordinate check: flat lines = stable across sizes)",
                 fontsize=10)
    return _save(fig, path)


def _label(r: dict, keys: list[str]) -> str:
    return ", ".join(f"{k.split('.')[-1]}={_fmt(r.get(k))}" for k in keys) if keys else "all"


def _sort_key(v: Any):
    return (0, float(v), "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0.0, str(v))


def _figure(n: int, w: float = 4.4, h: float = 3.4, cols: int = 3):
    import matplotlib.pyplot as plt

    if n == 1:
        w, h = 5.6, 4.0
    cols = min(cols, n)
    nrows = math.ceil(n / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(w * cols, h * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _log_y(ax, values: list[float]) -> None:
    """Log y axis; over less than three decades, label 1-2-5 ticks in plain numbers."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    v = [x for x in values if math.isfinite(x) and x > 0]
    if v and max(v) / min(v) < 1e3:
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())


def _colors(values: list):
    import matplotlib

    cmap = matplotlib.colormaps["viridis"]
    n = max(1, len(values) - 1)
    return {v: cmap(0.92 * i / n) for i, v in enumerate(values)}


def _block_norms(r: dict) -> list[float] | None:
    """[input RMS, block 1 output RMS, ...]; the input RMS from fwd_ratio = last / input."""
    n = r.get("blocks") or 0
    outs = [r.get(f"init_fwd_norm.{i}") for i in range(n)]
    if not outs or any(v is None for v in outs):
        return None
    ratio = r.get("init_fwd_ratio")
    first_in = outs[-1] / ratio if ratio and math.isfinite(ratio) and ratio > 0 else math.nan
    return [first_in, *outs]


def _panels(rows: list[dict], compare: list[str], others: list[str], value) -> list[tuple[str, list[dict]]]:
    """One panel per compare label x value of the other keys -- but other-key values that do
    not change `value(row)` (a learning rate does not change the forward pass at init) are merged."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in compare), []).append(r)
    panels = []
    for label in sorted(groups, key=lambda t: tuple(_sort_key(v) for v in t)):
        rs = groups[label]
        by_other: dict[tuple, list[dict]] = {}
        for r in rs:
            by_other.setdefault(tuple(r.get(k) for k in others), []).append(r)
        kept: list[tuple[tuple, list[dict]]] = []
        for o in sorted(by_other, key=lambda t: tuple(_sort_key(v) for v in t)):
            sig = _signature(by_other[o], value)
            if not any(_signature(k[1], value) == sig for k in kept):
                kept.append((o, by_other[o]))
        for o, rs_o in kept:
            parts = [_label(rs_o[0], compare)] if compare else []
            if len(kept) > 1:
                parts.append(_label(rs_o[0], others))
            panels.append(("; ".join(parts) or "all", rs_o))
    return panels


def _signature(rows: list[dict], value) -> tuple:
    out = []
    for r in rows:
        v = value(r)
        if isinstance(v, list):
            out.append(tuple(round(x, 9) if isinstance(x, float) and math.isfinite(x) else str(x) for x in v))
        else:
            out.append(round(v, 9) if isinstance(v, float) and math.isfinite(v) else str(v))
    return tuple(sorted(out, key=str))


def _fwd_norm_plot(rows, size_key, compare, others, path: Path) -> Path | None:
    from matplotlib.ticker import MaxNLocator

    usable = [r for r in rows if _block_norms(r)]
    if not usable:
        return None
    panels = _panels(usable, compare, others, lambda r: [r.get(size_key), *_block_norms(r)])
    panels = panels[:24]
    fig, axes = _figure(len(panels))
    sizes = sorted({r.get(size_key) for r in usable}, key=_sort_key) if size_key else [None]
    colors = _colors(sizes)
    vals = [v for r in usable for v in _block_norms(r) if math.isfinite(v) and v > 0]
    # depths differ (depth is the size axis): x = relative depth l / L, so every line spans [0, 1]
    relative = len({len(_block_norms(r)) for r in usable}) > 1
    for ax, (title, rs) in zip(axes, panels):
        seen = set()
        for r in sorted(rs, key=lambda r: _sort_key(r.get(size_key))):
            s = r.get(size_key)
            if s in seen:
                continue
            seen.add(s)
            y = _block_norms(r)
            L = len(y) - 1
            x = [i / L for i in range(L + 1)] if relative else list(range(L + 1))
            name = f"{size_key.split('.')[-1]}={_fmt(s)}" if size_key else "norm"
            ax.plot(x, y, marker="o" if L <= 32 else None, ms=3, lw=1.4, color=colors[s], label=name)
        _log_y(ax, vals)
        if relative:
            ax.set_xlim(0, 1)
            ax.set_xlabel("relative depth l / L (0 = input of the first block)")
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("block (0 = input of the first block)")
        ax.set_ylabel("forward RMS norm at init")
        ax.set_title(title, fontsize=9)
        ax.grid(alpha=0.3, which="major")
    if vals:
        lo, hi = min(vals), max(vals)
        for ax in axes:  # one scale for every panel: the labels compare at a glance
            ax.set_ylim(lo / 1.5, hi * 1.5)
    axes[0].legend(fontsize=7, loc="best", title=size_key, title_fontsize=7)
    fig.suptitle("forward norm per block at initialization (coordinate check: flat lines across sizes = stable)", fontsize=10)
    return _save(fig, path)
