"""search.transfer (nas_stab/search/sources/transfer.py): outer trials over the architecture, inner size x lr x seed runs.

- each outer trial's objectives equal the leaderboard's own computation on the same records (its row of
  `nas-stab leaderboard`), and its runs are ordinary trials.csv rows with `outer_trial`;
- a search stopped at any point (mid outer trial, or between its last record and telling the outer
  study) resumes without training anything twice and without sampling an open outer trial again;
- the exponent knobs are the papers' forms: alpha = C^-p (0.5: STAM), tau = L^-p (0.5: 1/sqrt(L));
- the Pareto front is the non-dominated set; the Ray runner drives the same source (slow).
"""
from __future__ import annotations

import math
import re

import pytest
from conftest_ray import rows, spec_text

TRANSFER = """\
name: tiny
seeds: 2
task: {kind: classification, dataset: {name: digits}}
model: {arch: mlp_resnet, depth: 2, width: 16, branch_depth: 2}
train: {optimizer: sgd, lr: 0.1, batch_size: 64, steps: 12, threads: 1}
stability: {every: 0, hessian: false, probe_batch: 64}
space:
  model.branches: [1, 4]
  train.lr: {log_grid: [0.05, 0.2, 3]}
  model.aggregation_exponent: {uniform: [0.0, 1.0]}
search: {sampler: random, trials: 3, objective: val_acc, transfer: {objectives: [transfer_score, best]}}
runner: {kind: local, concurrency: 1}
leaderboard: {lr: train.lr, transfer: model.branches}
logging: {tensorboard: false}
"""
RUNS = 3 * 2 * 3 * 2  # outer trials x sizes x lrs x seeds


def outer_study(d):
    import optuna

    from nas_stab.search.optuna_study import make_storage

    return optuna.load_study(study_name="tiny/transfer", storage=make_storage(f"sqlite:///{d / 'study.db'}"))


class Stopping:
    """The transfer source, stopped once as Ctrl-C does (KeyboardInterrupt) when `stop_after` runs are recorded."""

    def __init__(self, spec, storage, stop_after):
        from nas_stab.search.sources.transfer import TransferSource

        self.src, self.stop_after = TransferSource(spec, storage=storage), stop_after
        self.total, self.suggest = self.src.total, self.src.suggest  # its own suggest (inner: bracket's lr distribution)
        self.decision_facts, self.decisions = self.src.decision_facts, self.src.decisions  # what it decided, recorded

    def pending(self, records, running):
        if self.stop_after is not None and len(records) >= self.stop_after:
            self.stop_after = None
            raise KeyboardInterrupt
        return self.src.pending(records, running)


def _run(text, out, monkeypatch, stop_after=None):
    """Run the search (optionally stopped); the keys trained by this call."""
    from nas_stab.config import loads_spec
    from nas_stab.search import plan
    from nas_stab.search.local import run_local
    from nas_stab.store.rundir import RunDir

    trained = []
    real = plan.run_job

    def counting(spec, params, seed, *a, **kw):
        trained.append((tuple(sorted(params.items())), seed))
        return real(spec, params, seed, *a, **kw)

    monkeypatch.setattr(plan, "run_job", counting)
    spec = loads_spec(text)
    with RunDir.open(out, spec) as rd:
        source = None if stop_after is None else Stopping(spec, rd.storage_url, stop_after)
        run_local(spec, rd, source=source)
    return trained


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        out = tmp_path_factory.mktemp("transfer")
        _run(TRANSFER, out, mp)
    finally:
        mp.undo()
    return out / "tiny"


def test_each_outer_trial_is_scored_by_the_leaderboards_own_analysis(finished):
    from nas_stab.results.leaderboard import load_analysis
    from nas_stab.results.pareto import pareto_table
    from nas_stab.store.reader import read_run

    got = rows(finished)
    assert len(got) == RUNS and {r["status"] for r in got} == {"complete"}
    assert sorted({r["outer_trial"] for r in got}) == ["0", "1", "2"]
    for r in got:  # an inner run's trial number: outer * 1000 + its (size, lr) point
        assert int(r["trial"]) // 1000 == int(r["outer_trial"])
    trials = outer_study(finished).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    a, _, _ = load_analysis([finished])  # exactly what `nas-stab leaderboard` computes
    assert a.settings.compare == ("model.aggregation_exponent",)  # one row per architecture by default
    table = pareto_table(a, read_run(finished).spec).set_index("outer_trial")
    for t in trials:
        row = a.rows[[abs(float(v) - t.params["model.aggregation_exponent"]) < 1e-5 for v in a.rows["model.aggregation_exponent"]]]
        assert len(row) == 1
        assert t.values == [pytest.approx(row.iloc[0]["transfer_score"], rel=1e-12, abs=1e-15),
                            pytest.approx(row.iloc[0]["best"], rel=1e-12, abs=1e-15)]
        assert t.user_attrs["transfers"] == row.iloc[0]["transfers"]
        assert t.user_attrs["stuck"] == pytest.approx(row.iloc[0]["stuck"])  # beside diverged, as in the table
        assert set(t.user_attrs["stability"]["init_fwd_ratio"]) == {"1", "4"}  # the stability summary, per size
        assert table.loc[t.number, "transfer_score"] == pytest.approx(t.values[0], rel=1e-12)


