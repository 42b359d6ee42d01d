"""The Ray runner (`runner.kind: ray`): the same trials as the local runner, on Ray Tune.

The driver (this module, in the `nas-stab run` process) owns the Optuna study
and the run directory; Ray workers only train (`nas_stab.search.ray.trial`)
and send their records back through Tune results. One component,
`nas_stab.search.ray.bridge.OptunaBridge`, is both Tune's searcher (Optuna
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

The cluster itself (reachability, the session, a trial's resources) is `ray_cluster.py`'s.
Ray and Tune (over a second to import) are imported when a Ray run starts, not with this module.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import logging
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, TextIO, cast

from nas_stab.errors import Interrupted
from nas_stab.search.driver import Driver
from nas_stab.search.protocols import JobSource
from nas_stab.search.ray.cluster import check_client_storage, check_fits, ray_session, trial_resources, trial_threads
from nas_stab.search.ray.trial import Board, trial_main

if TYPE_CHECKING:
    from ray.actor import ActorHandle
    from ray.tune import Tuner
    from ray.tune.impl.tuner_internal import TunerInternal

    from nas_stab.config.schema import Spec
    from nas_stab.search.ray.bridge import OptunaBridge
    from nas_stab.search.ray.trial import Board
    from nas_stab.store.protocol import RunStore

PIDS_FILE = ".local_ray.pids"  # the processes of a local Ray this driver started (see ray_procs)
CLIENT_STAGING = ".ray_client"  # Tune's driver staging dir under Ray Client (see _ray_compat.driver_staging_here)


def run_ray(spec: Spec, rd: RunStore, *, trials: int | None = None, progress_stream: TextIO | None = None,
            run_fn: Callable | None = None, source: JobSource | None = None) -> dict:
    """Run every pending trial of `spec` on Ray Tune into run directory `rd`. Returns status counts.

    `run_fn` replaces `plan.run_job` in the workers (tests use toy runs); `source` (a
    `protocols.JobSource`) replaces the grid or the sampler as where jobs come from.
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


def _run_tune(spec: Spec, rd: RunStore, driver: Driver, run_fn: Callable | None) -> None:
    """One Tune experiment on the Ray session: the trials the driver gives, trained until it has no more."""
    check_client_storage(spec.runner)
    with ray_session(spec.runner, log=rd.log, pid_file=rd.path / PIDS_FILE) as local_ray:
        from ray.util.client import ray as ray_client  # Ray's imports: only when a Ray run starts

        from nas_stab.search.ray.bridge import OptunaBridge  # deferred: loads Ray, rich only when this runs

        r = spec.runner
        res = trial_resources(r)
        check_fits(res, started_here=local_ray.started_here, log=rd.log)
        board = _board()
        bridge = OptunaBridge(spec, driver, board=board, log=rd.log,
                              trial_config={"threads": trial_threads(spec), "checkpoint_every": r.checkpoint_every})
        n_trials = driver.planned  # None: as many as the job source gives (Tune's count: the bridge says when it is done)
        name, storage_path = _experiment(spec, rd)
        client = ray_client.is_connected()  # Ray Client (runner.address ray://...): see _ray_compat.local_tuner
        tuner = _tuner(spec, bridge, board, res, run_fn, name, storage_path, client)
        rd.log(f"ray: {f'{n_trials} trial(s)' if n_trials is not None else 'trials as the job source gives them'}, "
               f"{res} per trial, concurrency {r.concurrency}, tune experiment {storage_path}/{name}")
        local_ray.record_pids()  # the raylet's agents exist by now
        if not _fit(tuner, bridge, board, driver, rd, client):
            raise Interrupted("Ray Tune stopped before every trial finished")
        _remove_experiment(storage_path, name)


def _board() -> ActorHandle[Board]:
    """The trials' shared `ray_trial.Board` actor, on this node (soft affinity)."""
    import ray  # deferred: loads Ray only when this runs
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # deferred: loads Ray only when this runs

    return cast("ActorHandle[Board]", (  # a handle: Ray's annotation (ActorProxy) also admits the class itself
        ray.remote(num_cpus=0)(Board)
        .options(scheduling_strategy=NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True))
        .remote()
    ))


def _experiment(spec: Spec, rd: RunStore) -> tuple[str, str]:
    """(name, storage path) of a fresh Tune experiment; without `runner.storage`, the earlier ones under
    <run dir>/ray are removed first: Tune experiments of interrupted runs are scratch (nas_stab resumes from
    trials.csv)."""
    name = f"{spec.name}-{_dt.datetime.now().strftime('%Y%m%d-%H%M%S-%f')}"
    storage_path = spec.runner.storage or str(rd.path / "ray")
    if not spec.runner.storage:
        for old in (rd.path / "ray").glob(f"{spec.name}-*"):
            shutil.rmtree(old, ignore_errors=True)
    return name, storage_path


def _tuner(spec: Spec, bridge: OptunaBridge, board: ActorHandle[Board], res: dict, run_fn: Callable | None, name: str,
           storage_path: str, client: bool) -> Tuner | TunerInternal:
    """The Tune experiment: `ray_trial.trial_main` per trial, the bridge as searcher and scheduler."""
    from ray import tune  # deferred: loads Ray only when this runs

    from nas_stab.search.ray import compat as _ray_compat  # deferred: loads Ray only when this runs
    from nas_stab.search.ray.bridge import START_RETRIES  # deferred: loads Ray, rich only when this runs

    r = spec.runner
    fn = tune.with_parameters(trial_main, spec=spec, board=board, cwd=os.getcwd(), run_fn=run_fn)
    fn = tune.with_resources(fn, {k: v for k, v in res.items() if v})
    return (_ray_compat.local_tuner if client else tune.Tuner)(
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


def _fit(tuner: Tuner | TunerInternal, bridge: OptunaBridge, board: ActorHandle[Board], driver: Driver, rd: RunStore,
         client: bool) -> bool:
    """Run the experiment; True if it ended cleanly (every trial finished, none left to give). The trials
    left unfinished are closed as interrupted, and the board is killed, however it ends."""
    import ray  # deferred: loads Ray only when this runs

    from nas_stab.search.ray import compat as _ray_compat  # deferred: loads Ray only when this runs

    clean = False
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
    return clean


def _remove_experiment(storage_path: str, name: str) -> None:
    """A clean end: the Tune experiment is scratch (a local one is removed, its parent too if empty)."""
    exp = Path(storage_path) / name
    if "://" not in storage_path and exp.is_dir():
        shutil.rmtree(exp, ignore_errors=True)
        with contextlib.suppress(OSError):
            Path(storage_path).rmdir()  # only if empty


@contextlib.contextmanager
def _quiet_tune() -> Iterator[None]:
    """No per-trial result.json/progress.csv/TensorBoard files: the driver writes the records."""
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
