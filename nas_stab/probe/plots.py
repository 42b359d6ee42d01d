"""`nas-stab probe`'s figures, plots/probe_*.png (the muP coordinate check; see probe_cmd)."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas_stab.metrics import STABILITY_METRICS
from nas_stab.probe.table import axes, fmt, n_layers

if TYPE_CHECKING:
    from nas_stab.config.schema import Spec


def write_plots(spec: Spec, rows: list[dict], plots_dir: Path, steps: int) -> list[Path]:
    """The muP-style figures from one row per configuration (medians over seeds, with `<col>_lo`/`_hi`
    ranges when several seeds were probed); returns the files written."""
    ok = [r for r in rows if r["status"] in ("ok", "nonfinite")]
    if not ok:
        return []
    import matplotlib  # deferred: loads matplotlib only when this runs

    matplotlib.use("Agg", force=True)
    plots_dir.mkdir(parents=True, exist_ok=True)
    size_key, line_keys = axes(spec)
    compare = [k for k in spec.leaderboard.compare if k in line_keys]
    others = [k for k in line_keys if k not in compare]
    written = []
    p = _fwd_norm_plot(ok, size_key, compare, others, plots_dir / "probe_fwd_norm.png")
    if p:
        written.append(p)
    prefixes = ["init_"] + (["final_"] if steps else [])
    p = _per_layer_plot(ok, [k for k in [*compare, *others, size_key] if k], prefixes, steps, plots_dir / "probe_per_layer.png")
    if p:
        written.append(p)
    for prefix in prefixes:
        p = _coordinate_check(ok, prefix, size_key, compare, others, plots_dir / f"probe_{prefix}metrics.png", steps)
        if p:
            written.append(p)
    p = _coord_layers(ok, size_key, compare + others, prefixes, steps, plots_dir / "probe_coord.png")
    if p:
        written.append(p)
    return written


def _coord_layers(rows, size_key, line_keys: list[str], prefixes: list[str], steps: int, path: Path) -> Path | None:
    """muP's coordinate check (Tensor Programs V, Figure 5): per row label and per snapshot (init, after K steps)
    one panel of every layer's activation RMS (each block's stream, `fwd_norm.<i>`, and the output logits)
    against the size axis, one line per layer. Flat lines: the activations keep their size as the model
    widens; under SP after a few Adam steps they grow with width."""
    if size_key is None:
        return None
    sizes = [r.get(size_key) for r in rows]
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in sizes) or len(set(sizes)) < 2:
        return None
    labels = sorted({tuple(r.get(k) for k in line_keys if k != size_key) for r in rows},
                    key=lambda t: tuple(_sort_key(v) for v in t))
    keys = [k for k in line_keys if k != size_key]
    n_blocks = max(int(r.get("blocks") or 0) for r in rows)
    layers = [f"fwd_norm.{i}" for i in range(n_blocks)] + ["output_logit_rms"]
    colors = _colors(layers)
    fig, axes = _figure(len(labels) * len(prefixes), w=3.8, h=3.0, cols=len(prefixes))
    for li, lab in enumerate(labels):
        rs = sorted((r for r in rows if tuple(r.get(k) for k in keys) == lab), key=lambda r: r[size_key])
        for pi, prefix in enumerate(prefixes):
            ax = axes[li * len(prefixes) + pi]
            seen = []
            for layer in layers:
                pts = [(r[size_key], float(r[prefix + layer])) for r in rs
                       if isinstance(r.get(prefix + layer), (int, float)) and math.isfinite(r[prefix + layer])]
                if len(pts) < 2:
                    continue
                name = "logits" if layer == "output_logit_rms" else f"block {int(layer.split('.')[1]) + 1}"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", ms=3, lw=1.3, color=colors[layer], label=name)
                seen += [p[1] for p in pts]
            if seen and all(v > 0 for v in seen):
                _log_y(ax, seen)
            ax.set_xscale("log", base=2)
            xs = sorted(set(r[size_key] for r in rs))
            ax.set_xticks(xs)
            ax.set_xticklabels([fmt(x) for x in xs])
            when = "init" if prefix == "init_" else f"after {steps} step(s)"
            _title(ax, f"{_label(dict(zip(keys, lab)), keys)}: {when}", 9)
            ax.set_xlabel(size_key, fontsize=8)
            ax.set_ylabel("activation RMS", fontsize=8)
            ax.grid(alpha=0.3)
            if len(layers) <= 12:
                ax.legend(fontsize=6, loc="best")
    _suptitle(fig, f"coordinate check: every layer's activation RMS against {size_key}", fontsize=10)
    return _save(fig, path)


def _coordinate_check(rows, prefix: str, size_key, compare, others, path: Path, steps: int) -> Path | None:
    """One panel per metric against the size axis, one line per row (compare label and other keys' values)."""
    if size_key is None:
        return None
    names = [m for m in STABILITY_METRICS if any(isinstance(r.get(prefix + m), (int, float)) for r in rows)]
    if not names:
        return None
    import matplotlib  # deferred: loads matplotlib only when this runs

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
            band = sorted(((r.get(size_key), r[key + "_lo"], r[key + "_hi"]) for r in rows
                           if tuple(r.get(k) for k in line_keys) == lab and isinstance(r.get(key + "_lo"), (int, float))
                           and math.isfinite(r[key + "_lo"]) and math.isfinite(r[key + "_hi"])), key=lambda p: _sort_key(p[0]))
            if band:  # the range over seeds
                ax.fill_between([b[0] if numeric else cats.index(b[0]) for b in band], [b[1] for b in band],
                                [b[2] for b in band], color=colors[lab], alpha=0.18, lw=0)
        if finite and all(v > 0 for v in finite):
            _log_y(ax, finite)
        if m == "eos_ratio":
            ax.axhline(1.0, color="grey", lw=0.8, ls="--")
        if log_x:
            ax.set_xscale("log", base=2)
            ax.set_xticks(cats)
            ax.set_xticklabels([fmt(c) for c in cats])
        elif not numeric:
            ax.set_xticks(range(len(cats)))
            ax.set_xticklabels([fmt(c) for c in cats])
        ax.set_title(m, fontsize=9)
        ax.set_xlabel(size_key, fontsize=8)
        ax.grid(alpha=0.3, which="major")
    axes[0].legend(fontsize=6, loc="best")
    when = "at init" if prefix == "init_" else f"after {steps} step(s) on the probe batch"
    _suptitle(fig, f"stability metrics {when} against {size_key} (coordinate check: flat lines = stable across sizes)",
                 fontsize=10)
    return _save(fig, path)


def _fill(text: str, width_in: float, fontsize: float) -> str:
    """`text` wrapped to lines that fit `width_in` inches at `fontsize` points (about 0.55 em a character)."""
    return textwrap.fill(text, max(20, int(width_in * 72 / (fontsize * 0.55))))


def _title(ax, text: str, fontsize: float) -> None:
    """A panel title wrapped to its axes' width (a long configuration label was clipped at both edges)."""
    fig = ax.get_figure()
    ax.set_title(_fill(text, fig.get_size_inches()[0] * ax.get_position().width * 1.1, fontsize), fontsize=fontsize)


def _suptitle(fig, text: str, fontsize: float = 10, **kw) -> None:
    """The figure's title wrapped to its width."""
    fig.suptitle(_fill(text, fig.get_size_inches()[0] * 0.95, fontsize), fontsize=fontsize, **kw)


def _label(r: dict, keys: list[str]) -> str:
    """'aggregation=sum, init=kaiming'; a key inactive in this row (a `when:` dimension) is left out."""
    shown = [f"{k.split('.')[-1]}={fmt(r.get(k))}" for k in keys if r.get(k) not in (None, "")]
    return ", ".join(shown) or "every configuration"


def _sort_key(v: Any):
    return (0, float(v), "") if isinstance(v, (int, float)) and not isinstance(v, bool) else (1, 0.0, str(v))


def _figure(n: int, w: float = 4.4, h: float = 3.4, cols: int = 3):
    import matplotlib.pyplot as plt  # deferred: loads matplotlib only when this runs

    if n == 1:
        w, h = 5.6, 4.0
    cols = min(cols, n)
    nrows = math.ceil(n / cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(w * cols, h * nrows), squeeze=False)
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _save(fig, path: Path) -> Path:
    import matplotlib.pyplot as plt  # deferred: loads matplotlib only when this runs

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _log_y(ax, values: list[float]) -> None:
    """Log y axis; over less than three decades, label 1-2-5 ticks in plain numbers."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # deferred: loads matplotlib only when this runs

    ax.set_yscale("log")
    v = [x for x in values if math.isfinite(x) and x > 0]
    if v and max(v) / min(v) < 1e3:
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())


def _colors(values: list):
    import matplotlib  # deferred: loads matplotlib only when this runs

    cmap = matplotlib.colormaps["viridis"]
    n = max(1, len(values) - 1)
    return {v: cmap(0.92 * i / n) for i, v in enumerate(values)}


def _block_norms(r: dict) -> list[float]:
    """[input RMS, block 1 output RMS, ...]; the input RMS from fwd_ratio = last / input. [] when a block's is missing."""
    n = r.get("blocks") or 0
    outs = [v for i in range(n) if (v := r.get(f"init_fwd_norm.{i}")) is not None]
    if not outs or len(outs) < n:
        return []
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
        for _, rs_o in kept:
            parts = [_label(rs_o[0], compare)] if compare else []
            if len(kept) > 1:
                parts.append(_label(rs_o[0], others))
            panels.append(("; ".join(parts) or "every configuration", rs_o))
    return panels


def _signature(rows: list[dict], value) -> tuple:
    out: list[tuple | float | str] = []
    for r in rows:
        v = value(r)
        if isinstance(v, list):
            out.append(tuple(round(x, 9) if isinstance(x, float) and math.isfinite(x) else str(x) for x in v))
        else:
            out.append(round(v, 9) if isinstance(v, float) and math.isfinite(v) else str(v))
    return tuple(sorted(out, key=str))


def _fwd_norm_plot(rows, size_key, compare, others, path: Path) -> Path | None:
    from matplotlib.ticker import MaxNLocator  # deferred: loads matplotlib only when this runs

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
            name = f"{size_key.split('.')[-1]}={fmt(s)}" if size_key else "norm"
            ax.plot(x, y, marker="o" if L <= 32 else None, ms=3, lw=1.4, color=colors[s], label=name)
        _log_y(ax, vals)
        if relative:
            ax.set_xlim(0, 1)
            ax.set_xlabel("relative depth l / L (0 = input of the first block)")
        else:
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("block (0 = input of the first block)")
        ax.set_ylabel("forward RMS norm at init")
        _title(ax, title, 9)
        ax.grid(alpha=0.3, which="major")
    if vals:
        lo, hi = min(vals), max(vals)
        for ax in axes:  # one scale for every panel: the labels compare at a glance
            ax.set_ylim(lo / 1.5, hi * 1.5)
    axes[0].legend(fontsize=7, loc="best", title=size_key, title_fontsize=7)
    _suptitle(fig, "forward norm per block at initialization (coordinate check: flat lines across sizes = stable)", fontsize=10)
    return _save(fig, path)


def _per_layer_plot(rows, keys: list[str], prefixes: list[str], steps: int, path: Path) -> Path | None:
    """The Path-BN paper's Figure 4 form, for models with BatchNorm: per layer i (x), `bn_sigma.<i>` (left)
    and `grad_stream.<i>` (right, log y), one line per configuration (its searched keys' values), the median
    over seeds with their range as a band; one row of panels at init, one after the steps."""
    from matplotlib.ticker import MaxNLocator  # deferred: loads matplotlib only when this runs

    if not n_layers(rows, "bn_sigma"):
        return None
    import matplotlib  # deferred: loads matplotlib only when this runs

    cmap = matplotlib.colormaps["tab10"]
    metrics = (("bn_sigma", "BN sigma (batch std of the BN input, mean over channels)"),
               ("grad_stream", "L2 norm of dLoss / d(layer output)"))
    fig, axes = _figure(len(prefixes) * 2, w=5.2, h=3.8, cols=2)
    for row_i, prefix in enumerate(prefixes):
        when = "at init" if prefix == "init_" else f"after {steps} step(s)"
        for col, (m, ylabel) in enumerate(metrics):
            ax = axes[2 * row_i + col]
            finite = []
            for c, r in enumerate(rows):
                n = n_layers([r], m, prefix)
                pts = [(i, r.get(f"{prefix}{m}.{i}")) for i in range(n)]
                pts = [(i, float(v)) for i, v in pts if isinstance(v, (int, float)) and math.isfinite(v)]
                if not pts:
                    continue
                color = cmap(c % 10)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o" if n <= 32 else None, ms=3, lw=1.4,
                        color=color, label=_label(r, keys) if keys else f"config {r.get('config')}")
                finite += [p[1] for p in pts]
                band = [(i, r.get(f"{prefix}{m}.{i}_lo"), r.get(f"{prefix}{m}.{i}_hi")) for i in range(n)]
                band = [b for b in band if all(isinstance(v, (int, float)) and math.isfinite(v) for v in b[1:])]
                if band:  # the range over seeds
                    ax.fill_between([b[0] for b in band], [b[1] for b in band], [b[2] for b in band],
                                    color=color, alpha=0.18, lw=0)
                    finite += [b[1] for b in band] + [b[2] for b in band]
            if m == "grad_stream" and finite and all(v > 0 for v in finite):
                _log_y(ax, finite)
            if m == "bn_sigma":
                ax.axhline(1.0, color="grey", lw=0.8, ls="--")
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            ax.set_xlabel("layer index (0 = first layer)")
            ax.set_ylabel(ylabel, fontsize=8)
            ax.set_title(f"{m} {when}", fontsize=9)
            ax.grid(alpha=0.3, which="major")
    axes[0].legend(fontsize=7, loc="best")
    _suptitle(fig, "per layer: BN sigma and hidden-gradient norm (median over seeds, band: range; Path-BN paper Fig. 4)",
                 fontsize=10)
    return _save(fig, path)
