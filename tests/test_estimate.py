"""The cost estimate's wall-time model (nas_stab/estimate/), deterministic: given costs, fixed timings, no
wall-clock asserts. The estimate against measured wall times is in the issue's table, not asserted here."""
from __future__ import annotations

import io

import pytest
from conftest import TINY

from nas_stab import estimate
from nas_stab.config import loads_spec
from nas_stab.estimate import Costs, Timed, measure, report, search_shape, speedup, wall_model
from nas_stab.search.progress import Progress
from nas_stab.search.sources.bracket import points_range

COSTS = Costs(startup_s=2.0, warmup_s=1.5, open_s=0.5, book_s=0.03, end_s=0.25, cores=4, busy=0.0)


def test_start_up_bookkeeping_and_the_end_are_counted():
    one = wall_model(COSTS, run_s=10.0, runs=100, concurrency=1)
    assert one.start_s == pytest.approx(2.0 + 0.5 + 1.5)  # interpreter/imports/data, run dir and study, first run
    assert one.runs_s == pytest.approx(10.0 + 100 * 0.03)  # the runs and each run's records and Optuna
    assert one.end_s == pytest.approx(0.25)  # the leaderboard
    assert one.total == pytest.approx(one.start_s + one.runs_s + one.end_s)


def test_concurrency_divides_the_runs_and_starts_workers():
    one = wall_model(COSTS, run_s=10.0, runs=100, concurrency=1)
    two = wall_model(COSTS, run_s=10.0, runs=100, concurrency=2)
    assert two.runs_s == pytest.approx(one.runs_s / 2)  # 4 idle cores: two runs at once, twice as fast
    assert two.start_s == pytest.approx(one.start_s + 2 * COSTS.startup_s)  # the workers: fork server, first run
    # more runs at once than runs: no more than the runs
    assert wall_model(COSTS, run_s=1.0, runs=1, concurrency=8).runs_s == pytest.approx(1.0 + 0.03)


def test_measured_workers_and_parallel_speed_replace_the_model():
    import dataclasses

    measured = dataclasses.replace(COSTS, pool_s=4.0, parallel=1.25)
    two = wall_model(measured, run_s=10.0, runs=100, concurrency=2)
    assert two.start_s == pytest.approx(2.0 + 0.5 + 4.0)  # start-up, run dir and study, the workers as measured
    assert two.runs_s == pytest.approx((10.0 + 100 * 0.03) / 1.25)  # as fast as measured, not as the cores say
    assert wall_model(dataclasses.replace(measured, parallel=9.0), 10.0, 100, 2).runs_s == pytest.approx(13.0 / 2)


def test_other_work_on_the_machine_shares_the_cores():
    assert speedup(2, 1, cores=2, busy=0.0) == pytest.approx(2.0)
    assert speedup(2, 1, cores=2, busy=1.0) == pytest.approx(4 / 3)  # 3 threads on 2 cores: 2 of them ours
    assert speedup(4, 1, cores=2, busy=0.0) == pytest.approx(2.0)  # no more than the cores
    assert speedup(1, 1, cores=2, busy=1.5) == 1.0  # one at a time: the measured run already ran that way
    assert speedup(2, 2, cores=4, busy=0.0) == pytest.approx(2.0)  # threads count as cores


def test_transfer_search_is_outer_trials_times_inner_runs():
    spec = loads_spec("""\
name: tr
seeds: 2
task: {dataset: {name: digits}}
model: {arch: mlp_resnet, depth: 2, width: 16, aggregation_exponent: 0.5}
train: {lr: 0.1, steps: 10}
space:
  model.branches: [1, 4]
  train.lr: {log_grid: [0.025, 0.1, 3]}
  model.aggregation_exponent: {uniform: [0.0, 1.0]}
search: {sampler: tpe, trials: 5, objective: val_acc, transfer: {objectives: [transfer_score]}}
leaderboard: {lr: train.lr, transfer: model.branches}
""")
    shape = search_shape(spec, runs=0)
    assert shape.outer == 5 and shape.runs == 5 * (2 * 3) * 2  # outer x sizes x lrs x seeds
    assert sorted(c.model.branches for c, _ in shape.configs) == [1, 4]  # the sizes are costed, each with its runs
    assert sum(n for _, n in shape.configs) * shape.scale == shape.runs


def test_bracket_points_range_on_the_quickstart_example():
    # start 0.0125, 0.025; one-octave steps to the limits 0.003125 and 0.1: two lattice points below, two above
    fewest, expected, most = points_range([0.0125, 0.025], 1.0, 0.5, (0.003125, 0.1))
    # expected: 2 + (2 + 2 + 1 + 1 + 2 + 2) / 6 extension steps + 2 resolution points + 1 plateau step = 6.7
    assert (fewest, expected, most) == (2, 7, 2 + 4 + 2)
    # no room beyond the start and a resolution as coarse as the step: the start grid is all
    assert points_range([0.01, 0.02], 1.0, 1.0, (0.01, 0.02)) == (2, 2, 2)


