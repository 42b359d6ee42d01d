"""Secrets never leave (issue 50, item 3): a password or token in a tracking or storage URI is masked in every
message, log line, stored spec, provenance and leaderboard; a tracking server that does not answer costs a short
timeout per search, not one per run."""
from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from conftest import TINY, run_cli

from nas_stab.textfmt import mask_plain, mask_secrets

SECRET = "s3cr3tpw"


def test_mask_secrets_hides_user_info_passwords_and_query_tokens():
    assert mask_secrets("http://alice:s3cr3tpw@host:5000/x") == "http://alice:***@host:5000/x"
    assert mask_secrets("postgresql+psycopg2://bob:pw99@db:5432/x") == "postgresql+psycopg2://bob:***@db:5432/x"
    assert mask_secrets("error at https://u:pw@h/a?token=abc&x=1 and ?api_key=k") == "error at https://u:***@h/a?token=***&x=1 and ?api_key=***"
    assert mask_secrets("sqlite:///runs/x/study.db and http://host/x") == "sqlite:///runs/x/study.db and http://host/x"
    assert mask_plain({"search": {"storage": "mysql://u:pw@h/db"}, "n": [1, "a:b"]}) == \
        {"search": {"storage": "mysql://u:***@h/db"}, "n": [1, "a:b"]}


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _leaks(root: Path) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and SECRET.encode() in p.read_bytes()]


def test_a_search_with_a_password_in_its_tracking_uri_leaks_it_nowhere(tmp_path):
    pytest.importorskip("mlflow")
    uri = f"http://alice:{SECRET}@127.0.0.1:{_closed_port()}/"
    spec = tmp_path / "s.yaml"
    spec.write_text(TINY + f"logging: {{tracking: mlflow, mlflow_uri: '{uri}', tensorboard: false}}\n")
    t0 = time.time()
    r = run_cli("run", spec, "--out", tmp_path / "runs")
    assert r.returncode == 0, r.stderr[-2000:]
    assert time.time() - t0 < 120  # a server that is not there costs a timeout per search, not per run
    assert "warning: tracking: mlflow" in r.stderr and "alice:***@" in (tmp_path / "runs" / "tiny" / "log.txt").read_text()
    outputs = [r.stdout, r.stderr]
    for command in (("status",), ("leaderboard", "--format", "md,csv,html")):
        r = run_cli(command[0], tmp_path / "runs" / "tiny", *command[1:])
        outputs += [r.stdout, r.stderr]
    assert not any(SECRET in o for o in outputs)
    assert not _leaks(tmp_path / "runs")
    assert "alice:***@" in (tmp_path / "runs" / "tiny" / "spec.yaml").read_text()


def test_a_storage_password_is_masked_in_the_error_and_the_stored_spec(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text(TINY + f"search: {{storage: 'postgresql://bob:{SECRET}@127.0.0.1:{_closed_port()}/x'}}\n")
    r = run_cli("run", spec, "--out", tmp_path / "runs")
    assert r.returncode == 2 and SECRET not in r.stdout + r.stderr, r.stderr
    assert "bob:***@" in r.stderr
    assert not (tmp_path / "runs").exists() or not _leaks(tmp_path / "runs")  # (the user's own spec holds it)