def test_the_leaderboard_shows_the_pareto_front(finished):
    from nas_stab.results.leaderboard import build_leaderboard

    written = build_leaderboard([finished], formats=("md", "csv"))
    assert "plot:pareto" in written and written["plot:pareto"].read_bytes()[:4] == b"\x89PNG"
    md = (finished / "leaderboard.md").read_text()
    assert "## Pareto front of the transfer search" in md and "plots/pareto.png" in md
    assert md.index("## Pareto front") < md.index("## Provenance")
    assert (finished / "pareto.csv").read_text().startswith("outer_trial,model.aggregation_exponent,transfer_score,best")


@pytest.mark.parametrize("stop_after", [12, 17], ids=["between-last-record-and-tell", "mid-outer-trial"])
def test_a_stopped_transfer_search_resumes_without_training_twice(tmp_path, monkeypatch, finished, stop_after):
    with pytest.raises(KeyboardInterrupt):
        _run(TRANSFER, tmp_path, monkeypatch, stop_after=stop_after)
    d = tmp_path / "tiny"
    before = rows(d)
    assert len(before) == stop_after
    open_before = {t.number: t.params for t in outer_study(d).trials if t.state.name == "RUNNING"}
    assert open_before  # an outer trial was left open: its runs all recorded (12) or some of them (17)
    second = _run(TRANSFER, tmp_path, monkeypatch)
    after = rows(d)
    assert len(second) == RUNS - stop_after  # only what was missing
    keys = [r["key"] for r in after]
    assert len(keys) == len(set(keys)) == RUNS
    assert [r for r in after if r["key"] in {b["key"] for b in before}] == before  # kept as recorded
    trials = outer_study(d).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3  # the open one continued, none sampled again
    for n, params in open_before.items():
        assert trials[n].params == params
    # the same search uninterrupted gives the same records and values (seeded sampler, keyed runs)
    strip = lambda rs: sorted((r["key"], r["outer_trial"], r["val_acc"]) for r in rs)  # noqa: E731
    assert strip(after) == strip(rows(finished))
    assert [t.values for t in trials] == [t.values for t in outer_study(finished).trials]
    assert _run(TRANSFER, tmp_path, monkeypatch) == []  # nothing left


def test_the_exponent_knobs_are_the_papers_forms():
    from nas_stab.config import loads_spec, resolve
    from nas_stab.config.knobs import alpha
    from nas_stab.models.base import Tau, branch_alpha, model_tau

    for C in (1, 4, 16):
        assert alpha("sum", C, exponent=0.5) == pytest.approx(alpha("stam", C)) == pytest.approx(C ** -0.5)
        assert alpha("sum", C, exponent=1.0) == pytest.approx(alpha("avg", C))
        assert alpha("sum", C, exponent=0.0) == alpha("sum", C) == 1.0
    spec = loads_spec(TRANSFER)
    r = resolve(spec, {"model.branches": 16, "model.aggregation_exponent": 0.25, "model.tau_exponent": 0.5})
    assert branch_alpha(r.model) == pytest.approx(16 ** -0.25)
    assert float(Tau(model_tau(r.model), 9).value) == pytest.approx(1 / 3)  # tau = L^-0.5 = 1/sqrt(9)
    r = resolve(spec, {"model.tau_exponent": 1.0, "model.tau_learnable": True})
    t = Tau(model_tau(r.model), 4, learnable=r.model.tau_learnable)
    assert t.learnable and float(t.value.detach()) == pytest.approx(0.25)


def test_pareto_front_is_the_non_dominated_set():
    import pandas as pd

    from nas_stab.analysis.table import Analysis, Settings
    from nas_stab.config import loads_spec
    from nas_stab.results.pareto import pareto_table

    spec = loads_spec(spec_text(TRANSFER, search={"sampler": "random", "trials": 3, "objective": "val_acc",
                                                   "transfer": {"objectives": ["transfer_score", "lr_drift"]}}))
    pts = [(0.9, 2.0), (0.8, 0.5), (0.85, 1.0), (0.7, 0.6), (0.9, 2.5), (0.6, float("nan"))]
    rows_ = pd.DataFrame({"_k": range(len(pts)), "model.aggregation_exponent": [0.1 * i for i in range(len(pts))],
                          "transfer_score": [p[0] for p in pts], "lr_drift": [p[1] for p in pts],
                          "transfers": "inconclusive", "why": ""})
    a = Analysis(settings=Settings("val_acc", "maximize", "train.lr", "model.branches", ("model.aggregation_exponent",),
                                   None, 0.1, 0.09, ""), rows=rows_, cells=pd.DataFrame(),
                 records=pd.DataFrame({"_k": range(len(pts)), "outer_trial": range(len(pts))}))
    t = pareto_table(a, spec)
    assert sorted(t.loc[t["front"], "outer_trial"]) == [0, 1, 2]  # (0.7, 0.6) is dominated by (0.8, 0.5); 4 by 0
    assert 5 not in set(t["outer_trial"])  # an undefined objective: not a point


@pytest.mark.slow
def test_a_transfer_search_through_the_ray_runner(tmp_path, finished):
    import ray
    from conftest_ray import run_ray_text, start_local_ray

    if ray.is_initialized():
        ray.shutdown()
    start_local_ray(2)
    try:
        _, d, counts = run_ray_text(spec_text(TRANSFER, runner={"kind": "ray", "concurrency": 2}), tmp_path)
    finally:
        ray.shutdown()
    assert counts == {"complete": RUNS}
    strip = lambda rs: sorted((r["key"], r["outer_trial"], r["val_acc"]) for r in rs)  # noqa: E731
    assert strip(rows(d)) == strip(rows(finished))  # the same runs and results as the local runner
    trials = outer_study(d).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    for t, u in zip(trials, outer_study(finished).trials):
        assert t.params == u.params and all(math.isclose(x, y, rel_tol=1e-12) for x, y in zip(t.values, u.values))


