"""Ray on loopback (127.0.0.1) only: a local Ray, or a multi-node cluster on one machine.

Ray 2.60 rewrites a loopback address to the machine's "reachable" IP before
connecting, so a cluster whose processes listen on 127.0.0.1 only cannot be
joined as ``127.0.0.1:PORT``, and a node asked to use 127.0.0.1 still binds
every interface. This module keeps everything on loopback (the private Ray
details it takes are in `nas_stab.search.ray.compat`):

- `init_ray(address, num_cpus)`: start a local Ray, or join ``auto`` /
  ``host:port``, without that rewrite when the address is a loopback one;
- ``python -m nas_stab.search.ray.loopback start ...``: the ``ray`` command
  line with the rewrite disabled, used by runners/local_cluster.sh to start
  worker nodes that join a head on 127.0.0.1. A head started this way also
  keeps its Ray Client server's per-client drivers on loopback (see `main`).

A ``ray://host:port`` address (Ray Client) is passed to `ray.init` as is:
the client only opens a gRPC connection to that address; the head's side
of it is the head's business.
"""
from __future__ import annotations

import os
import sys
from typing import Any

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def no_grpc_fork_handlers() -> None:
    """Turn off gRPC's fork handlers in this process and the Ray processes it starts (unless set).

    grpcio 1.81-1.85 restarts its epoll poller in a child forked while gRPC is busy; when Python's
    subprocess then closes the child's file descriptors before exec, the poller hits EBADF and the
    child dies before it runs (grpc/grpc#43055). Ray starts its processes with a preexec_fn, so
    they are forked: a head's Ray Client server then fails to start a client's driver ("Starting
    Ray client server failed") about once in 20 connections on a busy machine; with
    GRPC_ENABLE_FORK_SUPPORT=false, none in 100 (benchmarks/grpc_fork.py). Ray's processes exec
    right after fork, so they never needed the handlers. Read when gRPC starts: call it before that.
    """
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")


def host_of(address: str) -> str:
    addr = address.split("://", 1)[-1]
    if addr.startswith("["):
        return addr[1:].split("]", 1)[0]
    return addr.rsplit(":", 1)[0] if ":" in addr else addr


def is_loopback(address: str | None) -> bool:
    return bool(address and host_of(address) in LOOPBACK)


def init_ray(address: str | None = None, *, num_cpus: int | None = None, **kwargs: Any) -> str:
    """Connect this process to Ray (`_connect`), keeping its Python SIGTERM handler.

    `ray.init` installs a native failure-signal handler for SIGTERM over Python's, so a SIGTERM to a `nas-stab run`
    driver printed a native stack and killed it with exit 15, its runs in progress never closed; Python's handler
    (`nas-stab run`: stop like Ctrl-C, exit 143) is put back once Ray is up."""
    import signal
    import threading

    handler = signal.getsignal(signal.SIGTERM)
    try:
        return _connect(address, num_cpus=num_cpus, **kwargs)
    finally:
        if callable(handler) and threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, handler)


def _connect(address: str | None = None, *, num_cpus: int | None = None, **kwargs: Any) -> str:
    """Connect this process to Ray; returns what it did ("started" or "joined ADDRESS").

    `address` None starts a local Ray bound to 127.0.0.1; a loopback address
    (or ``auto`` pointing at one) is joined on loopback; anything else is
    passed to `ray.init` as is.
    """
    no_grpc_fork_handlers()
    import ray  # deferred: loads Ray only when this runs

    from nas_stab.search.ray import compat as _ray_compat  # deferred: loads Ray only when this runs (this module must stay light: gRPC setup)

    kwargs.setdefault("log_to_driver", False)
    if address is not None and address.startswith("ray://"):
        ray.init(address=address, **kwargs)  # Ray Client: no local node, nothing to bind
        return f"connected to {address}"
    if address is None:
        _ray_compat.init_on_loopback(address="local", num_cpus=num_cpus, include_dashboard=False, **kwargs)
        return "started"
    real = _ray_compat.cluster_address(address)  # what `auto` stands for
    if is_loopback(real):
        _ray_compat.init_on_loopback(address=real, **kwargs)
    else:
        ray.init(address=address, **kwargs)
    return f"joined {real}"


def _option(args: list[str], name: str) -> str | None:
    """The value of `name` in a command line (``--name=value`` or ``--name value``)."""
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
        if a == name and i + 1 < len(args):
            return args[i + 1]
    return None


def main() -> int:
    """`ray` CLI with loopback addresses left alone (see runners/local_cluster.sh)."""
    no_grpc_fork_handlers()
    from nas_stab.search.ray import compat as _ray_compat  # deferred: loads Ray only when this runs (this module must stay light: gRPC setup)

    _ray_compat.keep_loopback_addresses()
    args = sys.argv[1:]
    if "start" in args and "--head" in args and _option(args, "--node-ip-address") in LOOPBACK:
        # A head's Ray Client server (--ray-client-server-port) starts one driver process per client;
        # that process joins the head with the same rewrite, which the patch above cannot reach.
        _ray_compat.node_ip_is_loopback_in_children()
    from ray.scripts.scripts import main as ray_main  # deferred: loads Ray only when this runs

    sys.argv[0] = "ray"
    return ray_main()


if __name__ == "__main__":
    sys.exit(main())
