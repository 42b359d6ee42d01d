"""Which knob values each architecture accepts, with the reason when not (each arch's `check` in its registry entry,
`models/catalog.py`).

Every check returns `((key path), reason)` for the first problem, or None.
Pure Python (no torch): `nas-stab validate` runs these on every grid point.
"""
from __future__ import annotations

from nas_stab.config.schema import ModelConfig, Spec

_DEFAULTS = ModelConfig()
TRANSFORMER_KEYS = ("d_model", "heads_per_branch", "head_dim", "ffn_per_branch", "ffn_ratio", "enc_layers",
                    "dec_layers", "head_dropout", "norm_position")
SCALED_SKIPS = ("xskip", "xskip_ln", "rskip_ln")
NORMED_SKIPS = ("xskip_ln", "rskip_ln", "deepnorm")
PREACT_ARCHS = ("resnet", "resnext")  # the CIFAR ResNets (three stages of their own)
PREACT_BLOCK = (*PREACT_ARCHS, "mlp_resnet")  # block: preact


def _bad(key: str, reason: str):
    return ("model", key), reason


def common(spec: Spec, *, conv: bool):
    """Rules shared by every vision architecture."""
    m = spec.model
    if m.stages != _DEFAULTS.stages and m.arch != "plainnet":
        return _bad("stages", f"stages chooses the stages of arch plainnet's conv layers; {m.arch} "
                              + ("has its own three stages (depth = 6n+2 or 9n+2)" if m.arch in PREACT_ARCHS else "has no stages"))
    for key in TRANSFORMER_KEYS:
        if getattr(m, key) != getattr(_DEFAULTS, key):
            return _bad(key, f"{key} applies to arch transformer only, not {m.arch}")
    if m.block != "post" and m.arch not in PREACT_BLOCK:
        return _bad("block", f"block: {m.block} (He et al.'s pre-activation block) applies to "
                             f"{', '.join(PREACT_BLOCK)}, not {m.arch}")
    if m.init == "fan_in" and m.arch != "mlp_resnet":
        return _bad("init", f"init fan_in (Tensor Programs V's standard parametrization) is implemented for mlp_resnet; "
                            f"{m.arch}'s stock init is kaiming")
    if m.init == "xavier_branch":
        return _bad("init", "xavier_branch (Xavier with the fans of one mini block) applies to arch transformer only; "
                            f"{m.arch}'s stock init is kaiming")
    if conv:
        d = spec.task.dataset
        if d.name == "synthetic" and spec.task.kind == "classification" and len(d.options.shape) != 3:
            return ("task", "dataset", "shape"), f"{m.arch} is a CNN and needs image inputs (C, H, W); got shape {list(d.options.shape)}"
    elif m.ln_mode != "chw":
        return _bad("ln_mode", f"ln_mode: {m.ln_mode} chooses the LN of CNNs; {m.arch} has no spatial dimensions")
    path = m.parametrization == "path" or m.norm == "path_bn"
    if m.layer_skip and m.arch not in ("mlp", "plainnet"):
        return _bad("layer_skip", f"layer_skip adds identity skips to the plain stacks mlp and plainnet; {m.arch} "
                                  "has its own skips (model.skip)")
    if m.layer_skip and path:
        return _bad("layer_skip", "layer_skip is the weight-space control of Path-BN: in path space every chain layer "
                                  "already carries the identity (its constant diagonal); use parametrization weight, "
                                  "norm none, bn or ln")
    if path:
        if m.norm == "ln":
            return _bad("norm", "LN mixes the units of a layer, so it is not positively scale-invariant per unit; "
                                "the path parametrization takes norm none, bn or path_bn")
        if m.init != "kaiming":
            return _bad("init", f"init {m.init} is a weight-space init; in path space the diagonal path values start "
                                "at 1 and the rest at the Kaiming default (Path-BN paper): use init kaiming")
        if m.scalar_bias:
            return _bad("scalar_bias", "scalar biases break the path-space reparameterization (bias-free ReLU chains)")
    return None