# ---------------------------------------------------------------- search.transfer.inner: bracket

BRACKETED = TRANSFER.replace("train.lr: {log_grid: [0.05, 0.2, 3]}", "train.lr: [0.05, 0.1]").replace(
    "search: {sampler: random, trials: 3, objective: val_acc, transfer: {objectives: [transfer_score, best]}}",
    "search: {sampler: tpe, trials: 3, objective: val_acc, pruner: sweep,\n"
    "         transfer: {objectives: [transfer_score, best], inner: bracket},\n"
    "         bracket: {step_octaves: 1, resolution_octaves: 1, lr_limits: [0.0125, 1.6]}}")


def _fake_record(job, opt):
    """A synthetic run of `job`: accuracy on a parabola in log2(lr) around opt(size, exponent)."""
    size, p, lr = job.params["model.branches"], job.params["model.aggregation_exponent"], job.params["train.lr"]
    acc = 0.9 - 0.05 * (math.log2(lr) - math.log2(opt(size, p))) ** 2 + 0.001 * job.seed
    return {"key": job.key, "seed": job.seed, "trial": job.trial, "outer_trial": job.outer, "status": "complete",
            "val_acc": max(0.0, acc), **job.params}


def test_inner_bracket_finds_each_sizes_optimum_outside_the_start(tmp_path):
    """On synthetic records (no training): each outer trial brackets each size's optimum, far outside the
    two start lrs, and is told only when every sweep has ended, from all of its sweeps' runs."""
    from nas_stab.config import loads_spec
    from nas_stab.search.sources.bracket import BracketSource
    from nas_stab.search.sources.transfer import TransferSource
    from nas_stab.search.sources.transfer_objectives import evaluate

    spec = loads_spec(BRACKETED)
    opt = lambda size, p: 0.4 * size ** (0.5 - p)  # noqa: E731  (p = 0.5 transfers exactly)
    src = TransferSource(spec, storage=f"sqlite:///{tmp_path / 'study.db'}")
    assert src.total is None  # decided as results come in
    records = []
    for _ in range(10_000):
        jobs = src.pending(records, ())
        if jobs is None:
            break
        assert jobs, "nothing running, yet nothing to start"
        for n in src.active:  # an open outer trial is never told early
            assert all(t.number != n or t.state.name == "RUNNING" for t in src.study.get_trials(deepcopy=False))
        records.append(_fake_record(jobs[0], opt))
    trials = src.study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    for t in trials:
        mine = [r for r in records if r["outer_trial"] == t.number]
        p = t.params["model.aggregation_exponent"]
        for size in (1, 4):
            lrs = sorted({r["train.lr"] for r in mine if r["model.branches"] == size})
            assert {0.05, 0.1} <= set(lrs) and len(lrs) > 2
            best = max(lrs, key=lambda lr: -abs(math.log2(lr) - math.log2(opt(size, p))))
            inside = [lr for lr in lrs if lr != best]
            if 0.0125 * 1.01 < opt(size, p) < 1.6 / 1.01:  # bracketed: tried lrs on both sides, 1 octave apart
                assert min(inside) < best < max(inside)
                assert abs(math.log2(best) - math.log2(opt(size, p))) <= 0.5 + 1e-9
        sweeps = BracketSource(spec, sweeps=[({"model.aggregation_exponent": p, "model.branches": s}, (0.05, 0.1))
                                             for s in (1, 4)])
        assert all(e.end != "running" for e in sweeps.report(mine))
        values, _, _ = evaluate(spec, mine)  # told from every run of its sweeps
        assert t.values == pytest.approx(values, rel=1e-12)
    for r in records:  # run ids and trial numbers unique, grouped by outer trial
        assert int(r["trial"]) // 1000 == r["outer_trial"]
    assert len({(r["trial"], r["seed"]) for r in records}) == len(records)
    assert len({r["key"] for r in records}) == len(records)


