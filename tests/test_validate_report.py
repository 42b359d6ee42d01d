"""`nas-stab validate` reports every key's error at once, and warns about settings with no effect."""
from conftest import run_cli

THREE_ERRORS = """\
name: three
task:
  dataset: {name: digits, trian: 100}
model: {arch: mlp_resnet, depth: 0}
train: {lr: 0.1, steps: 20, batch_size: big}
"""


def test_every_key_error_is_reported_each_on_its_line(tmp_path):
    p = tmp_path / "three.yaml"
    p.write_text(THREE_ERRORS)
    r = run_cli("validate", p, "--no-timing")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert lines == [
        f"error: {p}:3: task.dataset.trian: unknown key for dataset 'digits'; did you mean 'train'?",
        f"error: {p}:4: model.depth: must be >= 1, got 0",
        f"error: {p}:5: train.batch_size: must be an integer, got 'big'",
    ], r.stderr
    assert "Traceback" not in r.stderr


def test_space_errors_are_reported_with_the_key_errors(tmp_path):
    p = tmp_path / "two.yaml"
    p.write_text(THREE_ERRORS.replace("depth: 0", "depth: 2").replace("batch_size: big", "batch_size: 8")
                 + "space:\n  train.lr: {log_grid: [0.1, 1]}\n")
    r = run_cli("validate", p, "--no-timing")
    assert r.returncode == 2
    assert [ln.split(": ")[2] for ln in r.stderr.strip().splitlines()] == ["task.dataset.trian", "space.train.lr.log_grid"], r.stderr


WARN = """\
name: warn
task: {dataset: {name: digits}}
model: {arch: mlp_resnet, depth: 2, width: 8}
train: {optimizer: adam, lr: 0.001, momentum: 0.9, steps: 5}
stability: {every: 0, hessian: false}
space:
  model.width: {int: [2, 32], log: true}
"""


def test_settings_with_no_effect_are_warnings_not_errors(tmp_path):
    p = tmp_path / "warn.yaml"
    p.write_text(WARN)
    r = run_cli("validate", p, "--no-timing")
    assert r.returncode == 0, r.stderr
    warnings = [ln for ln in r.stderr.splitlines() if ln.startswith("warning: ")]
    assert f"warning: {p}:4: train.momentum: has no effect with adam (Adam's momentum is train.betas[0])" in warnings
    assert any(w.startswith(f"warning: {p}:7: space.model.width.log: has no effect in a grid: every integer from 2 to 32 "
                            "is a point (31 values)") and "[2, 4, 8, 16, 32]" in w for w in warnings), warnings
    # the same settings are quiet where they matter
    p.write_text(WARN.replace("optimizer: adam", "optimizer: sgd") + "search: {sampler: random, trials: 2}\n")
    r = run_cli("validate", p, "--no-timing")
    assert r.returncode == 0 and "warning:" not in r.stderr, r.stderr


def test_resolved_spec_shows_only_keys_that_apply_and_reloads_identically(tmp_path):
    import yaml

    from nas_stab.config import load_run_spec, loads_spec
    from nas_stab.store.rundir import RunDir

    text = WARN.replace("optimizer: adam, lr: 0.001, momentum: 0.9,", "optimizer: sgd, lr: 0.1,").replace(
        "model.width: {int: [2, 32], log: true}", "model.width: [4, 8]") + "task: {dataset: {name: digits, vocab_size: 100}}\n"
    text = text.replace("task: {dataset: {name: digits}}\n", "", 1)
    spec = loads_spec(text)
    with RunDir.open(tmp_path, spec) as rd:
        stored = yaml.safe_load((rd.path / "spec.yaml").read_text())
    assert "d_model" not in stored["model"] and "beam" not in stored["task"] and "betas" not in stored["train"]
    assert "src" not in stored["task"]["dataset"] and "classes" not in stored["task"]["dataset"]
    assert stored["task"]["dataset"]["vocab_size"] == 100  # not applicable but set by hand: kept (identity)
    assert stored["train"]["momentum"] == 0.9 and stored["model"]["width"] == 8
    again = load_run_spec(tmp_path / "warn")
    # the same configuration (== also equates 1 and 1.0, which YAML keeps apart for alpha_scale's float default)
    assert (again.task, again.model, again.train, again.stability) == (spec.task, spec.model, spec.train, spec.stability)


