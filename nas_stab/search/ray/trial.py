"""The worker side of the Ray runner: one Ray Tune trial = one Optuna trial.

A grid trial trains one (configuration, seed) job; a sampled trial trains the
configuration once per seed, in order, stopping at the first seed that does
not complete (as the local runner does). Each run goes through the same
`plan.run_job` -> `train_run` as the local runner, and a worker process that
trains several trials in turn (Tune reuses trial actors) loads each dataset
once (`reuse_data`), as the local runner does once per search.

What the trial sends to the driver, all through `tune.report` (the driver is
the only process that talks to the Optuna study or writes the run directory):

- ``{"nas_kind": "eval", "nas_step": s, "nas_value": v, ...}`` at every
  evaluation of `train_run` (the scheduler side of the bridge reports it to
  the Optuna trial, runs the divergence rule and asks the pruner);
- ``{"nas_kind": "checkpoint", ...}`` with a Tune checkpoint every
  `runner.checkpoint_every` steps (`train_run`'s full state plus the results
  of the seeds already trained), so a trial whose worker died resumes from it;
- ``{"nas_kind": "run_done", "nas_index": i, "nas_result": json}`` when a run
  ends: its `RunResult` (metrics, history, status...) for the driver to write.

Pruning reaches the trial through a tiny "board" actor: the scheduler marks
the trial there before letting it continue, and the trial's reporter, which
runs after `tune.report` returned (reporting is synchronous in Ray 2.60, so
the decision is already made), raises `Pruned`. `train_run` then stops
exactly as it does under the local runner: final stability snapshot, status
``pruned``, last values kept.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from nas_stab.search import plan

if TYPE_CHECKING:
    from ray.actor import ActorHandle

    from nas_stab.config.schema import Spec
    from nas_stab.training.loop import RunResult

KIND = "nas_kind"
CKPT_FILE = "nas_state.pt"


class Board:
    """Trial ids the scheduler told to stop (runs as a Ray actor on the driver's node)."""

    def __init__(self) -> None:
        self._stop: set[str] = set()

    def tell_stop(self, trial_id: str) -> None:
        self._stop.add(trial_id)

    def should_stop(self, trial_id: str) -> bool:
        return trial_id in self._stop


# ---------------------------------------------------------------- (de)serializing results


def encode_result(result: RunResult, tb: str = "", resumed_from: int | None = None) -> str:
    """A RunResult as JSON (NaN and inf kept: Python's json round-trips them)."""
    return json.dumps(
        {
            "status": result.status,
            "metrics": result.metrics,
            "history": result.history,
            "steps": result.steps,
            "wall_s": result.wall_s,
            "train_s": result.train_s,
            "measure_s": result.measure_s,
            "diverged_step": result.diverged_step,
            "error": result.error,
            "traceback": tb,
            "resumed_from": resumed_from,
        }
    )


def decode_result(text: str) -> tuple[RunResult, str, int | None]:
    """(RunResult, traceback text, resumed_from step or None) from `encode_result`."""
    from nas_stab.training.loop import RunResult  # deferred: loads torch, PyYAML, NumPy only when this runs

    d = json.loads(text)
    r = RunResult(
        status=d["status"],
        metrics=d["metrics"],
        history=d["history"],
        steps=d["steps"],
        wall_s=d["wall_s"],
        train_s=d.get("train_s", 0.0),
        measure_s=d.get("measure_s", 0.0),
        diverged_step=d["diverged_step"],
        error=d["error"],
    )
    return r, d.get("traceback", ""), d.get("resumed_from")


# ---------------------------------------------------------------- checkpoints


class TuneCheckpointer:
    """`train_run`'s checkpoint object, backed by Ray Tune checkpoints.

    The saved state also holds the index of the seed being trained and the
    encoded results of the seeds already done, so a restored sampled trial
    continues with the right seed.
    """

    def __init__(self, every: int, index: int, done: list[str], initial: dict | None):
        self.every = every
        self.index = index
        self.done = done
        self._initial = initial

    def load(self) -> dict | None:
        state, self._initial = self._initial, None
        return state

    def save(self, state: dict) -> None:
        import torch  # deferred: loads torch only when this runs
        from ray import tune  # deferred: loads Ray only when this runs

        with tempfile.TemporaryDirectory(prefix="nas-ckpt-") as d:
            torch.save({"index": self.index, "done": list(self.done), "run": state}, os.path.join(d, CKPT_FILE))
            tune.report({KIND: "checkpoint", "nas_step": int(state.get("step", 0))}, checkpoint=tune.Checkpoint.from_directory(d))


def load_tune_checkpoint() -> dict | None:
    """The state saved by `TuneCheckpointer` if Tune restored this trial from a checkpoint."""
    from ray import tune  # deferred: loads Ray only when this runs

    ckpt = tune.get_checkpoint()
    if ckpt is None:
        return None
    import torch  # deferred: loads torch only when this runs

    with ckpt.as_directory() as d:
        p = os.path.join(d, CKPT_FILE)
        if not os.path.exists(p):
            return None
        try:  # tensors, dicts, lists and numbers only: a checkpoint never runs code
            return torch.load(p, map_location="cpu", weights_only=True)
        except Exception:  # unreadable or not ours: the run starts over
            return None


# ---------------------------------------------------------------- the trainable


def trial_main(config: dict, *, spec: Spec, board: ActorHandle[Board] | None = None, cwd: str | None = None,
               run_fn: Callable | None = None) -> None:
    """Ray Tune function trainable: train this trial's job(s) and report to the driver.

    `config["nas"]` (made by the driver's searcher) holds ``params``,
    ``seeds``, ``offset`` (step offset between seeds in the Optuna trial's
    intermediate values), ``threads`` and ``checkpoint_every``. `run_fn` is
    `plan.run_job` unless a test injects a toy run function.
    """
    import torch  # deferred: loads torch only when this runs
    from ray import tune  # deferred: loads Ray only when this runs

    nas = config["nas"]
    if cwd and os.path.isdir(cwd):
        os.chdir(cwd)  # relative dataset roots mean what they mean to the driver
    torch.set_num_threads(int(nas["threads"]))
    run = run_fn or plan.run_job
    context = tune.get_context()
    trial_id = context.get_trial_id()
    reuse_data(context.get_experiment_name())
    objective = spec.search.objective

    saved = load_tune_checkpoint()
    done: list[str] = list(saved["done"]) if saved else []
    start = int(saved["index"]) if saved else 0
    run_state = saved.get("run") if saved else None
    for i in range(start, len(nas["seeds"])):
        seed = nas["seeds"][i]
        resumed_from = int(run_state["step"]) if (i == start and run_state) else None
        ckpt = TuneCheckpointer(int(nas["checkpoint_every"]), i, done, run_state if i == start else None)
        reporter = _reporter(objective, i * int(nas["offset"]), board, trial_id)
        result, tb = run(spec, nas["params"], seed, reporter, ckpt if ckpt.every else None)
        enc = encode_result(result, tb, resumed_from)
        done.append(enc)
        tune.report({KIND: "run_done", "nas_index": i, "nas_result": enc, "nas_node": _node_id()})
        if plan.ends_trial(result):
            break  # the driver's seed policy: a pruned, diverged or failed seed ends the trial


# ---------------------------------------------------------------- data, once per worker process

_DATA_SCOPE: tuple[str, Any] | None = None  # (experiment, the open reuse_loaded() block) in this process


def reuse_data(experiment: str) -> None:
    """Load each dataset once per worker process and experiment, as the local runner does per run.

    Tune runs a trial in an actor process and, with ``reuse_actors=True``, gives a finished trial's
    actor to the next trial that needs the same resources (`FunctionTrainable.reset_config`), so one
    process trains many trials in turn. This keeps a `nas_stab.data.reuse_loaded()` block open in
    the process for the whole Tune experiment `experiment` (one `run_ray` call, as the local
    runner's block is one `nas-stab run`): the trials it trains share the loaded data (training
    never modifies it), and only the first reads the files. A trial of another experiment in the
    same process starts a new block, so it reads the files again.
    """
    global _DATA_SCOPE
    from nas_stab.data import reuse_loaded  # deferred: loads torch, PyYAML, NumPy only when this runs

    if _DATA_SCOPE is not None and _DATA_SCOPE[0] == experiment:
        return
    if _DATA_SCOPE is not None:
        _DATA_SCOPE[1].__exit__(None, None, None)  # drops the other experiment's data
        _DATA_SCOPE = None
    block = reuse_loaded()
    block.__enter__()
    _DATA_SCOPE = (experiment, block)


def _node_id() -> str:
    import ray  # deferred: loads Ray only when this runs

    try:
        return ray.get_runtime_context().get_node_id()
    except Exception:
        return ""


def _reporter(objective: str, offset: int, board: ActorHandle[Board] | None,
              trial_id: str) -> Callable[[int, dict], None]:
    """train_run's reporter: send the evaluation to the driver, then obey its decision."""
    from ray import tune  # deferred: loads Ray only when this runs

    from nas_stab.training.loop import Pruned  # deferred: loads torch, PyYAML, NumPy only when this runs

    def report(step: int, values: dict) -> None:
        msg: dict[str, Any] = {KIND: "eval", "nas_step": offset + int(step)}
        v = values.get(objective)
        if v is not None:
            msg["nas_value"] = float(v)
        loss = values.get("train_loss")
        if loss is not None:
            msg["nas_train_loss"] = float(loss)
        msg["nas_metrics"] = json.dumps({k: float(x) for k, x in values.items() if isinstance(x, (int, float))})
        tune.report(msg)  # returns once the driver's scheduler has decided
        if board is not None and _told_to_stop(board, trial_id):
            raise Pruned()

    return report


def _told_to_stop(board: ActorHandle[Board], trial_id: str) -> bool:
    import ray  # deferred: loads Ray only when this runs

    try:
        return bool(ray.get(board.should_stop.remote(trial_id), timeout=60))
    except Exception:  # board unreachable: the scheduler falls back to STOP at the next report
        return False


def finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