@pytest.fixture(scope="module")
def bracketed(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    try:
        out = tmp_path_factory.mktemp("transfer-bracket")
        trained = _run(BRACKETED, out, mp)
    finally:
        mp.undo()
    return out / "tiny", trained


def _sweeps_of(spec, t):
    from nas_stab.search.sources.bracket import BracketSource

    return BracketSource(spec, sweeps=[({"model.aggregation_exponent": t.params["model.aggregation_exponent"],
                                         "model.branches": s}, (0.05, 0.1)) for s in (1, 4)], outer=t.number)


def test_a_bracketed_transfer_search_trains_real_runs_scored_by_the_leaderboard(bracketed):
    """inner: bracket with real training, a multi-objective tpe outer study and the sweep pruner: every size's
    sweep ended (beyond the two start lrs), each outer trial's values are its leaderboard row's, and the
    sweep pruner sees each (architecture, size) as one sweep."""
    import optuna

    from nas_stab.config import loads_spec
    from nas_stab.results.leaderboard import load_analysis
    from nas_stab.search.optuna_study import make_storage
    from nas_stab.search.sweep_pruner import _sweep
    from nas_stab.store.reader import read_run

    d, trained = bracketed
    spec = loads_spec(BRACKETED)
    got = rows(d)
    assert len(trained) == len(got) and len({r["key"] for r in got}) == len(got)  # nothing trained twice
    trials = outer_study(d).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3 and all(len(t.values) == 2 for t in trials)
    recs = {r["key"]: r for r in got}
    for t in trials:
        src = _sweeps_of(spec, t)
        ends = src.report(list(recs.values()))
        assert all(e.end != "running" for e in ends)
        mine = {r["key"] for r in got if r["outer_trial"] == str(t.number)}
        assert mine == {j.key for i, e in enumerate(ends) for j in src.sweep_jobs(i, e)}  # exactly its sweeps' runs
        assert all(len(e.lrs) > 2 for e in ends)  # the bracket went beyond the start
    a, _, _ = load_analysis([d])
    assert a.settings.compare == ("model.aggregation_exponent",)
    for t in trials:
        row = a.rows[[abs(float(v) - t.params["model.aggregation_exponent"]) < 1e-5 for v in a.rows["model.aggregation_exponent"]]]
        assert len(row) == 1
        assert t.values == [pytest.approx(row.iloc[0]["transfer_score"], rel=1e-12, abs=1e-15),
                            pytest.approx(row.iloc[0]["best"], rel=1e-12, abs=1e-15)]
        assert t.user_attrs["transfers"] == row.iloc[0]["transfers"]
    # how each (architecture, size) sweep ended: the table's replay (matching trials.csv rows by their values)
    # is the search's own (its runs' keys, the outer study's exact values)
    from nas_stab.analysis.values import fmt_value
    from nas_stab.store.decisions import END_TEXT as BRACKET_END_TEXT

    # (a sampled continuous value labels its row with the key's name: "aggregation_exponent=0.417022")
    decided = {("aggregation_exponent=" + fmt_value(e.params["model.aggregation_exponent"]), e.params["model.branches"]): BRACKET_END_TEXT[e.end]
               for t in trials for e in _sweeps_of(spec, t).report(got)}
    assert a.sizes.set_index(["label", "size"])["bracket_end"].to_dict() == decided and "" not in decided.values()
    # the same ends replayed from trials.csv alone, as for a run directory made before decisions were recorded
    from nas_stab.search.replay import upgrade
    from nas_stab.store.decisions import DECISIONS, read_decisions

    recorded = read_decisions(d)
    assert recorded is not None and recorded.complete and len(recorded.outers) == 3
    (d / DECISIONS).rename(d / "recorded.jsonl")
    assert upgrade(d, read_run(d).spec, read_run(d).trials.to_dict("records"))
    again = load_analysis([d])[0].sizes.set_index(["label", "size"])["bracket_end"].to_dict()
    assert again == decided and read_decisions(d).outers == recorded.outers  # (the outer study's scores)
    (d / "recorded.jsonl").replace(d / DECISIONS)
    # the run's study (inner runs): the sweep pruner groups trials exactly by (outer trial, size)
    study = optuna.load_study(study_name="tiny", storage=make_storage(f"sqlite:///{d / 'study.db'}"))
    assert read_run(d).spec.search.pruner.name == "sweep"
    from nas_stab.results.status import status_text

    text = status_text(d)  # no planned total: the outer trials scored
    assert f"{len(got)} runs finished; transfer search with bracket inside: 3 of 3 outer trials scored" in text
    by_key = {t.user_attrs["key"]: t for t in study.trials}
    groups: dict = {}
    for r in got:
        groups.setdefault(_sweep(by_key[r["key"]].params, "train.lr"), set()).add((r["outer_trial"], r["model.branches"]))
        assert by_key[r["key"]].intermediate_values  # reported, so the pruner was asked
    assert all(len(v) == 1 for v in groups.values()) and len(groups) == 3 * 2
    assert read_run(d).spec.search.transfer.inner == "bracket"


# (size 4 of an architecture with p < 0.5 peaks far above lr_limits: limit; with p >= 0.5 it peaks at 0.4 and
# diverges above 0.5: a divergence wall; size 1 peaks at 0.2: bracketed)
ENDS_SPEC = spec_text(BRACKETED, search={**__import__("yaml").safe_load(BRACKETED)["search"], "sampler": "random",
                                         "trials": 2, "transfer": {"objectives": ["transfer_score", "best"], "inner": "bracket",
                                                                   "start": [{"model.aggregation_exponent": 0.25},
                                                                             {"model.aggregation_exponent": 0.75}]}})


def _ends_record(job):
    size, p, lr = job.params["model.branches"], job.params["model.aggregation_exponent"], job.params["train.lr"]
    opt, wall = (0.2, math.inf) if size == 1 else ((10.0, math.inf) if p < 0.5 else (0.4, 0.5))
    r = {"key": job.key, "seed": job.seed, "trial": job.trial, "outer_trial": job.outer, **job.params}
    if lr > wall:
        return {**r, "status": "diverged", "val_acc": math.nan}
    return {**r, "status": "complete", "val_acc": 0.9 - 0.05 * (math.log2(lr) - math.log2(opt)) ** 2 + 0.003 * job.seed}


def _ends_run(tmp_path):
    """A finished inner-bracket transfer search on synthetic records, written as a run directory stores it
    (learning rates and exponents to 6 digits, keys not the ones the stored spec computes); the ends the
    search decided, per (architecture, size)."""
    import sys
    from pathlib import Path

    import yaml

    from nas_stab.config import loads_spec
    from nas_stab.search.sources.bracket import BracketSource
    from nas_stab.search.sources.transfer import TransferSource, inner_sweeps

    sys.path.insert(0, str(Path(__file__).parent / "data"))
    from lb_fixtures import make_run, spec_dict

    spec = loads_spec(ENDS_SPEC)
    src = TransferSource(spec, storage=f"sqlite:///{tmp_path / 'study.db'}")
    records = []
    while (jobs := src.pending(records, ())) is not None:
        records += [_ends_record(j) for j in jobs]
    decided = {}
    for t in src.study.get_trials(deepcopy=False):
        p = t.params["model.aggregation_exponent"]
        ends = BracketSource(spec, sweeps=inner_sweeps(spec, t.params)).report([r for r in records if r["outer_trial"] == t.number])
        decided.update({(p, e.params["model.branches"]): e.end for e in ends})
    for n, r in enumerate(records):
        r["train.lr"] = float(f"{r['train.lr']:.6g}")
        r["model.aggregation_exponent"] = float(f"{r['model.aggregation_exponent']:.6g}")
        r["key"] = f"{n:016x}"
    data = yaml.safe_load(ENDS_SPEC)
    data["meta"] = spec_dict()["meta"]
    return _upgraded(make_run(tmp_path, records, spec=data, history=False)), decided


def _upgraded(d):
    """The run directory given its decisions replayed from trials.csv (`nas-stab upgrade`), as one made before
    searches recorded them."""
    from nas_stab.search.replay import upgrade
    from nas_stab.store.decisions import DECISIONS
    from nas_stab.store.reader import read_run

    (d / DECISIONS).unlink(missing_ok=True)
    run = read_run(d)
    assert upgrade(d, run.spec, run.trials.to_dict("records"))
    return d


def test_an_inner_bracket_transfer_search_marks_how_each_sweep_ended(tmp_path):
    """search.transfer.inner: bracket: the leaderboard replays each outer trial's sweeps (one per size) from
    the records alone, as search.sampler: bracket's, and marks them the same way in every format."""
    import pandas as pd

    from nas_stab.results.leaderboard import build_leaderboard, load_analysis
    from nas_stab.results.tables import display_table

    d, decided = _ends_run(tmp_path)
    assert decided == {(0.25, 1): "bracketed", (0.25, 4): "limit", (0.75, 1): "bracketed", (0.75, 4): "divergence wall"}
    a, _, _ = load_analysis([d], n_boot=0)
    sz = a.sizes.set_index(["label", "size"])["bracket_end"].to_dict()
    assert sz == {("aggregation_exponent=0.25", 1): "bracketed", ("aggregation_exponent=0.25", 4): "limit",
                  ("aggregation_exponent=0.75", 1): "bracketed", ("aggregation_exponent=0.75", 4): "divergence wall"}
    headers, text, _ = display_table(a)
    shown = {t[headers.index("model.aggregation_exponent")]: t[headers.index("best_lr(s)")] for t in text}
    for label in ("0.25", "0.75"):
        assert shown[label].startswith("1:") and "(" not in shown[label].split(" 4:")[0], shown  # bracketed: no mark
    assert shown["0.25"].endswith(" 4:>=1.6 (limit)") and shown["0.75"].endswith("(wall)"), shown
    paths = build_leaderboard([d], formats=("md", "csv"), plots=False, n_boot=0)
    assert "4:\\>=1.6 (limit)" in paths["md"].read_text() and "(wall)" in paths["md"].read_text()
    sizes_csv = pd.read_csv(paths["sizes_csv"])
    assert set(sizes_csv["bracket_end"]) == {"bracketed", "limit", "divergence wall"}
    # the search stopped mid-round in outer trial 1's size 4: that sweep is unfinished, the rest as before
    t = pd.read_csv(d / "trials.csv")
    last = t[(t["outer_trial"] == 1) & (t["model.branches"] == 4)].index[-1]
    t.drop(index=last).to_csv(d / "trials.csv", index=False)
    a, _, _ = load_analysis([_upgraded(d)], n_boot=0)
    sz = a.sizes.set_index(["label", "size"])["bracket_end"].to_dict()
    assert sz == {("aggregation_exponent=0.25", 1): "bracketed", ("aggregation_exponent=0.25", 4): "limit",
                  ("aggregation_exponent=0.75", 1): "bracketed", ("aggregation_exponent=0.75", 4): "unfinished"}
    headers, text, _ = display_table(a)
    assert any(t[headers.index("best_lr(s)")].endswith("(unfinished)") for t in text)


@pytest.mark.parametrize("where", ["between-last-record-and-tell", "mid-round"])
def test_a_stopped_bracketed_transfer_search_resumes_without_training_twice(tmp_path, monkeypatch, bracketed, where):
    d0, trained0 = bracketed
    full = rows(d0)
    n0 = sum(r["outer_trial"] == "0" for r in full)  # outer trial 0's runs are the first ones (concurrency 1)
    stop_after = n0 if where == "between-last-record-and-tell" else n0 - 1
    with pytest.raises(KeyboardInterrupt):
        _run(BRACKETED, tmp_path, monkeypatch, stop_after=stop_after)
    d = tmp_path / "tiny"
    before = rows(d)
    assert len(before) == stop_after
    open_before = {t.number: t.params for t in outer_study(d).trials if t.state.name == "RUNNING"}
    assert list(open_before) == [0]
    from nas_stab.results.status import status_text

    assert "0 of 3 outer trials scored" in status_text(d) and "3 outer trial(s) not scored" in status_text(d)
    from nas_stab.results.leaderboard import load_analysis
    from nas_stab.results.tables import display_table

    a, _, _ = load_analysis([d], n_boot=0)  # outer trial 0's last round cut short: its sweep unfinished
    ends = a.sizes["bracket_end"].tolist()
    assert ("unfinished" in ends) == (where == "mid-round") and "" not in ends, ends
    headers, text, _ = display_table(a)
    assert any("(unfinished)" in t[headers.index("best_lr(s)")] for t in text) == (where == "mid-round")
    second = _run(BRACKETED, tmp_path, monkeypatch)
    after = rows(d)
    assert len(second) == len(full) - stop_after  # only what was missing
    keys = [r["key"] for r in after]
    assert len(keys) == len(set(keys)) == len(full)
    assert [r for r in after if r["key"] in {b["key"] for b in before}] == before  # kept as recorded
    trials = outer_study(d).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    assert trials[0].params == open_before[0]
    strip = lambda rs: sorted((r["key"], r["outer_trial"], r["train.lr"], r["val_acc"]) for r in rs)  # noqa: E731
    assert strip(after) == strip(full)  # the same records as the uninterrupted search
    assert [t.values for t in trials] == [t.values for t in outer_study(d0).trials]
    assert _run(BRACKETED, tmp_path, monkeypatch) == []  # nothing left


@pytest.mark.parametrize("change, key", [
    ({"sampler": "bracket"}, "search.sampler"),  # bracket is the inner search here: inner: bracket
    ({"transfer": {"objectives": ["transfer_score"], "inner": "grid"}}, "search.bracket"),  # settings with nothing to set
    ({"transfer": {"objectives": ["transfer_score"], "inner": "brackets"}}, "search.transfer.inner"),
    ({"bracket": {"step_octaves": 1, "resolution_octaves": 2, "lr_limits": [0.0125, 1.6]}}, "search.bracket.resolution_octaves"),
    ({"bracket": {"lr_limits": [0.06, 1.6]}}, "space.train.lr"),  # a start lr outside the limits
])
def test_bad_bracket_combinations_fail_at_load_naming_the_key(change, key):
    import yaml

    from nas_stab.config import loads_spec
    from nas_stab.errors import SpecError

    data = yaml.safe_load(BRACKETED)
    data["search"].update(change)
    with pytest.raises(SpecError) as e:
        loads_spec(yaml.safe_dump(data, sort_keys=False), file="exp.yaml")
    assert e.value.key == key, str(e.value)
    assert re.match(r"exp\.yaml:\d+: " + re.escape(key) + ": ", str(e.value)), str(e.value)  # file, line, key


def test_a_grid_transfer_keeps_its_spec_hash_and_run_keys():
    """`inner` was added to search.transfer later: a grid transfer search's hash leaves it out, so its run
    directories made before resume; inner: bracket is in the hash (another search)."""
    from nas_stab.config import loads_spec
    from nas_stab.config.load import _drop_added, spec_hash, to_plain

    grid = loads_spec(TRANSFER)
    assert grid.search.transfer.inner == "grid"
    explicit = loads_spec(TRANSFER.replace("objectives: [transfer_score, best]}", "objectives: [transfer_score, best], inner: grid}"))
    assert spec_hash(grid) == spec_hash(explicit)
    for spec, kept in ((grid, False), (loads_spec(BRACKETED), True)):
        plain = to_plain(spec)
        assert "inner" in plain["search"]["transfer"]
        _drop_added(plain, spec)
        assert ("inner" in plain["search"]["transfer"]) == kept and ("bracket" in plain["search"]) == kept


# ---------------------------------------------------------------- the nsga2 sampler, run

NSGA2 = spec_text(TRANSFER, seeds=1, search={"sampler": "nsga2", "trials": 5, "objective": "val_acc",
                                             "transfer": {"objectives": ["transfer_score", "best"]}})


def test_an_nsga2_search_runs_and_its_pareto_front_is_the_non_dominated_set(tmp_path, monkeypatch):
    """nsga2 end to end (5 architectures x 2 sizes x 3 lrs x 1 seed): the outer trials are sampled by
    NSGA-II, and pareto.csv, the Markdown section and plots/pareto.png show the non-dominated outer
    trials, computed here from the study's values (and agreeing with Optuna's own best_trials)."""
    import optuna
    import pandas as pd

    from nas_stab.results.leaderboard import build_leaderboard
    from nas_stab.search import optuna_study
    from nas_stab.search.sources import transfer

    made = []
    real = optuna_study.make_sampler
    for module in (optuna_study, transfer):  # the transfer search imports it by name
        monkeypatch.setattr(module, "make_sampler", lambda name, seed, **kw: made.append(real(name, seed, **kw)) or made[-1])
    _run(NSGA2, tmp_path, monkeypatch)
    d = tmp_path / "tiny"
    assert made and all(isinstance(s, optuna.samplers.NSGAIISampler) for s in made)
    study = outer_study(d)
    trials = study.trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 5 and all(len(t.values) == 2 for t in trials)
    # search.population_size unset: 5 // 4 -> 2 (not Optuna's 50), so the 5 outer trials evolve (NSGA-II
    # stores each trial's generation in its system attrs); the outer study's sampler and each reseeded one
    # (before every ask) have it (those of 50: the run's own study of inner runs, enqueued, and a placeholder)
    outer = [s for s in made if s.population_size != 50]
    assert len(outer) >= 5 and {s.population_size for s in outer} == {2}
    assert study.user_attrs["nsga2_population_size"] == 2
    gens = [t.system_attrs["NSGAIISampler:generation"] for t in trials]
    assert gens == sorted(gens) and gens[0] == 0 and max(gens) >= 1, gens
    assert all(gens.count(g) >= 2 for g in set(gens) if g < max(gens))  # a generation is full before the next
    assert len({t.params["model.aggregation_exponent"] for t in trials}) == 5
    # the front by definition: no other outer trial at least as good in both (maximized) and better in one
    v = {t.number: t.values for t in trials}
    front = {n for n, a in v.items()
             if not any(b[0] >= a[0] and b[1] >= a[1] and (b[0] > a[0] or b[1] > a[1]) for b in v.values())}
    assert front == {t.number for t in study.best_trials}
    written = build_leaderboard([d], formats=("md", "csv"))
    p = pd.read_csv(d / "pareto.csv")
    assert sorted(p["outer_trial"]) == [0, 1, 2, 3, 4]
    assert set(p.loc[p["front"], "outer_trial"]) == front
    for r in p.to_dict("records"):  # the values in pareto.csv are the ones the study was told
        assert [r["transfer_score"], r["best"]] == pytest.approx(v[r["outer_trial"]], rel=1e-12)
    assert list(p["front"]) == sorted(p["front"], reverse=True)  # the front first
    assert written["plot:pareto"].read_bytes()[:4] == b"\x89PNG"
    md = (d / "leaderboard.md").read_text()
    section = md[md.index("## Pareto front of the transfer search"):md.index("## Provenance")]
    shown = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| ") and "outer trial" not in line]
    assert {int(n) for f, n in shown if "yes" in f} == front and "](plots/pareto.png)" in section


def test_nsga2_default_population_gives_several_generations():
    """search.population_size unset: search.trials // 4, clamped to [2, 50] (Optuna's own default 50
    left a search of <= 50 trials random); every value is one NSGAIISampler accepts."""
    import optuna

    from nas_stab.search.optuna_study import default_population, make_sampler

    assert {t: default_population(t) for t in (1, 5, 8, 11, 12, 20, 100, 199, 200, 1000)} == {
        1: 2, 5: 2, 8: 2, 11: 2, 12: 3, 20: 5, 100: 25, 199: 49, 200: 50, 1000: 50}
    assert default_population(None) == 50
    for t in range(8, 201):
        assert t / default_population(t) >= 4  # at least four generations up to 200 trials
    for t in (1, 12, 200):
        s = make_sampler("nsga2", 0, population_size=default_population(t))
        assert isinstance(s, optuna.samplers.NSGAIISampler) and s.population_size == default_population(t)
    assert make_sampler("nsga2", 0).population_size == 50  # unset: Optuna's default


def _fake_transfer_records(src, n_runs=10_000):
    """Drive a TransferSource on synthetic records (no training): accuracy peaks at lr 0.1, best for p near 0.3."""
    records = []
    for _ in range(n_runs):
        jobs = src.pending(records, ())
        if jobs is None:
            break
        j = jobs[0]
        p, lr = j.params["model.aggregation_exponent"], j.params["train.lr"]
        acc = 0.9 - 0.3 * (p - 0.3) ** 2 - 0.02 * (math.log2(lr) - math.log2(0.1)) ** 2 + 0.001 * j.seed
        records.append({"key": j.key, "seed": j.seed, "trial": j.trial, "outer_trial": j.outer, "status": "complete",
                        "val_acc": acc, **j.params})
    return records


def test_nsga2_breeds_generations_of_the_population_size_and_a_resume_keeps_it(tmp_path):
    """search.population_size: 3 with 10 outer trials: generations 0..3 of 3 trials each (the last one
    short), each later one bred from the parents NSGA-II selected (cached in the study's system attrs); a
    study reopened keeps the size it was made with, and one made before the key (trials, no record) 50."""
    import optuna

    from nas_stab.config import loads_spec
    from nas_stab.search.optuna_study import make_storage, resume_seed
    from nas_stab.search.sources.transfer import POPULATION_ATTR, TransferSource, open_outer_study

    text = spec_text(TRANSFER, seeds=1, search={"sampler": "nsga2", "trials": 10, "population_size": 3, "objective": "val_acc",
                                                "transfer": {"objectives": ["transfer_score", "best"]}})
    spec = loads_spec(text)
    url = f"sqlite:///{tmp_path / 'study.db'}"
    src = TransferSource(spec, storage=url)
    assert src.study.sampler.population_size == 3
    _fake_transfer_records(src)
    trials = src.study.get_trials(deepcopy=False)
    assert [t.state.name for t in trials] == ["COMPLETE"] * 10
    gens = [t.system_attrs["NSGAIISampler:generation"] for t in trials]
    assert gens == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3], gens  # one outer trial open at a time: exactly 3 per generation
    storage = make_storage(url)  # the study's system attrs through the storage's public API
    attrs = storage.get_study_system_attrs(storage.get_study_id_from_name("tiny/transfer"))
    parents = {k: v for k, v in attrs.items() if k.startswith("NSGAIISampler:parent:")}
    assert sorted(parents) == [f"NSGAIISampler:parent:{g}" for g in (1, 2, 3)]
    assert all(len(v) == 3 for v in parents.values())
    assert src.study.user_attrs[POPULATION_ATTR] == 3
    # reopened with the key unset: the size the study was made with, also after a reseed
    unset = loads_spec(text.replace("population_size: 3", "population_size: null"))
    study = open_outer_study(unset, url)
    assert study.sampler.population_size == 3
    resume_seed(study, "nsga2", 0)
    assert study.sampler.population_size == 3
    # a study made before search.population_size existed: trials, no record -> Optuna's default it used
    optuna.load_study(study_name="tiny/transfer", storage=url).set_user_attr(POPULATION_ATTR, None)  # (no delete)
    assert open_outer_study(unset, url).sampler.population_size == 50
    # a new study with the key unset: the default rule of search.trials (10 // 4 = 2), recorded
    new = open_outer_study(unset, f"sqlite:///{tmp_path / 'new.db'}")
    assert new.sampler.population_size == 2 and new.user_attrs[POPULATION_ATTR] == 2


