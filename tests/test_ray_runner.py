"""The Ray runner on a local Ray (2 CPUs): resume, journal and PostgreSQL storages (Ray Client: test_ray_client.py)."""
import pytest
from conftest import TINY
from conftest_ray import rows, run_ray_text, spec_text, study_of


@pytest.mark.slow
def test_resume_adds_only_missing_runs_journal_storage(ray_local, tmp_path):
    journal = tmp_path / "optuna-journal.log"
    text = spec_text(TINY, train={"threads": 1}, search={"storage": f"journal://{journal}"},
                     runner={"kind": "ray", "concurrency": 2})
    spec, d, counts = run_ray_text(text, tmp_path, trials=2)
    assert counts == {"complete": 2}
    first = {r["key"]: r for r in rows(d)}
    _, _, counts = run_ray_text(text, tmp_path)
    assert counts == {"complete": 4}
    r = rows(d)
    assert len(r) == 4 and len({x["key"] for x in r}) == 4
    assert all(r2 == first[r2["key"]] for r2 in r if r2["key"] in first)  # untouched
    study = study_of(spec, d, f"journal://{journal}")
    assert [t.state.name for t in study.trials] == ["COMPLETE"] * 4
    assert not (d / "study.db").exists()
    _, _, counts = run_ray_text(text, tmp_path)  # nothing left: no Tune experiment at all
    assert counts == {"complete": 4} and len(study_of(spec, d, f"journal://{journal}").trials) == 4


@pytest.mark.slow
def test_postgresql_storage(ray_local, postgres_url, tmp_path):
    text = spec_text(TINY, space={"train.lr": [0.05, 0.1]}, train={"threads": 1},
                     search={"storage": postgres_url}, runner={"kind": "ray", "concurrency": 2})
    spec, d, counts = run_ray_text(text, tmp_path)
    assert counts == {"complete": 2}
    study = study_of(spec, d, postgres_url)
    assert [t.state.name for t in study.trials] == ["COMPLETE", "COMPLETE"]
    assert sorted(t.user_attrs["key"] for t in study.trials) == sorted(x["key"] for x in rows(d))


def test_trial_resources_and_import_cost():
    import subprocess
    import sys

    from nas_stab.config import loads_spec
    from nas_stab.search.ray.runner import trial_resources

    spec = loads_spec(spec_text(TINY, runner={"kind": "ray", "resources": {"gpu": 0.25}}))
    assert trial_resources(spec.runner) == {"cpu": 1.0, "gpu": 0.25}
    code = "import sys, nas_stab, nas_stab.cli, nas_stab.search.ray.runner; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False", "importing nas_stab or the Ray runner module must not import Ray"
