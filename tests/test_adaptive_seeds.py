"""Adaptive seeds (`seeds: {min, max}`): the key, the plan (`analysis/more_seeds.py`) and the job source
(`search/sources/adaptive.py`) on synthetic records (no training): seeds go only where a verdict is open, up to
max; a resumed search trains nothing twice and ends where an uninterrupted one ends."""
from __future__ import annotations

import io
import math

import numpy as np
import pytest

from nas_stab.analysis.more_seeds import shrink
from nas_stab.config import loads_spec, spec_hash
from nas_stab.errors import SpecError
from nas_stab.search.sources.adaptive import AdaptiveSeeds, _analysis

SPEC = """\
name: ad
seeds: {seeds}
task: {{dataset: {{name: digits}}}}
model: {{arch: mlp_resnet, width: 16}}
train: {{lr: 0.1, steps: 10}}
space:
  model.width: [16, 32]
  model.depth: [2, 4, 8]
  train.lr: {lrs}
search:
  sampler: {sampler}
{extra}leaderboard: {{transfer: model.depth, compare: [model.width]}}
"""
BRACKET = "  bracket: {step_octaves: 1, resolution_octaves: 0.5, lr_limits: [0.0001, 10]}\n"
GRID_LRS = "{log_grid: [0.0125, 0.8, 13]}"  # half-octave steps around the optima below


def make(seeds="{min: 3, max: 12}", sampler="grid", lrs=GRID_LRS, limit=None):
    extra = BRACKET if sampler == "bracket" else ""
    spec = loads_spec(SPEC.format(seeds=seeds, sampler=sampler, lrs=lrs, extra=extra))
    return spec, AdaptiveSeeds(spec, limit)


def objective(sd):
    """acc = 0.9 - 0.05 (log2 lr - log2 0.1)^2 + noise: the optimum does not move with depth (every row truly
    transfers); width 16 has noise sd[16], width 32 sd[32]; each run's noise is a function of its seed and
    configuration only (a replayed run gets the same value)."""

    def record(job):
        w, d, lr = job.params["model.width"], job.params["model.depth"], job.params["train.lr"]
        rng = np.random.default_rng([job.seed, w, d, int(round(math.log2(lr) * 1000)) + 100_000])
        acc = 0.9 - 0.05 * (math.log2(lr) - math.log2(0.1)) ** 2 + sd[w] * rng.normal()
        return {"key": job.key, "seed": job.seed, "trial": job.trial, "status": "complete",
                "val_acc": round(max(0.0, min(1.0, acc)), 6), **job.params}

    return record


def drive(src, record, records=None, stop=None):
    records = list(records or [])
    for _ in range(100_000):
        if stop is not None and len(records) >= stop:
            return records
        jobs = src.pending(records, ())
        if jobs is None:
            return records
        assert jobs, "nothing running, yet nothing to start"
        records.append(record(jobs[0]))
    raise AssertionError("the search never ended")


def seeds_by_cell(records):
    out: dict[tuple, set] = {}
    for r in records:
        out.setdefault((r["model.width"], r["model.depth"], r["train.lr"]), set()).add(r["seed"])
    return out


def verdicts(spec, records):
    a = _analysis(spec, records)
    return {int(r["model.width"]): (r["transfers"], int(r["min_seeds"])) for r in a.rows.to_dict("records")}


# ------------------------------------------------------------------ the key


def test_seed_range_form_and_its_errors():
    spec, _ = make()
    assert spec.seeds == (0, 1, 2) and spec.seeds_more == tuple(range(3, 12))
    # max is a budget, not part of the experiment's identity: a 3-seed run directory can go on adaptively
    assert spec_hash(spec) == spec_hash(make(seeds="3")[0])
    for bad, says in (("{min: 3, max: 3}", "larger than seeds.min"), ("{min: 3}", "max"),
                      ("{min: 3, max: 8, step: 2}", "unknown key 'step'"), ("{min: 0, max: 4}", "seed count from 1")):
        with pytest.raises(SpecError, match=says):
            make(seeds=bad)
    with pytest.raises(SpecError, match="grid or bracket"):
        loads_spec(SPEC.format(seeds="{min: 3, max: 6}", sampler="tpe\n  trials: 4", lrs="[0.1, 0.2]", extra=""))
    no_axis = SPEC.format(seeds="{min: 3, max: 6}", sampler="grid", lrs="[0.1, 0.2]", extra="").replace(
        "leaderboard: {transfer: model.depth, compare: [model.width]}", "")
    with pytest.raises(SpecError, match="leaderboard.transfer"):
        loads_spec(no_axis)


