"""The provenance a run directory records in the ``meta:`` section of its spec.yaml (`meta_for`): the spec
hash, the nas_stab version and git commit, torch and Python versions, the hardware, the creation time and
the command that started the run; and how a stored spec differs from the one now given (`spec_changes`)."""
from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from nas_stab import __version__

if TYPE_CHECKING:
    from nas_stab.config.schema import Spec

__all__ = ["git_commit", "hardware", "invocation", "meta_for", "spec_changes"]


def git_commit() -> str:
    """The commit of the nas_stab source tree ('+dirty' with local changes), or 'unknown'."""
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here, capture_output=True, text=True, timeout=5)
        return sha.stdout.strip()[:12] + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def hardware() -> str:
    try:
        import torch  # deferred: loads torch only when this runs

        if torch.cuda.is_available():
            return f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    except Exception:  # pragma: no cover
        pass
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores (CPU)"


def invocation() -> str | None:
    """The `nas-stab run ...` command line that started this process (its overrides included), or None when
    the run was started otherwise (the Python API, a test)."""
    argv = sys.argv
    if len(argv) < 2 or argv[1] != "run" or Path(argv[0]).name not in ("nas-stab", "cli.py", "__main__.py"):
        return None
    return "nas-stab " + shlex.join(argv[1:])



def spec_changes(stored: dict, new: dict, limit: int = 6) -> str:
    """The keys whose values differ between a run directory's stored spec and the one now given, as
    ``key: old -> new`` (at most `limit`, then how many more): what the refusal of a changed spec names."""
    from nas_stab.analysis.values import dotted  # deferred: loads pandas, NumPy only when this runs

    a = dotted({k: v for k, v in stored.items() if k != "meta"})
    b = dotted({k: v for k, v in new.items() if k != "meta"})
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k, "(unset)") != b.get(k, "(unset)")]
    parts = [f"{k}: {a.get(k, '(unset)')!r} -> {b.get(k, '(unset)')!r}" for k in keys[:limit]]
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(parts) + more



def meta_for(spec: Spec) -> dict:
    import torch  # deferred: loads torch only when this runs

    from nas_stab.config import spec_hash  # deferred: loads PyYAML only when this runs

    command = invocation()
    return {**({"command": command} if command else {}),
        "spec_hash": spec_hash(spec),
        "nas_stab_version": __version__,
        "git_commit": git_commit(),
        "torch_version": str(torch.__version__),
        "python": platform.python_version(),
        "hardware": hardware(),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": spec.source,
    }


