"""Which model a parametrization (`model.parametrization`: mup, depth_mup, completep, umup) can be applied to, with
the reason when not: pure Python, read when an experiment is validated (`models.check_model`); the rules that
rescale a built model are `parametrization.py`'s (torch)."""
from __future__ import annotations

import dataclasses

from nas_stab.config.schema import ModelConfig, Spec
from nas_stab.models.archs import ARCHS

WIDTH_FORMS = ("mup", "depth_mup", "completep", "umup")  # the values of model.parametrization this module applies (weight = sp, path: elsewhere)
# the depth forms: each residual branch x (L0 / L)^alpha; with Adam the blocks' lr x (L0 / L)^(1 - alpha) (CompleteP's
# Table 1, eta x m_L^(alpha - 1), which is TP-VI's Adam rule at alpha = 1/2); CompleteP also scales the blocks' Adam eps
# by (L0 / L)^alpha (nas_stab's depth_mup, published before it, does not)
DEPTH_ALPHA = {"depth_mup": 0.5, "completep": 1.0}


def supported(form: str) -> list[str]:
    """The architectures whose registry entry declares the width parametrization `form` (its `parametrizations`)."""
    return [name for name, e in ARCHS.items() if form in e.info.get("parametrizations", ())]


def width_key(arch: str) -> str:
    """The model key muP's width is: the architecture entry's `width_key` (the transformer's `d_model`), else `width`."""
    return ARCHS.entry(arch).info.get("width_key", "width") if arch in ARCHS else "width"


def readout(arch: str) -> str:
    """The module whose weight is the architecture's readout (its entry's `readout`)."""
    return str(ARCHS.entry(arch).info["readout"])


def check(spec: Spec) -> tuple[tuple, str] | None:
    """(key path, reason) when the parametrization cannot be applied to this model, else None."""
    m = spec.model
    p = m.parametrization
    if p not in WIDTH_FORMS:
        if m.readout_zero_init:
            return ("model", "readout_zero_init"), (f"readout_zero_init applies to {', '.join(WIDTH_FORMS)}; parametrization {p} keeps "
                                                    "its init (in a search, give the key only to those: a dimension with "
                                                    "when: {model.parametrization: mup})")
        return None
    searched = set(getattr(getattr(spec, "space", None), "keys", ()) or ())
    if p == "umup":
        return _check_umup(spec, searched)
    if p in DEPTH_ALPHA and m.arch == "mlp":
        return ("model", "parametrization"), (f"{p} scales residual branches; the plain mlp has none "
                                              "(use mlp_resnet, or mup)")
    if p in DEPTH_ALPHA and m.arch == "transformer":
        return ("model", "parametrization"), (f"{p} is not implemented for the transformer: its depth is "
                                              "enc_layers and dec_layers, not model.depth (the branch "
                                              "multiplier and lr rule are defined over model.depth); use mup")
    if p == "completep" and spec.train.optimizer not in ("adam", "adamw"):
        return ("model", "parametrization"), ("completep's rules (Dey et al. 2025, Table 1) are stated for Adam and "
                                              f"AdamW; train.optimizer is {spec.train.optimizer}: use depth_mup, whose "
                                              "SGD rule is Tensor Programs VI's")
    if m.arch not in supported(p):
        return ("model", "parametrization"), f"{p} is implemented for {', '.join(supported(p))}; not yet for {m.arch!r}"
    if m.norm == "path_bn":
        return ("model", "parametrization"), f"{p} is defined in weight space; norm: path_bn implies path space"
    wkey = width_key(m.arch)
    if f"model.{wkey}" in searched and m.base_width is None:
        return ("model", "base_width"), (f"model.{wkey} is searched: {p} needs a fixed base width "
                                         f"(model.base_width; each {wkey} would otherwise be its own base, i.e. sp)")
    if p in DEPTH_ALPHA and "model.depth" in searched and m.base_depth is None:
        return ("model", "base_depth"), f"model.depth is searched: {p} needs a fixed base depth (model.base_depth)"
    if p in DEPTH_ALPHA and m.base_depth is not None and m.base_depth != m.depth:
        arch_check = ARCHS.entry(m.arch).info.get("check")
        base = dataclasses.replace(spec, model=dataclasses.replace(m, depth=m.base_depth, parametrization="weight"))
        problem = arch_check(base) if arch_check else None
        if problem:
            return ("model", "base_depth"), f"base_depth {m.base_depth} is not a depth of {m.arch}: {problem[1]}"
    width = getattr(m, wkey)
    if m.base_width is not None and m.base_width > width * 64:
        return ("model", "base_width"), f"base_width {m.base_width} is more than 64x the {wkey} {width}"
    if m.arch == "transformer":
        return _check_transformer(m, f"model.{wkey}" in searched)
    return None