@pytest.mark.parametrize("search, key, message", [
    ({"sampler": "tpe", "population_size": 4}, "search.population_size", "only applies to search.sampler: nsga2"),
    ({"sampler": "random", "population_size": 4}, "search.population_size", "the sampler is random"),
    ({"sampler": "nsga2", "population_size": 1}, "search.population_size", "must be >= 2"),
    ({"sampler": "nsga2", "population_size": "many"}, "search.population_size", ""),
])
def test_a_bad_population_fails_at_load_naming_file_line_and_key(search, key, message):
    import yaml

    from nas_stab.config import loads_spec
    from nas_stab.errors import SpecError

    data = yaml.safe_load(NSGA2)
    data["search"].update(search)
    text = yaml.safe_dump(data, sort_keys=False)
    with pytest.raises(SpecError) as e:
        loads_spec(text, file="exp.yaml")
    assert e.value.key == key, str(e.value)
    line = next(i for i, s in enumerate(text.splitlines(), 1) if s.strip().startswith("population_size:"))
    assert str(e.value).startswith(f"exp.yaml:{line}: {key}: ") and message in str(e.value), str(e.value)


def test_population_size_is_in_the_hash_only_when_set_and_a_useless_one_warns():
    import yaml

    from nas_stab.config import loads_spec, spec_hash

    unset = loads_spec(NSGA2)
    data = yaml.safe_load(NSGA2)
    data["search"]["population_size"] = None
    assert spec_hash(loads_spec(yaml.safe_dump(data))) == spec_hash(unset)  # null: the default, out of the hash
    data["search"]["population_size"] = 2
    two = loads_spec(yaml.safe_dump(data))
    assert spec_hash(two) != spec_hash(unset) and not two.notes  # 2 < 5 trials: evolves
    data["search"]["population_size"] = 5
    five = loads_spec(yaml.safe_dump(data, sort_keys=False), file="exp.yaml")
    assert any(n.startswith("exp.yaml:") and "search.population_size: 5 individuals per generation and 5 trials" in n
               and "never evolves" in n for n in five.notes), five.notes


