"""`nas-stab judge`: the leaderboard's verdict for a sweep trained anywhere (docs/judge.md).

A sweep is one row per trained run: its size, learning rate, seed and metric, optionally its status and the keys
that label its rows. It is read from a long CSV or Parquet file (a W&B runs export is one), an MLflow experiment
or an Optuna study (`read_sweep`), checked (`sweep_frame`: every problem at once, one line each), and judged by the
same `analyze` and the same rules as `nas-stab leaderboard` (`judge`), whose writer makes the same files.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from nas_stab.analysis.table import Analysis, TableSettings, analyze
from nas_stab.analysis.values import number_or_text
from nas_stab.errors import SpecError, SpecErrors
from nas_stab.safefiles import check_regular
from nas_stab.textfmt import did_you_mean

__all__ = ["KINDS", "Sweep", "SweepColumns", "judge", "read_sweep", "sweep_frame"]

# what a metric is, as the analysis knows it: its direction, its no-learning value m0 (docs/leaderboard.md)
KINDS = {"accuracy": "val_acc", "loss": "val_loss", "bleu": "bleu"}
_KNOWN = {"val_acc": "accuracy", "test_acc": "accuracy", "val_loss": "loss", "train_loss": "loss",
          "train_loss_tail": "loss", "test_loss": "loss", "bleu": "bleu", "test_bleu": "bleu"}

# the status words of the tools a sweep comes from -> the analysis's (complete, pruned, diverged, failed); None: a run
# still going, left out
STATUS = {
    "complete": "complete", "completed": "complete", "finished": "complete", "success": "complete", "ok": "complete",
    "pruned": "pruned",
    "diverged": "diverged", "nan": "diverged",
    "failed": "failed", "fail": "failed", "crashed": "failed", "killed": "failed", "error": "failed",
    "running": None, "waiting": None, "scheduled": None, "queued": None,
}


@dataclass(frozen=True)
class SweepColumns:
    """Which column holds what: `size` (None: one size), `lr`, `seed` (None: every run seed 0), `metric`, `status`
    (None: every run complete) and the `compare` keys that label the rows."""

    lr: str
    metric: str
    size: str | None = None
    seed: str | None = None
    status: str | None = None
    compare: tuple[str, ...] = ()


@dataclass(frozen=True)
class Sweep:
    """A sweep as read: its runs and where they came from (the provenance's first line)."""

    runs: pd.DataFrame
    source: str


def read_sweep(path: str | None = None, *, mlflow_uri: str | None = None, experiment: str | None = None,
               optuna_storage: str | None = None, study: str | None = None) -> Sweep:
    """Read a sweep: a CSV or Parquet file at `path`, the runs of the MLflow `experiment` at `mlflow_uri`, or the
    trials of the Optuna `study` in `optuna_storage`. MLflow's columns are ``params.<name>``, ``metrics.<name>`` and
    ``status``; Optuna's ``params_<name>``, ``user_attrs_<name>``, ``value`` and ``state`` (`resolve_column` finds a
    plain name among them)."""
    given = [x for x in (path, mlflow_uri, optuna_storage) if x]
    if len(given) != 1:
        raise SpecError("give one sweep: a CSV or Parquet file, --mlflow URI --experiment NAME, or --optuna STORAGE --study NAME",
                        key="judge")
    if path:
        return _read_file(Path(path))
    if mlflow_uri:
        return _read_mlflow(mlflow_uri, experiment)
    return _read_optuna(str(optuna_storage), study)


def _read_file(p: Path) -> Sweep:
    check_regular(p, "sweep")  # a link to /dev/zero, a FIFO: one line, never read
    if not p.is_file():
        raise SpecError(f"{p} not found" if not p.exists() else f"{p} is not a file", key="judge")
    try:
        if p.suffix.lower() in (".parquet", ".pq"):
            df = pd.read_parquet(p)
        else:
            df = pd.read_csv(p, sep=None, engine="python") if p.suffix.lower() in (".tsv", ".txt") else pd.read_csv(p)
    except Exception as e:  # a malformed file: its own words, one line
        raise SpecError(f"cannot read it as a {'Parquet' if p.suffix.lower() in ('.parquet', '.pq') else 'CSV'} table: "
                        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=str(p)) from None
    return Sweep(df, str(p))


def _read_mlflow(uri: str, experiment: str | None) -> Sweep:
    if not experiment:
        raise SpecError("an MLflow sweep needs --experiment NAME", key="--experiment")
    import mlflow  # deferred: only an MLflow sweep loads it

    mlflow.set_tracking_uri(uri)
    if mlflow.get_experiment_by_name(experiment) is None:
        names = [e.name for e in mlflow.search_experiments()]
        raise SpecError(f"no experiment {experiment!r} at {uri}" + did_you_mean(experiment, names), key="--experiment")
    df = mlflow.search_runs(experiment_names=[experiment], max_results=1_000_000)
    for c in df.columns:
        if c.startswith("params."):  # MLflow stores every parameter as text
            df[c] = df[c].map(lambda v: number_or_text(v) if isinstance(v, str) else v)
    return Sweep(df, f"MLflow experiment {experiment!r} at {uri}")


def _read_optuna(storage: str, study: str | None) -> Sweep:
    if not study:
        raise SpecError("an Optuna sweep needs --study NAME", key="--study")
    import optuna  # deferred: only an Optuna sweep loads it

    try:
        s = optuna.load_study(study_name=study, storage=storage)
    except KeyError:
        names = optuna.get_all_study_names(storage)
        raise SpecError(f"no study {study!r} in {storage}" + did_you_mean(study, names), key="--study") from None
    df = s.trials_dataframe(multi_index=False)
    if "state" in df.columns:
        df["state"] = df["state"].astype(str).str.replace("TrialState.", "", regex=False)
    return Sweep(df, f"Optuna study {study!r} in {storage}")


_PREFIXES = ("", "params.", "metrics.", "tags.", "params_", "user_attrs_", "config.", "summary.")


def resolve_column(df: pd.DataFrame, name: str) -> str | None:
    """The column that holds `name`: itself, or `name` under a prefix of MLflow, Optuna or W&B."""
    for p in _PREFIXES:
        if p + name in df.columns:
            return p + name
    return None


def sweep_frame(sweep: Sweep, cols: SweepColumns, *, kind: str | None = None,
                direction: str | None = None) -> tuple[pd.DataFrame, SweepColumns, list[str]]:
    """The runs as the analysis reads them, checked: (frame, its columns, their metric the name the analysis judges it
    as, notes). Every problem at once (`SpecErrors`, one line each): a missing column (the nearest named), a metric the
    kind of which is unknown or contradicts the direction, non-numeric or infinite sizes, lrs or seeds, a metric
    that is not a number, runs given twice, rows holding several metrics, a status word not known."""
    df, src = sweep.runs, sweep.source
    errors: list[SpecError] = []
    notes: list[str] = []

    def err(key: str, message: str) -> None:
        errors.append(SpecError(message, file=src, key=key))

    found: dict[str, str] = {}
    wanted = [("--lr", cols.lr), ("--metric", cols.metric)] + [(f, c) for f, c in (("--size", cols.size), ("--seed", cols.seed),
                                                                                 ("--status", cols.status)) if c]
    wanted += [("--compare", c) for c in cols.compare]
    for flag, name in wanted:
        col = resolve_column(df, name)
        if col is None:
            err(flag, f"no column {name!r}" + did_you_mean(name, [str(c) for c in df.columns]))
        else:
            found[name] = col
    metric_as = _metric_kind(cols.metric, kind, direction, err)
    if errors:
        raise SpecErrors(errors)
    out = pd.DataFrame(index=df.index)
    for name, col in found.items():
        out[name] = df[col]
    if cols.status:
        out = _statuses(out, cols.status, err, notes)
    else:
        out["status"] = "complete"
    for flag, key in (("--lr", cols.lr), ("--size", cols.size), ("--seed", cols.seed)):
        if key:
            _numeric(out, key, flag, err, positive=flag != "--seed")
    if len(out) and not pd.api.types.is_numeric_dtype(out[cols.metric]):
        bad = pd.to_numeric(out[cols.metric], errors="coerce").isna() & out[cols.metric].notna()
        if bad.any():
            err("--metric", f"column {cols.metric!r} holds values that are not numbers ({_examples(out.loc[bad, cols.metric])})")
    _several_metrics(df, cols.metric, err)
    if not errors:
        _duplicates(out, cols, err)
    if errors:
        raise SpecErrors(errors)
    out[cols.metric] = pd.to_numeric(out[cols.metric], errors="coerce")
    out["seed"] = out[cols.seed].astype(np.int64) if cols.seed else 0
    if len(out) == 0:
        raise SpecError("no run to judge (every row is a run still going, or the table is empty)", file=src)
    frame = out.rename(columns={cols.metric: metric_as}) if metric_as != cols.metric else out
    if metric_as != cols.metric:
        notes.append(f"metric column {cols.metric!r} judged as {metric_as} ({_KNOWN[metric_as]})")
    return frame, replace(cols, metric=metric_as), notes


def _metric_kind(metric: str, kind: str | None, direction: str | None, err: Any) -> str:
    """The nas_stab metric the analysis judges the column as: its own name when nas_stab knows it, else the kind's
    (`KINDS`), given or read from the name (acc, loss, bleu); checked against a given direction."""
    known = _KNOWN.get(metric)
    k = kind or known
    if k is None:
        low = metric.lower()
        k = "accuracy" if "acc" in low else "loss" if "loss" in low else "bleu" if "bleu" in low else None
    if k is None:
        if direction == "minimize":
            k = "loss"
        else:
            err("--kind", f"what is {metric!r}? say --kind accuracy, loss or bleu (the metric's direction and its "
                          "no-learning value m0 follow from it)")
            return metric
    if k not in KINDS:
        err("--kind", f"unknown kind {k!r}; one of {', '.join(KINDS)}")
        return metric
    name = metric if known == k else KINDS[k]
    want = "minimize" if k == "loss" else "maximize"
    if direction and direction != want:
        err("--" + direction, f"{metric!r} judged as {k} is to be {want}d; drop --{direction} or say --kind")
    return name


def _statuses(out: pd.DataFrame, col: str, err: Any, notes: list[str]) -> pd.DataFrame:
    words = out[col].astype(str).str.strip().str.lower().str.replace("trialstate.", "", regex=False)
    unknown = sorted(set(words) - set(STATUS))
    if unknown:
        err("--status", f"column {col!r}: unknown status {', '.join(map(repr, unknown[:5]))}; known: "
                        f"{', '.join(sorted(k for k in STATUS))}")
        return out.assign(status="complete")
    mapped = words.map(STATUS)
    going = mapped.isna()
    if going.any():
        notes.append(f"{int(going.sum())} runs still going (status running, waiting...) were left out")
    out = out.assign(status=mapped).loc[~going]
    return out.drop(columns=[col]) if col != "status" else out


def _numeric(out: pd.DataFrame, name: str, flag: str, err: Any, *, positive: bool) -> None:
    v = pd.to_numeric(out[name], errors="coerce")
    bad = v.isna() | ~np.isfinite(v.astype(float))
    if flag == "--seed":
        bad |= (v.fillna(0) % 1 != 0)
    if bad.any():
        err(flag, f"column {name!r} holds values that are not finite numbers ({_examples(out.loc[bad, name])}), "
                  f"in {int(bad.sum())} of {len(out)} rows")
        return
    if positive and (v <= 0).any():
        err(flag, f"column {name!r} holds values <= 0 ({_examples(out.loc[v <= 0, name])})")
        return
    out[name] = v


def _several_metrics(df: pd.DataFrame, metric: str, err: Any) -> None:
    """A long table whose rows hold different metrics (a `metric` or `key` column naming them beside one value
    column) cannot be judged as one metric."""
    for c in ("metric", "metric_name", "key", "name"):
        if c in df.columns and c != metric and metric in ("value", "metric_value", "val"):
            names = df[c].dropna().astype(str).unique()
            if len(names) > 1:
                err("--metric", f"rows hold several metrics (column {c!r}: {', '.join(map(repr, names[:4]))}"
                                f"{'...' if len(names) > 4 else ''}): keep the rows of one metric, or one column per metric")


def _duplicates(out: pd.DataFrame, cols: SweepColumns, err: Any) -> None:
    keys = [k for k in (cols.size, cols.lr, cols.seed, *cols.compare) if k]
    dup = out.duplicated(keys, keep=False)
    if dup.any():
        first = {k: out.loc[dup, k].iloc[0] for k in keys}  # column by column: an int stays an int
        err("--seed", f"{int(dup.sum())} rows are runs given twice (the same "
            f"{', '.join(keys)}; e.g. {', '.join(f'{k}={v}' for k, v in first.items())})"
            + ("" if cols.seed else ": name the seed column with --seed"))


def _examples(values: pd.Series) -> str:
    seen = list(dict.fromkeys(values.astype(str)))
    return ", ".join(map(repr, seen[:3])) + (", ..." if len(seen) > 3 else "")


def judge(sweep: Sweep, cols: SweepColumns, *, kind: str | None = None, direction: str | None = None,
          classes: int | None = None, m0: float | None = None, epsilon: float | str | None = None,
          reference: Any = None, criterion: str = "regret", tolerance: float = 1.0,
          n_boot: int = 1000) -> tuple[Analysis, list[tuple[str, str]]]:
    """The leaderboard of a sweep and its provenance: `analyze` with the same rules as `nas-stab leaderboard`."""
    frame, used, notes = sweep_frame(sweep, cols, kind=kind, direction=direction)
    metric = used.metric
    if reference is not None and used.size and not (frame[used.size] == number_or_text(str(reference))).any():
        sizes = sorted(frame[used.size].unique().tolist())
        raise SpecError(f"no run at reference size {reference!r}; sizes: {', '.join(map(str, sizes))}", key="--reference")
    settings = TableSettings(lr=used.lr, transfer=used.size, compare=used.compare, metric=metric, classes=classes, m0=m0,
                             epsilon=epsilon, reference=number_or_text(str(reference)) if reference is not None else None,
                             criterion=criterion, tolerance=tolerance, n_boot=n_boot)
    a = analyze(frame, settings)
    counts = frame["status"].value_counts()
    prov = [
        ("sweep", sweep.source),
        ("columns", ", ".join(f"{k} {v}" for k, v in (("size", cols.size), ("lr", cols.lr), ("seed", cols.seed),
                                                        ("metric", cols.metric), ("status", cols.status)) if v)
         + (f", rows {', '.join(cols.compare)}" if cols.compare else "")),
        ("trials", f"{len(frame)} runs: " + ", ".join(f"{int(counts.get(s, 0))} {s}" for s in ("complete", "pruned", "diverged", "failed"))),
        *(("note", n) for n in notes),
        ("command", _command(sweep, cols, kind, direction, classes, m0, epsilon, reference)),
    ]
    return a, prov


def _command(sweep: Sweep, cols: SweepColumns, kind: str | None, direction: str | None, classes: int | None,
             m0: float | None, epsilon: Any, reference: Any) -> str:
    parts = ["nas-stab judge", sweep.source if not sweep.source.startswith(("MLflow", "Optuna")) else f"<{sweep.source}>"]
    for flag, v in (("--size", cols.size), ("--lr", cols.lr), ("--seed", cols.seed), ("--metric", cols.metric),
                    ("--status", cols.status), ("--compare", ",".join(cols.compare) or None), ("--kind", kind),
                    ("--classes", classes), ("--m0", m0), ("--epsilon", epsilon), ("--reference", reference)):
        if v is not None:
            parts.append(f"{flag} {v}")
    if direction:
        parts.append(f"--{direction}")
    return " ".join(parts)


def split_keys(text: str | None) -> tuple[str, ...]:
    """``--compare a,b`` -> ("a", "b")."""
    return tuple(k.strip() for k in (text or "").split(",") if k.strip())
