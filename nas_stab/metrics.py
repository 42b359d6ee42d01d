"""Names of metrics and statuses (docs/metrics.md), and which way is better.

Pure data, importable without torch: the spec validator, the runners and the
leaderboard all read it.
"""
from __future__ import annotations

import math
from typing import Literal

Direction = Literal["minimize", "maximize"]  # an Optuna study's direction

STATUSES = ("complete", "pruned", "diverged", "failed")

TASK_METRICS = {
    "classification": ("train_loss", "train_loss_tail", "init_loss", "val_loss", "val_acc", "test_acc"),
    "translation": ("train_loss", "train_loss_tail", "init_loss", "val_loss", "bleu", "test_bleu"),
}

# Stability metrics, each at init (init_ prefix) and at the end (final_ prefix); docs/metrics.md defines them.
STABILITY_METRICS = ("fwd_ratio", "enc_fwd_ratio", "dec_fwd_ratio", "branch_ratio", "grad_norm", "branch_grad_norm",
                     "grad_ratio", "update_ratio", "update_norm", "loss_drop", "sharpness", "eos_ratio", "lr_sharpness",
                     "attn_logit_max", "output_logit_rms")
TRANSFORMER_ONLY = ("enc_fwd_ratio", "dec_fwd_ratio", "attn_logit_max")
# Further values of a stability snapshot that `nas-stab probe` records beside the metrics above.
PROBE_EXTRA = ("probe_loss", "sharpness_iters", "sharpness_converged")

# diverged_why labels (docs/metrics.md gives the rule of each)
DIVERGED_WHY = ("forward_explosion_at_init", "eos_above_1", "loss_spike", "attn_logit_growth",
                "nonfinite_gradient", "nonfinite_forward", "nonfinite_loss", "loss_above_threshold")

MAXIMIZE = {"val_acc", "test_acc", "bleu", "test_bleu"}
MINIMIZE = {"train_loss", "train_loss_tail", "init_loss", "val_loss", "max_update_ratio", "loss_spikes"}


TAIL_SHARE = 10  # train_loss_tail: the mean training-batch loss over the last 1/TAIL_SHARE of the steps taken


def tail_loss(losses: dict[int, float], step: int) -> float:
    """`train_loss_tail` at `step`: the mean of the logged training-batch losses (``{step: loss}``) over
    the last tenth of the steps taken (at least the last one); NaN without any."""
    first = step - max(1, step // TAIL_SHARE)
    vals = [v for s, v in losses.items() if first < s <= step]
    return math.fsum(vals) / len(vals) if vals else math.nan


def stability_metrics(task_kind: str) -> tuple[str, ...]:
    """The stability metrics recorded for a task (the Transformer-only ones for translation only)."""
    if task_kind == "translation":
        return STABILITY_METRICS
    return tuple(m for m in STABILITY_METRICS if m not in TRANSFORMER_ONLY)

# Metrics an objective may name: task metrics plus stability metrics at the end.
OBJECTIVES = sorted(
    set(m for ms in TASK_METRICS.values() for m in ms)
    | {f"{p}{m}" for p in ("init_", "final_") for m in STABILITY_METRICS}
    | {"max_update_ratio", "loss_spikes"}
)


# Metrics measured once on the held-out test split at the end of a run (trials.csv columns): what a leaderboard
# reports at the learning rate chosen on a validation metric (leaderboard.report, docs/leaderboard.md)
HELD_OUT = ("test_acc", "test_loss", "test_bleu")
REPORTS = sorted(set(OBJECTIVES) | set(HELD_OUT))  # the metrics leaderboard.report may name


def held_out(metric: str) -> str | None:
    """The held-out counterpart of a validation metric: val_<x> -> test_<x>, bleu -> test_bleu; None for any
    other metric (a training loss, a stability metric, a test metric itself)."""
    if metric == "bleu":
        return "test_bleu"
    if metric.startswith("val_"):
        return "test_" + metric[len("val_"):]
    return None


def direction(metric: str) -> Direction:
    """'maximize' for accuracy and BLEU, 'minimize' for losses and stability metrics."""
    return "maximize" if metric in MAXIMIZE else "minimize"


def value_range(metric: str) -> tuple[float, float]:
    """The values `metric` can take: accuracies in [0, 1], BLEU in [0, 100], losses and ratios >= 0."""
    if metric in ("val_acc", "test_acc"):
        return 0.0, 1.0
    if metric in ("bleu", "test_bleu"):
        return 0.0, 100.0
    if metric.endswith(("sharpness", "eos_ratio", "loss_drop")):  # an eigenvalue, a loss change: either sign
        return float("-inf"), float("inf")
    return 0.0, float("inf")


def parse_epsilon(value) -> tuple[float | None, float | None]:
    """(relative share, absolute value) of a ``leaderboard.epsilon``: ``"2%"`` -> (0.02, None), ``0.01`` ->
    (None, 0.01). Raises ValueError on anything else (negative, not finite, not a number or a percentage)."""
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("%"):
            try:
                share = float(text[:-1]) / 100.0
            except ValueError:
                raise ValueError(f"a relative epsilon is a percentage such as '3%', got {value!r}") from None
            if not (math.isfinite(share) and 0 < share < 1):
                raise ValueError(f"a relative epsilon is a percentage between 0 and 100, got {value!r}")
            return share, None
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"epsilon must be a number in the metric's units or a percentage such as '3%', got {value!r}") from None
    if isinstance(value, bool):
        raise ValueError(f"epsilon must be a number or a percentage, got {value!r}")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"epsilon must be > 0 and finite, got {value!r}")
    return None, v
