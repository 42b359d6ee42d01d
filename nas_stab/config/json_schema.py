"""The experiment file as a JSON Schema, generated from the typed schema.

`nas-stab schema` prints it. Editors that speak the yaml-language-server
protocol (VS Code's YAML extension, Neovim, Emacs' lsp-mode, JetBrains IDEs)
then complete keys, show each key's description and flag wrong types while a
spec is typed; docs/install.md says how to point them at it.

Everything comes from `schema.py` (field types, defaults, `doc`, `ge`/`gt`/
`le`/`lt`/`pattern`), so the two cannot drift. The JSON Schema is the typing
layer only: cross-field rules (`rules.py`: an architecture's knobs, a tau
expression, a dataset's files) are checked by `nas-stab validate`.
"""
from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal

from nas_stab.config import hooks, schema
from nas_stab.config.build import MAX_NUMBER, _type_hints, is_union, public_fields

DRAFT = "https://json-schema.org/draft/2020-12/schema"

_SCALAR = {int: {"type": "integer"}, float: {"type": "number"}, str: {"type": "string"}, bool: {"type": "boolean"}}
_BOUNDS = {"ge": "minimum", "gt": "exclusiveMinimum", "le": "maximum", "lt": "exclusiveMaximum"}

# keys whose YAML form is wider than their typed field (normalized at load, see spec/__init__.py)
_SPECIAL: dict[tuple[str, ...], dict] = {
    ("seeds",): {
        "description": "a count n (seeds 0..n-1), a list of distinct integers >= 0, or adaptive seeds {min: n, max: m} "
                       "(seeds 0..n-1 everywhere, up to m where a verdict is still open)",
        "anyOf": [
            {"type": "integer", "minimum": 1, "maximum": 10_000},
            {"type": "array", "items": {"type": "integer", "minimum": 0}, "minItems": 1, "uniqueItems": True},
            {"type": "object", "additionalProperties": False, "required": ["min", "max"],
             "properties": {"min": {"type": "integer", "minimum": 1, "maximum": 10_000},
                            "max": {"type": "integer", "minimum": 2, "maximum": 10_000}}},
        ],
    },
    ("search", "pruner"): {
        "description": "none | median | percentile | asha | hyperband | threshold, or {name: {options}} "
                       "(Optuna's keyword arguments, e.g. {median: {n_warmup_steps: 50}})",
        "anyOf": [
            {"type": "string"},
            {"type": "null"},
            {"type": "object", "minProperties": 1, "maxProperties": 1,
             "additionalProperties": {"anyOf": [{"type": "object"}, {"type": "null"}]}},
        ],
    },
    ("model", "tau"): {
        "description": "residual-branch scale: a number, '1/L', '1/sqrt(L)', 'L^-p', or {init: ..., learnable: true}",
        "anyOf": [
            {"type": "number"},
            {"type": "string"},
            {"type": "object", "properties": {"init": {"anyOf": [{"type": "number"}, {"type": "string"}]},
                                              "learnable": {"type": "boolean"}},
             "additionalProperties": False},
        ],
    },
    ("runner", "resources"): {
        "description": "per trial: {cpu: 1, gpu: 0} (gpu may be fractional)",
        "anyOf": [{"type": "null"}, {"type": "object", "properties": {"cpu": {"type": "number", "minimum": 0},
                                                                       "gpu": {"type": "number", "minimum": 0}},
                                     "additionalProperties": False}],
    },
}


