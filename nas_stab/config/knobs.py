"""Pure-math parsing of the knob values shared by validation and model building.

No torch here: `nas-stab validate` uses these to check a file.
"""
from __future__ import annotations

import math
import re
from typing import Any

from nas_stab.textfmt import did_you_mean

MAX_TAU_EXPONENT = 4  # L^p for |p| <= 4: no overflow at any depth the schema allows
_L_POW = re.compile(r"^L\^\(?(-?\s*[0-9.]+(?:/[0-9.]+)?)\)?$")


def parse_tau(tau: Any) -> tuple[Any, bool]:
    """Validate a `tau` value; return (init form, learnable). Raises ValueError."""
    learnable = False
    if isinstance(tau, dict):
        unknown = set(tau) - {"init", "learnable"}
        if unknown:
            raise ValueError(f"unknown tau option {sorted(unknown)[0]!r}; tau takes {{init: ..., learnable: true}}")
        if "init" not in tau:
            raise ValueError("tau as a mapping needs 'init'")
        learnable = tau.get("learnable", False)
        if not isinstance(learnable, bool):
            raise ValueError(f"tau.learnable must be true or false, got {learnable!r}")
        tau = tau["init"]
    tau_value(tau, 1)  # raises on a bad form
    return tau, learnable


def tau_value(tau: Any, L: int) -> float:
    """The number a tau form stands for with L residual blocks."""
    if isinstance(tau, bool):
        raise ValueError(f"tau must be a number or '1/L', '1/sqrt(L)', 'L^-p', got {tau!r}")
    if isinstance(tau, (int, float)):
        if not math.isfinite(tau) or tau < 0:
            raise ValueError(f"tau must be a finite number >= 0, got {tau!r}")
        return float(tau)
    if isinstance(tau, str):
        s = tau.replace(" ", "")
        if s == "1/L":
            return 1.0 / L
        if s in ("1/sqrt(L)", "1/L^0.5", "L^-0.5"):
            return 1.0 / math.sqrt(L)
        m = _L_POW.match(s)
        if m:
            p = m.group(1).replace(" ", "")
            try:
                a, _, b = p.partition("/")
                exp = float(a) / float(b or 1)
            except (ValueError, ZeroDivisionError):
                raise ValueError(f"tau {tau!r}: the exponent {p!r} is not a number") from None
            if not abs(exp) <= MAX_TAU_EXPONENT:
                raise ValueError(f"tau {tau!r}: the exponent must be between -{MAX_TAU_EXPONENT} and {MAX_TAU_EXPONENT}, got {exp:g}")
            return float(L) ** exp
        try:
            return tau_value(float(s), L)
        except ValueError:
            pass
    raise ValueError(f"tau must be a number or '1/L', '1/sqrt(L)', 'L^-p' (e.g. 'L^-0.25'), got {tau!r}")


def parse_aggregation(agg: Any) -> Any:
    """Validate `aggregation`: sum | avg | stam | a positive number."""
    if isinstance(agg, bool):
        raise ValueError(f"aggregation must be sum, avg, stam or a number, got {agg!r}")
    if isinstance(agg, (int, float)):
        if not math.isfinite(agg) or agg <= 0:
            raise ValueError(f"aggregation as a number must be > 0, got {agg!r}")
        return float(agg)
    if agg in ("sum", "avg", "stam"):
        return agg

    hint = did_you_mean(agg, ("sum", "avg", "stam")) if isinstance(agg, str) else ""
    raise ValueError(f"aggregation must be sum, avg, stam or a number, got {agg!r}{hint}")


def tau_form(tau: Any, exponent: float | None) -> Any:
    """The tau form a model uses: `tau`, or 'L^-p' when `model.tau_exponent` p is set (tau stays a mapping's
    learnable flag: {init: 'L^-p', learnable: true})."""
    if exponent is None:
        return tau
    form = f"L^{-float(exponent):.12f}"
    return {**tau, "init": form} if isinstance(tau, dict) else form


def alpha(aggregation: Any, branches: int, base: float = 1.0, scale: float = 1.0, exponent: float | None = None) -> float:
    """The aggregation weight alpha for C = `branches` (docs/experiment-file.md, STAM); with `exponent` p
    (`model.aggregation_exponent`), alpha = (C / C0)^-p whatever `aggregation` says."""
    ratio = branches / base
    if exponent is not None:
        a = ratio ** (-float(exponent))
    elif aggregation == "sum":
        a = 1.0
    elif aggregation == "avg":
        a = 1.0 / ratio
    elif aggregation == "stam":
        a = 1.0 / math.sqrt(ratio)
    else:
        a = float(aggregation)
    return a * scale
