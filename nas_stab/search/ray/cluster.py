"""The Ray cluster a `runner.kind: ray` run uses: whether Ray answers at `runner.address`
(`check_reachable`, before anything is written), the session (`ray_session`: the Ray this
process is connected to, a cluster joined directly or through Ray Client, or a local Ray started
here), and what a trial asks of it (`trial_resources`, `trial_threads`) and whether that fits.

Ray itself (~0.5 s to import) is imported inside the functions that use it, so that importing the
runner costs nothing until a Ray run starts (`nas-stab --help`, `nas-stab validate`).
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from nas_stab.errors import RunError
from nas_stab.search.ray import loopback as ray_loopback
from nas_stab.search.ray import procs as ray_procs

if TYPE_CHECKING:
    from types import ModuleType

    from nas_stab.config.schema import RunnerConfig, Spec


def check_reachable(address: str, timeout: float = 60.0) -> None:
    """RunError unless Ray answers at a HOST:PORT or ray://HOST:PORT address within `timeout` seconds
    (runner.connect_timeout_s; 'auto' is Ray's to find).

    Something must accept the TCP connection and answer an HTTP/2 connection preface with its SETTINGS
    frame, as the gRPC servers behind both addresses (Ray's GCS, the Ray Client server) do at once.
    `ray.init` itself has no deadline: against a port that accepts and never answers it retried the GCS
    connection for minutes, in native code no signal interrupts. With RAY_USE_TLS the connection is TLS
    and only the TCP connection is checked.
    """
    if address == "auto":  # the cluster RAY_ADDRESS or the last `ray start` names, when there is one
        from nas_stab.search.ray.compat import cluster_address  # deferred: loads Ray, PyYAML only when this runs

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
    return address is not None and address.startswith("ray://")


def check_client_storage(runner: RunnerConfig) -> None:
    """Under Ray Client, trial checkpoints cannot go to the default <run dir>/ray: it is on this machine.

    A trial saving a checkpoint writes it to `runner.storage` from its worker; Ray refuses a path the
    worker does not see (its storage validation marker is missing there), so every checkpointing trial
    would fail. A loopback address is this machine, whose disk the workers share.
    """
    addr = runner.address
    if is_client_address(addr) and runner.checkpoint_every and not runner.storage and not ray_loopback.is_loopback(addr):
        raise RunError(
            f"runner.address {addr!r} (Ray Client) with runner.checkpoint_every={runner.checkpoint_every}: the "
            "cluster's workers cannot write trial checkpoints to the run directory on this machine. Set "
            "runner.storage to a bucket (s3://..., gs://...) or to a path this machine and every node share, "
            "or runner.checkpoint_every=0 (a retried trial then starts over)"
        )


def check_fits(res: dict, *, started_here: bool, log: Callable) -> None:
    """A trial that fits on no node would wait forever: refuse on a local Ray, warn on a cluster
    (an autoscaling cluster may still add such nodes)."""
    import ray  # deferred: loads Ray only when this runs

    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(n.get("CPU", 0) >= res["cpu"] and n.get("GPU", 0) >= res["gpu"] for n in nodes):
        return
    have = ", ".join(f"{n.get('CPU', 0):g} CPU/{n.get('GPU', 0):g} GPU" for n in nodes) or "no nodes"
    msg = f"runner.resources asks {res['cpu']:g} CPU and {res['gpu']:g} GPU per trial, but no Ray node has that ({have})"
    if started_here:
        raise RunError(msg + "; lower runner.resources or join a cluster with --address")
    log(f"warning: {msg}; trials wait until the cluster adds such a node")


def trial_resources(runner: RunnerConfig) -> dict:
    """Per-trial resources, with the documented default {cpu: 1, gpu: 0}."""
    res = {"cpu": 1.0, "gpu": 0.0}
    for k, v in (runner.resources or {}).items():
        res[k] = float(v)
    return res


def trial_threads(spec: Spec) -> int:
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
            ray_procs.record(self.pid_file)


@contextlib.contextmanager
def ray_session(runner: RunnerConfig, log: Callable = print, pid_file: Path | None = None) -> Iterator[LocalRay]:
    """Use the Ray this process is already connected to, join `runner.address` (``auto``, ``host:port``,
    or ``ray://host:port`` through Ray Client), or start a local Ray.

    A Ray started or joined here is shut down on exit (a cluster we joined keeps running).
    Yields a `LocalRay`: call its `record_pids` once the Ray has all its processes.
    """
    ray_loopback.no_grpc_fork_handlers()  # before Ray starts gRPC here or in a local Ray it starts
    import ray  # deferred: loads Ray only when this runs

    from nas_stab.search.ray import compat as _ray_compat  # deferred: loads Ray only when this runs

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
    session = LocalRay()
    if addr and is_client_address(addr):
        try:
            connect_client(addr, ray_loopback.init_ray, log)
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
            ray_loopback.init_ray(addr)
        except ConnectionError as e:
            raise RunError(
                f"cannot join the Ray cluster at {addr!r}: {e}. Is it running (`ray status --address {addr}`)? "
                "Clusters started with `ray start` use Ray's token authentication by default: "
                "export RAY_AUTH_MODE=token (the token is ~/.ray/auth_token, or set RAY_AUTH_TOKEN)"
            ) from None
        log(f"ray: joined the cluster at {addr} ({_cluster_summary(ray)})")
    else:
        ray_loopback.init_ray(None, num_cpus=os.cpu_count() or 1)
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
    import ray  # deferred: loads Ray only when this runs

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


def _cluster_summary(ray: ModuleType) -> str:
    res = ray.cluster_resources()
    nodes = len([n for n in ray.nodes() if n.get("Alive")])
    return f"{nodes} node(s), {res.get('CPU', 0):g} CPU, {res.get('GPU', 0):g} GPU"
