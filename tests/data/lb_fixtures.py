"""Small run directories for the leaderboard tests, written from code (no binary fixtures).

`make_run(root, rows, ...)` writes ``root/<name>/{spec.yaml,trials.csv,history/}``
in the layout of SPEC 3 and returns the run directory. `rows` are dicts with
the searched keys, ``seed``, ``status`` and metric values; the other columns
of SPEC 4 are filled in.
"""
from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

STAB = ("fwd_ratio", "grad_ratio", "update_ratio", "sharpness", "lr_sharpness")


def spec_dict(name: str = "demo", *, description: str = "A small test run.", transfer: str | None = "model.branches",
              compare: Iterable[str] = ("model.aggregation",), metric: str | None = None, objective: str = "val_acc",
              reference: Any = None, loss_factor: float = 10.0, seeds=(0, 1), space: dict | None = None) -> dict:
    return {
        "name": name,
        "description": description,
        "seeds": list(seeds),
        "task": {"kind": "classification", "dataset": {"name": "digits", "root": "../shared/data", "train": 500, "val": 200, "test": None}},
        "model": {"arch": "mlp_resnet", "depth": 3, "width": 16, "branches": 1, "aggregation": "sum", "tau": 1, "skip": "plain", "norm": "none"},
        "train": {"optimizer": "sgd", "lr": 0.1, "momentum": 0.9, "batch_size": 64, "steps": 20},
        "stability": {"every": 10, "probe_batch": 64, "hessian": False, "divergence": {"loss_factor": loss_factor}},
        "space": space if space is not None else {"model.branches": [1, 2, 4], "model.aggregation": ["sum", "stam"], "train.lr": {"log_grid": [0.1, 0.8, 4]}},
        "search": {"sampler": "grid", "trials": None, "objective": objective, "pruner": {"name": "none", "options": None}},
        "runner": {"kind": "local", "concurrency": 1},
        "leaderboard": {"lr": "train.lr", "transfer": transfer, "compare": list(compare), "metric": metric, "reference": reference},
        "meta": {"spec_hash": "0123456789abcdef", "nas_stab_version": "0.1.0", "git_commit": "d138591", "torch_version": "2.9.0+cpu",
                 "hardware": "2 x CPU (test)", "created": "2025-01-02T03:04:05+00:00", "python": "3.11.2"},
    }


def make_run(root: Path, rows: list[dict], *, spec: dict | None = None, history: bool = True, blocks: int = 3) -> Path:
    spec = spec or spec_dict()
    d = Path(root) / str(spec["name"]).replace("/", "_").replace("<", "_").replace(">", "_")
    (d / "history").mkdir(parents=True, exist_ok=True)
    (d / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    out = []
    for i, r in enumerate(rows):
        rec = {"trial": i, "seed": r.get("seed", 0), "status": r.get("status", "complete"), "run_id": f"t{i:05d}-s{r.get('seed', 0)}"}
        rec.update({k: v for k, v in r.items() if k not in rec})
        rec.setdefault("objective", rec.get(spec["search"]["objective"], math.nan))
        for m in STAB:
            rec.setdefault(f"init_{m}", 1.0)
            rec.setdefault(f"final_{m}", 1.0)
        rec.setdefault("max_update_ratio", 0.01)
        rec.setdefault("steps", 20)
        rec.setdefault("wall_s", 1.5)
        rec.setdefault("diverged_step", 7 if rec["status"] == "diverged" else None)
        rec.setdefault("error", "boom" if rec["status"] == "failed" else None)
        out.append(rec)
        if history:
            size = float(r.get("model.branches", 1) or 1)
            h = {"step": [0, 10, 20], "train_loss": [2.3, 1.0, 0.5], "lr": [r.get("train.lr", 0.1)] * 3}
            for b in range(blocks):
                h[f"fwd_norm.{b}"] = [math.sqrt(1 + b * size), 1.0, 1.0]
            pd.DataFrame(h).to_csv(d / "history" / f"{rec['run_id']}.csv", index=False)
    pd.DataFrame(out).to_csv(d / "trials.csv", index=False)
    return d


def grid_rows(table: dict, *, size_key: str = "model.branches", label_key: str = "model.aggregation",
              metric: str = "val_acc") -> list[dict]:
    """{(label, size, lr): [value or 'diverged'/'pruned'/'failed' per seed]} -> trial rows."""
    rows = []
    for (label, size, lr), vals in table.items():
        for seed, v in enumerate(vals):
            r = {"seed": seed, "train.lr": lr}
            if size is not None:
                r[size_key] = size
            if label is not None:
                r[label_key] = label
            if isinstance(v, str):
                r["status"] = v
                r[metric] = 0.05 if v == "pruned" else math.nan  # a pruned run keeps its last value
            else:
                r["status"] = "complete"
                r[metric] = v
            rows.append(r)
    return rows


# a finished transfer search (search.transfer), for the Pareto section of the leaderboard pages
OBJECTIVES = ["transfer_score", "best"]
# (aggregation exponent, peak accuracy, how far each size's optimum moves per log2(size) in octaves)
ARCHS = [(0.1, 0.95, 1.0), (0.5, 0.90, 0.0), (0.7, 0.93, 0.5), (0.9, 0.85, 0.0)]


def transfer_run(root: Path, name: str = "tsearch") -> Path:
    """A finished transfer search: 4 architectures (outer trials 0-3) x sizes 1, 4 x lrs 0.1-0.8 x 2 seeds."""
    space = {"model.branches": [1, 4], "train.lr": {"log_grid": [0.1, 0.8, 4]},
             "model.aggregation_exponent": {"uniform": [0.0, 1.0]}}
    spec = spec_dict(name, compare=(), space=space)
    spec["search"] = {"sampler": "nsga2", "trials": len(ARCHS), "objective": "val_acc",
                      "pruner": {"name": "none", "options": None}, "transfer": {"objectives": OBJECTIVES}}
    rows = []
    for n, (p, peak, drift) in enumerate(ARCHS):
        for size in (1, 4):
            opt = math.log2(0.2) + drift * math.log2(size)
            for lr in (0.1, 0.2, 0.4, 0.8):
                for seed in (0, 1):
                    acc = peak - 0.04 * (math.log2(lr) - opt) ** 2 + 0.002 * seed
                    rows.append({"seed": seed, "train.lr": lr, "model.branches": size, "model.aggregation_exponent": p,
                                 "outer_trial": n, "val_acc": round(acc, 6)})
    return make_run(root, rows, spec=spec)
