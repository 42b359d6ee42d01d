"""Every private Ray API nas_stab uses, behind one door.

Ray's public API does not cover four things the Ray runner needs: running Tune's
driver loop in this process under Ray Client, a staging directory for that loop
when this process has no Ray node, and keeping a local Ray or a one-machine
cluster on 127.0.0.1 (Ray rewrites loopback addresses to the machine's IP). Each
workaround below says which public behaviour it works around, the Ray version it
was verified on, and what to do when it breaks; tests/test_ray_compat.py has one
test per workaround that fails when Ray changes underneath it. No other module
of nas_stab imports ``ray._private``, ``ray.train._internal`` or ``TunerInternal``,
or passes ``_node_ip_address``.

Importing this module imports Ray, and warns once (`RayVersionWarning`, not an
error) when the installed Ray is outside the tested range ``TESTED``, which
matches pyproject.toml's pin. On a new Ray: run ``pytest tests/test_ray_compat.py``;
a failing test names the workaround to revisit (its docstring says how), then
widen ``TESTED`` and the pin together.

Example:
    >>> from nas_stab.search import _ray_compat
    >>> _ray_compat.untested_version("2.60.0") is None
    True
"""
from __future__ import annotations

import contextlib
import os
import re
import shutil
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ray
import ray._private.ray_constants as constants
import ray._private.worker as worker
from ray._private import services

if TYPE_CHECKING:
    from ray.tune import RunConfig, TuneConfig
    from ray.tune.impl.tuner_internal import TrainableType, TunerInternal

TESTED = ("2.60", "2.61")  # Ray versions >= the first and < the second (pyproject.toml: ray>=2.60,<2.61)
VERIFIED_ON = "2.60.0"  # the Ray every workaround below was verified on
LOOPBACK_IP = "127.0.0.1"


class RayVersionWarning(UserWarning):
    """The installed Ray is outside the range nas_stab's Ray workarounds were tested with."""


def untested_version(version: str | None = None) -> str | None:
    """A one-line warning when `version` (default: the installed Ray) is outside `TESTED`, else None."""
    version = version or ray.__version__
    low, below = TESTED
    if _release(low) <= _release(version) < _release(below):
        return None
    return (f"Ray {version} is outside the range nas_stab's Ray runner was tested with "
            f"(>={low},<{below}): the private Ray APIs in nas_stab.search.ray.compat may have changed; "
            "run tests/test_ray_compat.py to see which")


def _release(version: str) -> tuple[int, ...]:
    """(2, 60, 0) of "2.60.0", "2.60.0rc1" or "2.60.0.dev0"; (2, 60) of "2.60"."""
    m = re.match(r"\d+(?:\.\d+)*", version)
    assert m is not None, f"not a release number: {version!r}"
    return tuple(int(x) for x in m.group().split("."))


_message = untested_version()
if _message:
    warnings.warn(_message, RayVersionWarning, stacklevel=1)


# ---------------------------------------------------------------- Tune under Ray Client


def local_tuner(trainable: TrainableType, *, tune_config: TuneConfig, run_config: RunConfig) -> TunerInternal:
    """A Tuner whose driver loop runs in this process although it is a Ray Client.

    Works around: `tune.Tuner` under Ray Client (`ray.util.client.ray.is_connected()`) moves its
    driver loop into an actor on the head node (`_force_on_current_node(ray.remote(TunerInternal))`)
    with pickled copies of the searcher and scheduler; the copies would lose the Optuna study and the
    run directory, which must stay here. `TunerInternal` is what `Tuner` itself runs in a normal
    driver; ``_tuner_kwargs={"_remote": False}`` reaches `tune.run`'s ``_remote``, its switch for "run
    the driver loop here" (Tune passes it itself to the remote copy). Every Ray call of the loop then
    goes through the Ray Client. Use it as `tune.Tuner`: ``local_tuner(...).fit()``.

    Verified on Ray 2.60.0 (`ray.tune.impl.tuner_internal.TunerInternal`, `tune.run(_remote=...)`).
    When it breaks (test_local_tuner_runs_tune_here fails): find where Tuner.__init__ decides to go
    remote under Ray Client and what it builds in a normal driver; build that here with the remote
    switch off. If Ray no longer moves the loop under Ray Client, use `tune.Tuner` and drop this.
    """
    from ray.tune.impl.tuner_internal import TunerInternal  # deferred: loads Ray only when this runs

    return TunerInternal(trainable=trainable, tune_config=tune_config, run_config=run_config,
                         _tuner_kwargs={"_remote": False})


