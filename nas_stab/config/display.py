"""The resolved configuration as people read it: only the keys that apply.

`nas-stab validate` prints it and a run directory's `spec.yaml` stores it. A key
is left out only when it cannot matter for this experiment (a translation key in
an image-classification run, a Transformer key for an MLP, Adam's betas under
SGD) **and** holds its default, so loading the stored file gives back exactly the
same configuration (and the same spec hash). Searched keys are always kept.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from nas_stab.config import schema
from nas_stab.config.build import public_fields
from nas_stab.config.load import to_plain
from nas_stab.config.schema import Spec

TRANSFORMER_ONLY = ("d_model", "heads_per_branch", "head_dim", "ffn_per_branch", "ffn_ratio", "enc_layers",
                    "dec_layers", "head_dropout", "norm_position")
SGD_ONLY = ("momentum", "nesterov")
ADAM_ONLY = ("betas", "eps")


def _defaults(cls) -> dict[str, Any]:
    out = {}
    for f in public_fields(cls):
        d = f.default
        out[f.name] = list(d) if isinstance(d, tuple) else d
    return out


def _scope(doc: str) -> str | None:
    head = doc.split(":", 1)[0] if ":" in doc else ""
    return head if head == "translation" else None


def applicable_plain(spec: Spec) -> dict:
    """`to_plain(spec)` (with the raw `space:`), less the keys that cannot apply and hold their default."""
    plain = to_plain(spec)
    plain["space"] = spec.raw.get("space") if spec.raw else None
    if getattr(spec, "seeds_more", ()) and plain.get("seeds") == list(range(len(spec.seeds))):
        plain["seeds"] = {"min": len(spec.seeds), "max": len(spec.seeds) + len(spec.seeds_more)}  # adaptive seeds, as written
    searched = set(spec.space.keys) if spec.space else set()
    kind, arch = spec.task.kind, spec.model.arch
    optimizers = {spec.train.optimizer}
    dim = spec.space.get("train.optimizer") if spec.space else None
    if dim is not None and dim.discrete:
        optimizers |= set(dim.values)

    def prune(section: str, cls, drop) -> None:
        node = plain.get(section)
        if not isinstance(node, dict):
            return
        defaults = _defaults(cls)
        for f in public_fields(cls):
            if dataclasses.is_dataclass(f.type) or f.name not in node:
                continue
            if f"{section}.{f.name}" in searched or node[f.name] != defaults[f.name]:
                continue
            if drop(f):
                del node[f.name]

    def not_for_this_task(f) -> bool:
        scope = _scope(f.metadata.get("doc", ""))
        return scope == "translation" and kind != "translation"

    prune("task", schema.TaskConfig, not_for_this_task)  # task.dataset holds only the named dataset's own options
    prune("model", schema.ModelConfig, lambda f: f.name in TRANSFORMER_ONLY and arch != "transformer")
    prune("train", schema.TrainConfig, lambda f: not_for_this_task(f)
          or (f.name in SGD_ONLY and "sgd" not in optimizers)
          or (f.name in ADAM_ONLY and not optimizers & {"adam", "adamw"}))
    return plain
