"""stability.budget (nas_stab/training/budget.py): the default cadences of the stability snapshots and the
mid-run validations are chosen so that the measurements' modelled cost stays within the budget; the cadences
an experiment sets are kept; each run records measure_s and train_s; measurements never change training.

The choice is tested with made-up costs (deterministic: no clock); the runs only check that the times are
recorded and add up, never how large they are."""
from __future__ import annotations

import csv
import math

import pytest

from nas_stab.config import loads_spec, spec_hash
from nas_stab.errors import SpecError, SpecErrors
from nas_stab.training import budget
from nas_stab.training.budget import MeasureCosts, every_for, plan, points

SPEC = """\
name: budget
task: {{dataset: {{name: synthetic, size: 600, shape: [8], classes: 3}}}}
model: {{arch: mlp_resnet, depth: 2, width: 8}}
train: {{lr: 0.01, steps: {steps}, batch_size: 16{train}}}
stability: {{hessian: {hessian}{stability}}}
"""


def spec(steps=40, train="", stability="", hessian="false"):
    return loads_spec(SPEC.format(steps=steps, train=train, stability=stability, hessian=hessian))


COSTS = [MeasureCosts(s, h, v) for s in (0.5, 3.7, 8.0) for h in (0.0, 12.0, 30.0) for v in (0.2, 4.6, 40.0)]
TOTALS = [1, 2, 7, 40, 100, 300, 1000, 1500, 10_000, 200_000]
BUDGETS = [0.0, 0.01, 0.03, 0.1, 1.0]


def modelled(total, costs, c, hessian=True):
    """What the cadences `c` cost by the model: init and end snapshots (with the Hessian) plus the mid-run ones."""
    return (2 * (costs.snapshot + (costs.hessian if hessian else 0.0)) + points(c.snap_every, total) * costs.snapshot
            + points(c.eval_every, total) * costs.validation)


@pytest.mark.parametrize("costs", COSTS)
def test_the_default_cadences_stay_within_the_budget(costs):
    for total in TOTALS:
        for b in BUDGETS:
            c = plan(total, b, costs)
            cost = modelled(total, costs, c)
            assert math.isclose(c.planned, cost, rel_tol=1e-9)
            fixed = 2 * (costs.snapshot + costs.hessian)
            # the budget holds, or nothing during training was taken (init and end alone exceed it)
            assert cost <= b * total + 1e-9 or cost == fixed, (total, b, c)
            n_snap, n_eval = points(c.snap_every, total), points(c.eval_every, total)
            assert n_snap <= budget.MAX_POINTS and n_eval <= budget.MAX_POINTS


def test_a_larger_budget_never_measures_less():
    for costs in COSTS:
        for total in TOTALS:
            prev = (0, 0)
            for b in BUDGETS:
                c = plan(total, b, costs)
                now = (points(c.snap_every, total), points(c.eval_every, total))
                assert now[0] >= prev[0] and now[1] >= prev[1], (costs, total, b)
                prev = now


def test_the_budget_in_figures():
    c = MeasureCosts(snapshot=4.0, hessian=15.0, validation=5.0)
    # 1500 steps x 3% = 45 steps; init + end with the Hessian 38; 7 left, 3.5 each: neither a snapshot nor a validation
    assert plan(1500, 0.03, c)[:2] == (0, 0)
    assert plan(1500, 0.03, c).planned == 38
    # 3000 steps: 90 - 38 = 52, 26 each: 6 snapshots (24), 5 validations (25)
    assert plan(3000, 0.03, c)[:2] == (every_for(5, 3000), every_for(6, 3000)) == (500, 429)
    # 10,000 steps: 300; 38 + 9 x 4 + 9 x 5 = 119 fits: 10 per run each, as before the budget
    assert plan(10_000, 0.03, c)[:2] == (1000, 1000)
    # without the Hessian: 45 - 8 = 37, 18.5 each: 4 snapshots, 3 validations
    assert plan(1500, 0.03, c, hessian=False)[:2] == (every_for(3, 1500), every_for(4, 1500)) == (375, 300)
    # cheap snapshots reach their cap (9 x 0.5 = 4.5 of their 22): validations get the other 39.5 (7, not 4)
    cheap = MeasureCosts(snapshot=0.5, hessian=0.0, validation=5.0)
    assert plan(1500, 0.03, cheap, hessian=False)[:2] == (every_for(7, 1500), 150)
    assert plan(1500, 0.0, c)[:2] == (0, 0)  # budget 0: nothing during training
    assert plan(1500, None, c)[:2] == (150, 150)  # no budget: 10 per run whatever they cost
    assert plan(1500, 1.0, c)[:2] == (150, 150)  # a generous budget: never more than 10 per run


def test_explicit_cadences_are_kept_even_over_the_budget():
    c = MeasureCosts(snapshot=4.0, hessian=15.0, validation=5.0)
    p = plan(100, 0.03, c, eval_every=10, snap_every=5)
    assert p[:2] == (10, 5)
    assert p.planned == 2 * 19 + 19 * 4 + 9 * 5 > 0.03 * 100  # over budget: recorded in the plan, not changed
    assert plan(1500, 0.03, c, snap_every=0)[:2] == (every_for(1, 1500), 0)  # every: 0 leaves the rest to validations
    # the pruner's reports: 10 per run whatever they cost; the snapshots get what is left (here nothing)
    assert plan(1500, 0.03, c, pruner=True)[:2] == (150, 0)
    assert plan(100_000, 0.03, c, pruner=True)[:2] == (10_000, 10_000)
    # Hessian estimates during training (hessian_every) count against the budget before the free cadences
    assert plan(10_000, 0.03, c, snap_every=1000, hessian_every=1000)[:2] == (1000, 1000)
    assert plan(10_000, 0.03, c, snap_every=1000, hessian_every=1000).planned == 38 + 9 * 15 + 9 * 4 + 9 * 5