def plain(spec: Spec, *, conv: bool):
    """mlp and plainnet: one stack of layers, no residual branches, no skips."""
    m = spec.model
    problem = common(spec, conv=conv)
    if problem:
        return problem
    why = f"{m.arch} has no residual branches; use {'resnet' if conv else 'mlp_resnet'}"
    if m.branches != 1:
        return _bad("branches", why)
    if m.branch_depth != 1:
        return _bad("branch_depth", why)
    for key in ("aggregation", "aggregation_exponent", "aggregation_base", "alpha_scale", "tau", "tau_exponent", "tau_learnable"):
        if getattr(m, key) != getattr(_DEFAULTS, key):
            return _bad(key, why)
    if m.skip not in ("plain", "none"):
        return _bad("skip", f"{m.arch} has no skip connections; skip {m.skip} needs a residual architecture")
    if m.skip_lambda != 1:
        return _bad("skip_lambda", f"{m.arch} has no skip connections")
    if m.skip_norm != "ln":
        return _bad("skip_norm", f"{m.arch} has no skip connections")
    if m.init != "kaiming":
        return _bad("init", f"init {m.init} initializes residual branches; {why}")
    if m.scalar_bias:
        return _bad("scalar_bias", why)
    return None


def residual(spec: Spec, *, conv: bool, b: int):
    """mlp_resnet, resnet and resnext; b is the depth of one branch."""
    m = spec.model
    problem = common(spec, conv=conv)
    if problem:
        return problem
    if m.skip_lambda != 1 and m.skip not in SCALED_SKIPS:
        why = "deepnorm sets its own alpha from L" if m.skip == "deepnorm" else f"skip {m.skip} has no lambda"
        return _bad("skip_lambda", f"skip_lambda applies to {', '.join(SCALED_SKIPS)}; {why}")
    if m.skip_norm != "ln" and m.skip not in NORMED_SKIPS:
        return _bad("skip_norm", f"skip_norm applies to {', '.join(NORMED_SKIPS)}; skip {m.skip} has no norm")
    if m.skip == "deepnorm" and m.init not in ("kaiming", "deepnorm"):
        return _bad("init", f"skip deepnorm sets DeepNet's init (beta); init {m.init} would override it: use kaiming or deepnorm")
    if m.init == "fixup" and m.norm != "none":
        return _bad("init", f"Fixup initializes normalization-free networks; set norm: none (got {m.norm})")
    if m.scalar_bias and m.norm != "none":
        return _bad("scalar_bias", f"scalar biases are for normalization-free networks; norm {m.norm} has its own shift")
    if m.init in ("stam_forward", "stam_update") and (m.aggregation != "sum" or m.aggregation_exponent is not None):
        return _bad("init", f"init {m.init} is STAM's appendix A.4 scaled-down init for SUM aggregation (it replaces "
                            f"alpha by scaling every branch layer); with aggregation {m.aggregation!r} both would "
                            "scale the branches: use aggregation: sum")
    if m.block == "preact" and (m.parametrization == "path" or m.norm == "path_bn"):
        return _bad("block", "path-space chains (and Path-BN) are conv -> norm -> relu; the pre-activation block "
                             "puts the norm first: use block: post")
    if m.init == "stam_update" and b < 2:
        return _bad("init", f"stam_update scales by (bC)^(-1/(2(b-1))) and needs branches of depth b >= 2; here b = {b}")
    if (m.parametrization == "path" or m.norm == "path_bn") and b < 2:
        return _bad("parametrization" if m.norm != "path_bn" else "norm",
                    "a one-layer branch is its own path: path values equal the weights and Path-BN equals BN; "
                    "use branch_depth >= 2")
    return None


def cifar_depth(spec: Spec, per_block: int):
    """resnet: depth = 6n + 2; resnext: depth = 9n + 2 (3 stages of n blocks)."""
    m = spec.model
    layers = 3 * per_block
    if m.depth < layers + 2 or (m.depth - 2) % layers:
        near = max(1, round((m.depth - 2) / layers)) * layers + 2
        return _bad("depth", f"{m.arch} needs depth = {layers}n + 2 (n blocks per stage, {per_block} layers per block), "
                             f"e.g. {near}; got {m.depth}")
    if m.branch_depth != 1:
        return _bad("branch_depth", f"{m.arch} branches are fixed ({per_block} convolutions); branch_depth applies to mlp_resnet")
    return None

