"""Worker processes of the local runner at `runner.concurrency` > 1.

N worker processes are started once per `nas-stab run`. Each loads the data
once (`reuse_loaded`), sets its torch threads to `train.threads` or cpus // N,
and trains one run at a time: `plan.run_job`, exactly what the in-process path
calls. Workers come from multiprocessing's 'forkserver' (torch and a plain
fork of the driver do not mix): a server process that imports torch and the
training code once, and forks each worker from that clean state. With 'spawn'
every worker paid those imports again, several seconds of CPU each on a busy
2-core machine before its first run. As with 'spawn', a script that calls the
runner itself needs the usual `if __name__ == "__main__":` guard.

Pruning goes through the driver, not through the storage: a worker's reporter
(`plan.make_reporter`, unchanged) talks to a stand-in trial that sends each
intermediate value to the driver over the worker's pipe and, when a pruner is
configured, waits for the driver's `should_prune()` answer. The driver alone
owns the Optuna study, so this works with every storage (SQLite, a journal
file, PostgreSQL, in-memory), needs no multi-process locking of SQLite, and
asks the pruner exactly as the in-process path does. The alternative (each
worker opening the storage and reporting into its trial) would need a storage
every process can open (not an in-memory one), N writers on one SQLite file,
and a study, sampler and pruner rebuilt in every worker; the driver's storage
commits are the same either way.

Workers die with the driver: the fork server exits when the driver dies, on
Linux each worker asks the kernel for SIGKILL when its parent (the server)
dies (PR_SET_PDEATHSIG), and everywhere a lost pipe ends it. They
ignore SIGINT: Ctrl-C reaches the driver, which closes its running trials as
interrupted and kills the workers.
"""
from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import traceback
from collections.abc import Callable
from multiprocessing.connection import wait as wait_any
from typing import TYPE_CHECKING

from nas_stab.search import plan
from nas_stab.search.records import FAULT_ENV

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.context import ForkServerContext
    from multiprocessing.process import BaseProcess

    from nas_stab.config.schema import Spec
    from nas_stab.search.plan import Prunable
    from nas_stab.training.loop import Reporter, RunResult


def worker_threads(spec: Spec, n: int) -> int:
    """torch threads per worker: `train.threads`, else the cpus shared by the N workers."""
    return spec.train.threads or max(1, (os.cpu_count() or 1) // n)


class WorkerPool:
    """N worker processes training one run each; the driver serves their reports.

    `submit(tag, trial, ...)` starts a run on an idle worker; `wait()` blocks
    until at least one run finishes and returns [(tag, result, traceback)].
    Reports are fed to `trial` (an Optuna trial the driver asked) meanwhile.
    """

    def __init__(self, spec: Spec, n: int, log: Callable[[str], None] | None = None):
        self.spec = spec
        self.n = n
        self.log = log or (lambda line: None)
        self.threads = worker_threads(spec, n)
        self._ctx = _context()
        self._workers: list[_Worker] = [self._start() for _ in range(n)]

    def _start(self) -> _Worker:
        here, there = self._ctx.Pipe(duplex=True)
        fault = os.environ.get(FAULT_ENV, "")  # the fork server's environment may be older than ours
        p = self._ctx.Process(target=_worker_main, args=(there, self.spec, self.threads, fault),
                              name="nas-stab-worker", daemon=True)
        p.start()
        there.close()  # only the worker holds its end: the driver sees EOF if the worker dies
        return _Worker(p, here)

    def grow(self) -> None:
        """One more worker (a job source gave more runs than the pool was started for)."""
        self._workers.append(self._start())
        self.n += 1

    @property
    def idle(self) -> int:
        return sum(w.busy is None for w in self._workers)

    @property
    def busy(self) -> list:
        """Tags of the runs in progress."""
        return [w.busy[0] for w in self._workers if w.busy is not None]

    def submit(self, tag: object, trial: Prunable, params: dict, seed: int, resolved: Spec | None = None, *,
               offset: int = 0, prune: bool = False) -> None:
        i, w = next((i, w) for i, w in enumerate(self._workers) if w.busy is None)
        if not w.process.is_alive():  # died while idle (killed from outside): a fresh one takes the run
            w.conn.close()
            w = self._workers[i] = self._start()
        w.busy = (tag, trial)
        w.job, w.failures = (params, seed, resolved, offset, prune), 0
        with contextlib.suppress(OSError, EOFError):  # a dead worker: `wait` retries the run or reports it failed
            w.conn.send(w.job)

    def wait(self) -> list[tuple]:
        done: list[tuple] = []
        while not done:
            working = [w for w in self._workers if w.busy is not None]
            if not working:
                return done
            ready = wait_any([w.conn for w in working] + [w.process.sentinel for w in working])
            for w in working:
                if w.conn in ready or w.process.sentinel in ready:
                    finished = self._serve(w)
                    if finished is not None:
                        done.append(finished)
        return done

    def _serve(self, w: _Worker) -> tuple[object, RunResult, str] | None:
        """Handle every message waiting on `w`'s pipe; (tag, result, tb) once its run finished."""
        assert w.busy is not None, "only a busy worker is served (wait)"
        tag, trial = w.busy
        try:
            while w.conn.poll():
                msg = w.conn.recv()
                if msg[0] == "report":
                    trial.report(msg[1], msg[2])
                elif msg[0] == "prune?":
                    w.conn.send(trial.should_prune())
                else:  # ("done", result, tb)
                    w.busy = None
                    return tag, msg[1], msg[2]
            if w.process.is_alive():
                return None
        except (EOFError, OSError):
            pass
        # the worker died mid-run (killed, out of memory, a crash in native code): a fresh worker
        # trains the run again from its start, up to runner.max_failures times (as the Ray runner)
        w.process.join(5)
        code = w.process.exitcode
        w.conn.close()
        fresh = self._workers[self._workers.index(w)] = self._start()
        failures, limit = w.failures + 1, self.spec.runner.max_failures
        if failures <= limit:
            self.log(f"worker process died (exit code {code}) during a run; training it again on a fresh worker "
                     f"(failure {failures} of runner.max_failures={limit})")
            fresh.busy, fresh.job, fresh.failures = w.busy, w.job, failures
            with contextlib.suppress(OSError, EOFError):  # dead again: the next wait sees it
                fresh.conn.send(fresh.job)
            return None
        from nas_stab.training.loop import RunResult  # deferred: loads torch, PyYAML, NumPy only when this runs

        return tag, RunResult("failed", error=f"worker process died (exit code {code}); gave up after {failures} "
                                               f"failure(s), runner.max_failures={limit}"), ""

    def close(self, *, kill: bool = False) -> None:
        """Stop the workers: asked to finish (kill=False) or killed at once."""
        for w in self._workers:
            if not kill:
                with contextlib.suppress(OSError, EOFError):
                    w.conn.send(None)
        for w in self._workers:
            if not kill:
                w.process.join(10)
            if w.process.is_alive():
                w.process.kill()
                w.process.join(10)
            w.conn.close()
        self._workers = []

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *_: object) -> None:
        self.close(kill=exc_type is not None)


