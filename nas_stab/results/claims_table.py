"""`nas-stab claims RUN_DIR`: a run's declared claims judged (docs/leaderboard.md, "Claims").

The claims file (``claims.yaml``, by default in the run directory) is read with `analysis.claims.load_claims`;
the runs are the directory's ``trials.csv``, and every other ``NAME.csv`` it holds is available to a claim as
``runs: NAME`` (a confirmation run's trials copied in, ``probe_slopes.csv`` of a probe, ``leaderboard.csv``
for a transfer claim: when the directory has none, the leaderboard is computed from the run, as `nas-stab
leaderboard` would write it). The spec's base values fill the keys a run does not search, the leaderboard settings
give the validation metric and the learning-rate key, the dataset its class count.
"""
from __future__ import annotations

import io
from pathlib import Path

import pandas as pd

from nas_stab.analysis.claim_verdicts import evaluate
from nas_stab.analysis.claims import load_claims
from nas_stab.analysis.settings import settings
from nas_stab.csvsafe import escape_frame
from nas_stab.errors import RunError
from nas_stab.results.formats import to_csv
from nas_stab.results.leaderboard import load_analysis
from nas_stab.safefiles import check_regular
from nas_stab.store.reader import read_run, read_table

__all__ = ["judge_run", "claims_csv"]


def judge_run(run_dir: str | Path, claims_file: str | Path | None = None) -> pd.DataFrame:
    """The declared claims of a run directory, judged (one row per claim, `claim_verdicts.COLUMNS`)."""
    d = Path(run_dir)
    path = Path(claims_file) if claims_file is not None else d / "claims.yaml"
    if not path.is_file():
        raise RunError(f"{path}: no claims file (declare the run's claims there: docs/leaderboard.md, Claims)")
    claims = load_claims(path)
    run = read_run(d)
    default = {"transfer": ("leaderboard",), "slope": ("probe_slopes",)}
    named = {n for c in claims for n in (c.runs or default.get(c.kind, ("trials",)))}
    files = {n: _table(d / f"{n}.csv") for n in sorted(named - {"trials"}) if (d / f"{n}.csv").exists()}  # only what a claim reads
    if "trials" in named:
        check_regular(d / "trials.csv", "trials.csv")
        files["trials"] = run.trials  # checked to the value (store.reader.check_trials), every problem at once
    if "leaderboard" not in files and any(c.kind == "transfer" and not c.runs for c in claims):
        files["leaderboard"] = pd.read_csv(io.StringIO(to_csv(load_analysis([d])[0])))
    st = settings(run.spec)
    return evaluate(claims, files, metric=st.metric, lr_key=st.lr, classes=st.classes, base=run.spec.raw)


def _table(path: Path) -> pd.DataFrame:
    """A run file a claim reads: a regular file (not a link to /dev/zero, a FIFO) that is a CSV table; else one
    line naming it."""
    check_regular(path, "trials.csv" if path.name == "trials.csv" else "table")
    return read_table(path)


def claims_csv(df: pd.DataFrame) -> str:
    """The judged claims as CSV (numbers to 6 significant digits)."""
    buf = io.StringIO()
    escape_frame(df).to_csv(buf, index=False, lineterminator="\n", float_format="%.6g")
    return buf.getvalue()