# ------------------------------------------------------------ each architecture's check (its registry entry)

def check_mlp(spec: Spec) -> tuple[tuple, str] | None:
    return plain(spec, conv=False)


def check_mlp_resnet(spec: Spec) -> tuple[tuple, str] | None:
    return residual(spec, conv=False, b=spec.model.branch_depth)


def check_plainnet(spec: Spec) -> tuple[tuple, str] | None:
    return plain(spec, conv=True)


def check_resnet(spec: Spec) -> tuple[tuple, str] | None:
    return cifar_depth(spec, 2) or residual(spec, conv=True, b=2)


def check_resnext(spec: Spec) -> tuple[tuple, str] | None:
    return cifar_depth(spec, 3) or residual(spec, conv=True, b=3)


# ------------------------------------------------------------ the transformer

SUPPORTED_INIT = ("kaiming", "zero_last", "deepnorm", "xavier_branch")
VISION_KEYS = {
    "depth": "use enc_layers and dec_layers",
    "width": "use d_model and ffn_per_branch (or ffn_ratio)",
    "branch_depth": "the transformer's branches are heads and FFN slices",
    "stages": "stages applies to plainnet",
    "ln_mode": "its LayerNorm normalizes over d_model",
    "scalar_bias": "its projections have ordinary biases",
    "layer_skip": "its sublayers have their residual connections (model.skip)",
}


def ffn_width(cfg) -> int:
    """Units of one FFN branch: round(ffn_ratio * d_model / branches) with `model.ffn_ratio` (it grows with
    d_model, as muP needs), else the fixed `ffn_per_branch`."""
    if cfg.ffn_ratio is not None:
        return round(cfg.ffn_ratio * cfg.d_model / cfg.branches)
    return cfg.ffn_per_branch


def check_transformer(spec: Spec) -> tuple[tuple, str] | None:
    m = spec.model
    unsupported = {
        "norm": (("none", "ln"), "the transformer normalizes with LayerNorm or not at all"),
        "skip_norm": (("ln",), "batch norm over padded token batches is not supported"),
        "parametrization": (("weight", "sp", "mup", "depth_mup", "completep", "umup"),
                            "the path-space parametrization needs ReLU chains, not attention"),
        "init": (SUPPORTED_INIT, "fixup/stam_* inits are defined for ReLU branches"),
        "block": (("post",), "the pre-activation block is resnet's and resnext's; use norm_position"),
    }
    for key, (ok, why) in unsupported.items():
        v = getattr(m, key)
        if v not in ok:
            return ("model", key), f"{v!r} is not supported on transformer (supported: {', '.join(ok)}; {why})"
    for key, use in VISION_KEYS.items():  # keys of other archs: refuse rather than silently ignore
        if hasattr(m, key) and getattr(m, key) != getattr(_DEFAULTS, key):
            return ("model", key), f"{key} does not apply to arch transformer; {use}"
    if m.skip == "deepnorm" and m.norm_position == "pre":
        return ("model", "norm_position"), "deepnorm is a post-LN form; use norm_position: post"
    H = m.branches * m.heads_per_branch
    if m.head_dim is None and (m.d_model % H or m.d_model < H):
        return ("model", "head_dim"), (
            f"d_model {m.d_model} is not divisible by branches x heads_per_branch = {H}; set model.head_dim"
        )
    return _check_ffn_ratio(m)


def _check_ffn_ratio(m) -> tuple[tuple, str] | None:
    """`ffn_ratio` replaces `ffn_per_branch` (refused together rather than one silently ignored) and must give
    each branch at least one unit."""
    if m.ffn_ratio is None:
        return None
    if m.ffn_per_branch != _DEFAULTS.ffn_per_branch:
        return ("model", "ffn_per_branch"), (
            f"ffn_ratio {m.ffn_ratio} sets the FFN width (round(ffn_ratio * d_model / branches) per branch) in place of "
            f"ffn_per_branch {m.ffn_per_branch}: give one of them")
    if ffn_width(m) < 1:
        return ("model", "ffn_ratio"), (
            f"ffn_ratio {m.ffn_ratio} x d_model {m.d_model} / branches {m.branches} rounds to an FFN branch of 0 units")
    return None