def _check_umup(spec: Spec, searched: set[str]) -> tuple[tuple, str] | None:
    """umup: u-muP's width rules, for Adam, on the mlp_resnet; its depth rules are not implemented."""
    m = spec.model
    if m.arch not in supported("umup"):
        return ("model", "parametrization"), f"umup is implemented for {', '.join(supported('umup'))}; not yet for {m.arch!r}"
    if spec.train.optimizer not in ("adam", "adamw"):
        return ("model", "parametrization"), ("umup applies u-muP's Adam rules (the unit-scaling package's optim.Adam); "
                                              f"train.optimizer is {spec.train.optimizer}: use mup, whose SGD rule is "
                                              "Tensor Programs V's")
    if m.norm == "path_bn":
        return ("model", "parametrization"), "umup is defined in weight space; norm: path_bn implies path space"
    if m.init not in ("kaiming", "fan_in"):
        return ("model", "init"), (f"umup sets every weight's init itself (unit weights times u-muP's multipliers): "
                                   f"init {m.init} would be overwritten; leave model.init at its default")
    if "model.depth" in searched or m.base_depth is not None:
        return ("model", "base_depth" if m.base_depth is not None else "depth"), (
            "umup implements u-muP's width rules only: its depth rules (residual_split / residual_add's tau and "
            "the blocks' lr x depth^-1/2) are not applied, so depth cannot be searched under it (use depth_mup "
            "or completep for depth)")
    return None


def _check_transformer(m: ModelConfig, d_searched: bool) -> tuple[tuple, str] | None:
    """muP on the transformer: every hidden dimension (d_model, the FFN width, the head size) must grow with
    d_model whenever d_model differs from the base or is searched, and the tied readout cannot start at zero."""
    if m.readout_zero_init:
        return ("model", "readout_zero_init"), ("the transformer's readout is its input embedding (tied): zeroing it "
                                                "would zero the embedding; leave readout_zero_init false")
    d0 = m.base_width or m.d_model
    if not d_searched and d0 == m.d_model:
        return None  # the base model itself: muP is SP
    why = "d_model is searched" if d_searched else f"d_model {m.d_model} is not the base d_model {d0}"
    if m.ffn_ratio is None:
        return ("model", "ffn_ratio"), (
            f"mup on the transformer needs the FFN width to grow with d_model ({why}), and ffn_per_branch "
            f"({m.ffn_per_branch}) is fixed: fc1 would be a hidden weight with only its fan_in growing; set "
            "model.ffn_ratio (each branch's FFN width = round(ffn_ratio * d_model / branches), e.g. ffn_ratio: 4) "
            "in place of ffn_per_branch")
    if m.head_dim is not None:
        return ("model", "head_dim"), (
            f"mup on the transformer needs the head size to grow with d_model ({why}), and head_dim {m.head_dim} "
            "is fixed; leave model.head_dim unset (heads of size d_model / (branches * heads_per_branch))")
    H = m.branches * m.heads_per_branch
    if d0 % H or d0 < H:
        return ("model", "base_width"), (
            f"the base d_model (base_width {d0}) is not divisible by branches x heads_per_branch = {H}: the base "
            "model's heads need size base_width / heads")
    return None
