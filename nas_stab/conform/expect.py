"""What each parametrization prescribes, as slopes against log2 of the size (width, or the residual block count L),
stated from the papers' tables and not from nas_stab's implementation of them (`models/parametrization.py`): a
conformance check compares a model with these, so a bug in that code is not copied into the expectation.

A parameter's role is found from its shapes at two sizes (`roles`): the readout (the architecture's declared readout
module), hidden (two dims grow: fan-in and fan-out), input (a weight whose fan-out only grows), vector (a norm
gain, a bias: one dim), fixed (nothing grows); over depth, whether it sits in a residual block (`blocks.`).

Width (Tensor Programs V, Table 3 / Table 8; u-muP, Blake et al. 2024, Table 2, which is abc-equivalent for these
slopes). The readout is judged by its *effective* weight: its multiplier m times its init, and its update (Adam,
scale-free: m x lr; SGD, whose gradient carries m too: m^2 x lr), so TP-V's two equivalent forms (1/fan_in init
variance and no multiplier, or a 1/width multiplier on a constant init) agree. Init scales are RMS (a norm's gain
of ones has RMS 1; an all-zero tensor is not judged):

| quantity (slope vs log2 width) | SP (TP-V: fan-in init) | muP / u-muP |
| --- | --- | --- |
| init std: input weight / vector | 0 / 0 | 0 / 0 |
| init std: hidden weight | -1/2 | -1/2 |
| effective readout init std (multiplier x std) | -1/2 | -1 |
| Adam lr: input / vector / hidden | 0 / 0 / 0 | 0 / 0 / -1 |
| Adam effective readout lr (multiplier x lr) | 0 | -1 |
| SGD lr: input / vector / hidden / effective readout (multiplier^2 x lr) | 0 / 0 / 0 / 0 | +1 / +1 / 0 / -1 |
| every hidden layer's output at init | 0 | 0 |
| the logits at init | 0 | -1/2 (0 with a zero readout: not judged) |
| attention logits at init (q.k x scale: SP's 1/sqrt(dh), muP's 1/dh; q, k independent at init) | 0 | -1/2 |
| every layer's output change after k steps, the logits' | (not prescribed: SP's grows) | 0 |

Depth, L residual blocks (Depth-muP: Tensor Programs VI and Bordelon et al. 2023, branches x L^-1/2, with Adam the
blocks' lr x L^-1/2; CompleteP, Dey et al. 2025, Table 1: branches x L^-1, the blocks' Adam lr unchanged, their
eps x L^-1). The branch multiplier is judged by the block's residual contribution RMS(out - in) / RMS(in) at init:

| quantity (slope vs log2 L) | SP | Depth-muP | CompleteP |
| --- | --- | --- | --- |
| a block's residual contribution at init | (the spec's tau) | -1/2 | -1 |
| Adam lr of the blocks' parameters | 0 | -1/2 | 0 |
| Adam eps of the blocks' parameters | 0 | 0 | -1 |
| the logits at init, and their change after k steps: bounded (only growth judged) | - | <= 0 | <= 0 |
"""
from __future__ import annotations

from dataclasses import dataclass

EXPECTS = ("sp", "mup", "depth_mup", "completep", "umup")
DEPTH_FORMS = {"depth_mup": 0.5, "completep": 1.0}  # the branch exponent alpha: branches x L^-alpha

# how far a slope may sit from its prescription: the rules are exact (init std, lrs, multipliers) up to the sampling
# of an init's std; the dynamics (activations, their change) carry finite-size and seed noise
TOL = {"rule": 0.1, "init": 0.2, "logits": 0.25, "update": 0.3}  # the logits' RMS at init: a few random readout rows


@dataclass(frozen=True)
class Expectation:
    check: str  # the check's name (init_std, lr, eps, readout_init, readout_lr, act_init, logits_init, update, ...)
    what: str  # its group of layers or parameters (role), for the report
    slope: float  # the prescribed slope vs log2 size
    tol: float
    sided: str = "both"  # "upper": only growth beyond slope + tol is judged (bounded, approached from below or above)


def roles(shapes: dict[str, tuple[int, ...]], other: dict[str, tuple[int, ...]], readout: str) -> dict[str, str]:
    """Per parameter: readout, hidden, input, vector, fixed or other (a weight only whose fan-in grows, not the
    readout), from its shapes at two widths."""
    out = {}
    for name, shape in shapes.items():
        o = other.get(name)
        if o is None or len(o) != len(shape):
            out[name] = "other"
            continue
        grows = [a != b for a, b in zip(shape, o)]
        if name == readout + ".weight":
            out[name] = "readout"
        elif not any(grows):
            out[name] = "fixed"
        elif len(shape) == 1:
            out[name] = "vector"
        elif len(shape) >= 2 and grows[0] and grows[1]:
            out[name] = "hidden"
        elif len(shape) >= 2 and grows[0]:
            out[name] = "input"
        else:
            out[name] = "other"
    return out


def width_expectations(expect: str, optimizer: str, *, zero_readout: bool) -> list[Expectation]:
    """The width checks of `expect` (sp, mup, umup; depth_mup and completep include muP's)."""
    mup = expect != "sp"
    adam = optimizer in ("adam", "adamw")
    r, i, u = TOL["rule"], TOL["init"], TOL["update"]
    out = [Expectation("init_std", "input", 0.0, r), Expectation("init_std", "vector", 0.0, r),
           Expectation("init_std", "hidden", -0.5, r), Expectation("act_init", "hidden layers", 0.0, i),
           Expectation("attn_init", "attention logits", -0.5 if mup else 0.0, i)]
    if not zero_readout:
        out += [Expectation("readout_init", "readout", -1.0 if mup else -0.5, r),
                Expectation("logits_init", "logits", -0.5 if mup else 0.0, TOL["logits"])]
    if adam:
        out += [Expectation("lr", "input", 0.0, r), Expectation("lr", "vector", 0.0, r),
                Expectation("lr", "hidden", -1.0 if mup else 0.0, r), Expectation("readout_lr", "readout", -1.0 if mup else 0.0, r)]
    else:
        out += [Expectation("lr", "input", 1.0 if mup else 0.0, r), Expectation("lr", "vector", 1.0 if mup else 0.0, r),
                Expectation("lr", "hidden", 0.0, r), Expectation("readout_lr", "readout", -1.0 if mup else 0.0, r)]
    if mup:
        out += [Expectation("update", "every layer", 0.0, u), Expectation("logits_update", "logits", 0.0, u)]
    return out


def depth_expectations(expect: str, optimizer: str) -> list[Expectation]:
    """The depth checks of `expect` (depth_mup, completep; sp: the rules it must not have)."""
    alpha = DEPTH_FORMS.get(expect)
    adam = optimizer in ("adam", "adamw")
    r, i, u = TOL["rule"], TOL["init"], TOL["update"]
    out = []
    if alpha is not None:
        out.append(Expectation("branch", "residual blocks", -alpha, i))
    if adam:
        out.append(Expectation("lr", "residual blocks", -(1.0 - alpha) if alpha is not None else 0.0, r))
        out.append(Expectation("eps", "residual blocks", -1.0 if expect == "completep" else 0.0, r))
    if alpha is not None:  # bounded in depth: at small L the branches' share still moves them (CompleteP's falls as L^-1/2)
        out += [Expectation("logits_init", "logits", 0.0, u, "upper"), Expectation("logits_update", "logits", 0.0, u, "upper")]
    return out
