"""Python's cyclic garbage collector during `nas-stab run`.

Measured (issue 19, a 20-step run of the bench_trial model): the imports (torch, Optuna,
SQLAlchemy, pandas) and the study's setup leave ~360,000 long-lived objects, and the
first run imports ~200,000 more lazily (Optuna's alembic when the study is created,
torch._dynamo and sympy on the first optimizer). The collector walked all of them again
in every full collection: 7 of them, 10-190 ms each, plus one at exit.

So, for the one command that trains:
1. no collection during the setup (`setup`), then `gc.freeze()` just before the search
   starts: everything alive then (modules, the spec, the data) leaves the collector's sight;
2. until the first run has ended, only the young generations are collected (cycles
   made and dropped within a step are freed as usual; no full collection walks what
   the run imports); when it has ended (`first_run_done`, called by the driver), one
   full collection frees what that run left in reference cycles, and a second freeze
   takes what it imported. No run is in flight in this process then (with one run at a time the
   finished run's model is garbage; with worker processes or Ray the driver holds no model);
3. from there the collector runs normally over what later runs make: their objects are
   never frozen, so their reference cycles are freed as before.
As a command (`keep_frozen`) the frozen objects stay frozen: the process ends right
after, and the interpreter's last collection skips them too. Called in-process (tests,
notebooks) everything is unfrozen at the end and the collector is left as it was.
"""
from __future__ import annotations

import contextlib
import gc

_armed = False  # between `setup`'s freeze and the first finished run
_thresholds = gc.get_threshold()


@contextlib.contextmanager
def setup(keep_frozen: bool):
    """Around `nas-stab run`: yields the function to call when the setup is done."""
    global _armed, _thresholds
    was_enabled, _thresholds = gc.isenabled(), gc.get_threshold()
    gc.disable()

    def setup_done() -> None:
        global _armed
        gc.freeze()
        if was_enabled:
            young, middle, _ = _thresholds
            gc.set_threshold(young, middle, 1_000_000)  # no full collection before first_run_done
            gc.enable()
            _armed = True

    try:
        yield setup_done
    finally:
        _armed = False
        gc.set_threshold(*_thresholds)
        if was_enabled:
            gc.enable()
        if not keep_frozen:
            gc.unfreeze()


def first_run_done() -> None:
    """The driver's call after each finished run: acts once, after the first (see the module)."""
    global _armed
    if _armed:
        _armed = False
        gc.set_threshold(*_thresholds)
        gc.collect()
        gc.freeze()
