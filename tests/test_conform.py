"""`nas-stab conform` (nas_stab/conform/): a model conforms to the parametrization it claims, the same network in SP
fails naming the checks, and every injected bug class is caught (benchmarks/bench_conform.py holds the whole table
and the false alarms; the slow test runs it)."""
from __future__ import annotations

import importlib.util
import math

import pytest
from conftest import ROOT, run_cli

from nas_stab.config import loads_spec
from nas_stab.conform.bugs import BUGS
from nas_stab.conform.checks import decide, slope_interval
from nas_stab.conform.cmd import conform, verdict
from nas_stab.conform.expect import roles

spec_ = importlib.util.spec_from_file_location("bench_conform", ROOT / "benchmarks" / "bench_conform.py")
assert spec_ is not None and spec_.loader is not None
bench = importlib.util.module_from_spec(spec_)
spec_.loader.exec_module(bench)

MLP_MUP = bench.MLP.format(form="mup", sizes=[32, 64, 128, 256], key="width")


def test_a_slope_and_its_interval_on_known_data():
    sizes = [32.0, 64.0, 128.0, 256.0]
    exact = [[s ** -0.5] * 4 for s in sizes]  # no seed noise: the interval is the slope
    slope, lo, hi = slope_interval(sizes, exact)
    assert slope == pytest.approx(-0.5) and lo == pytest.approx(-0.5) and hi == pytest.approx(-0.5)
    noisy = [[s ** 0.25 * f for f in (0.8, 1.0, 1.25, 0.9, 1.1)] for s in sizes]
    slope, lo, hi = slope_interval(sizes, noisy)
    assert slope == pytest.approx(0.25) and lo < 0.25 < hi


def test_a_check_decides_only_on_a_whole_interval():
    assert decide(-0.02, -0.1, 0.08, 0.0, 0.3) == "pass"
    assert decide(0.8, 0.6, 1.0, 0.0, 0.3) == "fail"
    assert decide(0.25, 0.1, 0.4, 0.0, 0.3) == "inconclusive"  # straddles the bound: never decided
    assert decide(-0.9, -1.2, -0.6, 0.0, 0.3, "upper") == "pass"  # only growth is judged
    assert decide(0.5, 0.35, 0.7, 0.0, 0.3, "upper") == "fail"
    assert decide(math.nan, 0.0, 0.0, 0.0, 0.3) == "not measured"


def test_roles_come_from_the_shapes_at_two_widths():
    small = {"inp.weight": (32, 2), "h.weight": (32, 32), "h.bias": (32,), "head.weight": (2, 32), "t": (1,)}
    large = {"inp.weight": (64, 2), "h.weight": (64, 64), "h.bias": (64,), "head.weight": (2, 64), "t": (1,)}
    assert roles(large, small, "head") == {"inp.weight": "input", "h.weight": "hidden", "h.bias": "vector",
                                          "head.weight": "readout", "t": "fixed"}


