"""train_run's allocator setting (nas_stab/training/malloc.py): safe, idempotent, and the user's choice stands."""
import os
import subprocess
import sys

from nas_stab.training import malloc


def test_keep_freed_memory_is_idempotent():
    first = malloc.keep_freed_memory()
    assert isinstance(first, bool)
    assert malloc.keep_freed_memory() is first
    if sys.platform.startswith("linux") and first:
        assert malloc._state is True


def _in_child(env_extra: dict) -> str:
    code = "from nas_stab.training.malloc import keep_freed_memory; print(keep_freed_memory())"
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")} | env_extra
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True).stdout.strip()


def test_user_malloc_settings_are_left_alone():
    assert _in_child({"MALLOC_TRIM_THRESHOLD_": "131072"}) == "False"
