"""Grid runs are recorded in the Optuna study with distributions that match their
values, so optuna-dashboard and Optuna's plots order numbers as numbers and put a
log-spaced learning rate on a log axis."""
import optuna
import optuna.distributions as od

from nas_stab.config import loads_spec
from nas_stab.search.local import run_local
from nas_stab.space import is_log_spaced
from nas_stab.store.rundir import RunDir

GRID = """\
name: dists
seeds: 1
task:
  dataset: {name: digits}
model: {arch: mlp_resnet, depth: 2, width: 8}
train: {lr: 0.05, steps: 2, batch_size: 16}
stability: {every: 0, probe_batch: 16, hessian: false}
space:
  model.depth: [2, 8, 32]
  model.width: [8, 10]
  model.aggregation: [sum, stam]
  train.lr: {log_grid: [0.01, 0.1, 3]}
  train.momentum: {grid: [0.0, 0.5, 2]}
leaderboard: {transfer: model.depth}
"""


def _run(text, out):
    spec = loads_spec(text)
    with RunDir.open(out, spec) as rd:
        counts = run_local(spec, rd, trials=3)
    return spec, out / spec.name, counts


def test_numeric_grid_dimensions_are_int_and_float_distributions(tmp_path):
    spec, d, counts = _run(GRID, tmp_path)
    assert sum(counts.values()) == 3
    study = optuna.load_study(study_name="dists", storage=f"sqlite:///{d / 'study.db'}")
    dist = study.trials[0].distributions
    assert dist["model.depth"] == od.IntDistribution(2, 32, log=True)
    assert dist["model.width"] == od.IntDistribution(8, 10, log=False)
    assert dist["train.lr"] == od.FloatDistribution(0.01, 0.1, log=True)
    assert dist["train.momentum"] == od.FloatDistribution(0.0, 0.5, log=False)
    assert isinstance(dist["model.aggregation"], od.CategoricalDistribution)
    # the enqueued values themselves are kept exactly
    assert [t.params["model.depth"] for t in study.trials] == [2, 2, 2]
    assert {t.params["train.lr"] for t in study.trials} <= {0.01, 0.0316228, 0.1}


def test_a_study_from_before_keeps_its_categorical_distributions(tmp_path):
    """Resuming a run directory whose study recorded grid values as categorical must
    not fail on Optuna's 'different distribution kind' check."""
    spec = loads_spec(GRID)
    with RunDir.open(tmp_path, spec) as rd:
        study = optuna.create_study(study_name="dists", storage=f"sqlite:///{rd.path / 'study.db'}", direction="maximize",
                                    load_if_exists=True)
        t = study.ask({"model.depth": od.CategoricalDistribution([2, 8, 32])})
        study.tell(t, state=optuna.trial.TrialState.FAIL)
        counts = run_local(spec, rd, trials=2)
    assert sum(counts.values()) == 2
    study = optuna.load_study(study_name="dists", storage=f"sqlite:///{tmp_path / 'dists' / 'study.db'}")
    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(done) == 2
    assert all(isinstance(t.distributions["model.depth"], od.CategoricalDistribution) for t in done)
    assert isinstance(done[0].distributions["train.lr"], od.FloatDistribution)


def test_log_spacing_rule():
    assert is_log_spaced([1, 4, 16]) and is_log_spaced([0.001, 0.01, 0.1, 1.0]) and is_log_spaced([3, 10, 30, 100])
    assert not is_log_spaced([2, 4, 6]) and not is_log_spaced([0.0, 0.5]) and not is_log_spaced([1, 2])
    assert is_log_spaced([0.01, 0.1])
