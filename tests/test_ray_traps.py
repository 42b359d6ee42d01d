"""Regression tests for DESIGN.md section 3: the Optuna + Ray Tune traps.

`TrialScheduler` and `Searcher` are Ray developer APIs, so Ray is pinned
(2.60.x). The first test reproduces the three stock behaviours with Ray's
own `OptunaSearch` + `ASHAScheduler`; if it starts failing after a Ray
upgrade, Ray changed and the bridge's workarounds must be revisited. The
others show nas_stab's searcher+scheduler bridge avoiding each trap, with toy
runs (no training) so they take seconds, then with real training (median
pruner, divergence), and a worker process dying mid-run (slow).

Toy behaviours, by train.lr:
  0.01, 0.02  good: value grows with the step
  0.03        bad: value stays low (the median pruner should prune it)
  0.04        nanfinal: intermediate values as the good ones, NaN final objective
  0.05        diverge: NaN from step 2 on
"""
import math
import sys

import pytest
from conftest import TINY
from conftest_ray import rows, run_ray_text, spec_text, study_of

KINDS = {0.01: "good", 0.02: "good", 0.03: "bad", 0.04: "nanfinal", 0.05: "diverge"}
STEPS = 8


def _value(kind: str, step: int) -> float:
    if kind == "good":
        return 0.1 * step
    if kind == "bad":
        return 0.01
    if kind == "nanfinal":
        return 0.1 * step  # as good as the good ones, so never pruned; its final value is NaN
    return math.nan if step >= 2 else 0.5


def toy_run(spec, params, seed, reporter=None, checkpoint=None):
    """A stand-in for plan.run_job: reports STEPS evaluations, no training."""
    from nas_stab.training.loop import Pruned, RunResult

    kind = KINDS[params["train.lr"]]
    v, step = math.nan, 0
    try:
        for step in range(1, STEPS + 1):
            v = _value(kind, step)
            if reporter:
                reporter(step, {"val_acc": v, "train_loss": 1.0})
    except Pruned:
        return RunResult("pruned", metrics={"val_acc": v}, steps=step), ""
    final = math.nan if kind == "nanfinal" else v
    return RunResult("complete", metrics={"val_acc": final, "train_loss": 1.0}, steps=STEPS, history=[{"step": STEPS}]), ""


def toy_trainable(config):
    """The same behaviours as a plain Ray Tune function trainable (for the stock setup)."""
    from ray import tune

    for step in range(1, STEPS + 1):
        v = _value(config["kind"], step)
        if config["kind"] == "nanfinal" and step == STEPS:
            v = math.nan
        tune.report({"val_acc": v, "step": step})


@pytest.fixture(scope="module", autouse=True)
def _ship_this_module():
    # Ray workers cannot import this test module: send its functions by value
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def test_stock_optunasearch_and_asha_reproduce_the_traps(ray_local, tmp_path):
    """Ray 2.60's OptunaSearch + ASHA: the three traps of DESIGN.md section 3 are real."""
    import optuna
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler
    from ray.tune.search.optuna import OptunaSearch

    storage = optuna.storages.InMemoryStorage()
    kinds = ["good", "good", "bad", "nanfinal", "diverge"]
    search = OptunaSearch(
        space={"kind": optuna.distributions.CategoricalDistribution(sorted(set(kinds)))},
        metric="val_acc", mode="max", points_to_evaluate=[{"kind": k} for k in kinds],
        storage=storage, study_name="stock",
    )
    assert isinstance(search._ot_study.pruner, optuna.pruners.NopPruner)  # trap 1: it never prunes
    asha = ASHAScheduler(metric="val_acc", mode="max", time_attr="step", max_t=STEPS, grace_period=2, reduction_factor=2)
    tuner = tune.Tuner(
        toy_trainable,
        tune_config=tune.TuneConfig(search_alg=search, scheduler=asha, num_samples=len(kinds), max_concurrent_trials=1,
                                    reuse_actors=True),
        run_config=tune.RunConfig(storage_path=str(tmp_path / "ray"), verbose=0),
    )
    results = tuner.fit()
    study = optuna.load_study(study_name="stock", storage=storage)
    by_kind = {}
    for t in study.trials:
        by_kind.setdefault(t.params["kind"], []).append(t)
    steps = {r.config["kind"]: r.metrics["step"] for r in results}

    assert [t.state.name for t in by_kind["good"]] == ["COMPLETE", "COMPLETE"]
    # trap 2: ASHA stopped the bad trial early, and Optuna recorded it COMPLETE with its truncated value
    bad = by_kind["bad"][0]
    assert steps["bad"] < STEPS
    assert bad.state.name == "COMPLETE" and bad.value == pytest.approx(0.01)
    # trap 3: a NaN final value leaves the Optuna trial RUNNING
    assert by_kind["nanfinal"][0].state.name == "RUNNING"
    # divergence slips past ASHA: NaN from step 2 on, yet the trial ran to the end (and stays RUNNING)
    assert steps["diverge"] == STEPS
    assert by_kind["diverge"][0].state.name == "RUNNING"


