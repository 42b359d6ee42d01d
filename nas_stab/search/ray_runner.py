"""The Ray runner (`runner.kind: ray`): the same trials as the local runner, on Ray Tune.

The driver (this module, in the `nas-stab run` process) owns the Optuna study
and the run directory; Ray workers only train (`nas_stab.search.ray_trial`)
and send their records back through Tune results. One component,
`nas_stab.search.ray_bridge.OptunaBridge`, is both Tune's searcher (Optuna
asks, from the YAML space) and its scheduler (divergence rule, then Optuna's
pruner), so every trial ends COMPLETE, PRUNED or FAIL in the study.

Resuming is the same as for the local runner: a rerun skips every run whose
key is in trials.csv, closes trials a killed driver left RUNNING as FAIL
(status interrupted), and trains the rest. Tune's own experiment state is
scratch: each `run_ray` call is a fresh Tune experiment under
``runner.storage`` (default ``<run dir>/ray``), removed when it ends cleanly.

Example:
    >>> # nas-stab run spaces/quickstart.yaml --runner ray            # a local Ray
    >>> # nas-stab run spaces/quickstart.yaml --runner ray --address auto   # join a cluster
    >>> # nas-stab run spaces/quickstart.yaml --runner ray --address ray://HEAD:10001   # from another machine

Under Ray Client (``ray://``) the driver is still this process: Tune's driver
loop runs here, its Ray calls go through the client connection, and the
study and run directory stay on this machine (`_ray_compat.local_tuner`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

from nas_stab.errors import Interrupted, RunError
from nas_stab.search.driver import Driver

PIDS_FILE = ".local_ray.pids"  # the processes of a local Ray this driver started (see ray_procs)
CLIENT_STAGING = ".ray_client"  # Tune's driver staging dir under Ray Client (see _ray_compat.driver_staging_here)


def run_ray(spec, rd, *, trials: int | None = None, progress_stream=None, run_fn: Callable | None = None,
            source=None) -> dict:
    """Run every pending trial of `spec` on Ray Tune into run directory `rd`. Returns status counts.

    `run_fn` replaces `plan.run_job` in the workers (tests use toy runs); `source` (a
    `driver.JobSource`) replaces the grid or the sampler as where jobs come from.
    """
    # plain progress lines: Ray's workers print to the terminal too
    driver = Driver(spec, rd, trials=trials, source=source, progress_stream=progress_stream, live=False)
    try:
        if driver.startable():
            _run_tune(spec, rd, driver, run_fn)
    except BaseException:
        driver.close_running()
        raise
    finally:
        counts = driver.close()  # trials.csv back in (trial, seed) order, also after an interruption
    return counts


def _run_tune(spec, rd, driver, run_fn) -> None:
    _check_client_storage(spec.runner)
    with ray_session(spec.runner, log=rd.log, pid_file=rd.path / PIDS_FILE) as local_ray:
        import ray
        from ray import tune
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from nas_stab.search import _ray_compat
        from nas_stab.search.ray_bridge import START_RETRIES, OptunaBridge
        from nas_stab.search.ray_trial import Board, trial_main

        r = spec.runner
        res = trial_resources(r)
        _check_fits(res, started_here=local_ray.started_here, log=rd.log)
        threads = trial_threads(spec)
        board = (
            ray.remote(num_cpus=0)(Board)
            .options(scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True))
            .remote()
        )
        bridge = OptunaBridge(spec, driver, board=board, log=rd.log,
                              trial_config={"threads": threads, "checkpoint_every": r.checkpoint_every})
        n_trials = driver.planned  # None: as many as the job source gives (Tune's count: the bridge says when it is done)
        fn = tune.with_parameters(trial_main, spec=spec, board=board, cwd=os.getcwd(), run_fn=run_fn)
        fn = tune.with_resources(fn, {k: v for k, v in res.items() if v})
        name = f"{spec.name}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
        storage_path = r.storage or str(rd.path / "ray")
        if not r.storage:
            # Tune experiments of earlier interrupted runs are scratch: nas_stab resumes from trials.csv
            for old in (rd.path / "ray").glob(f"{spec.name}-*"):
                shutil.rmtree(old, ignore_errors=True)
        from ray.util.client import ray as ray_client

        client = ray_client.is_connected()  # Ray Client (runner.address ray://...): see _ray_compat.local_tuner
        tuner = (_ray_compat.local_tuner if client else tune.Tuner)(
            fn,
            tune_config=tune.TuneConfig(
                search_alg=bridge.searcher,
                scheduler=bridge.scheduler,
                num_samples=-1,  # a trial given up by Tune may be offered again (ray_bridge.OptunaBridge.on_error)
                max_concurrent_trials=r.concurrency,
                reuse_actors=True,
                trial_name_creator=lambda t: f"trial_{t.trial_id}",
                trial_dirname_creator=lambda t: t.trial_id,
            ),
            run_config=tune.RunConfig(
                name=name,
                storage_path=storage_path,
                # the bridge spends runner.max_failures only on failures of a trial that ran (ray_bridge.START_RETRIES)
                failure_config=tune.FailureConfig(max_failures=r.max_failures + START_RETRIES),
                checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
                verbose=0,
            ),
        )
        rd.log(f"ray: {f'{n_trials} trial(s)' if n_trials is not None else 'trials as the job source gives them'}, {res} per trial, concurrency {r.concurrency}, tune experiment {storage_path}/{name}")
        clean = False
        local_ray.record_pids()  # the raylet's agents exist by now
        try:
            with _quiet_tune(), (_ray_compat.driver_staging_here(rd.path / CLIENT_STAGING) if client else contextlib.nullcontext()):
                tuner.fit()
            clean = not bridge.live and not bridge.requeued and driver.exhausted and not bridge.interrupted
        finally:
            left = bridge.close_unfinished()
            if left:
                rd.log(f"closed {left} unfinished trial(s) as interrupted; rerun to train them")
            with contextlib.suppress(Exception):
                ray.kill(board)
        if clean:
            exp = Path(storage_path) / name
            if "://" not in storage_path and exp.is_dir():
                shutil.rmtree(exp, ignore_errors=True)
                with contextlib.suppress(OSError):
                    Path(storage_path).rmdir()  # only if empty
        else:
            raise Interrupted("Ray Tune stopped before every trial finished")


def check_reachable(address: str, timeout: float = 60.0) -> None:
    """RunError unless Ray answers at a HOST:PORT or ray://HOST:PORT address within `timeout` seconds
    (runner.connect_timeout_s; 'auto' is Ray's to find).

    Something must accept the TCP connection and answer an HTTP/2 connection preface with its SETTINGS
    frame, as the gRPC servers behind both addresses (Ray's GCS, the Ray Client server) do at once.
    `ray.init` itself has no deadline: against a port that accepts and never answers it retried the GCS
    connection for minutes, in native code no signal interrupts. With RAY_USE_TLS the connection is TLS
    and only the TCP connection is checked.
    """
    import socket

    if address == "auto":  # the cluster RAY_ADDRESS or the last `ray start` names, when there is one
        from nas_stab.search._ray_compat import cluster_address

        address = cluster_address(address)
    hostport = address[len("ray://"):] if is_client_address(address) else address
    if address == "auto" or ":" not in hostport:
        return
    host, _, port = hostport.rpartition(":")
    end = time.monotonic() + timeout
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except (OSError, ValueError) as e:
        raise RunError(f"runner.address {address!r}: nothing answers there ({getattr(e, 'strerror', None) or e}); "
                       "is the Ray head running and reachable from here?") from None
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        sock.close()
        return
    got = b""
    try:
        with sock:
            sock.sendall(_H2_PREFACE)
            while len(got) < 9:
                sock.settimeout(max(0.01, end - time.monotonic()))
                chunk = sock.recv(9 - len(got))
                if not chunk:
                    break
                got += chunk
    except OSError:  # socket.timeout included
        pass
    if len(got) < 9 or got[3] != 0x04:  # the frame header of a SETTINGS frame: type 4
        what = "did not answer" if not got else "answered, but not as a gRPC server"
        raise RunError(f"runner.address {address!r}: something accepts connections there but {what} within "
                       f"{timeout:g} s (runner.connect_timeout_s): it is not a Ray "
                       f"{'Client server' if is_client_address(address) else 'head (GCS)'}; check the port")


# an HTTP/2 client's connection preface and an empty SETTINGS frame: a gRPC server answers with its SETTINGS
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def is_client_address(address: str | None) -> bool:
    """A Ray Client address (``ray://host:port``)."""
    return bool(address) and address.startswith("ray://")


def _check_client_storage(runner) -> None:
    """Under Ray Client, trial checkpoints cannot go to the default <run dir>/ray: it is on this machine.

    A trial saving a checkpoint writes it to `runner.storage` from its worker; Ray refuses a path the
    worker does not see (its storage validation marker is missing there), so every checkpointing trial
    would fail. A loopback address is this machine, whose disk the workers share.
    """
    from nas_stab.search.ray_loopback import is_loopback

    addr = runner.address
    if is_client_address(addr) and runner.checkpoint_every and not runner.storage and not is_loopback(addr):
        raise RunError(
            f"runner.address {addr!r} (Ray Client) with runner.checkpoint_every={runner.checkpoint_every}: the "
            "cluster's workers cannot write trial checkpoints to the run directory on this machine. Set "
            "runner.storage to a bucket (s3://..., gs://...) or to a path this machine and every node share, "
            "or runner.checkpoint_every=0 (a retried trial then starts over)"
        )


def _check_fits(res: dict, *, started_here: bool, log: Callable) -> None:
    """A trial that fits on no node would wait forever: refuse on a local Ray, warn on a cluster
    (an autoscaling cluster may still add such nodes)."""
    import ray

    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(n.get("CPU", 0) >= res["cpu"] and n.get("GPU", 0) >= res["gpu"] for n in nodes):
        return
    have = ", ".join(f"{n.get('CPU', 0):g} CPU/{n.get('GPU', 0):g} GPU" for n in nodes) or "no nodes"
    msg = f"runner.resources asks {res['cpu']:g} CPU and {res['gpu']:g} GPU per trial, but no Ray node has that ({have})"
    if started_here:
        raise RunError(msg + "; lower runner.resources or join a cluster with --address")
    log(f"warning: {msg}; trials wait until the cluster adds such a node")


def trial_resources(runner) -> dict:
    """Per-trial resources, with the documented default {cpu: 1, gpu: 0}."""
    res = {"cpu": 1.0, "gpu": 0.0}
    for k, v in (runner.resources or {}).items():
        res[k] = float(v)
    return res


def trial_threads(spec) -> int:
    """torch threads of one Ray trial: `train.threads`, else the trial's CPUs."""
    return spec.train.threads or max(1, int(trial_resources(spec.runner)["cpu"]))


@dataclasses.dataclass
class LocalRay:
    """What `ray_session` yields: whether it started a local Ray, and where that Ray's processes are recorded."""

    started_here: bool = False  # False: the Ray this process was already connected to, or a cluster it joined
    pid_file: Path | None = None

    def record_pids(self) -> None:
        """Write the processes of the local Ray started here to `pid_file` (nothing for any other Ray),
        so that a rerun after a SIGKILL ends the ones Ray leaves behind (`ray_procs`)."""
        if self.started_here and self.pid_file is not None:
            from nas_stab.search import ray_procs

            ray_procs.record(self.pid_file)


@contextlib.contextmanager
def ray_session(runner, log: Callable = print, pid_file: Path | None = None):
    """Use the Ray this process is already connected to, join `runner.address` (``auto``, ``host:port``,
    or ``ray://host:port`` through Ray Client), or start a local Ray.

    A Ray started or joined here is shut down on exit (a cluster we joined keeps running).
    Yields a `LocalRay`: call its `record_pids` once the Ray has all its processes.
    """
    from nas_stab.search.ray_loopback import no_grpc_fork_handlers

    no_grpc_fork_handlers()  # before Ray starts gRPC here or in a local Ray it starts
    import ray

    from nas_stab.search import _ray_compat, ray_procs

    untested = _ray_compat.untested_version()
    if untested:
        log(f"warning: {untested}")
    addr = runner.address
    if pid_file is not None:
        ended = ray_procs.end_orphans(pid_file)
        if ended:
            log(f"ray: ended {ended} process(es) left by the local Ray of a killed run")
    if ray.is_initialized():
        yield LocalRay()
        return
    from nas_stab.search.ray_loopback import init_ray

    session = LocalRay()
    if addr and is_client_address(addr):
        try:
            connect_client(addr, init_ray, log)
        except ImportError as e:  # ray[client] (grpcio) missing
            raise RunError(f"runner.address {addr!r} needs Ray Client: pip install 'ray[client]' ({e})") from None
        except ConnectionError as e:
            if _driver_failed(e):
                raise RunError(
                    f"the Ray Client server at {addr!r} accepted the connection but could not start a driver "
                    f"process for it ({CLIENT_ATTEMPTS} attempts): see ray_client_server_*.err in the head's "
                    "session logs (/tmp/ray/session_latest/logs unless the head was started with --temp-dir). "
                    "'epoll_wait error: Bad file descriptor' there is grpcio 1.81-1.85's fork bug "
                    "(grpc/grpc#43055): start the head with GRPC_ENABLE_FORK_SUPPORT=false in its environment"
                ) from None
            raise RunError(
                f"cannot connect to the Ray Client server at {addr!r}: {e}. Is the head started with "
                "`ray start --head --ray-client-server-port PORT` (default 10001) and reachable from here? "
                "Clusters started with `ray start` use Ray's token authentication by default: "
                "export RAY_AUTH_MODE=token (the token is ~/.ray/auth_token, or set RAY_AUTH_TOKEN)"
            ) from None
        log(f"ray: connected to the cluster at {addr} through Ray Client ({_cluster_summary(ray)}); "
            "Tune's driver loop, the Optuna study and the run directory stay in this process")
    elif addr:
        try:
            init_ray(addr)
        except ConnectionError as e:
            raise RunError(
                f"cannot join the Ray cluster at {addr!r}: {e}. Is it running (`ray status --address {addr}`)? "
                "Clusters started with `ray start` use Ray's token authentication by default: "
                "export RAY_AUTH_MODE=token (the token is ~/.ray/auth_token, or set RAY_AUTH_TOKEN)"
            ) from None
        log(f"ray: joined the cluster at {addr} ({_cluster_summary(ray)})")
    else:
        init_ray(None, num_cpus=os.cpu_count() or 1)
        log(f"ray: started a local Ray on 127.0.0.1 ({_cluster_summary(ray)})")
        session = LocalRay(started_here=True, pid_file=pid_file)
        session.record_pids()
    try:
        yield session
    finally:
        ray.shutdown()
        if session.started_here and pid_file is not None:
            pid_file.unlink(missing_ok=True)


# Ray 2.60's proxier, when the driver it starts for a connection dies before it runs, or does not answer in 30 s
_DRIVER_FAILED = ("Starting Ray client server failed", "Proxy failed to Connect to backend")
CLIENT_ATTEMPTS = 3
CLIENT_BACKOFF_S = 2.0  # before attempt k+1: k times this (and Ray itself takes ~40 s to report the failure)


def _driver_failed(e: Exception) -> bool:
    return any(m in str(e) for m in _DRIVER_FAILED)


def connect_client(addr: str, connect: Callable, log: Callable = print, sleep: Callable | None = None) -> None:
    """`connect(addr)` through Ray Client, retried when the head could not start this client's driver.

    A Ray Client server (the proxier) starts one driver process per connection; when that process dies
    at start the connection fails with "Starting Ray client server failed" (or, when it dies a little
    later, "Proxy failed to Connect to backend"), and the next connection gets a new process. Anything
    else (nothing listening, authentication) fails at once.
    """
    import ray

    for attempt in range(1, CLIENT_ATTEMPTS + 1):
        try:
            connect(addr)
            return
        except ConnectionError as e:
            if not _driver_failed(e) or attempt == CLIENT_ATTEMPTS:
                raise
            log(f"ray: the Ray Client server at {addr} could not start a driver for this connection "
                f"(attempt {attempt} of {CLIENT_ATTEMPTS}); connecting again")
            if ray.is_initialized():
                ray.shutdown()
            (sleep or time.sleep)(CLIENT_BACKOFF_S * attempt)


def _cluster_summary(ray) -> str:
    res = ray.cluster_resources()
    nodes = len([n for n in ray.nodes() if n.get("Alive")])
    return f"{nodes} node(s), {res.get('CPU', 0):g} CPU, {res.get('GPU', 0):g} GPU"


@contextlib.contextmanager
def _quiet_tune():
    """No per-trial result.json/progress.csv/TensorBoard files: the driver writes the records."""
    import logging

    keys = {
        "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS": "1",
        "RAY_AIR_NEW_OUTPUT": "0",
        # frequent trial checkpoints force small experiment-state snapshots; that is fine, do not warn
        "TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S": "0",
        # a worker failure is one line in log.txt (ray_bridge.on_error), not Tune's traceback on the terminal
        "TUNE_PRINT_ALL_TRIAL_ERRORS": "0",
    }
    old = {k: os.environ.get(k) for k in keys}
    os.environ.update(keys)
    # without those files, Tune's result grid warns that it found no metrics: nas_stab does not use it
    analysis = logging.getLogger("ray.tune.analysis.experiment_analysis")
    level = analysis.level
    analysis.setLevel(logging.ERROR)
    try:
        yield
    finally:
        analysis.setLevel(level)
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