def test_the_json_schema_accepts_the_range():
    import jsonschema

    from nas_stab.config.json_schema import json_schema

    schema = json_schema()
    jsonschema.validate({"name": "x", "task": {}, "model": {}, "seeds": {"min": 3, "max": 12}}, schema)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "x", "task": {}, "model": {}, "seeds": {"min": 3, "most": 12}}, schema)


def test_shrink_is_the_t_interval_half_width():
    assert shrink(5, 5) == pytest.approx(1.0)
    # t_2(0.95) = 2.920, t_11(0.95) = 1.796: 1.796 / 2.920 * sqrt(3 / 12)
    assert shrink(3, 12) == pytest.approx(1.796 / 2.920 * 0.5, rel=1e-3)


# ------------------------------------------------------------------ the source


def test_a_decided_row_gets_no_more_seeds_and_an_open_one_gets_them_up_to_max():
    spec, src = make()
    records = drive(src, objective({16: 0.002, 32: 0.03}))
    cells = seeds_by_cell(records)
    quiet = [s for (w, _, _), s in cells.items() if w == 16]
    noisy = [s for (w, _, _), s in cells.items() if w == 32]
    assert all(s == {0, 1, 2} for s in quiet)  # decided with the first seeds: nothing added
    assert max(len(s) for s in noisy) > 3  # the open row got more seeds ...
    assert all(len(s) <= 12 for s in noisy) and set().union(*noisy) <= set(range(12))  # ... never beyond max
    assert sum(len(s) > 3 for s in noisy) < len(noisy)  # ... only at the cells its verdict rests on
    for s in noisy:  # a cell's seeds are the first k, in order
        assert s == set(range(len(s)))
    v = verdicts(spec, records)
    assert v[16] == ("yes", 3)
    # the open row ended decided, or at max, or was given up as undecidable (never stopped early otherwise)
    assert v[32][0] == "yes" or v[32][1] >= 12 or any("left inconclusive" in n for n in src.notes.values())
    assert len(records) == len({r["key"] for r in records})  # nothing trained twice


def test_a_resumed_search_trains_nothing_twice_and_ends_where_an_uninterrupted_one_ends():
    record = objective({16: 0.002, 32: 0.03})
    spec, src = make()
    whole = drive(src, record)
    base = 2 * 3 * 13 * 3  # the first seeds everywhere
    assert len(whole) > base + 4
    for stop in (base + 1, base + 3, len(whole) - 1):  # killed inside the first batch, a later one, the last run
        _, a = make()
        part = drive(a, record, stop=stop)
        _, b = make()  # a new process: nothing remembered but the records
        resumed = drive(b, record, records=part)
        assert len(resumed) == len({r["key"] for r in resumed})
        assert sorted(r["key"] for r in resumed) == sorted(r["key"] for r in whole)


def test_runs_in_flight_are_not_offered_again_and_a_batch_waits_whole():
    spec, src = make()
    record = objective({16: 0.002, 32: 0.03})
    records = drive(src, record, stop=2 * 3 * 13 * 3)
    batch = src.pending(records, ())
    assert batch and all(j.seed >= 3 for j in batch)
    running = {batch[0].key}
    assert batch[0].key not in {j.key for j in src.pending(records, running)}
    # every other run of the batch recorded, one still running: nothing new is planned meanwhile
    done = records + [record(j) for j in batch[1:]]
    assert src.pending(done, running) == []


def test_trials_limit_caps_the_runs_in_all():
    spec, src = make(limit=250)
    records = drive(src, objective({16: 0.002, 32: 0.03}))
    assert len(records) == 250


def test_bracket_inner_extends_with_every_seed_recorded():
    spec, src = make(sampler="bracket", lrs="[0.0125, 0.025]")
    records = drive(src, objective({16: 0.002, 32: 0.03}))
    ends = src.inner.report(records)
    assert all(e.end == "bracketed" for e in ends)
    assert max(len(s) for s in seeds_by_cell(records).values()) > 3
    assert len(records) == len({r["key"] for r in records})
    # what the search records (decisions.jsonl) names every record on its sweeps' final lrs, further seeds included; a
    # record off them is an lr an earlier stage tried with the first seeds, before further seeds moved that sweep's
    # path (it still counts in the table's cells, with no bracket end of its own)
    from nas_stab.search.replay import replayed
    from nas_stab.store.decisions import fold

    live = fold([{"event": "start", "records": 0}, *src.decisions(records)])
    final = {(e.params["model.width"], e.params["model.depth"], lr) for e in ends for lr in e.lrs}
    got = live.run_ends()
    for r in records:
        on_path = (r["model.width"], r["model.depth"], r["train.lr"]) in final
        assert got.get(r["key"], "") == ("bracketed" if on_path else ""), r
        assert on_path or r["seed"] < 3
    assert live.stage_todo(r["key"] for r in records) == 0  # the search is over
    # the replay of an old run directory (records matched by values, the lrs as trials.csv keeps them) decides the same
    kept = [{**r, "train.lr": float(f"{r['train.lr']:.6g}"), "key": f"{n:016x}"} for n, r in enumerate(records)]
    facts, events = replayed(spec, kept)
    again = fold([{"event": "start", "records": 0}, *events])
    assert {f"{n:016x}": got[r["key"]] for n, r in enumerate(records) if r["key"] in got} == again.run_ends()
    assert facts["source"] == "adaptive" and again.stage_todo(r["key"] for r in kept) == 0