TOY_SPACE = {"train.lr": sorted(KINDS)}


def test_bridge_avoids_the_traps(ray_local, tmp_path):
    """Ours: pruned trials PRUNED, a NaN final value FAIL, divergence stopped at once and recorded."""
    text = spec_text(
        space=TOY_SPACE,
        search={"sampler": "grid", "pruner": {"median": {"n_startup_trials": 2, "n_warmup_steps": 0}}},
        runner={"kind": "ray", "concurrency": 1},
    )
    spec, d, counts = run_ray_text(text, tmp_path, run_fn=toy_run)
    by_lr = {float(r["train.lr"]): r for r in rows(d)}
    assert len(by_lr) == 5
    study = study_of(spec, d)
    state = {t.params["train.lr"]: t for t in study.trials}
    assert not [t for t in study.trials if t.state.name in ("RUNNING", "WAITING")]

    assert state[0.01].state.name == state[0.02].state.name == "COMPLETE"
    assert state[0.01].value == pytest.approx(0.8)
    # the pruner ran inside Tune, and the pruned trial is PRUNED (not COMPLETE with a truncated value)
    assert by_lr[0.03]["status"] == "pruned"
    assert state[0.03].state.name == "PRUNED" and state[0.03].user_attrs["status"] == "pruned"
    assert int(by_lr[0.03]["steps"]) < STEPS
    # a NaN final value ends FAIL, not RUNNING
    assert state[0.04].state.name == "FAIL"
    assert state[0.04].user_attrs["error"] == "objective is not finite"
    # the divergence rule on top of the pruner: stopped at the first NaN, recorded diverged
    assert by_lr[0.05]["status"] == "diverged"
    assert by_lr[0.05]["diverged_step"] == "2" and "non-finite" in by_lr[0.05]["error"]
    assert state[0.05].state.name == "PRUNED" and state[0.05].user_attrs["status"] == "diverged"
    assert max(state[0.05].intermediate_values, default=0) < 2  # the NaN never reached Optuna
    assert counts == {"complete": 3, "pruned": 1, "diverged": 1}


@pytest.mark.slow
def test_bridge_with_a_sampler_and_seeds(ray_local, tmp_path):
    """A sampled study: each Optuna trial trains every seed; final states are right for all."""
    text = spec_text(
        seeds=2,
        space=TOY_SPACE,
        search={"sampler": "random", "trials": 6, "seed": 3},
        runner={"kind": "ray", "concurrency": 2},
    )
    spec, d, counts = run_ray_text(text, tmp_path, run_fn=toy_run)
    study = study_of(spec, d)
    assert len(study.trials) == 6
    assert not [t for t in study.trials if t.state.name in ("RUNNING", "WAITING")]
    r = rows(d)
    for t in study.trials:
        kind = KINDS[t.params["train.lr"]]
        mine = [x for x in r if x["optuna_trial"] == str(t.number)]
        want = {"good": ("COMPLETE", 2), "bad": ("COMPLETE", 2), "nanfinal": ("FAIL", 2), "diverge": ("PRUNED", 1)}[kind]
        assert (t.state.name, len(mine)) == want, (kind, t.state.name, mine)
        if kind == "diverge":
            assert t.user_attrs["status"] == "diverged" and mine[0]["status"] == "diverged"
        if kind == "good":
            # the second seed's evaluations are offset by train.steps in the Optuna trial
            assert sorted(t.intermediate_values) == list(range(1, 9)) + [spec.train.steps + s for s in range(1, 9)]


