"""The garbage collector during `nas-stab run` (nas_stab/gcsetup.py): setup frozen, trials never."""
import gc
import subprocess
import sys
import weakref

import pytest
from conftest import ROOT, TINY

from nas_stab import gcsetup


class Node:
    pass


def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


@pytest.fixture
def collector():
    before = (gc.isenabled(), gc.get_threshold())
    yield
    gc.unfreeze()
    gc.set_threshold(*before[1])
    gc.enable() if before[0] else gc.disable()


def test_setup_is_frozen_the_first_runs_garbage_freed_and_everything_restored_in_process(collector):
    thresholds = gc.get_threshold()
    with gcsetup.setup(keep_frozen=False) as setup_done:
        assert not gc.isenabled()  # no collection while the setup imports
        setup_done()
        assert gc.isenabled() and gc.get_freeze_count() > 0
        assert gc.get_threshold()[2] == 1_000_000  # young generations only during the first run
        during_first = cycle()
        assert during_first() is not None
        gcsetup.first_run_done()
        assert during_first() is None  # the first run's cycles are collected before the second freeze
        assert gc.get_threshold() == thresholds
        later = cycle()
        gcsetup.first_run_done()  # once only: later runs' objects are never frozen
        gc.collect()
        assert later() is None
    assert gc.get_freeze_count() == 0 and gc.isenabled() and gc.get_threshold() == thresholds


def test_as_a_command_the_setup_stays_frozen_to_the_end(collector):
    with gcsetup.setup(keep_frozen=True) as setup_done:
        setup_done()
    assert gc.get_freeze_count() > 0 and gc.isenabled()


def test_first_run_done_outside_a_run_does_nothing(collector):
    frozen = gc.get_freeze_count()
    gcsetup.first_run_done()  # the driver calls it in every search, from tests and notebooks too
    assert gc.get_freeze_count() == frozen


def test_no_trial_object_is_frozen_by_the_command(tmp_path, monkeypatch, collector):
    """Each run's model is put in a reference cycle: only the collector can free it. After the
    command (as the `nas-stab` process runs it: frozen setup kept), every model must be freeable."""
    import nas_stab.training.loop as loop
    from nas_stab.cli import main

    models = []
    real = loop.build_model

    def build_in_a_cycle(*a, **k):
        m = real(*a, **k)
        m.__dict__["_cycle"] = [m]
        models.append(weakref.ref(m))
        return m

    monkeypatch.setattr(loop, "build_model", build_in_a_cycle)
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    monkeypatch.setattr(sys, "argv", ["nas-stab", "run", str(spec), "--out", str(tmp_path / "runs")])
    assert main() == 0
    assert gc.get_freeze_count() > 0  # the command's setup stayed frozen
    gc.collect()
    assert len(models) >= 4 and [r() for r in models] == [None] * len(models)


def test_the_command_makes_at_most_one_full_collection_before_exit(tmp_path):
    """Measured cost (issue 19): ~7 full collections over ~400,000 objects in a short run."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(TINY)
    code = (
        "import gc, sys\n"
        "full = []\n"
        "gc.callbacks.append(lambda phase, info: full.append(1) if phase == 'stop' and info['generation'] == 2 else None)\n"
        "from nas_stab.cli import main\n"
        f"sys.argv = ['nas-stab', 'run', {str(spec)!r}, '--out', {str(tmp_path / 'runs')!r}]\n"
        "rc = main()\n"
        "print('FULL', len(full), 'RC', rc)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert "RC 0" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "FULL 1 " in out.stdout, out.stdout  # the one after the first run
