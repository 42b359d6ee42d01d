"""`nas-stab probe`'s tables: probe.csv (every metric) and probe.md (the printed table)."""
from __future__ import annotations

import csv
import io
import json
import math
import platform
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from nas_stab.metrics import PROBE_EXTRA, STABILITY_METRICS
from nas_stab.results.csvsafe import escape_cell

# the columns of the printed table (probe.csv holds every metric)
TABLE = ("fwd_ratio", "enc_fwd_ratio", "dec_fwd_ratio", "branch_ratio", "grad_norm", "grad_ratio", "update_norm",
         "loss_drop", "eos_ratio", "attn_logit_max")


def columns(rows: list[dict], keys: list[str]) -> list[str]:
    head = ["config", *keys, "status"]
    metric_cols = []
    for prefix in ("init_", "final_"):
        for m in ("lr",) + STABILITY_METRICS + PROBE_EXTRA:
            if any(prefix + m in r for r in rows):
                metric_cols.append(prefix + m)
    tail = ["n_params", "blocks", "seconds", "error"]
    norms = sorted({k for r in rows for k in r if k.startswith(("init_fwd_norm.", "final_fwd_norm."))},
                   key=lambda k: (k.split("fwd_norm.")[0], int(k.rsplit(".", 1)[1])))
    return head + metric_cols + tail + norms


def write_csv(path: Path, rows: list[dict], keys: list[str]) -> None:
    cols = columns(rows, keys)
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
        cells = [str(r["config"]), *[fmt(r.get(k)) for k in keys], r["status"], *[fmt(r.get(c)) for c in shown]]
        lines.append("| " + " | ".join(cells) + " |")
    errors = [r for r in rows if r.get("error")]
    if errors:
        lines.append("")
        for r in errors:
            lines.append(f"- config {r['config']} ({r['status']}): {r['error']}")
    lines += ["", f"nas_stab {nas_stab.__version__}, torch {torch.__version__}, {platform.machine()}, "
                  f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}, {seconds:.1f}s"]
    return "\n".join(lines) + "\n"


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