def test_a_mup_model_conforms_and_the_same_network_in_sp_fails_naming_the_checks(tmp_path):
    f = tmp_path / "mlp.yaml"
    f.write_text(MLP_MUP)
    r = run_cli("conform", f, "--expect", "mup", "--out", tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "conforms to mup" in r.stdout and "FAIL" not in r.stdout
    out = tmp_path / "conform-mlp.conform-mup"
    assert (out / "conform.csv").is_file() and (out / "points.csv").is_file() and (out / "coord_width.png").is_file()
    r = run_cli("conform", f, "--expect", "mup", "--set", "model.parametrization=weight", "--out", tmp_path, "--no-plots")
    assert r.returncode == 1, r.stdout + r.stderr
    fails = [line.split()[1] for line in r.stdout.splitlines() if line.strip().startswith("FAIL")]
    assert {"lr", "readout_lr", "update", "logits_update"} <= set(fails), r.stdout
    assert "failing: blocks.0.branch.layers.0.weight" in r.stdout  # the layers it points to
    assert "does not conform to mup" in r.stdout


def test_a_depth_mup_model_conforms_and_without_its_depth_rules_fails(tmp_path):
    f = tmp_path / "deep.yaml"
    f.write_text(bench.DEPTH_MLP.format(form="depth_mup", sizes=[2, 4, 8, 16], key="depth"))
    r = run_cli("conform", f, "--expect", "depth_mup", "--out", tmp_path, "--no-plots")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "depth axis (model.depth = 2, 4, 8, 16; L = 2, 4, 8, 16)" in r.stdout
    r = run_cli("conform", f, "--expect", "depth_mup", "--set", "model.parametrization=mup", "--out", tmp_path, "--no-plots")
    assert r.returncode == 1 and "FAIL         branch" in r.stdout and "FAIL         lr " in r.stdout, r.stdout


def test_bad_arguments_are_refused(tmp_path):
    f = tmp_path / "mlp.yaml"
    f.write_text(MLP_MUP)
    r = run_cli("conform", f, "--expect", "mxp")
    assert r.returncode == 2 and "invalid choice" in r.stderr
    r = run_cli("conform", f, "--expect", "mup", "--seeds", "1")
    assert r.returncode == 2 and "--seeds" in r.stderr


@pytest.mark.parametrize("case", [c for c in bench.CASES if not c[0].startswith("ResNet")], ids=lambda c: c[0])
def test_every_bug_that_applies_is_caught(case):
    """The MLP ResNet (muP, Depth-muP, CompleteP) and the Transformer (muP), every applicable bug of bugs.py: a check
    fails (the convolutional ResNet's cases are in the slow test)."""
    label, template, form, sizes, key = case
    spec = bench.case_spec(template, form, sizes, key)
    assert verdict(conform(spec, form, seeds=6)) != "fails"  # the correct model
    missed = [b.name for b in BUGS if b.applies(spec) and verdict(conform(spec, form, seeds=6, mutate=b.mutate)) != "fails"]
    assert not missed, missed


def test_the_bug_classes_are_the_ten_the_field_ships_and_each_applies_somewhere():
    assert [b.name for b in BUGS] == [
        "readout multiplier missing", "attention 1/sqrt(d) under muP", "hidden Adam lr not scaled",
        "embedding / norm / input lr scaled like hidden", "wrong base shapes", "readout init not scaled",
        "Adam eps not scaled (CompleteP)", "depth branch multiplier missing", "Depth-muP lr rule missing",
        "parametrization flag parsed, not applied"]
    specs = [bench.case_spec(t, form, sizes, key) for _, t, form, sizes, key in bench.CASES]
    assert all(any(b.applies(s) for s in specs) for b in BUGS)
    assert not any(b.applies(loads_spec(MLP_MUP.replace("parametrization: mup", "parametrization: weight"), probe=True))
                   for b in BUGS)  # nothing to break in SP


@pytest.mark.slow
def test_the_injected_bug_table_and_the_false_alarms_meet_their_targets():
    rows, by_class = bench.bug_table()
    classes = [name for name, hits in by_class.items() if hits]
    detected = [name for name in classes if all(by_class[name])]
    assert len(classes) >= 10 and len(detected) >= 9, by_class
    assert max(r[4] for r in rows) <= 300  # each check within 5 CPU-minutes
    runs = bench.false_alarms()
    assert sum(r[3] == "fails" for r in runs) <= 1, runs


def test_the_readme_and_docs_tables_are_the_stored_benchmark_results():
    """The bug table the README and docs/conform.md show is rendered from docs/conform/*.csv, which
    `bench_conform.py --write` stores (no figure typed by hand); the stored results meet the targets."""
    import csv

    block = bench.render()
    for page in bench.PAGES:
        text = page.read_text(encoding="utf-8")
        assert bench.BEGIN + "\n" + block + bench.END in text, page
    with open(bench.STORE / "bugs.csv") as f:
        bugs = list(csv.DictReader(f))
    with open(bench.STORE / "false_alarms.csv") as f:
        runs = list(csv.DictReader(f))
    classes = {r["bug"] for r in bugs if not r["bug"].startswith("(none")}
    caught = {c for c in classes if all(r["verdict"] == "fails" for r in bugs if r["bug"] == c)}
    assert len(classes) == 10 and len(caught) >= 9
    assert len(runs) == 20 and sum(r["verdict"] == "fails" for r in runs) <= 1
    assert max(float(r["cpu_s"]) for r in bugs + runs) <= 300