# ------------------------------------------------------------------ a real search (local runner)

TINY_ADAPTIVE = """\
name: tinyad
seeds: {min: 2, max: 4}
task: {dataset: {name: digits}}
model: {arch: mlp_resnet, depth: 2, width: 16}
train: {lr: 0.05, steps: 40, batch_size: 32, threads: 1, eval_every: 20}
stability: {every: 20, probe_batch: 64, hessian: false}
space:
  model.branches: [1, 2]
  train.lr: [0.02, 0.04]
search:
  sampler: bracket
  bracket: {step_octaves: 1, resolution_octaves: 1, lr_limits: [0.0025, 0.64]}
leaderboard: {transfer: model.branches}
logging: {tensorboard: false}
"""


def _local(text, out, trials=None):
    from nas_stab.config import loads_spec
    from nas_stab.search.local import run_local
    from nas_stab.store.rundir import RunDir

    spec = loads_spec(text)
    with RunDir.open(out, spec) as rd:
        run_local(spec, rd, trials=trials, progress_stream=io.StringIO())
    return out / spec.name


def _rows(run_dir):
    import csv

    with open(run_dir / "trials.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.slow  # over 15 s: CI runs it in its slow stage (pytest -m slow)
def test_a_real_search_stopped_inside_a_batch_resumes_to_the_same_runs(tmp_path):
    whole = _rows(_local(TINY_ADAPTIVE, tmp_path / "a"))
    keys = [r["key"] for r in whole]
    assert len(keys) == len(set(keys))
    seeds = {int(r["seed"]) for r in whole}
    assert seeds == {0, 1, 2, 3}  # 2 seeds where the bracket went, then more where the verdict was open
    first = {(r["model.branches"], r["train.lr"]): r["trial"] for r in whole if r["seed"] == "0"}
    assert all(r["trial"] == first[(r["model.branches"], r["train.lr"])] for r in whole)  # a configuration's trial
    for i, stop in enumerate((len(whole) // 2, len(whole) - 3)):  # killed midway, and inside the last batch
        d = _local(TINY_ADAPTIVE, tmp_path / f"b{i}", trials=stop)
        assert len(_rows(d)) == stop
        resumed = _rows(_local(TINY_ADAPTIVE, tmp_path / f"b{i}"))
        assert sorted(r["key"] for r in resumed) == sorted(keys)  # the same runs, none twice
    # the run directory remembers adaptive seeds: its status knows the search is over
    from nas_stab.results.status import status_text

    text = status_text(d)
    assert "nothing left to train" in text and "decided or out of seeds" not in text  # never "decided" when a row is not


def test_why_a_row_got_no_more_seeds_is_in_the_leaderboard_and_status(tmp_path):
    """Once adaptive seeds are over, the search records why each row still undecided got no more seeds (the last
    stage event's notes in decisions.jsonl); the leaderboard shows it under its summary (Adaptive seeds) and in
    the row (seeds_stop), and `nas-stab status` prints it: never only in log.txt."""
    from nas_stab.results.formats import to_markdown
    from nas_stab.results.leaderboard import load_analysis
    from nas_stab.results.status import status_text
    from nas_stab.store.decisions import read_decisions

    d = _local(TINY_ADAPTIVE.replace("max: 4", "max: 3"), tmp_path / "a")
    decided = read_decisions(d)
    assert decided is not None and decided.stage is not None and decided.stage["runs"] == []
    notes = decided.seeds_notes()
    a, prov, _ = load_analysis([d])
    undecided = set(a.rows.loc[a.rows["transfers"] == "inconclusive", "label"])
    assert undecided, "the fixture should leave a row undecided at seeds.max"
    assert set(notes) == undecided
    assert all(notes[lab].startswith(("inconclusive at", "left inconclusive", "more seeds cannot")) for lab in notes)
    assert dict(zip(a.rows["label"], a.rows["seeds_stop"])) == {lab: notes.get(lab, "") for lab in a.rows["label"]}
    md = to_markdown(a, prov)
    assert "**Adaptive seeds**" in md and all(f"{lab}: {notes[lab]}" in md for lab in notes)
    text = status_text(d)
    assert all(f"{lab}: {notes[lab]}" in text for lab in notes)