# two good learning rates first, then a far too small one (pruned by the median rule) and a
# far too large one (diverges); concurrency 1 keeps the pruner's view deterministic
PRUNE = spec_text(
    TINY,
    space={"train.lr": [0.05, 0.1, 0.0003, 20.0]},
    model={"width": 32},
    train={"steps": 60, "eval_every": 10, "threads": 1, "batch_size": 64},
    search={"sampler": "grid", "pruner": {"median": {"n_startup_trials": 2, "n_warmup_steps": 10}}},
    runner={"kind": "ray", "concurrency": 1},
)


def test_real_training_pruned_and_diverged(ray_local, tmp_path):
    spec, d, counts = run_ray_text(PRUNE, tmp_path)
    by_lr = {float(r["train.lr"]): r for r in rows(d)}
    study = study_of(spec, d)
    st = {t.params["train.lr"]: t for t in study.trials}
    assert not [t for t in study.trials if t.state.name in ("RUNNING", "WAITING")]
    assert [st[lr].state.name for lr in (0.05, 0.1)] == ["COMPLETE", "COMPLETE"]
    # pruned by Optuna's median pruner inside Tune; stopped cleanly: its final stability snapshot is there
    small = by_lr[0.0003]
    assert small["status"] == "pruned" and st[0.0003].state.name == "PRUNED"
    assert int(small["steps"]) < 60 and small["final_fwd_ratio"] not in ("", "nan")
    assert (d / "history" / f"{small['run_id']}.csv").exists()
    # diverged: the divergence rule, recorded as data; PRUNED in Optuna with status diverged
    big = by_lr[20.0]
    assert big["status"] == "diverged" and big["diverged_step"] and big["error"]
    assert st[20.0].state.name == "PRUNED" and st[20.0].user_attrs["status"] == "diverged"
    assert counts == {"complete": 2, "pruned": 1, "diverged": 1}


def crashing_run(spec, params, seed, reporter=None, checkpoint=None, *, markers: str):
    """lr 0.01: the worker process dies once after a checkpoint at step 4, then the retry resumes.
    lr 0.02: the worker dies every time."""
    import os

    from nas_stab.training.loop import RunResult

    marker = os.path.join(markers, f"{params['train.lr']}")
    state = checkpoint.load() if checkpoint else None
    start = state["step"] if state else 0
    for step in range(start + 1, STEPS + 1):
        reporter(step, {"val_acc": 0.1 * step, "train_loss": 1.0})
        if checkpoint and step % checkpoint.every == 0:
            checkpoint.save({"step": step})
        if step == 5 and (params["train.lr"] == 0.02 or not os.path.exists(marker)):
            open(marker, "w").close()
            os._exit(1)  # the worker process dies, as on a lost node
    return RunResult("complete", metrics={"val_acc": 0.1 * STEPS}, steps=STEPS, history=[{"step": STEPS}]), ""


@pytest.mark.slow
def test_worker_death_retried_from_checkpoint_then_given_up(ray_local, tmp_path):
    """A worker process that dies is retried from its last checkpoint; past max_failures the run is failed."""
    import functools

    markers = tmp_path / "markers"
    markers.mkdir()
    text = spec_text(space={"train.lr": [0.01, 0.02]},
                     runner={"kind": "ray", "concurrency": 2, "max_failures": 1, "checkpoint_every": 4})
    spec, d, counts = run_ray_text(text, tmp_path, run_fn=functools.partial(crashing_run, markers=str(markers)))
    by_lr = {float(r["train.lr"]): r for r in rows(d)}
    study = study_of(spec, d)
    st = {t.params["train.lr"]: t for t in study.trials}
    assert by_lr[0.01]["status"] == "complete" and st[0.01].state.name == "COMPLETE"
    assert st[0.01].user_attrs["ray_failures"] == 1 and st[0.01].user_attrs["resumed_from_step"] == 4
    assert by_lr[0.02]["status"] == "failed" and st[0.02].state.name == "FAIL"
    assert "max_failures=1" in by_lr[0.02]["error"] and st[0.02].user_attrs["ray_failures"] == 2
    assert counts == {"complete": 1, "failed": 1}


