"""Names of metrics and statuses (SPEC 4), and which way is better.

Pure data, importable without torch: the spec validator, the runners and the
leaderboard all read it.
"""
from __future__ import annotations

STATUSES = ("complete", "pruned", "diverged", "failed")

TASK_METRICS = {
    "classification": ("train_loss", "val_loss", "val_acc", "test_acc"),
    "translation": ("train_loss", "val_loss", "bleu", "test_bleu"),
}

# Stability metrics, each at init (init_ prefix) and at the end (final_ prefix).
STABILITY_METRICS = ("fwd_ratio", "grad_ratio", "update_ratio", "sharpness", "lr_sharpness")

MAXIMIZE = {"val_acc", "test_acc", "bleu", "test_bleu"}
MINIMIZE = {"train_loss", "val_loss", "max_update_ratio"}

# Metrics an objective may name: task metrics plus stability metrics at the end.
OBJECTIVES = sorted(
    set(m for ms in TASK_METRICS.values() for m in ms)
    | {f"{p}{m}" for p in ("init_", "final_") for m in STABILITY_METRICS}
    | {"max_update_ratio"}
)


def direction(metric: str) -> str:
    """'maximize' for accuracy and BLEU, 'minimize' for losses and stability metrics."""
    return "maximize" if metric in MAXIMIZE else "minimize"


def value_range(metric: str) -> tuple[float, float]:
    """The values `metric` can take: accuracies in [0, 1], BLEU in [0, 100], losses and ratios >= 0."""
    if metric in ("val_acc", "test_acc"):
        return 0.0, 1.0
    if metric in ("bleu", "test_bleu"):
        return 0.0, 100.0
    if metric.endswith("sharpness"):  # an eigenvalue: either sign
        return float("-inf"), float("inf")
    return 0.0, float("inf")


def worst_value(metric: str, loss_threshold: float | None = None) -> float:
    """The value a diverged, pruned or failed run counts with in a leaderboard (SPEC 5)."""
    if metric in MAXIMIZE:
        return 0.0
    return float("inf") if loss_threshold is None else float(loss_threshold)