@contextlib.contextmanager
def driver_staging_here(path: Path) -> Iterator[None]:
    """Give Tune's driver a local staging directory without a local Ray node: `path`, emptied before, removed after.

    Works around: Tune's driver keeps its experiment state in ``<Ray session dir>/artifacts/...``
    before it syncs it to the experiment's storage (`StorageContext.experiment_driver_staging_path`);
    a Ray Client has no local Ray node, hence no session dir (``ray._private.worker._global_node`` is
    None, and Ray fails with AttributeError). `path` stands in for it: the storage module's
    ``_get_ray_train_session_dir`` answers `path` while this context is open. Does nothing when this
    process has a Ray node (not a Ray Client) or Ray no longer has that function.

    Verified on Ray 2.60.0 (`ray.train._internal.storage._get_ray_train_session_dir`, imported there
    from `ray.train.constants`, read at call time by `StorageContext._get_session_path`).
    When it breaks (test_driver_staging_here_moves_tunes_staging_dir fails): find what
    `experiment_driver_staging_path` reads now and point that at `path`; if Ray Client runs get a
    staging directory of their own, drop this.
    """
    import ray.train._internal.storage as storage  # deferred: loads Ray only when this runs

    if worker._global_node is not None or not hasattr(storage, "_get_ray_train_session_dir"):
        yield
        return
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    old = storage._get_ray_train_session_dir
    storage._get_ray_train_session_dir = lambda: str(path)
    try:
        yield
    finally:
        storage._get_ray_train_session_dir = old
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------- Ray on loopback


@contextlib.contextmanager
def node_ip_is_loopback() -> Iterator[None]:
    """While open, Ray's node-IP lookup in this process answers 127.0.0.1.

    Works around: `ray.init` turns a loopback address (its ``address`` host, ``_node_ip_address``)
    into the machine's "reachable" IP (`services.resolve_ip_for_localhost`, which asks
    `services.get_node_ip_address`), so a Ray on 127.0.0.1 only cannot be started or joined as
    such. `get_node_ip_address` answers the loopback IP when ``ray_constants.ENABLE_RAY_CLUSTER`` is
    False (Ray's macOS/Windows default), which it reads at call time.

    Verified on Ray 2.60.0 (`ray._private.ray_constants.ENABLE_RAY_CLUSTER`,
    `ray._private.services.get_node_ip_address`).
    When it breaks (test_node_ip_is_loopback_keeps_loopback fails): find what
    `resolve_ip_for_localhost` asks now; a public ``ray.init`` option to bind loopback replaces this.
    """
    old = constants.ENABLE_RAY_CLUSTER
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = old


def init_on_loopback(**kwargs: Any) -> None:
    """`ray.init(**kwargs)` with this process's Ray node on 127.0.0.1 (started or joined).

    Works around: `ray.init` has no public argument for the IP of the node it starts or joins
    from; ``_node_ip_address`` (listed in its docstring among the "hidden / experimental options") is it. Inside
    `node_ip_is_loopback` so that Ray does not rewrite it.

    Verified on Ray 2.60.0 (`ray.init(..., _node_ip_address=...)`, popped from its **kwargs).
    When it breaks (test_init_takes_node_ip_address fails): use the new name of that argument, or
    ``RAY_NODE_IP_ADDRESS`` if Ray reads one.
    """
    with node_ip_is_loopback():
        ray.init(_node_ip_address=LOOPBACK_IP, **kwargs)


def cluster_address(address: str) -> str:
    """The address ``auto`` stands for (RAY_ADDRESS, or the cluster last started here), else `address`.

    Works around: Ray has no public call that says which cluster ``ray.init(address="auto")`` would
    join; nas_stab needs it to join a loopback cluster on loopback. Any error: `address` unchanged.

    Verified on Ray 2.60.0 (`ray._private.services.get_ray_address_from_environment(addr, temp_dir)`).
    When it breaks (test_cluster_address_reads_ray_address fails): find what `ray.init` calls to
    resolve "auto" now (`services.canonicalize_bootstrap_address` in 2.60) and call that.
    """
    if address != "auto":
        return address

    try:
        return services.get_ray_address_from_environment("auto", None) or address
    except Exception:
        return address


def keep_loopback_addresses() -> None:
    """Make Ray leave loopback addresses alone in this process, for good (the ``ray`` command line).

    Works around: as `node_ip_is_loopback`, for `ray start` / `ray stop` run in this process:
    ``--address 127.0.0.1:PORT`` and ``--node-ip-address 127.0.0.1`` would be rewritten to the
    machine's IP by `services.resolve_ip_for_localhost`, which this replaces by the identity.
    Only for a process that runs nothing else (``python -m nas_stab.search.ray.loopback``).

    Verified on Ray 2.60.0 (`ray._private.services.resolve_ip_for_localhost(host)`, looked up at
    call time by `services.canonicalize_bootstrap_address` and `ray.scripts.scripts.start`).
    When it breaks (test_keep_loopback_addresses fails): find the function `ray start` uses to
    rewrite the addresses now and replace that.
    """
    import ray._private.services as services  # deferred: loads Ray only when this runs

    services.resolve_ip_for_localhost = lambda host: host


def node_ip_is_loopback_in_children(environ: dict | None = None) -> None:
    """Make Ray's node-IP lookup answer 127.0.0.1 in the processes this one starts (environment variable).

    Works around: a head's Ray Client server starts one driver process per client, which joins the
    head through the same rewrite as `node_ip_is_loopback`, out of reach of a patch in this process.
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` sets ``ray_constants.ENABLE_RAY_CLUSTER`` False in every
    child at import. On Linux it only also refuses `ray start --address` of a worker node, which a
    head never runs: set it in a head's environment only.

    Verified on Ray 2.60.0 (`ray._private.ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR`).
    When it breaks (test_node_ip_env_var_keeps_loopback fails): use the variable's new name, or
    whatever `get_node_ip_address` reads now.
    """
    (os.environ if environ is None else environ)["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
