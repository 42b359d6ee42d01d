"""The command line as a user runs it: exit codes, messages, no traceback, cheap --help."""
import subprocess
import sys

from conftest import TINY, run_cli


def test_help_imports_neither_ray_nor_torch():
    code = (
        "import sys\n"
        "from nas_stab.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "import nas_stab\n"
        "bad = [m for m in ('ray', 'torch', 'optuna') if m in sys.modules]\n"
        "print('IMPORTED', bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "IMPORTED []" in out.stdout, out.stdout + out.stderr


def test_validate_prints_resolved_config_trials_and_cost_and_trains_only_when_asked(tiny_yaml):
    r = run_cli("validate", tiny_yaml)
    assert r.returncode == 0, r.stderr
    assert "loss_factor: 10" in r.stdout  # defaults are printed
    assert "trials: 4 configurations x 1 seed(s) = 4 runs (grid)" in r.stdout
    assert "optimizer steps" in r.stdout and "ms/step" not in r.stdout and "--estimate times" in r.stdout
    r = run_cli("validate", tiny_yaml, "--estimate")
    assert r.returncode == 0, r.stderr
    assert "ms/step" in r.stdout and "-> wall time: ~" in r.stdout and "--estimate times" not in r.stdout


def test_cost_estimate_times_a_run_with_its_own_threads_and_divides_by_concurrency(tiny_yaml):
    import os

    from nas_stab.config import loads_spec
    from nas_stab.estimate import run_threads

    base = TINY.replace("train: {lr: 0.05", "runner: {concurrency: 2}\ntrain: {lr: 0.05")
    spec = loads_spec(base)
    assert run_threads(spec) == max(1, (os.cpu_count() or 1) // 2)  # the local runner's workers share the cpus
    assert run_threads(loads_spec(base.replace("batch_size: 32", "batch_size: 32, threads: 3"))) == 3
    ray = loads_spec(TINY.replace("train: {lr: 0.05", "runner: {kind: ray, resources: {cpu: 4}}\ntrain: {lr: 0.05"))
    assert run_threads(ray) == 4  # a Ray trial's torch threads are its CPUs
    r = run_cli("validate", tiny_yaml, "--set", "runner.concurrency=2", "--set", "train.threads=1", "--estimate")
    assert r.returncode == 0, r.stderr
    cost = r.stdout[r.stdout.index("cost:"):]
    assert "1 torch thread(s) per run" in cost.splitlines()[0] and "  2 runs at once: " in cost and "-> wall time: ~" in cost


def test_bad_input_exit_2_without_traceback(tmp_path, tiny_yaml):
    bad = tmp_path / "bad.yaml"
    bad.write_text(TINY.replace("width: 16", "widht: 16"))
    for args in (["validate", bad], ["run", bad, "--out", tmp_path], ["validate", tiny_yaml, "--set", "train.lr=-1"],
                 ["validate", tmp_path / "missing.yaml"], ["status", tmp_path]):
        r = run_cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert "Traceback" not in r.stderr and r.stderr.startswith("error: "), r.stderr
    r = run_cli("validate", bad)
    assert f"{bad}:5: model.widht: unknown key for model 'mlp_resnet'; did you mean 'width'?" in r.stderr
    assert not (tmp_path / "tiny").exists()  # nothing written for bad input


def test_list_shows_registries():
    r = run_cli("list")
    assert r.returncode == 0
    for word in ("mlp_resnet", "digits", "mnist", "tpe", "hyperband", "aggregation"):
        assert word in r.stdout


def test_run_then_status(tmp_path, tiny_yaml):
    r = run_cli("run", tiny_yaml, "--out", tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "[4/4] complete 4" in r.stderr
    assert (tmp_path / "tiny" / "leaderboard.md").exists()
    s = run_cli("status", tmp_path / "tiny")
    assert s.returncode == 0 and "4/4 runs finished" in s.stdout and "complete 4" in s.stdout