@pytest.mark.slow
def test_a_bracketed_transfer_search_through_the_ray_runner(tmp_path):
    """inner: bracket on Ray (concurrency 2: a second outer trial opens while the first one's round is in
    flight): every outer trial complete, its sweeps ended, its values its own runs' analysis, nothing twice."""
    import ray
    from conftest_ray import run_ray_text, start_local_ray

    from nas_stab.config import loads_spec
    from nas_stab.search.sources.transfer_objectives import evaluate

    if ray.is_initialized():
        ray.shutdown()
    start_local_ray(2)
    try:
        _, d, counts = run_ray_text(spec_text(BRACKETED, runner={"kind": "ray", "concurrency": 2}), tmp_path)
    finally:
        ray.shutdown()
    spec = loads_spec(BRACKETED)
    got = rows(d)
    # pruner: sweep may stop a run once three other lrs of its sweep are better (sweeps that follow a plateau
    # have that many); nothing fails or diverges, and nothing is trained twice
    assert set(counts) <= {"complete", "pruned"} and "complete" in counts and len({r["key"] for r in got}) == len(got)
    trials = outer_study(d).trials
    assert [t.state.name for t in trials] == ["COMPLETE"] * 3
    for t in trials:
        src = _sweeps_of(spec, t)
        ends = src.report(got)
        assert all(e.end != "running" for e in ends)
        mine = [r for r in got if r["outer_trial"] == str(t.number)]
        assert {r["key"] for r in mine} == {j.key for i, e in enumerate(ends) for j in src.sweep_jobs(i, e)}
        assert t.values == pytest.approx(evaluate(spec, mine)[0], rel=1e-12)