@pytest.mark.parametrize("opt", [0.0002, 0.003, 0.01, 0.05, 0.4, 3.0])
def test_a_sweep_trains_within_the_bracket_range(opt):
    from test_bracket import drive, lrs_of, make, objective

    src = make([0.01, 0.02], seeds=2)
    records, _ = drive(src, objective(opt))
    fewest, _, most = points_range([0.01, 0.02], 1.0, 0.5, (1e-4, 10))
    assert fewest <= len(lrs_of(records)) <= most


def fixed_timings(monkeypatch, ms=(1.0, 4.0), run_s=(0.1, 0.4)):
    """time_steps and whole_run replaced: the cheapest `ms[0]` ms/step and `run_s[0]` s a run, the dearest the others."""
    def time_steps(spec, task, device, label, proxy):
        return Timed(label, proxy, (ms[0],) * 3) if "width=8" in label else Timed(label, proxy, (ms[1],) * 3)

    def whole_run(spec, total, ms_step, *, reuse=True):
        return (run_s[0] if ms_step == ms[0] else run_s[1]), None

    monkeypatch.setattr(report, "time_steps", time_steps)
    monkeypatch.setattr(report, "whole_run", whole_run)


BRACKET = """\
name: cost
seeds: 2
task: {dataset: {name: digits}}
model: {arch: mlp_resnet, depth: 2, width: 16}
train: {lr: 0.05, steps: 10, batch_size: 32}
space:
  model.width: [64, 8]
  train.lr: {log_grid: [0.01, 0.04, 3]}
search: {sampler: bracket, bracket: {step_octaves: 1, resolution_octaves: 0.5, lr_limits: [0.0025, 0.16]}}
runner: {concurrency: 2}
leaderboard: {transfer: model.width}
"""


def test_bracket_estimate_names_cheapest_and_dearest_and_gives_a_range(monkeypatch):
    fixed_timings(monkeypatch)
    spec = loads_spec(BRACKET)
    lines = estimate.estimate_cost(spec, 12, costs=COSTS).splitlines()
    assert lines[0].startswith("cost: 12 runs, 120 optimizer steps"), lines
    assert lines[1].startswith("  cheapest width=8: 1.0 ms/step") and "a whole run 0.1 s" in lines[1], lines
    assert lines[2].startswith("  dearest  width=64: 4.0 ms/step") and "a whole run 0.4 s" in lines[2], lines
    last = lines[-1]
    assert "for ~28 runs expected" in last and "start grid's 12 runs" in last and "(36 runs:" in last, last
    # per sweep (2 sweeps x 2 seeds): 3 start lrs, (2+2+1+0+1+2+2)/7 extension steps, 2 resolution points, 1 plateau
    # step (7.4); at most 3 + 4 + 2
    assert search_shape(spec, 12).bracket == (12, 2 * 2 * 7, 2 * 2 * 9)
    per_run = (6 * 0.1 + 6 * 0.4) / 12

    def wall(n):
        return wall_model(COSTS, per_run * n, n, 2).total

    times = [float(t.split(" s")[0]) for t in (last.split("wall time: ~")[1], last.split("if the start grid")[0].split("; ")[-1],
                                                last.split("at most ~")[1])]
    assert times == [pytest.approx(round(wall(n), 1), abs=0.051) for n in (28, 12, 36)]
    assert wall(12) <= wall(28) <= wall(36)


def test_grid_estimate_counts_overheads(monkeypatch):
    fixed_timings(monkeypatch)
    spec = loads_spec(BRACKET.replace("search: {sampler: bracket, bracket: {step_octaves: 1, resolution_octaves: 0.5, "
                                      "lr_limits: [0.0025, 0.16]}}", "search: {sampler: grid}"))
    text = estimate.estimate_cost(spec, 12, costs=COSTS)
    assert "start-up 2.0 s" in text and "30 ms per run" in text and "leaderboard 0.2 s" in text, text
    total = wall_model(COSTS, 6 * 0.1 + 6 * 0.4, 12, 2).total
    assert text.splitlines()[-1] == f"  -> wall time: ~{total:.1f} s", text


