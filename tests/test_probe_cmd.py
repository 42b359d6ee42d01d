"""`nas-stab probe`: a table and muP-style plots for every configuration, nothing else touched."""
import csv

import pytest
from conftest import run_cli

from nas_stab.config import loads_spec
from nas_stab.errors import SpecError
from nas_stab.probe.cmd import probe_points, run_probe

PROBE = """\
name: probe-tiny
seeds: [3, 4]
task: {dataset: {name: digits}}
model: {arch: mlp_resnet, depth: 2, width: 16, branch_depth: 2}
train: {lr: 0.05, batch_size: 32, steps: 20}
stability: {probe_batch: 64, hessian: true, hessian_iters: 6}
space:
  model.branches: [1, 4]
  model.aggregation: [sum, stam]
  train.lr: [0.01, 0.03, 0.1]
leaderboard: {transfer: model.branches, compare: [model.aggregation]}
"""


def read(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def test_probe_writes_table_and_plots_and_nothing_else(tmp_path, capsys):
    run_dir = tmp_path / "probe-tiny"
    run_dir.mkdir()
    kept = {"trials.csv": "trial,seed\n", "study.db": "x", "spec.yaml": "name: probe-tiny\n"}
    for n, text in kept.items():
        (run_dir / n).write_text(text)
    assert run_probe(loads_spec(PROBE), steps=2, out_root=tmp_path) == 0
    for n, text in kept.items():
        assert (run_dir / n).read_text() == text  # a run's files are never touched
    rows = read(run_dir / "probe.csv")
    assert len(rows) == 24 and all(r["status"] == "ok" for r in rows)  # 12 configurations x seeds 3 and 4
    assert sorted({r["seed"] for r in rows}) == ["3", "4"]
    cols = rows[0].keys()
    for c in ("model.branches", "model.aggregation", "train.lr", "init_fwd_ratio", "init_grad_ratio", "init_update_ratio",
              "init_sharpness", "init_lr_sharpness", "final_fwd_ratio", "final_update_ratio", "final_sharpness",
              "init_fwd_norm.0", "init_fwd_norm.1", "init_branch_ratio", "init_grad_norm", "init_branch_grad_norm",
              "init_update_norm", "init_loss_drop", "init_eos_ratio", "final_eos_ratio", "final_loss_drop",
              "init_grad_stream.0", "init_grad_stream.1"):
        assert c in cols, c
    for r in rows:  # no nan or inf: every metric is defined here
        for c in cols:
            assert r[c] not in ("nan", "inf", "-inf"), (c, r[c])
    # the learning rate does not change the network at init, only the update
    by = {(r["model.branches"], r["model.aggregation"], r["train.lr"]): r for r in rows if r["seed"] == "3"}
    a, b = by[("4", "sum", "0.01")], by[("4", "sum", "0.1")]
    assert a["init_fwd_ratio"] == b["init_fwd_ratio"] and a["init_sharpness"] == b["init_sharpness"]
    assert float(b["init_update_ratio"]) > float(a["init_update_ratio"])
    assert float(by[("4", "sum", "0.01")]["init_fwd_ratio"]) > float(by[("4", "stam", "0.01")]["init_fwd_ratio"])
    assert float(by[("4", "sum", "0.01")]["init_branch_grad_norm"]) > float(by[("4", "stam", "0.01")]["init_branch_grad_norm"])
    assert float(b["init_eos_ratio"]) == pytest.approx(10 * float(a["init_eos_ratio"]), rel=1e-6)
    md = (run_dir / "probe.md").read_text()
    assert "| # | model.branches | model.aggregation | train.lr | status | seeds |" in md and "seeds 3, 4" in md
    assert "## Slopes against model.branches" in md
    assert md in capsys.readouterr().out  # printed too
    plots = sorted(p.name for p in (run_dir / "plots").iterdir())
    assert plots == ["probe_coord.png", "probe_final_metrics.png", "probe_fwd_norm.png", "probe_init_metrics.png"]
    for p in (run_dir / "plots").iterdir():
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(x.name for x in run_dir.iterdir()) == sorted(
        ["plots", "probe.csv", "probe.md", "probe_slopes.csv", "probe_provenance.txt", *kept])
    prov = (run_dir / "probe_provenance.txt").read_text()
    assert "seeds: 3, 4" in prov and "commit " in prov and "hash " in prov


def test_continuous_dimensions_are_probed_at_a_few_points():
    spec = loads_spec(PROBE.replace("train.lr: [0.01, 0.03, 0.1]", "train.lr: {loguniform: [0.001, 0.1]}")
                      .replace("leaderboard:", "search: {sampler: random, trials: 4}\nleaderboard:"))
    points, notes = probe_points(spec)
    assert len(points) == 12
    assert sorted({p["train.lr"] for p in points}) == pytest.approx([0.001, 0.01, 0.1])
    assert notes and "train.lr" in notes[0]


def test_negative_steps_is_bad_input(tmp_path):
    with pytest.raises(SpecError):
        run_probe(loads_spec(PROBE), steps=-1, out_root=tmp_path)


def test_cli_probe_exit_codes(tmp_path, capsys):
    from nas_stab.cli import main

    spec = tmp_path / "p.yaml"
    spec.write_text(PROBE.replace("  train.lr: [0.01, 0.03, 0.1]\n", "").replace("transfer: model.branches, ", ""))
    assert main(["probe", str(spec), "--out", str(tmp_path / "out"), "--set", "stability.hessian=false"]) == 0
    out = capsys.readouterr().out
    assert "| # | model.branches |" in out and (tmp_path / "out" / "probe-tiny" / "probe.md").exists()
    assert "init_sharpness" not in out
    assert main(["probe", str(spec), "--steps", "-2", "--out", str(tmp_path / "out")]) == 2
    assert "--steps" in capsys.readouterr().err
    assert main(["probe", str(spec), "--seeds", "3", "--out", str(tmp_path / "out")]) == 2  # the file has 2 seeds
    assert "--seeds" in capsys.readouterr().err
    assert main(["probe", str(spec), "--seeds", "1", "--out", str(tmp_path / "one"), "--set", "stability.hessian=false"]) == 0
    one = read(tmp_path / "one" / "probe-tiny" / "probe.csv")
    assert {r["seed"] for r in one} == {"3"} and len(one) == 4
    prov = (tmp_path / "one" / "probe-tiny" / "probe_provenance.txt").read_text()
    assert "seeds: 3\n" in prov and "command: nas-stab probe" not in prov  # main() called directly: no argv
    bad = tmp_path / "bad.yaml"
    bad.write_text(PROBE.replace("width: 16", "widht: 16"))
    assert main(["probe", str(bad), "--out", str(tmp_path / "out")]) == 2
    assert "did you mean 'width'" in capsys.readouterr().err


def test_cli_probe_subprocess(tmp_path):
    """The installed entry point, once: exit code 2 and no traceback on bad input."""
    bad = tmp_path / "bad.yaml"
    bad.write_text(PROBE.replace("width: 16", "widht: 16"))
    r = run_cli("probe", bad, cwd=tmp_path)
    assert r.returncode == 2 and "did you mean 'width'" in r.stderr and "Traceback" not in r.stderr


def test_probe_titles_wrap_to_their_panel():
    """A panel title longer than its axes is wrapped, not clipped at both edges; a probe with nothing to
    compare is titled 'every configuration', not 'all'."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from nas_stab.probe.plots import _label, _title

    fig, axes = plt.subplots(1, 2, figsize=(8, 3))
    long = "parametrization=depth_mup, lr=0.003, aggregation=stam: after 3 step(s) on the probe batch"
    _title(axes[0], long, 9)
    text = axes[0].get_title()
    assert "\n" in text and text.replace("\n", " ") == long
    assert max(len(line) for line in text.splitlines()) <= 8 * 0.5 * 72 / (9 * 0.55) * 1.1 + 1
    plt.close(fig)
    assert _label({}, []) == "every configuration"
