"""search.sampler: bracket, on synthetic records (no training): a fake objective
acc(lr) = peak - c * (log2 lr - log2 lr*)^2, every run diverging above a wall."""
from __future__ import annotations

import math

import pytest

from nas_stab.config import loads_spec
from nas_stab.search.sources.bracket import MAX_POINTS, BracketSource

SPEC = """\
name: br
seeds: {seeds}
task: {{dataset: {{name: digits}}}}
model: {{arch: mlp_resnet, width: 16}}
train: {{lr: 0.1, steps: 10}}
space:
  model.depth: {depths}
  train.lr: {start}
search:
  sampler: bracket
  bracket: {{step_octaves: 1, resolution_octaves: 0.5, lr_limits: {limits}}}
"""


def make(start, depths=(2,), seeds=3, limits=(1e-4, 10)):
    text = SPEC.format(seeds=seeds, depths=list(depths), start=list(start), limits=list(limits))
    return BracketSource(loads_spec(text))


def objective(opt, wall=math.inf, peak=0.9, c=0.05, failed=()):
    """A record maker: the job's accuracy on the parabola around opt[depth] (log2), diverged above wall[depth]."""

    def record(job):
        depth, lr = job.params["model.depth"], job.params["train.lr"]
        o = opt[depth] if isinstance(opt, dict) else opt
        w = wall[depth] if isinstance(wall, dict) else wall
        row = {"key": job.key, "seed": job.seed, "trial": job.trial, **job.params}
        if (lr, job.seed) in failed:
            return {**row, "status": "failed", "val_acc": ""}
        if lr > w:
            return {**row, "status": "diverged", "val_acc": ""}
        acc = peak - c * (math.log2(lr) - math.log2(o)) ** 2 + 0.002 * job.seed
        return {**row, "status": "complete", "val_acc": max(0.0, acc)}

    return record


def drive(src, record, records=None, limit=10_000):
    """What a driver does, one job at a time; returns the records and every job started (in order)."""
    records = list(records or [])
    started = []
    for _ in range(limit):
        jobs = src.pending(records, ())
        if jobs is None:
            return records, started
        assert jobs, "nothing running, yet nothing to start"
        started.append(jobs[0])
        records.append(record(jobs[0]))
    raise AssertionError("the search never ended")


def lrs_of(records, depth=2):
    return sorted({r["train.lr"] for r in records if r["model.depth"] == depth})


def octaves(a, b):
    return abs(math.log2(a) - math.log2(b))


def test_optimum_outside_the_start_is_found_bracketed_and_resolved():
    src = make([0.001, 0.002])
    records, started = drive(src, objective(0.1))
    (end,) = src.report(records)
    assert end.end == "bracketed"
    assert octaves(end.best_lr, 0.1) <= 0.25 + 1e-9  # on the 0.5-octave lattice through the start
    lrs = lrs_of(records)
    assert max(lrs) > 0.1  # extended beyond the optimum
    i = lrs.index(end.best_lr)
    assert 0 < i < len(lrs) - 1
    assert octaves(lrs[i - 1], end.best_lr) == pytest.approx(0.5)  # the resolution neighbours
    assert octaves(lrs[i + 1], end.best_lr) == pytest.approx(0.5)
    assert len(started) == len({j.key for j in started}) == 3 * len(lrs)  # every lr with every seed, once
    half_octave_grid = 2 * octaves(lrs[0], lrs[-1]) + 1
    assert len(lrs) <= half_octave_grid / 2 + 3  # one-octave steps, half octaves only around the optimum


def test_a_divergence_wall_stops_the_extension():
    src = make([0.01])
    records, _ = drive(src, objective(0.4, wall=0.15))
    (end,) = src.report(records)
    assert end.end == "divergence wall"
    lrs = lrs_of(records)
    diverged = sorted({r["train.lr"] for r in records if r["status"] == "diverged"})
    assert diverged and diverged == [lr for lr in lrs if lr > 0.15]
    assert len(diverged) == 1  # one step beyond the wall, never further
    assert end.best_lr < 0.15
    assert octaves(end.best_lr, diverged[0]) == pytest.approx(0.5)  # the resolution point next to the wall


