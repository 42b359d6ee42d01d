"""Ray Tune's two faces of one `bridge.OptunaBridge`: its searcher (`BridgeSearcher`) and its
scheduler (`BridgeScheduler`). Each forwards Tune's calls to the bridge; a copy Tune pickles into a
checkpoint carries no bridge (the driver keeps the only one)."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ray.tune.experiment import Trial
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

if TYPE_CHECKING:
    from ray.tune.execution.tune_controller import TuneController


class OptunaBridge(Protocol):
    """What the faces ask of `bridge.OptunaBridge` (which builds them)."""

    def suggest(self, trial_id: str) -> dict | str | None: ...

    def complete(self, trial_id: str, result: dict | None, error: bool) -> None: ...

    def on_result(self, trial_id: str, result: dict) -> str: ...

    def on_error(self, trial_id: str, message: str, *, final: bool = False) -> None: ...

    def gave_up(self, trial_id: str) -> bool: ...


class _Face:
    def __init__(self, bridge: OptunaBridge):
        self._bridge: OptunaBridge | None = bridge

    @property
    def bridge(self) -> OptunaBridge:
        assert self._bridge is not None, "the driver's face has the bridge; an unpickled copy has none"
        return self._bridge

    def __getstate__(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k != "_bridge"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._bridge = None


class BridgeSearcher(_Face, Searcher):
    """Tune's searcher face of `OptunaBridge`."""

    def __init__(self, bridge: OptunaBridge):
        _Face.__init__(self, bridge)
        Searcher.__init__(self, metric=None, mode=None)

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict, **spec: Any) -> bool:
        return True

    # Searcher.FINISHED is a str, which Ray's own annotation (Optional[Dict]) leaves out
    def suggest(self, trial_id: str) -> dict | str | None:  # type: ignore[override]
        return self.bridge.suggest(trial_id)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        pass  # the scheduler face sees every result first

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self.bridge.complete(trial_id, result, error)

    def save(self, checkpoint_path: str) -> None:
        pass  # the Optuna study and trials.csv are the durable state

    def restore(self, checkpoint_path: str) -> None:
        pass

    def get_state(self) -> dict:
        return {}

    def set_state(self, state: dict) -> None:
        pass


class BridgeScheduler(_Face, FIFOScheduler):
    """Tune's scheduler face of `OptunaBridge`: divergence rule, then the Optuna pruner."""

    def __init__(self, bridge: OptunaBridge):
        _Face.__init__(self, bridge)
        FIFOScheduler.__init__(self)

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        return True

    def on_trial_result(self, tune_controller: TuneController, trial: Trial, result: dict) -> str:
        decision = self.bridge.on_result(trial.trial_id, result)
        return TrialScheduler.STOP if decision == "STOP" else TrialScheduler.CONTINUE

    def on_trial_error(self, tune_controller: TuneController, trial: Trial) -> None:
        # Tune calls this after stopping a trial it retries (status ERROR, then requeued as PENDING), and
        # before giving one up (still RUNNING, or PENDING: a failure while it waited to start)
        self.bridge.on_error(trial.trial_id, _error_message(trial), final=trial.status != Trial.ERROR)

    def choose_trial_to_run(self, tune_controller: TuneController) -> Trial | None:
        """FIFO, except that a trial given up (`OptunaBridge.on_error`) that Tune requeued is stopped
        instead: the bridge then records it failed."""
        for trial in list(tune_controller.get_trials()):
            if trial.status == Trial.PENDING and self.bridge.gave_up(trial.trial_id):
                tune_controller.stop_trial(trial)
        return FIFOScheduler.choose_trial_to_run(self, tune_controller)

    def debug_string(self) -> str:
        return "nas_stab: divergence rule + Optuna pruner"

    def save(self, checkpoint_path: str) -> None:
        pass

    def restore(self, checkpoint_path: str) -> None:
        pass


def _error_message(trial: Trial) -> str:
    """The last failure recorded in a Tune trial's error file, shortened."""
    try:
        p = Path(trial.error_file) if trial.error_file else None
        text = p.read_text(encoding="utf-8", errors="replace") if p and p.exists() else ""
    except Exception:
        text = ""
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    tail = [ln for ln in lines if not ln.startswith("Failure #")][-3:]
    msg = " | ".join(ln.strip() for ln in tail)
    return (msg or "worker failed")[:500]
