"""Ray on loopback (127.0.0.1) only: a local Ray, or a multi-node cluster on one machine.

Ray 2.60 rewrites a loopback address to the machine's "reachable" IP before
connecting (`resolve_ip_for_localhost`), so a cluster whose processes listen
on 127.0.0.1 only cannot be joined as ``127.0.0.1:PORT``, and
``ray.init(_node_ip_address="127.0.0.1")`` still binds every interface. This
module keeps everything on loopback:

- `init_ray(address, num_cpus)`: start a local Ray, or join ``auto`` /
  ``host:port``, without that rewrite when the address is a loopback one;
- ``python -m nas_stab.search.ray_loopback start ...``: the ``ray`` command
  line with the rewrite disabled, used by runners/local_cluster.sh to start
  worker nodes that join a head on 127.0.0.1.
"""
from __future__ import annotations

import contextlib
import sys

LOOPBACK = ("127.0.0.1", "localhost", "::1")


def host_of(address: str) -> str:
    addr = address.split("://", 1)[-1]
    if addr.startswith("["):
        return addr[1:].split("]", 1)[0]
    return addr.rsplit(":", 1)[0] if ":" in addr else addr


def is_loopback(address: str | None) -> bool:
    return bool(address) and host_of(address) in LOOPBACK


@contextlib.contextmanager
def _no_localhost_rewrite():
    """Make Ray's node-IP lookup answer 127.0.0.1 while we start or join on loopback."""
    import ray._private.ray_constants as constants

    old = constants.ENABLE_RAY_CLUSTER
    constants.ENABLE_RAY_CLUSTER = False  # read at call time by services.get_node_ip_address
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = old


def resolve_auto(address: str | None) -> str | None:
    """The address ``auto`` stands for (RAY_ADDRESS, or the cluster last started here), else as given."""
    if address != "auto":
        return address
    from ray._private import services

    try:
        return services.get_ray_address_from_environment("auto", None) or address
    except Exception:
        return address


def init_ray(address: str | None = None, *, num_cpus: int | None = None, **kwargs) -> str:
    """Connect this process to Ray; returns what it did ("started" or "joined ADDRESS").

    `address` None starts a local Ray bound to 127.0.0.1; a loopback address
    (or ``auto`` pointing at one) is joined on loopback; anything else is
    passed to `ray.init` as is.
    """
    import ray

    kwargs.setdefault("log_to_driver", False)
    if address is None:
        with _no_localhost_rewrite():
            ray.init(address="local", num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1", **kwargs)
        return "started"
    real = resolve_auto(address)
    if is_loopback(real):
        with _no_localhost_rewrite():
            ray.init(address=real, _node_ip_address="127.0.0.1", **kwargs)
    else:
        ray.init(address=address, **kwargs)
    return f"joined {real}"


def main() -> int:
    """`ray` CLI with loopback addresses left alone (see runners/local_cluster.sh)."""
    import ray._private.services as services

    services.resolve_ip_for_localhost = lambda host: host
    from ray.scripts.scripts import main as ray_main

    sys.argv[0] = "ray"
    return ray_main()


if __name__ == "__main__":
    sys.exit(main())