def test_a_limit_stops_the_extension_and_is_reported():
    src = make([0.1], limits=(1e-4, 10))
    records, _ = drive(src, objective(40.0))
    (end,) = src.report(records)
    assert end.end == "limit"
    assert max(lrs_of(records)) <= 10
    assert octaves(end.best_lr, 10) < 1  # the optimum stays at the top of what the limits allow


def test_no_lr_trains_extends_downwards_when_all_diverge():
    src = make([1.0, 2.0])
    records, _ = drive(src, objective(0.05, wall=0.3))
    (end,) = src.report(records)
    assert end.end == "bracketed"  # the wall is 2.6 octaves above the optimum: not a neighbour
    assert octaves(end.best_lr, 0.05) <= 0.25 + 1e-9  # found its way down from an all-diverged start
    assert sorted({r["train.lr"] for r in records if r["status"] == "diverged"})[0] > 0.3


def test_replaying_a_half_finished_search_trains_only_the_rest():
    record = objective({2: 0.1, 4: 0.01})
    full, started = drive(make([0.001, 0.01], depths=(2, 4)), record)
    for cut in (1, 5, len(full) // 2, len(full) - 1):
        fresh = make([0.001, 0.01], depths=(2, 4))  # a new process: state from the records alone
        rest, more = drive(fresh, record, records=full[:cut])
        assert [j.key for j in more] == [j.key for j in started[cut:]]
        assert {r["key"] for r in rest} == {r["key"] for r in full}
        assert len(rest) == len(full)  # nothing twice


def test_running_jobs_are_not_handed_out_again():
    src = make([0.01, 0.1])
    first = src.pending([], ())
    assert len(first) == 6
    running = {j.key for j in first[:4]}
    again = src.pending([], running)
    assert [j.key for j in again] == [j.key for j in first[4:]]
    assert src.pending([], {j.key for j in first}) == []  # wait for the runs in flight


def test_all_seeds_of_an_lr_before_deciding():
    src = make([0.03], seeds=3)
    record = objective(0.1)
    jobs = src.pending([], ())
    records = [record(j) for j in jobs[:2]]
    left = src.pending(records, ())
    assert [j.key for j in left] == [jobs[2].key]  # the missing seed, no new learning rate yet
    records.append(record(jobs[2]))
    nxt = src.pending(records, ())
    assert {j.params["train.lr"] for j in nxt} == {0.06, 0.015}  # one lr is both edges: both directions
    assert len(nxt) == 6


def test_a_failed_seed_counts_as_no_learning_and_is_not_retrained():
    record = objective(0.1, failed={(0.1, 1)})
    src = make([0.1])
    records, started = drive(src, record)
    assert len(started) == len({j.key for j in started})
    failed = [r for r in records if r["status"] == "failed"]
    assert len(failed) == 1
    (end,) = src.report(records)
    assert end.end == "bracketed"  # the search ends; the failed seed pulls 0.1's mean down as in the table


def test_sweeps_progress_independently():
    src = make([0.01], depths=(2, 4))
    record = objective({2: 0.1, 4: 0.001})
    records, held = [], set()
    for _ in range(200):
        jobs = src.pending(records, held)
        if not jobs:
            break
        for j in jobs:
            if j.params["model.depth"] == 4 and j.params["train.lr"] != 0.01:
                held.add(j.key)  # depth 4's second round never finishes
            else:
                records.append(record(j))
    ends = {e.params["model.depth"]: e for e in src.report(records)}
    assert ends[2].end == "bracketed" and octaves(ends[2].best_lr, 0.1) <= 0.25 + 1e-9
    assert ends[4].end == "running"
    assert src.pending(records, held) == []  # not done: depth 4 is waiting for its runs


def test_trial_numbers_and_run_ids_are_unique_per_sweep():
    full, started = drive(make([0.001, 0.01], depths=(2, 4)), objective({2: 0.1, 4: 0.01}))
    by_trial = {}
    for j in started:
        by_trial.setdefault(j.trial, set()).add(j.params["train.lr"])
        assert j.trial // MAX_POINTS == (0 if j.params["model.depth"] == 2 else 1)
    assert all(len(v) == 1 for v in by_trial.values())
    assert len({j.run_id for j in started}) == len(started)


@pytest.mark.parametrize("override, key", [
    ("search.bracket.resolution_octaves=2", "search.bracket.resolution_octaves"),
    ("search.bracket.lr_limits=[1,0.1]", "search.bracket.lr_limits"),
    ("search.bracket.lr_limits=[0.05,10]", "space.train.lr"),
    ("search.sampler=grid", "search.bracket"),
    ("leaderboard.lr=train.momentum", "search.sampler"),
])
def test_bracket_settings_are_validated(override, key):
    from nas_stab.errors import SpecError

    text = SPEC.format(seeds=1, depths=[2], start=[0.01], limits=[1e-4, 10])
    key_, _, value = override.partition("=")
    import yaml

    data = yaml.safe_load(text)
    node = data
    parts = key_.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = yaml.safe_load(value)
    with pytest.raises(SpecError) as e:
        loads_spec(yaml.safe_dump(data))
    assert key in [x.key for x in getattr(e.value, "errors", [e.value])]  # every problem is reported, in line order


def test_no_lr_trains_is_reported():
    src = make([0.01])
    records, _ = drive(src, objective(0.1, wall=0.5, peak=0.15))  # never beats chance (0.1) by the margin
    (end,) = src.report(records)
    assert end.end == "no lr trains" and end.best_lr is None
    assert max(lrs_of(records)) > 0.5  # went up until the runs diverged


def test_jobs_become_optuna_trials_with_their_values():
    import warnings

    import optuna

    from nas_stab.search.plan import base_lookup

    src = make([0.001])
    records, started = drive(src, objective(0.1))
    study = optuna.create_study(direction="maximize")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "fixed parameter out of range" for an extended lr
        for j in started[:: 3]:
            study.enqueue_trial(j.params)
            t = study.ask()
            assert src.suggest(t, base_lookup(src.spec)) == j.params
            study.tell(t, 0.5)
    assert {t.params["train.lr"] for t in study.trials} == set(lrs_of(records))


def test_a_rounded_log_grid_start_is_never_trained_twice():
    """`log_grid` rounds its values to 6 significant digits (0.0452548 for 2^-4.4658...), 7e-7 octaves
    from the exact half-octave point the resolution step computes: that is the same learning rate, and
    it must not be trained again (a half-octave grid whose optimum lies at its top edge did so)."""
    text = SPEC.format(seeds=2, depths=[2], start="{log_grid: [0.002, 0.064, 11]}", limits=[1e-4, 2.0])
    text = text.replace("step_octaves: 1", "step_octaves: 0.5")
    src = BracketSource(loads_spec(text))
    records, started = drive(src, objective(0.07))
    lrs = lrs_of(records)
    gaps = [math.log2(b / a) for a, b in zip(lrs, lrs[1:])]
    assert min(gaps) > 0.4, [f"{x:.9g}" for x in lrs]  # no two points closer than the grid's spacing
    assert len(started) == 2 * len(lrs)
    (end,) = src.report(records)
    assert end.end == "bracketed" and octaves(end.best_lr, 0.07) < 0.3


def test_trials_is_a_total_across_calls_as_for_a_grid():
    """`nas-stab run --trials N` on a bracket search: N runs in all. A second call with the same N
    trains nothing (it handed out N new runs per call before, unlike a grid's first N runs);
    a larger N carries on where the records stop, and the result equals one uninterrupted call."""
    text = SPEC.format(seeds=2, depths=[2, 4], start=[0.01, 0.1], limits=[1e-4, 10])
    record = objective({2: 0.3, 4: 0.03})
    first, started = drive(BracketSource(loads_spec(text), limit=5), record)
    assert len(started) == 5
    again, started = drive(BracketSource(loads_spec(text), limit=5), record, first)
    assert started == [] and again == first
    more, started = drive(BracketSource(loads_spec(text), limit=9), record, first)
    assert len(started) == 4 and len(more) == 9
    whole, _ = drive(BracketSource(loads_spec(text)), record)
    rest, _ = drive(BracketSource(loads_spec(text)), record, more)
    assert sorted(r["key"] for r in rest) == sorted(r["key"] for r in whole)


def test_stuck_and_diverged_start_points_extend_downwards_until_something_trains():
    # the start lrs 0.4 and 0.8: at 0.4 the model is stuck at chance (complete, 0.1 accuracy), at 0.8 it
    # diverges; it trains to 0.9 around 0.05. The sweep used to stop there with "no lr trains".
    src = make([0.4, 0.8])

    def record(job):
        lr = job.params["train.lr"]
        row = {"key": job.key, "seed": job.seed, "trial": job.trial, **job.params}
        if lr > 0.6:
            return {**row, "status": "diverged", "val_acc": ""}
        if lr > 0.3:
            return {**row, "status": "complete", "val_acc": 0.1}
        return {**row, "status": "complete", "val_acc": 0.9 - 0.05 * (math.log2(lr) - math.log2(0.05)) ** 2 + 0.002 * job.seed}

    records, _ = drive(src, record)
    (end,) = src.report(records)
    assert end.end == "bracketed" and octaves(end.best_lr, 0.05) <= 0.25 + 1e-9
    assert min(lrs_of(records)) < 0.05


def test_no_lr_trains_only_after_both_limits():
    # stuck at chance everywhere: the sweep walks down to the lower limit and up to the upper one first
    src = make([0.01, 0.02], limits=(0.001, 0.16))

    def record(job):
        return {"key": job.key, "seed": job.seed, "trial": job.trial, **job.params, "status": "complete", "val_acc": 0.1}

    records, _ = drive(src, record)
    (end,) = src.report(records)
    assert end.end == "no lr trains"
    lrs = lrs_of(records)
    assert min(lrs) <= 0.002 and max(lrs) >= 0.08


def test_a_plateau_is_followed_to_both_ends():
    # flat (0.9 within the seed noise) from 0.025 to 0.1, falling outside; the start sits on the plateau's left
    # part. The sweep used to stop at the first local maximum; now it extends while the edge is within noise.
    src = make([0.025, 0.05])

    def record(job):
        lr = job.params["train.lr"]
        d = max(0.0, abs(math.log2(lr) - math.log2(0.05)) - 1.0)
        return {"key": job.key, "seed": job.seed, "trial": job.trial, **job.params, "status": "complete",
                "val_acc": 0.9 - 0.1 * d**2 + 0.002 * job.seed}

    records, _ = drive(src, record)
    (end,) = src.report(records)
    lrs = lrs_of(records)
    assert max(lrs) >= 0.2 and min(lrs) <= 0.0125  # past both ends of the plateau
    assert end.end == "bracketed"
@pytest.mark.parametrize("override", ["search.bracket.step_octaves=0.0001", "search.bracket.resolution_octaves=0.0001",
                                      "search.bracket.step_octaves=1.0e-12", "search.bracket.resolution_octaves=0.01"])
def test_bracket_octaves_have_a_floor(override):
    """Issue 35: 1e-4 validated and let a sweep grow to its 1000-point cap; 1e-12 looped."""
    from nas_stab.errors import SpecError

    text = SPEC.format(seeds=1, depths=[2], start=[0.01], limits=[1e-4, 10])
    with pytest.raises(SpecError) as e:
        loads_spec(text, overrides=[override])
    assert e.value.key == override.split("=")[0] and "must be >= 0.05 octaves" in str(e.value)


@pytest.mark.parametrize("step, res", [(1e-12, 1e-12), (1e-4, 1e-4), (1.0, 1e-12), (1e-12, 0.5)])
def test_a_replay_cannot_loop_on_points_it_already_tried(step, res):
    """Below the tolerance (a spec made before the floor, or built in code), a new lr is one already tried:
    the sweep ends instead of replaying forever or training its point cap."""
    import dataclasses
    import signal

    spec = loads_spec(SPEC.format(seeds=2, depths=[2], start=[0.001, 0.002], limits=[1e-4, 10]))
    spec = dataclasses.replace(spec, search=dataclasses.replace(
        spec.search, bracket=dataclasses.replace(spec.search.bracket, step_octaves=step, resolution_octaves=res)))

    def stop(*_):
        raise AssertionError("the replay loops")

    old = signal.signal(signal.SIGALRM, stop)
    signal.alarm(30)
    try:
        records, _ = drive(BracketSource(spec), objective(0.1))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    lrs = lrs_of(records)
    assert len(lrs) < 20 and all(octaves(a, b) > 1e-3 for a, b in zip(lrs, lrs[1:]))
