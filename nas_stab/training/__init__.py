"""Training: one readable loop (`loop.train_run`), optimizers and schedules."""
from nas_stab.training.loop import Pruned, RunResult, train_run

__all__ = ["Pruned", "RunResult", "train_run"]
