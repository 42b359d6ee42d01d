"""The no-learning value ``m0`` of the leaderboard's metric, the margin a cell must beat it by to train, and
the values runs count with (docs/leaderboard.md): failed runs count as ``m0`` and every value worse than
``m0`` is clamped to it; a complete run at that level did not learn (it is ``stuck``)."""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from nas_stab import metrics
from nas_stab.analysis.optimum_fit import did_not_learn

__all__ = ["NoLearning", "counted_values", "no_learning", "no_learning_level", "stuck_undefined"]

_ACC = ("val_acc", "test_acc")
_BLEU = ("bleu", "test_bleu")
_LOSS = ("train_loss", "train_loss_tail", "val_loss", "test_loss")


def no_learning(metric: str, classes: int | None = None) -> tuple[float | None, float, str]:
    """(m0, margin, how) for `metric`; m0 None means "the largest finite value among complete runs".

    Accuracy: m0 = 1/classes (chance of a balanced set; 0 when the class count is unknown),
    margin a tenth of the way from m0 to 1. BLEU: m0 = 0, margin 1 BLEU. Losses: m0 = ln(classes),
    the loss of a uniform prediction (the divergence rule's reference), else the largest finite
    value among complete runs; margin 10% of m0. Other metrics: m0 as for an unknown loss
    (minimize) or 0 (maximize), margin 0.
    """
    if metric in _ACC:
        m0 = 1.0 / classes if classes and classes > 1 else 0.0
        how = f"chance 1/{classes}" if classes and classes > 1 else "0 (class count unknown)"
        return m0, 0.1 * (1.0 - m0), how
    if metric in _BLEU:
        return 0.0, 1.0, "0 BLEU"
    if metric in _LOSS:
        if classes and classes > 1:
            return math.log(classes), 0.1 * math.log(classes), f"ln({classes}), the loss of a uniform prediction"
        return None, 0.1, "the largest finite value among complete runs (no class count)"
    if metrics.direction(metric) == "minimize":
        return None, 0.0, "the largest finite value among complete runs"
    return 0.0, 0.0, "0"


def stuck_undefined(metric: str, classes: int | None = None, given: bool = False) -> str:
    """Why a run stuck at the no-learning level cannot be told for `metric` ("" when it can).

    `stuck` (docs/leaderboard.md) needs `m0` to be what a model that learned nothing scores on the
    task, independent of the runs: chance accuracy 1/classes, the uniform prediction's loss
    ln(classes), or an `m0` given explicitly. Elsewhere `m0` is a stand-in that would make the count
    a guess: 0 for accuracy without a class count (not chance), the floor of the BLEU scale (a model
    that emits one fixed sentence for every input scores above it), the worst complete run's value
    (every table would have a stuck run by construction), or 0 for another metric.
    """
    if given:
        return ""
    if metric in _ACC:
        return "" if classes and classes > 1 else "chance accuracy is unknown (no class count)"
    if metric in _LOSS:
        return "" if classes and classes > 1 else "no class count: m0 is the worst complete run's loss, not a no-learning level"
    if metric in _BLEU:
        return ("m0 = 0 is the floor of the BLEU scale, not the score of a model that learned nothing (one that emits "
                "the same sentence for every input can score above it)")
    return f"no task-defined no-learning level for {metric}"


class NoLearning(NamedTuple):
    """The table's no-learning value, its trains margin, how m0 was chosen, and why `stuck` is not counted ("" when it is)."""

    m0: float
    margin: float
    how: str
    stuck_na: str


def no_learning_level(metric: str, classes: int | None, m0: float | None, margin: float | None,
                      value: np.ndarray, ok: np.ndarray, finite: np.ndarray) -> NoLearning:
    """`m0` and `margin` as given, else `no_learning`'s; an m0 it leaves to the runs is the largest of the
    `value`s of the complete finite runs (`ok`; of the finite runs when none is, 1 without any)."""
    m0_default, margin_default, m0_how = no_learning(metric, classes)
    stuck_na = stuck_undefined(metric, classes, given=m0 is not None)
    if m0 is None:
        m0 = m0_default
        if m0 is None:
            pool = value[ok] if ok.any() else value[finite]
            m0 = float(pool.max()) if pool.size else 1.0
    else:
        m0_how = "given"
    m0 = float(m0)
    if margin is None:
        margin = 0.1 * abs(m0) if metric in _LOSS or (margin_default == 0.1 and m0_default is None) else margin_default
    return NoLearning(m0=m0, margin=float(margin), how=m0_how, stuck_na=stuck_na)


def counted_values(value: np.ndarray, ok: np.ndarray, pruned: np.ndarray, finite: np.ndarray, sign: float,
                   level: NoLearning) -> tuple[np.ndarray, np.ndarray]:
    """The value each run counts with, and whether it is stuck (all False when `stuck` is not counted)."""
    m0, margin = level.m0, level.margin
    # a pruned run counts with the value it had when it was stopped (its last evaluation), else m0;
    # diverged, failed and non-finite runs count with m0; every value worse than m0 counts as m0
    # (Wortsman et al. 2023 clamp losses at the initial loss)
    counted = np.where(ok | (pruned & finite), value, m0)
    counted = np.maximum(counted, m0) if sign > 0 else np.minimum(counted, m0)
    thr = sign * m0 + margin  # the trains threshold in metric direction: at or below it, a value did not learn
    # stuck: a complete run with a finite value that did not learn (chance accuracy, a uniform prediction's loss);
    # diverged, pruned and failed runs are never stuck
    stuck = ok & did_not_learn(counted, sign, thr) if not level.stuck_na else np.zeros(len(value), dtype=bool)
    return counted, stuck