def test_cost_estimate_times_the_cheapest_and_the_dearest_configuration():
    from nas_stab.config import loads_spec
    from nas_stab.estimate import estimate_cost

    spec = loads_spec("""\
name: cost
seeds: 2
task: {dataset: {name: digits}}
model: {arch: mlp_resnet, depth: 2, width: 16}
train: {lr: 0.05, steps: 10, batch_size: 32}
space:
  model.depth: [1, 4]
  model.width: [8, 64]
  train.lr: [0.01, 0.1]
""")
    text = estimate_cost(spec, 16)
    lines = text.splitlines()
    assert lines[0].startswith("cost: 16 runs, 160 optimizer steps; timed on cpu"), text
    assert lines[1].startswith("  cheapest depth=1, width=8: ") and "(rounds " in lines[1], text
    assert lines[2].startswith("  dearest  depth=4, width=64: "), text
    assert "of training steps (range " in lines[3] and "of whole runs" in lines[3], text
    assert "start-up" in text and "ms per run" in text and lines[-1].startswith("  -> wall time: ~"), text
    # a bracket search's configurations are its start grid's: timed the same way, and said to grow
    bracket = loads_spec("""\
name: cost
seeds: 2
task: {dataset: {name: digits}}
model: {arch: mlp_resnet, depth: 2, width: 16}
train: {lr: 0.05, steps: 10, batch_size: 32}
space:
  model.width: [8, 64]
  train.lr: {log_grid: [0.01, 0.1, 3]}
search: {sampler: bracket}
leaderboard: {transfer: model.width}
""")
    lines = estimate_cost(bracket, 12).splitlines()
    assert lines[0].startswith("cost: 12 runs, 120 optimizer steps"), lines
    assert lines[1].startswith("  cheapest width=8: ") and lines[2].startswith("  dearest  width=64: "), lines
    assert "runs expected" in lines[-1] and "if the start grid's 12 runs bracket every optimum" in lines[-1], lines


def test_mistakes_in_every_phase_are_reported_in_one_run(tmp_path):
    """Unknown keys, types and ranges (the first phase) and the cross-field rules (tau, aggregation, the
    search, the leaderboard) in one report: they came one fix at a time; an enum-like value gets 'did you
    mean'; a base configuration's problem is not repeated for every searched point."""
    import pytest

    from nas_stab.config import load_spec
    from nas_stab.errors import SpecErrors

    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntask: {dataset: {name: digits}}\n"
                   "model: {arch: mlp_resnet, depht: 2, width: 16, aggregation: stamm, tau: '1/sqrtt(L)'}\n"
                   "train: {lr: 0.05, steps: -5, momentum: lots}\n"
                   "search: {objective: val_accc, sampler: grid}\n"
                   "space: {model.branches: [1, 2, 0], train.lr: [0.01, 0.1, 1.0]}\n")
    with pytest.raises(SpecErrors) as e:
        load_spec(bad)
    text = "\n".join(e.value.lines())
    for needle in ("model.depht: unknown key for model 'mlp_resnet'; did you mean 'depth'", "train.momentum: must be a number",
                   "train.steps: must be >= 1", "model.tau: tau must be", "did you mean 'stam'", "search.objective: unknown metric 'val_accc'"):
        assert needle in text, (needle, text)
    # the base's own problems are not repeated per point, and a wrong searched value shows beside them (it came
    # only once the base was fixed)
    assert text.count("space.model.branches") == 1 and "model.branches: must be >= 1" in text, text
    assert "model.aggregation" not in text.split("space.model.branches", 1)[1].split("\n")[0], text


TWELVE = """\
name: Bad Name
seeds: {min: 3, max: 2}
task:
  dataset: {name: mnist1D}
model:
  arch: mlp_resnet
  parametrisation: mup
  parametrization: mup
  branches: [1, 0, -4]
train:
  lr: -0.1
  steps: 100
  epochs: 2
serch: {sampler: grid}
space:
  model.widht: [16, 32]
  model.width: [16, 64]
  model.depth: [2, 0, -1]
  train.lr: {log_grid: [1.0, 0.01, 3]}
leaderboard: {epsilon: lots, transfer: model.width}
"""


def test_a_file_with_twelve_mistakes_in_every_stage_is_reported_whole_in_one_run_in_line_order(tmp_path):
    """The shorthand forms (seeds), the name, keys, types and ranges, the dataset's and the model's own rules, the
    cross-field rules, the space's distributions and values (every bad value of a list), the leaderboard: one run,
    one line each, sorted by line, in the project's words (no Python exception text)."""
    p = tmp_path / "twelve.yaml"
    p.write_text(TWELVE)
    r = run_cli("validate", p)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert [ln.split(": ", 2)[1:] for ln in r.stderr.strip().splitlines()] == [[f"{p}:{n}", m] for n, m in [
        (1, "name: 'Bad Name' must match [a-z0-9][a-z0-9_-]{0,99}"),
        (2, "seeds.max: must be larger than seeds.min (3), got 2: with max <= min the count is fixed (write seeds: 3)"),
        (4, "task.dataset.name: unknown dataset 'mnist1D'; did you mean 'mnist1d'?"),
        (5, "model.base_width: model.width is searched: mup needs a fixed base width (model.base_width; each width "
            "would otherwise be its own base, i.e. sp)"),
        (7, "model.parametrisation: unknown key for model 'mlp_resnet'; did you mean 'parametrization'?"),
        (9, "model.branches: must be an integer, got [1, 0, -4]"),
        (11, "train.lr: must be > 0, got -0.1"),
        (13, "train.epochs: give exactly one of train.steps and train.epochs, not both"),
        (14, "serch: unknown key; did you mean 'search'?"),
        (16, "space.model.widht: unknown key 'model.widht'; did you mean 'width'?"),
        (18, "space.model.depth: 2 values are invalid: 0 (model.depth: must be >= 1, got 0); -1 (model.depth: must be >= 1, got -1)"),
        (19, "space.train.lr.log_grid: low 1.0 is above high 0.01"),
        (20, "leaderboard.epsilon: epsilon must be a number in the metric's units or a percentage such as '3%', got 'lots'"),
    ]], r.stderr
