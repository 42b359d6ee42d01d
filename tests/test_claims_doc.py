"""docs/claims.md documents the claims file: every YAML example on the page loads, and the key table names every
field of a claim."""
import re

from conftest import ROOT

from nas_stab.analysis.claims import KINDS, Claim, load_claims

DOC = (ROOT / "docs" / "claims.md").read_text()


def test_every_example_on_the_page_loads(tmp_path):
    blocks = re.findall(r"```yaml\n(.*?)```", DOC, re.S)
    assert len(blocks) == 2
    kinds = set()
    for i, block in enumerate(blocks):
        p = tmp_path / f"claims{i}.yaml"
        p.write_text(block)
        kinds |= {c.kind for c in load_claims(p)}
    assert kinds == set(KINDS)  # one example per kind


def test_the_key_table_names_every_field():
    table = DOC.split("## Every key", 1)[1].split("##", 1)[0]
    named = set(re.findall(r"`(\w+)`", table))
    from dataclasses import fields

    assert {f.name for f in fields(Claim)} <= named