# ---------------------------------------------------------------- issue 35: a killed trial worker


def _bridge(tmp_path, max_failures=1):
    from nas_stab.config import loads_spec
    from nas_stab.search.driver import Driver
    from nas_stab.search.ray.bridge import OptunaBridge
    from nas_stab.store.rundir import RunDir

    spec = loads_spec(spec_text(space={"train.lr": [0.01, 0.02]}, runner={"kind": "ray", "max_failures": max_failures}))
    rd = RunDir.open(tmp_path, spec)
    return spec, rd, OptunaBridge(spec, Driver(spec, rd), log=rd.log)


def _run_done(bridge, tid, value=0.5):
    from nas_stab.search.ray.trial import KIND, encode_result
    from nas_stab.training.loop import RunResult

    res = RunResult("complete", metrics={"val_acc": value}, steps=STEPS, history=[{"step": STEPS}])
    result = {KIND: "run_done", "nas_index": 0, "nas_result": encode_result(res)}
    assert bridge.on_result(tid, result) == "CONTINUE"
    bridge.complete(tid, result, False)


def test_a_trial_tune_gives_up_before_it_started_is_offered_again(tmp_path):
    """SIGKILL of one `ray::ImplicitFunc`: Tune handed a trial (or its retry) the cached actor of the dead
    worker; a failure of a trial waiting to start (PENDING) is never retried by Tune, so the run was
    recorded failed after two failures in the same second. The bridge offers it again as a new Tune trial
    (same Optuna trial, same job) and it completes; nothing is recorded for the failed attempts."""
    spec, rd, bridge = _bridge(tmp_path)
    first = bridge.suggest("a")
    bridge.on_error("a", "The actor is dead because its worker process has died", final=False)  # retried by Tune
    bridge.on_error("a", "The actor is dead because its worker process has died", final=True)  # PENDING: given up
    bridge.complete("a", None, True)
    assert not rd.read_trials() and not bridge.live
    assert bridge.suggest("b") == first  # the same trial again, under the new Tune trial id
    _run_done(bridge, "b")
    (row,) = rd.read_trials()
    assert row["status"] == "complete" and float(row["train.lr"]) == first["nas"]["params"]["train.lr"]
    (t,) = [t for t in bridge.driver.study.trials if t.state.name != "RUNNING"]
    assert t.state.name == "COMPLETE" and t.user_attrs["ray_failures"] == 2 and t.user_attrs["ray_trial_id"] == "b"
    assert "offered again as a new Tune trial" in (rd.path / "log.txt").read_text()
    rd.close()


def test_failures_of_a_trial_that_ran_still_spend_max_failures(tmp_path):
    from nas_stab.search.ray.trial import KIND

    spec, rd, bridge = _bridge(tmp_path, max_failures=1)
    bridge.suggest("a")
    ev = {KIND: "eval", "nas_step": 1, "nas_value": 0.1, "nas_train_loss": 1.0}
    assert bridge.on_result("a", ev) == "CONTINUE"
    bridge.on_error("a", "boom", final=False)  # it ran: 1 of max_failures 1
    assert not bridge.gave_up("a")
    assert bridge.on_result("a", dict(ev, nas_step=2)) == "CONTINUE"
    bridge.on_error("a", "boom", final=False)  # 2 > 1: given up, although Tune (max_failures + START_RETRIES) retries
    assert bridge.gave_up("a") and bridge.on_result("a", dict(ev, nas_step=3)) == "STOP"
    bridge.complete("a", None, False)  # what BridgeScheduler.choose_trial_to_run's stop_trial leads to
    (row,) = rd.read_trials()
    assert row["status"] == "failed" and "gave up after 2 failure(s); runner.max_failures=1" in row["error"]
    # failures before anything was reported are free only up to START_RETRIES
    from nas_stab.search.ray.bridge import START_RETRIES

    bridge.suggest("b")
    for _ in range(START_RETRIES + 1):
        bridge.on_error("b", "dead actor", final=False)
    assert bridge.gave_up("b")
    bridge.complete("b", None, False)
    assert sorted(r["status"] for r in rd.read_trials()) == ["failed", "failed"]
    rd.close()