SECTIONS = {
    ("task",): "what is learned: classification or translation, and the dataset",
    ("task", "dataset"): "the dataset, its subsets and (translation) its tokenizer",
    ("model",): "the architecture and its stability knobs (nas-stab list)",
    ("train",): "optimizer, learning rate and schedule, batch, length, device",
    ("stability",): "stability probes on a fixed probe batch, and the divergence rule",
    ("stability", "divergence"): "when a run counts as diverged",
    ("search",): "Optuna: sampler, trial budget, objective, pruner, storage",
    ("search", "pruner"): "the Optuna pruner",
    ("search", "bracket"): ("sampler bracket: the step, the final resolution and the limits of each learning-rate sweep "
                            "(a sweep: one configuration of the searched keys other than leaderboard.lr). Each sweep trains "
                            "every seed at the lrs of space, steps beyond any edge that holds the leaderboard's optimum, "
                            "then adds lrs at the resolution on both sides of it; it ends 'bracketed', 'divergence wall' "
                            "(a neighbour of the optimum diverged with every seed), 'limit' (the optimum stays at lr_limits) "
                            "or 'no lr trains'. A failed or diverged seed is not retrained: it counts in its lr's mean as "
                            "in the leaderboard. The same settings bracket each size's lr inside every outer trial of "
                            "search.transfer with inner: bracket (a sweep: one architecture x one size)"),
    ("runner",): "where trials run: local (one machine) or ray (Ray Tune)",
    ("leaderboard",): "the LR-transfer leaderboard: the lr key, the size axis, the row labels",
    ("logging",): "extra logs of every run (the run directory's records are always written)",
}


def _number_list(n: int) -> dict:
    return {"type": "array", "items": {"type": "number"}, "minItems": n, "maxItems": n}


_SCALAR_VALUE = {"type": ["number", "string", "boolean", "null"]}

DIMENSION = {
    "description": "values to search: a list (categorical / grid dimension) or one distribution; null removes a "
                   "dimension an extended file (extends:) or --set declared",
    "anyOf": [
        {"type": "null"},
        {"type": "array", "items": _SCALAR_VALUE, "minItems": 1},
        {
            "type": "object",
            "properties": {
                "values": {"type": "array", "items": _SCALAR_VALUE, "minItems": 1, "description": "categorical"},
                "log_grid": {**_number_list(3), "description": "[low, high, n]: n log-spaced values, endpoints included"},
                "grid": {**_number_list(3), "description": "[low, high, n]: n evenly spaced values, endpoints included"},
                "uniform": {**_number_list(2), "description": "[low, high], continuous"},
                "loguniform": {**_number_list(2), "description": "[low, high], continuous, log scale"},
                "int": {**_number_list(2), "description": "[low, high], integers"},
                "step": {"type": "integer", "minimum": 1, "description": "int: step between values"},
                "log": {"type": "boolean", "description": "int: sample on a log scale"},
                "when": {"type": "object", "minProperties": 1,
                         "description": "only searched when every listed key has one of the given values",
                         "additionalProperties": {"anyOf": [_SCALAR_VALUE, {"type": "array", "items": _SCALAR_VALUE}]}},
            },
            "additionalProperties": False,
            "oneOf": [{"required": [k]} for k in ("values", "log_grid", "grid", "uniform", "loguniform", "int")],
        },
    ],
}


def _type_schema(tp: Any, plugins: bool = True) -> dict:
    origin = typing.get_origin(tp)
    if tp is Any:
        return {}
    if tp in _SCALAR:
        return dict(_SCALAR[tp])
    if origin is Literal:
        return {"enum": list(typing.get_args(tp))}
    if origin is tuple:
        return {"type": "array", "items": _type_schema(typing.get_args(tp)[0], plugins)}
    if is_union(tp):
        args = typing.get_args(tp)
        opts = [_type_schema(a, plugins) for a in args if a is not type(None)]
        if type(None) in args:
            opts.append({"type": "null"})
        return opts[0] if len(opts) == 1 else {"anyOf": opts}
    if dataclasses.is_dataclass(tp):
        return _object(tp, (), plugins)
    raise TypeError(f"no JSON Schema for {tp!r}")  # pragma: no cover - schema bug


