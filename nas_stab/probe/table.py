"""`nas-stab probe`'s tables: probe.csv (every metric, a row per configuration and seed), probe_slopes.csv,
probe.md (the printed table: medians over seeds, and the slopes) and probe_provenance.txt."""
from __future__ import annotations

import csv
import io
import json
import math
import platform
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import nas_stab
from nas_stab.csvsafe import escape_cell
from nas_stab.metrics import PROBE_EXTRA, STABILITY_METRICS
from nas_stab.store.rundir_meta import git_commit, hardware

if TYPE_CHECKING:
    from nas_stab.config.schema import Spec

# the columns of the printed table (probe.csv holds every metric)
TABLE = ("fwd_ratio", "enc_fwd_ratio", "dec_fwd_ratio", "branch_ratio", "grad_norm", "grad_ratio", "update_norm",
         "loss_drop", "eos_ratio", "attn_logit_max")


def axes(spec: Spec) -> tuple[str | None, list[str]]:
    """The size axis (`leaderboard.transfer` when searched, else the first numeric key) and the keys that label
    a line of the table's rows (`leaderboard.compare`, then the other searched keys)."""
    keys = list(spec.space.keys)
    lb = spec.leaderboard
    size_key = lb.transfer if lb.transfer in keys else None
    if size_key is None:
        for d in spec.space.dims:
            if d.kind in ("int", "uniform", "loguniform") or (
                    d.kind == "values" and d.values and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in d.values)):
                size_key = d.key
                break
    compare = [k for k in lb.compare if k in keys]
    return size_key, compare + [k for k in keys if k != size_key and k not in compare]


def _block_cols(rows: list[dict], what: str) -> list[str]:
    found = {k for r in rows for k in r if k.startswith((f"init_{what}.", f"final_{what}.")) and not k.endswith(("_lo", "_hi"))}
    return sorted(found, key=lambda k: (k.split(what)[0], int(k.rsplit(".", 1)[1])))


def columns(rows: list[dict], keys: list[str]) -> list[str]:
    head = ["config", *(["seed"] if any("seed" in r for r in rows) else []), *keys, "status"]
    metric_cols = []
    for prefix in ("init_", "final_"):
        for m in ("lr",) + STABILITY_METRICS + PROBE_EXTRA:
            if any(prefix + m in r for r in rows):
                metric_cols.append(prefix + m)
    tail = ["n_params", "blocks", "seconds", "error"]
    return head + metric_cols + tail + _block_cols(rows, "fwd_norm") + _block_cols(rows, "grad_stream") + _block_cols(rows, "bn_sigma")


def write_slopes(path: Path, rows: list[dict], line_keys: list[str]) -> None:
    """probe_slopes.csv: one row per table row and metric (empty when fewer than two sizes were probed)."""
    _write_rows(path, rows, [*line_keys, "metric", "slope", "lo", "hi", "sizes", "seeds"])


def provenance_text(spec: Spec, seeds: list, steps: int, started, seconds: float, n_rows: int, command: str | None) -> str:
    """probe_provenance.txt: what produced probe.csv (the commit says '+dirty' when the source had local changes)."""
    import torch  # deferred: loads torch only when this runs

    from nas_stab.config import spec_hash  # deferred: loads PyYAML only when this runs

    lines = [
        f"spec: {spec.name} (hash {spec_hash(spec)})",
        f"description: {spec.description}" if getattr(spec, "description", None) else None,
        f"seeds: {', '.join(map(str, seeds))}",
        "probe: at init" + (f" and after {steps} optimizer step(s) on the probe batch" if steps else "")
        + f", probe batch {spec.stability.probe_batch} examples",
        f"nas_stab: {nas_stab.__version__} (commit {git_commit()})",
        f"torch: {torch.__version__}",
        f"python: {platform.python_version()}",
        f"hardware: {hardware()}",
        f"started: {started.isoformat(timespec='seconds')}",
        f"rows: {n_rows} (configuration x seed)",
        f"compute: {seconds:.0f} s wall",
        f"command: {command}" if command else None,
        "definitions: docs/metrics.md",
    ]
    return "\n".join(x for x in lines if x) + "\n"


def write_csv(path: Path, rows: list[dict], keys: list[str]) -> None:
    _write_rows(path, rows, columns(rows, keys))


def _write_rows(path: Path, rows: list[dict], cols: list[str]) -> None:
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
    return escape_cell(v)  # no spreadsheet formula from a value