def test_censored_optima_never_score_as_transfer():
    # both sizes' best lr is the grid's top (0.2): lr_drift 0.00 and regret 0 used to be told to Optuna as a
    # perfect score, which the search then optimized toward; they are bounds, so the trial is not told them
    from nas_stab.config import loads_spec
    from nas_stab.search.sources.transfer_objectives import evaluate

    spec = loads_spec(spec_text(TRANSFER, search={"sampler": "random", "trials": 3, "objective": "val_acc",
                                                   "transfer": {"objectives": ["lr_drift", "worst_regret"]}}))
    rows = [{"model.branches": b, "train.lr": lr, "model.aggregation_exponent": 0.5, "seed": s, "status": "complete",
             "val_acc": 0.5 + 0.1 * i + 0.01 * s, "run_id": f"t{i}-s{s}", "key": f"{b}-{i}-{s}"}
            for b in (1, 4) for i, lr in enumerate((0.05, 0.1, 0.2)) for s in (0, 1)]
    values, attrs, why = evaluate(spec, rows)
    assert values is None and "lr_drift" in why and "censored" in why
    assert attrs["lr_drift"] == 0.0  # the point value is still recorded for the table
    spec2 = loads_spec(spec_text(TRANSFER, search={"sampler": "random", "trials": 3, "objective": "val_acc",
                                                    "transfer": {"objectives": ["transfer_score"]}}))
    values, _, _ = evaluate(spec2, rows)
    assert values is not None  # the default objective is defined whatever the censoring