def _field(cls, f: dataclasses.Field, hint: Any, path: tuple[str, ...], plugins: bool) -> dict:
    if path in _SPECIAL:
        return dict(_SPECIAL[path])
    if dataclasses.is_dataclass(hint):
        return _object(hint, path, plugins)
    if is_union(hint) and any(dataclasses.is_dataclass(a) for a in typing.get_args(hint)):
        obj = _object(next(a for a in typing.get_args(hint) if dataclasses.is_dataclass(a)), path, plugins)
        return {"anyOf": [obj, {"type": "null"}], **({"description": f.metadata["doc"]} if f.metadata.get("doc") else {})}
    out = _type_schema(hint, plugins)
    meta = dict(f.metadata)
    if "le" not in meta and "lt" not in meta:  # build.MAX_NUMBER bounds every number the schema leaves open
        meta["le"] = MAX_NUMBER
    if "ge" not in meta and "gt" not in meta:
        meta["ge"] = -MAX_NUMBER
    for k, js in _BOUNDS.items():
        if k in meta:
            if "anyOf" in out:
                for o in out["anyOf"]:
                    if o.get("type") in ("integer", "number"):
                        o[js] = meta[k]
            else:
                out[js] = meta[k]
    if "pattern" in meta:
        out["pattern"] = f"^(?:{meta['pattern']})$"
    if meta.get("doc"):
        out["description"] = meta["doc"]
    default = f.default
    if default is not dataclasses.MISSING and default is not None:
        out["default"] = list(default) if isinstance(default, tuple) else default
    return out


def _object(cls, path: tuple[str, ...], plugins: bool) -> dict:
    hints = _type_hints(cls)
    props = {}
    for f in public_fields(cls):
        if cls is schema.Spec and f.name == "space":
            props["space"] = {
                "type": "object",
                "description": "searched keys: dotted key (e.g. train.lr, model.branches) -> values or a distribution",
                "propertyNames": {"pattern": r"^(task|model|train|stability)\.[A-Za-z0-9_.]+$"},
                "additionalProperties": DIMENSION,
            }
            continue
        props[f.name] = _field(cls, f, hints[f.name], path + (f.name,), plugins)
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    component = getattr(cls, "COMPONENT", None)
    if component:  # each entry's own options, where the section names it (an editor completes them)
        out.pop("additionalProperties")
        key = cls.COMPONENT_KEY
        out["allOf"] = [{"if": {"properties": {key: {"const": name}}, "required": [key]},
                         "then": {"properties": props} if props else {}}
                        for name, props in _own_options(component, path, plugins).items()]
        out["unevaluatedProperties"] = False
    if path in SECTIONS:
        out["description"] = SECTIONS[path]
    return out


def _own_options(component: str, path: tuple[str, ...], plugins: bool) -> dict[str, dict]:
    """Each entry name's own options as JSON Schema properties (one name for several tasks: their options merged)."""
    out: dict[str, dict] = {}
    for name, _task, cls in hooks.option_classes(component, plugins=plugins):
        props = out.setdefault(name, {})
        if cls is not None:
            hints = _type_hints(cls)
            for f in public_fields(cls):
                props.setdefault(f.name, _field(cls, f, hints[f.name], path + (f.name,), plugins))
    return out


def json_schema(plugins: bool = True) -> dict:
    """The JSON Schema (draft 2020-12) of a nas_stab experiment file: its components' own options (a dataset's)
    those of the built-in ones and, unless `plugins` is False, of the installed plugins'."""
    root = _object(schema.Spec, (), plugins)
    root["properties"]["extends"] = {
        "type": "string",
        "description": "another experiment file (relative to this one) to start from; this file's keys override its keys",
    }
    return {
        "$schema": DRAFT,
        "$id": "https://nas-stab.invalid/experiment.schema.json",
        "title": "nas_stab experiment file",
        "description": "An experiment: the base configuration (task, model, train, stability), the searched space, "
                       "the search, the runner and the leaderboard. Checked in full by `nas-stab validate`.",
        **root,
        # a file that extends another may leave any key to its base
        "anyOf": [{"required": ["extends"]}, {"required": list(schema.REQUIRED_TOP)}],
    }
