"""One live driver per study, also across run directories (`search.storage` shared by several `--out`).

The run directory's lock (log.txt) keeps a second driver out of one directory; two drivers with
different `--out` and the same external `search.storage` opened one study, and the second closed
the first's live trials as left by a kill. So a driver of an external storage also holds the study:
its user attribute ``nas_stab_driver`` names the live driver (host, pid, run directory, token) and
the time of its last refresh (``beat``, every BEAT seconds from a daemon thread). A driver that
finds it held by a live one refuses before touching any trial; one held by a process that is gone
(the same host: its pid is not running; another host: no refresh for STALE seconds) is taken over.

Taking it is write-then-read (Optuna has no compare-and-set): of two drivers starting within the
same instant both may read it free, but only the last writer reads its own token back.
"""
from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas_stab.errors import RunError

if TYPE_CHECKING:
    import optuna

ATTR = "nas_stab_driver"
BEAT = 30.0  # seconds between refreshes
STALE = 300.0  # another host's driver without a refresh for this long is presumed gone


def _alive(held: object, now: float) -> bool:
    if not isinstance(held, dict) or not held.get("token"):
        return False
    if held.get("host") == socket.gethostname():
        try:
            os.kill(int(held.get("pid", "")), 0)  # no pid: int("") raises ValueError, caught below
        except ProcessLookupError:
            return False
        except (PermissionError, TypeError, ValueError, OverflowError):
            return True
        return True
    try:
        return now - float(held.get("beat", "")) < STALE
    except (TypeError, ValueError):
        return False


class StudyLock:
    """The study held by this driver (see the module docstring); `release` when the driver ends."""

    def __init__(self, study: optuna.Study, run_dir: str | Path, url: str):
        self.study, self.url = study, url
        self.me = {"host": socket.gethostname(), "pid": os.getpid(), "run_dir": str(run_dir), "token": uuid.uuid4().hex}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _held(self) -> Any:  # a study user attribute: whatever was stored
        return self.study.user_attrs.get(ATTR)

    def acquire(self) -> StudyLock:
        """Take the study, or refuse (RunError) while another live driver holds it."""
        held = self._held()
        if _alive(held, time.time()):
            raise RunError(self._refusal(held))
        self.study.set_user_attr(ATTR, {**self.me, "beat": time.time()})
        held = self._held()
        if not isinstance(held, dict) or held.get("token") != self.me["token"]:
            raise RunError(self._refusal(held))  # another driver wrote after us
        self._thread = threading.Thread(target=self._beat, name="nas-stab-study-lock", daemon=True)
        self._thread.start()
        return self

    def _refusal(self, held: object) -> str:
        held = held if isinstance(held, dict) else {}
        return (f"the study {self.study.study_name!r} in {self.url} is in use by another nas-stab driver "
                f"(host {held.get('host')}, pid {held.get('pid')}, run directory {held.get('run_dir')}); "
                "wait for it to finish, or give this run its own search.storage")

    def _beat(self) -> None:
        while not self._stop.wait(BEAT):
            try:
                if (self._held() or {}).get("token") == self.me["token"]:
                    self.study.set_user_attr(ATTR, {**self.me, "beat": time.time()})
            except Exception:  # a storage hiccup: the next beat tries again
                pass

    def release(self) -> None:
        """Stop refreshing and free the study (when it is still ours)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
        try:
            if (self._held() or {}).get("token") == self.me["token"]:
                self.study.set_user_attr(ATTR, None)
        except Exception:  # a storage that is gone: the next driver sees a dead pid or a stale beat
            pass
