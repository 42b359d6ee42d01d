"""`search.pruner: sweep`: prune a run only against the other learning rates of its own sweep.

A sweep is the runs that share every searched parameter except the learning
rate (one row x size of an lr-transfer leaderboard). Optuna's median or
percentile pruners compare a run with every other trial of the study, other
sizes and rows included, and so stop sizes or rows that are merely slower;
the leaderboard then counts them as failures. This pruner compares like with
like, and never removes a point the leaderboard's fit of the optimum needs:

- a run is compared, at its last reported step, with the other learning rates
  of its sweep that reported a value at that same step (the seed-mean of the
  runs at each lr: grid and bracket runs are one Optuna trial per seed);
- it is pruned only when at least `min_better` (default 3) other learning rates
  are better than it by more than `margin` (default 0.01, in the objective's
  units: one point of accuracy, 0.01 nats of loss);
- never when its lr is the sweep's best at that step or one of the best's two
  lr neighbours (the quadratic fit's three points), its own seeds' mean counted;
- not before `n_warmup_steps` (default 0).

It is not chosen automatically: a pruner is only ever the one named in
`search.pruner`; an lr-transfer experiment with another pruner gets a warning.
"""
from __future__ import annotations

import math

import optuna
from optuna.trial import TrialState


class SweepPruner(optuna.pruners.BasePruner):
    def __init__(self, lr_key: str = "train.lr", min_better: int = 3, margin: float = 0.01, n_warmup_steps: int = 0):
        if not isinstance(min_better, int) or isinstance(min_better, bool) or min_better < 1:
            raise ValueError(f"min_better must be an integer >= 1, got {min_better!r}")
        if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin >= 0 or not math.isfinite(margin):
            raise ValueError(f"margin must be a number >= 0, got {margin!r}")
        if not isinstance(n_warmup_steps, int) or isinstance(n_warmup_steps, bool) or n_warmup_steps < 0:
            raise ValueError(f"n_warmup_steps must be an integer >= 0, got {n_warmup_steps!r}")
        self.lr_key, self.min_better, self.margin, self.n_warmup_steps = lr_key, min_better, float(margin), n_warmup_steps

    def prune(self, study: optuna.Study, trial: optuna.trial.FrozenTrial) -> bool:
        step = trial.last_step
        if step is None or step < self.n_warmup_steps:
            return False
        mine = trial.intermediate_values[step]
        lr = _num(trial.params.get(self.lr_key))
        if lr is None or not math.isfinite(mine):
            return False
        sweep = _sweep(trial.params, self.lr_key)
        at: dict[float, list[float]] = {lr: [mine]}
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING)):
            if t.number == trial.number or _sweep(t.params, self.lr_key) != sweep:
                continue
            v, other = t.intermediate_values.get(step), _num(t.params.get(self.lr_key))
            if other is not None and v is not None and math.isfinite(v):
                at.setdefault(other, []).append(v)
        if len(at) <= self.min_better:
            return False
        sign = 1.0 if study.direction == optuna.study.StudyDirection.MAXIMIZE else -1.0
        mean = {x: sum(vs) / len(vs) for x, vs in at.items()}
        lrs = sorted(mean)
        best = max(lrs, key=lambda x: (sign * mean[x], -x))
        i = lrs.index(best)
        if lr in lrs[max(0, i - 1): i + 2]:
            return False
        better = sum(1 for x in lrs if x != lr and sign * (mean[x] - mine) > self.margin)
        return better >= self.min_better


def _num(v: object) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v)


def _sweep(params: dict, lr_key: str) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in params.items() if k != lr_key))