def test_a_long_run_is_timed_shortened_with_its_cadence():
    spec = loads_spec(TINY.replace("steps: 20", "steps: 100000").replace("space:\n  model.branches: [1, 2]\n  train.lr: [0.01, 0.05]\n", ""))
    from nas_stab.training.loop import cadences

    short, factor = estimate.shortened(spec, 100000, ms_step=1.0, budget_s=1.5)
    # the spec's snapshots every 10 steps take stability.budget's whole share: no validation during training
    # (ev 0), so the shortened run has none either
    ev, sn = cadences(spec, 100000)
    assert (ev, sn) == (0, 10)
    assert short.train.steps == 1500 and short.stability.every == 10 and short.train.eval_every == 1501
    assert factor == pytest.approx((3 + 99999 // 10) / (3 + 1499 // 10))
    spec = loads_spec(TINY.replace("steps: 20", "steps: 100000, eval_every: 10000").replace(
        "space:\n  model.branches: [1, 2]\n  train.lr: [0.01, 0.05]\n", ""))
    short, factor = estimate.shortened(spec, 100000, ms_step=1.0, budget_s=1.5)  # a cadence the experiment sets
    assert short.train.eval_every == 10000
    assert factor == pytest.approx((3 + 99999 // 10000 + 99999 // 10) / (3 + 1499 // 10000 + 1499 // 10))
    same, one = estimate.shortened(spec, 1000, ms_step=1.0, budget_s=1.5)
    assert same is spec and one == 1.0


def test_progress_shows_the_expected_total_and_time_left():
    spec = loads_spec(TINY)
    out = io.StringIO()
    p = Progress(spec, None, stream=out)
    p.expect(10, "~", "estimated: the sweeps add lrs as they go")
    line = p.update({"trial": 0, "seed": 0, "status": "complete", "objective": 0.5, "run_id": "t0", "wall_s": 1.0})
    assert "[1/~10]" in line and "left (estimated: the sweeps add lrs as they go)" in line, line
    p.expect(1, ">=", "more seeds where a verdict needs them")
    p.started("t1", {}, 0, 20)
    line = p.summary()
    assert "[1/>=2]" in line and "or more left" in line, line  # never fewer than done + training
    bare = Progress(spec, None, stream=io.StringIO())
    assert "[0/?]" in bare.summary() and "left" not in bare.summary()


def test_a_bracket_search_shows_its_expected_total(tmp_path):
    from nas_stab.search.local import run_local
    from nas_stab.store.rundir import RunDir

    spec = loads_spec(TINY.replace("train.lr: [0.01, 0.05]", "train.lr: [0.01, 0.02, 0.04]").replace(
        "space:", "search: {sampler: bracket, bracket: {step_octaves: 1, resolution_octaves: 1, lr_limits: [0.0099, 0.0405]}}\n"
                  "leaderboard: {transfer: model.branches}\nspace:"))
    out = io.StringIO()
    with RunDir.open(tmp_path, spec) as rd:
        run_local(spec, rd, progress_stream=out)
    first = out.getvalue().splitlines()[0]
    assert "[1/~6]" in first, first  # 2 sweeps x 3 lrs: no room to extend, no resolution finer than the step


def test_the_bookkeeping_is_measured_on_a_real_driver_in_a_temporary_directory(tmp_path):
    """A real driver records a few runs (no training) with the search's own source; the user's storage and
    trackers are never touched."""
    other = tmp_path / "theirs.db"
    spec = loads_spec(TINY + f"search: {{storage: 'sqlite:///{other}'}}\nlogging: {{tracking: mlflow}}\n")
    open_s, book_s, end_s = measure.bookkeeping(spec, None)
    assert open_s > 0 and book_s > 0 and end_s >= 0
    assert not other.exists() and not list(tmp_path.iterdir())


def test_adaptive_seeds_give_a_range_from_the_first_seeds_to_every_verdict_cell_at_max(monkeypatch):
    """With seeds: {min, max} the search decides its own size: the estimate gives the runs if the first seeds decide
    every row, and the most, every row open to seeds.max at each cell its verdict rests on (5 per row and size)."""
    fixed_timings(monkeypatch)
    spec = loads_spec(BRACKET.replace("seeds: 2", "seeds: {min: 2, max: 5}"))
    assert report.adaptive_extra_runs(spec) == 1 * 2 * 5 * 3  # one row, two widths, 5 cells, 3 more seeds
    assert report.adaptive_extra_runs(loads_spec(BRACKET)) == 0
    last = estimate.estimate_cost(spec, 12, costs=COSTS).splitlines()[-1]
    per_run = (6 * 0.1 + 6 * 0.4) / 12

    def wall(n):
        return wall_model(COSTS, per_run * n, n, 2).total

    assert last.startswith("  -> adaptive seeds (2 to 5): the search decides its own size: "), last
    assert f"~{wall(28):.1f} s (28 runs) if 2 seeds decide every row, up to ~{wall(58):.1f} s (58 runs)" in last, last
    grid = loads_spec(BRACKET.replace("seeds: 2", "seeds: {min: 3, max: 4}").replace(
        "search: {sampler: bracket, bracket: {step_octaves: 1, resolution_octaves: 0.5, lr_limits: [0.0025, 0.16]}}",
        "search: {sampler: grid}"))
    assert report.adaptive_extra_runs(grid) == 1 * 2 * 3 * 1  # a 3-lr grid: at most its 3 lrs per size