def probe_markdown(spec: Spec, rows: list[dict], keys: list[str], steps: int, seeds: list, notes: list[str], seconds: float,
                   *, slope_rows: Sequence[dict] = (), size_key: str | None = None, line_keys: Sequence[str] = ()) -> str:
    """`rows`: one per configuration (probe_seeds.aggregate: medians over seeds)."""
    import torch  # deferred: loads torch only when this runs

    shown = ["init_" + m for m in TABLE] + (["final_" + m for m in TABLE] if steps else [])
    shown = [c for c in shown if any(c in r for r in rows)]
    many = len(seeds) > 1
    head = ["#", *keys, "status", *(["seeds"] if many else []), *shown]
    lines = [
        f"# Stability probe: {spec.name}",
        "",
        f"{len(rows)} configuration(s), "
        + (f"seeds {', '.join(map(str, seeds))} (each cell: the median over seeds; probe.csv has every seed)"
           if many else f"seed {seeds[0]}")
        + "; metrics on the fixed probe batch "
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
        cells = [str(r["config"]), *[fmt(r.get(k)) for k in keys], r["status"],
                 *([str(r.get("seeds", 1))] if many else []), *[fmt(r.get(c)) for c in shown]]
        lines.append("| " + " | ".join(cells) + " |")
    errors = [r for r in rows if r.get("error")]
    if errors:
        lines.append("")
        for r in errors:
            lines.append(f"- config {r['config']} ({r['status']}): {r['error']}")
    if slope_rows:
        lines += ["", f"## Slopes against {size_key}", "",
                  f"Each metric's least-squares slope of log2(metric) on log2({size_key}), through the per-size means of "
                  "log2(metric) over seeds: the exponent k of metric ~ size^k (0: the metric does not change with size). "
                  + ("Interval: 90% paired bootstrap over seeds, widened for few seeds." if many else "One seed: no interval.")
                  + " probe_slopes.csv has every metric.", ""]
        sel = [r for r in slope_rows if r["metric"].split("_", 1)[1] in TABLE + ("branch_grad_norm", "update_ratio", "sharpness")]
        lines.append("| " + " | ".join([*line_keys, "metric", "slope", "90% interval"]) + " |")
        lines.append("|" + "|".join(["---"] * len(line_keys) + ["---", "---:", "---"]) + "|")
        for r in sel:
            iv = f"{r['lo']:.2f} to {r['hi']:.2f}" if r.get("lo") is not None else ""
            lines.append("| " + " | ".join([*[fmt(r.get(k)) for k in line_keys], r["metric"], f"{r['slope']:.2f}", iv]) + " |")
    lines += per_layer_markdown(rows, steps, many)
    lines += ["", f"nas_stab {nas_stab.__version__} (commit {git_commit()}), torch {torch.__version__}, {platform.machine()}, "
                  f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, {seconds:.1f}s"]
    return "\n".join(lines) + "\n"


PER_LAYER_MAX_CONFIGS = 8  # more configurations: the per-layer table is left to probe.csv and the plot


def n_layers(rows: list[dict], what: str, prefix: str = "init_") -> int:
    """How many per-layer values `<prefix><what>.<i>` the rows hold (the largest i + 1)."""
    idx = [int(k.rsplit(".", 1)[1]) for r in rows for k in r
           if k.startswith(f"{prefix}{what}.") and not k.endswith(("_lo", "_hi"))]
    return max(idx) + 1 if idx else 0


def per_layer_markdown(rows: list[dict], steps: int, many: bool) -> list[str]:
    """The Path-BN paper's Figure 4 as a table, for models with BatchNorm: per layer i, each
    configuration's `bn_sigma.<i>` and `grad_stream.<i>` (medians over seeds), at init and after the
    steps. Nothing for a model without BatchNorm, or for more than PER_LAYER_MAX_CONFIGS configurations."""
    if not n_layers(rows, "bn_sigma"):
        return []
    out = ["", "## Per layer: BN sigma and hidden-gradient norm", ""]
    if len(rows) > PER_LAYER_MAX_CONFIGS:
        return out + [f"{len(rows)} configurations: the per-layer values `init_bn_sigma.<i>` and `init_grad_stream.<i>` "
                      "are in probe.csv and plots/probe_per_layer.png."]
    out += ["`sigma` (`bn_sigma.<i>`): the batch standard deviation the i-th BatchNorm divides its input by "
            "(sqrt(variance + eps)), averaged over its channels; `grad` (`grad_stream.<i>`): the L2 norm of the "
            "gradient of the probe loss with respect to layer i's output (docs/metrics.md). Columns `#c`: "
            "configuration c of the table above" + ("; medians over seeds." if many else "."), ""]
    for prefix in ["init_"] + (["final_"] if steps else []):
        n = max(n_layers(rows, "bn_sigma", prefix), n_layers(rows, "grad_stream", prefix))
        if not n:
            continue
        out.append("At init:" if prefix == "init_" else f"After {steps} step(s):")
        out.append("")
        head = ["layer", *[f"#{r['config']} sigma" for r in rows], *[f"#{r['config']} grad" for r in rows]]
        out.append("| " + " | ".join(head) + " |")
        out.append("|" + "|".join(["---:"] * len(head)) + "|")
        for i in range(n):
            cells = [str(i), *[fmt(r.get(f"{prefix}bn_sigma.{i}")) for r in rows],
                     *[fmt(r.get(f"{prefix}grad_stream.{i}")) for r in rows]]
            out.append("| " + " | ".join(cells) + " |")
        out.append("")
    return out[:-1] if out[-1] == "" else out


def fmt(v: Any) -> str:
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