def test_every_for_spreads_at_most_n_points():
    for total in TOTALS:
        for n in range(0, 12):
            e = every_for(n, total)
            assert points(e, total) <= n
            if n and total >= 10 * (n + 1):
                assert points(e, total) == n  # long runs: exactly n
    assert every_for(9, 1500) == 150 and points(150, 1500) == 9  # 9 during training + 1 at the end


def test_cost_model_of_a_classification_task():
    import torch

    from nas_stab.tasks import load_task

    s = spec(stability=", probe_batch: 64, hessian_batch: 32, hessian_iters: 10", hessian="true")
    task = load_task(s, 0, torch.device("cpu"))
    w = task.measure_work()
    assert w["train"] == 16 and w["probe"] == 64 and w["val"] > 0
    c = budget.measure_costs(s, task)
    assert math.isclose(c.snapshot, budget.SNAPSHOT_K * (4 * 64 + 3 * 16) / (3 * 16))
    assert math.isclose(c.hessian, budget.HESSIAN_K * (budget.GRAPH_WORK + budget.HVP_WORK * 10) * 32 / (3 * 16))
    assert math.isclose(c.validation, w["val"] / (3 * 16))
    assert budget.measure_costs(s, object()) == budget.FALLBACK  # a task that does not say its sizes


def test_cost_model_of_a_translation_task():
    """Tokens, not sentences: the padded source and target input of a training batch (the mean over one
    epoch's plan), of the probe batch, and of a validation with its decoding (1.25 x beam x target tokens)."""
    import torch

    from nas_stab.tasks import load_task

    s = loads_spec("name: t\ntask: {kind: translation, dataset: {name: synthetic, size: 200}, beam: 2}\n"
                   "model: {arch: transformer, d_model: 16, enc_layers: 1, dec_layers: 1, heads_per_branch: 2, "
                   "ffn_per_branch: 32}\ntrain: {optimizer: adam, lr: 0.001, steps: 10, batch_size: 16}\n"
                   "stability: {probe_batch: 32, hessian_batch: 16}\nsearch: {objective: bleu}\n")
    task = load_task(s, 0, torch.device("cpu"))
    w = task.measure_work()
    src, tin = task.probe_batch[0], task.probe_batch[1]
    assert w["probe"] == src.numel() + tin.numel() and w["probe_rows"] == src.shape[0] == 32
    v = task.data.splits["val"]
    assert w["val"] == float(v.src_len.sum() + v.tgt_len.sum()) + 1.25 * 2 * float(v.tgt_len.sum())
    assert w["train"] > 16  # tokens of a 16-sentence batch
    c = budget.measure_costs(s, task)
    assert math.isclose(c.hessian, budget.HESSIAN_K * (budget.GRAPH_WORK + budget.HVP_WORK * 20) * w["probe"] / 2 / (3 * w["train"]))
    assert all(math.isfinite(x) and x > 0 for x in c)


def test_a_run_records_its_measuring_and_training_time():
    from nas_stab.training import train_run

    r = train_run(spec(steps=60, stability=", every: 20"), 0)
    assert r.status == "complete", r.error
    assert r.train_s > 0 and r.measure_s > 0
    assert r.train_s + r.measure_s <= r.wall_s
    lean = train_run(spec(steps=60, stability=", budget: 0"), 0)
    # measurements never change training: the same trajectory and final metrics whatever the cadence
    for k in ("val_acc", "val_loss", "test_acc", "train_loss", "train_loss_tail", "final_fwd_ratio", "final_grad_norm"):
        assert lean.metrics[k] == r.metrics[k], k
    assert [h["step"] for h in lean.history if "fwd_ratio" in h] == [0, 60]
    assert [h["step"] for h in r.history if "fwd_ratio" in h] == [0, 20, 40, 60]


def test_trials_csv_has_the_time_columns(tmp_path):
    from nas_stab.cli import main

    path = tmp_path / "s.yaml"
    path.write_text(SPEC.format(steps=20, train=", threads: 1", stability="", hessian="false")
                    + "space: {train.lr: [0.01, 0.02]}\nlogging: {tensorboard: false}\n")
    assert main(["run", str(path), "--out", str(tmp_path / "runs")]) == 0
    with open(tmp_path / "runs" / "budget" / "trials.csv") as f:
        rows = list(csv.DictReader(f))
    cols = list(rows[0])
    assert cols[cols.index("wall_s"):cols.index("wall_s") + 3] == ["wall_s", "train_s", "measure_s"]
    for r in rows:
        assert float(r["train_s"]) > 0 and float(r["measure_s"]) > 0
        assert float(r["train_s"]) + float(r["measure_s"]) <= float(r["wall_s"]) + 0.002  # each rounded to 1 ms


@pytest.mark.parametrize("value", ["-0.01", "1.5", "x", "[0.1]", "true"])
def test_budget_out_of_range_is_refused(value):
    with pytest.raises((SpecError, SpecErrors), match="budget"):
        spec(stability=f", budget: {value}")


def test_budget_values_and_the_spec_hash():
    assert spec().stability.budget == 0.03
    assert spec(stability=", budget: null").stability.budget is None
    assert spec(stability=", budget: 0").stability.budget == 0
    assert spec(stability=", budget: 1").stability.budget == 1
    # at its default the key stays out of the hash: run directories made before it resume
    assert spec_hash(spec()) == spec_hash(spec(stability=", budget: 0.03"))
    assert spec_hash(spec()) != spec_hash(spec(stability=", budget: 0.1")) != spec_hash(spec(stability=", budget: null"))