PRELOAD = ["nas_stab.search.local_pool", "nas_stab.training.loop", "torch._dynamo", "torch.optim"]


def _context() -> ForkServerContext:
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)  # takes effect when this process first starts the server
    return ctx


class _Worker:
    def __init__(self, process: BaseProcess, conn: Connection):
        self.process = process
        self.conn = conn
        self.busy: tuple | None = None  # (tag, Optuna trial) of the run in progress
        self.job: tuple | None = None  # what it was sent, to train again if it dies
        self.failures = 0  # deaths of workers training this run


class _RemoteTrial:
    """The trial `plan.make_reporter` reports to, inside a worker: the driver's trial, over the pipe."""

    def __init__(self, conn: Connection):
        self.conn = conn

    def report(self, value: float, step: int) -> None:
        self._send(("report", value, step))

    def should_prune(self) -> bool:
        self._send(("prune?",))
        try:
            return self.conn.recv()
        except (EOFError, OSError):
            os._exit(0)  # the driver is gone: nothing is left to train for

    def _send(self, msg: tuple) -> None:
        try:
            self.conn.send(msg)
        except (EOFError, OSError):
            os._exit(0)


def _die_with_parent() -> None:
    """SIGKILL when the parent (the fork server, which exits with the driver) dies."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before prctl took effect
        os._exit(0)


def _worker_main(conn: Connection, spec: Spec, threads: int, fault: str = "") -> None:
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch  # deferred: loads torch only when this runs

    from nas_stab.data import reuse_loaded  # deferred: loads torch, PyYAML, NumPy only when this runs

    torch.set_num_threads(threads)
    objective = spec.search.objective
    trial = _RemoteTrial(conn)
    with reuse_loaded():  # the data is loaded once per worker
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):
                return
            if msg is None:
                return
            params, seed, resolved, offset, prune = msg
            try:
                reporter = _fault_hook(plan.make_reporter(trial, objective, offset=offset, prune=prune), fault)
                result, tb = plan.run_job(spec, params, seed, reporter, resolved=resolved)
            except Exception as e:  # run_job catches a run's errors; this is anything around it
                from nas_stab.training.loop import RunResult  # deferred: loads torch, PyYAML, NumPy only when this runs

                result, tb = RunResult("failed", error=f"{type(e).__name__}: {e}"), traceback.format_exc()
            try:
                conn.send(("done", result, tb))
            except (EOFError, OSError):
                return


def _fault_hook(reporter: Reporter, fault: str) -> Reporter:
    """Test hook: NAS_STAB_FAULT=worker-kill:PATH makes the first worker to report (it creates PATH) SIGKILL itself."""
    if not fault.startswith("worker-kill:"):
        return reporter
    marker = fault.split(":", 1)[1]

    def report(step: int, values: dict) -> None:
        try:
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            pass
        else:
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)
        reporter(step, values)

    return report
