"""A searched point made concrete: the spec with the point's values substituted, validated again."""
from __future__ import annotations

import copy
import dataclasses
from typing import Any

from nas_stab.config import schema
from nas_stab.config.build import Ctx, build
from nas_stab.config.keys import set_path
from nas_stab.config.rules import check_config
from nas_stab.space import Space


def resolve(spec: schema.Spec, params: dict[str, Any]) -> schema.Spec:
    """The spec with searched values substituted, validated again (cross-field rules too)."""
    if not params:
        return spec
    data = copy.deepcopy(spec.raw)
    data.pop("space", None)
    for key, value in params.items():
        set_path(data, tuple(key.split(".")), value, key)
    ctx = Ctx(spec.source, {}, {})
    out = build(schema.Spec, data, ctx)
    out = dataclasses.replace(out, space=Space(), source=spec.source, raw=data)

    check_config(out, ctx)
    return out
