"""The HTML leaderboard's script and style are package data files: installed, and the page's own."""
from __future__ import annotations

import base64
import fnmatch
import hashlib
import html
import re
from pathlib import Path

import pytest
import tomllib

pytest.importorskip("pandas")

from nas_stab.results import html_page

ROOT = Path(__file__).resolve().parent.parent
ASSETS = ROOT / "nas_stab" / "results" / "assets"


def test_every_asset_is_declared_package_data():
    """A non-editable install carries only the data files pyproject.toml declares."""
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    globs = data["tool"]["setuptools"].get("package-data", {}).get("nas_stab.results", [])
    files = sorted(p.relative_to(ASSETS.parent).as_posix() for p in ASSETS.iterdir() if p.is_file())
    assert files, "no assets found"
    for f in files:
        assert any(fnmatch.fnmatch(f, g) for g in globs), f"{f} is not declared in [tool.setuptools.package-data]"


def test_page_embeds_the_asset_script_and_style_and_allows_only_that_script():
    import pandas as pd

    from nas_stab.analysis.table import analyze

    t = pd.DataFrame({"seed": [0, 0], "status": ["complete"] * 2, "train.lr": [0.1, 0.2], "val_acc": [0.5, 0.6]})
    page = html_page.to_html(analyze(t, n_boot=0), [("spec", "demo (hash 0)")])
    js, css = (ASSETS / "table.js").read_text(), (ASSETS / "table.css").read_text()
    scripts = re.findall(r"<script>(.*?)</script>", page, re.S)
    assert scripts == ["\n" + js]
    assert f"<style>\n{css}</style>" in page
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    csp = html.unescape(re.search(r'http-equiv="Content-Security-Policy" content="([^"]*)"', page).group(1))
    assert f"script-src 'sha256-{digest}'" in csp
