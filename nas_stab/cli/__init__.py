"""The `nas-stab` command line (commands in docs/commands.md). Thin: parse, call the library, print.

This module is the parser and the exit codes; the commands are in commands.py.
Exit codes: 0 done, 1 some trials failed, 2 bad input. Heavy libraries
(torch, Optuna, Ray) are imported inside the commands, so `--help` is fast.
"""
from __future__ import annotations

import argparse
import signal
import sys

from nas_stab import __version__
from nas_stab.cli.commands import (
    cmd_bench,
    cmd_claims,
    cmd_conform,
    cmd_judge,
    cmd_leaderboard,
    cmd_list,
    cmd_probe,
    cmd_run,
    cmd_schema,
    cmd_status,
    cmd_tensorboard,
    cmd_upgrade,
    cmd_validate,
)
from nas_stab.errors import NasStabError, RunErrors, SpecErrors, Terminated, clear_termination, request_termination
from nas_stab.textfmt import mask_secrets, printable


def _quiet_dropped_sigterm(unraisable) -> None:
    """sys.unraisablehook during `nas-stab run`: a SIGTERM raised inside a garbage-collector callback is dropped by
    Python, which would print its traceback; the request is kept (errors.request_termination) and raised again
    at the driver's next safe point, so say nothing here. Anything else goes to Python's own hook."""
    if isinstance(unraisable.exc_value, Terminated):
        return
    sys.__unraisablehook__(unraisable)


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is cmd_run:
        clear_termination()
        signal.signal(signal.SIGTERM, request_termination)  # like Ctrl-C: close what runs, keep what is written
        sys.unraisablehook = _quiet_dropped_sigterm
        args.keep_frozen = argv is None  # the `nas-stab` process ends with this command (nas_stab/gcsetup.py)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args) or 0
    except SpecErrors as e:
        for line in e.lines():
            print(f"error: {printable(mask_secrets(line))}", file=sys.stderr)
        return e.exit_code
    except RunErrors as e:
        for line in e.lines():
            print(f"error: {printable(mask_secrets(line))}", file=sys.stderr)
        return e.exit_code
    except NasStabError as e:
        print(f"error: {printable(mask_secrets(e))}", file=sys.stderr)
        return e.exit_code
    except Terminated:
        print("terminated (SIGTERM): runs in progress were closed as interrupted; rerun the same command to resume",
              file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("interrupted (Ctrl-C): runs in progress were closed as interrupted; rerun the same command to resume",
              file=sys.stderr)
        return 130
    except OSError as e:  # a full disk, a read-only or unusable --out: one line, never a traceback
        where = f"{e.filename}: " if e.filename else ""
        print(f"error: {printable(mask_secrets(where))}{e.strerror or e}; nothing finished was lost, rerun the same command to resume", file=sys.stderr)
        return 2
    except Exception as e:
        optuna = sys.modules.get("optuna")
        if optuna is None or not isinstance(e, optuna.exceptions.StorageInternalError):
            raise
        # the study's database refused a write (a full disk under study.db, a lost connection): one line
        why = mask_secrets(" ".join(str(e.__cause__ or e).split("\n")[0].split()))
        print(f"error: the Optuna storage failed to record ({why}); nothing finished was lost, rerun the same command "
              "to resume", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nas-stab", description="Stability-aware neural architecture search, from YAML to leaderboards.")
    p.add_argument("--version", action="version", version=f"nas_stab {__version__}")
    sub = p.add_subparsers(metavar="COMMAND")

    _add_validate(sub)

    r = sub.add_parser("run", help="run an experiment (resumes if it was interrupted)")
    r.add_argument("spec")
    r.add_argument("--out", default="runs", help="output root; the run goes to OUT/<name>/ (default: runs)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a dotted key")
    r.add_argument("--runner", choices=["local", "ray"], help="override runner.kind")
    r.add_argument("--address", help="Ray cluster address (with --runner ray): auto, HOST:PORT, or ray://HOST:PORT (Ray Client)")
    r.add_argument("--trials", type=int, help="override search.trials: a total, so a rerun with the same N trains nothing more "
                   "(grid: its first N runs; bracket: N runs; samplers: N trials; a transfer search: N outer trials)")
    r.add_argument("--fresh", action="store_true", help="move an existing run of this name aside and start over")
    r.set_defaults(func=cmd_run)

    pr = sub.add_parser("probe", help="stability metrics at init (and after K steps) for every configuration, as a table and plots")
    pr.add_argument("spec")
    pr.add_argument("--steps", type=int, default=0, help="train K steps on the fixed probe batch before measuring again")
    pr.add_argument("--seeds", type=int, metavar="N", help="probe the first N seeds of the experiment file's seeds (default: all)")
    pr.add_argument("--out", default="runs", help="output root (default: runs); writes OUT/<name>/probe.* and plots/")
    pr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    pr.set_defaults(func=cmd_probe)

    _add_conform(sub)
    _add_bench(sub)

    lb = sub.add_parser("leaderboard", help="build the LR-transfer leaderboard from one or more runs")
    lb.add_argument("run_dirs", nargs="+", metavar="RUN_DIR")
    lb.add_argument("--format", default="md", help="comma-separated: md,csv,tex,html (default: md)")
    lb.add_argument("--out", help="output directory (default: the run directory)")
    lb.add_argument("--metric", help="the metric to rank by (default: the run's leaderboard.metric or search.objective)")
    lb.add_argument("--transfer", metavar="KEY", help="the size axis across which one lr should transfer")
    lb.add_argument("--compare", metavar="KEY,...", help="comma-separated keys whose values label the rows")
    lb.add_argument("--lr", metavar="KEY", help="the learning-rate key")
    lb.add_argument("--reference", metavar="S", help="the reference size s_ref (default: the smallest)")
    lb.add_argument("--tolerance", metavar="OCT", type=float, help="octaves of lr_drift a 'yes' allows with --criterion drift (default 1)")
    lb.add_argument("--criterion", choices=("regret", "drift"), help="what 'transfers' judges (default: the run's leaderboard.criterion, regret)")
    lb.add_argument("--epsilon", metavar="E", help="the regret a 'yes' allows: a number in the metric's units or a percentage "
                    "of the row's gap between its best and the no-learning value (default: leaderboard.epsilon, 3%%)")
    lb.add_argument("--report", metavar="METRIC", help="the metric reported at each size's lr chosen on --metric (default: the run's "
                    "leaderboard.report, else the held-out counterpart: val_acc -> test_acc, bleu -> test_bleu); none: no report")
    lb.set_defaults(func=cmd_leaderboard)

    _add_judge(sub)

    cl = sub.add_parser("claims", help="judge a run's declared claims (claims.yaml), sized by power")
    cl.add_argument("run_dir", help="a run directory (its trials.csv; any other NAME.csv in it is a claim's runs: NAME)")
    cl.add_argument("--claims", help="the claims file (default: RUN_DIR/claims.yaml)")
    cl.add_argument("--out", help="where to write the judged claims (default: RUN_DIR/claims.csv)")
    cl.set_defaults(func=cmd_claims)

    st = sub.add_parser("status", help="trials by status, best so far, time used and left")
    st.add_argument("run_dir")
    st.set_defaults(func=cmd_status)

    up = sub.add_parser("upgrade", help="give a run directory made by an earlier nas_stab what this one reads "
                        "(the search's decisions, replayed from trials.csv)")
    up.add_argument("run_dirs", nargs="+")
    up.set_defaults(func=cmd_upgrade)

    ls = sub.add_parser("list", help="registered architectures, datasets, knobs, samplers and pruners")
    ls.set_defaults(func=cmd_list)

    tb = sub.add_parser("tensorboard", help="(re)write the TensorBoard logs of a run directory's runs")
    tb.add_argument("run_dir")
    tb.set_defaults(func=cmd_tensorboard)

    sc = sub.add_parser("schema", help="print the JSON Schema of experiment files (for editors: completion and checks as you type)")
    sc.add_argument("--format", choices=["json", "markdown"], default="json",
                    help="json: the JSON Schema (default); markdown: the reference page docs/experiment-file.md")
    sc.add_argument("--out", help="write it to this file instead of standard output")
    sc.add_argument("--builtin", action="store_true",
                    help="only nas_stab's own components (default: the installed plugins' datasets and their options too)")
    sc.set_defaults(func=cmd_schema)
    return p

def _add_conform(sub: argparse._SubParsersAction) -> None:
    """nas-stab conform: does the spec's model implement the parametrization it claims (docs/conform.md)."""
    cf = sub.add_parser("conform", help="check that the spec's model implements the parametrization it claims (slopes "
                        "over its width or depth, with intervals); exit 0 conforms, 1 a check fails, 3 undecided")
    cf.add_argument("spec")
    cf.add_argument("--expect", required=True, choices=("sp", "mup", "depth_mup", "completep", "umup"),
                    help="the parametrization the model should implement")
    cf.add_argument("--steps", type=int, default=1, help="optimizer steps before the update is measured (default 1)")
    cf.add_argument("--seeds", type=int, default=8, help="models per size (default 8)")
    cf.add_argument("--out", default="runs", help="output root (default: runs); writes OUT/<name>.conform-<expect>/")
    cf.add_argument("--no-plots", action="store_true", help="write the CSVs only")
    cf.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    cf.set_defaults(func=cmd_conform)


def _add_bench(sub: argparse._SubParsersAction) -> None:
    """nas-stab bench: the published runs as a dataset (nas_stab.bench; docs/bench.md)."""
    b = sub.add_parser("bench", help="the published runs as a dataset: tables, query KEY=VALUE ..., history KEY=VALUE ..., "
                                     "verify, fields")
    b.add_argument("what", choices=("tables", "query", "history", "verify", "fields"))
    b.add_argument("filters", nargs="*", metavar="KEY=VALUE",
                   help="query, history: a field and its value (model.width=128 table=pathbn)")
    b.add_argument("--out", help="history: write the steps to this CSV file (default: a summary per run on stdout)")
    b.add_argument("--columns", help="query: the fields to print, comma-separated (default: a short set)")
    b.add_argument("--format", choices=("table", "csv"), default="table", help="query: a readable table or CSV for a pipe")
    b.set_defaults(func=cmd_bench)


def _add_judge(sub: argparse._SubParsersAction) -> None:
    """`nas-stab judge`: its sweep (a file, an MLflow experiment, an Optuna study), its columns and settings."""
    jd = sub.add_parser("judge", help="the leaderboard's verdict for a sweep trained anywhere: a CSV or Parquet file (a W&B "
                                      "runs export), an MLflow experiment or an Optuna study (docs/judge.md)")
    jd.add_argument("sweep", nargs="?", metavar="FILE", help="a long CSV or Parquet table: one row per run")
    jd.add_argument("--mlflow", metavar="URI", help="an MLflow tracking URI (with --experiment)")
    jd.add_argument("--experiment", metavar="NAME", help="the MLflow experiment")
    jd.add_argument("--optuna", metavar="STORAGE", help="an Optuna storage URL (with --study)")
    jd.add_argument("--study", metavar="NAME", help="the Optuna study")
    jd.add_argument("--lr", required=True, metavar="COL", help="the learning-rate column")
    jd.add_argument("--metric", required=True, metavar="COL", help="the metric column judged (Optuna: value)")
    jd.add_argument("--size", metavar="COL", help="the size column (width, depth, branches...) across which one lr should transfer")
    jd.add_argument("--seed", metavar="COL", help="the seed column (default: one seed per configuration)")
    jd.add_argument("--status", metavar="COL", help="the run status column (complete/finished, pruned, diverged, failed/crashed; "
                                                     "running runs are left out); default: every run complete")
    jd.add_argument("--compare", metavar="COL,...", help="columns whose values label the rows (one verdict per row)")
    jd.add_argument("--kind", choices=("accuracy", "loss", "bleu"),
                    help="what the metric is (default: read from its name): its direction and no-learning value m0 follow")
    way = jd.add_mutually_exclusive_group()
    way.add_argument("--maximize", dest="direction", action="store_const", const="maximize", help="the metric is maximized (a check)")
    way.add_argument("--minimize", dest="direction", action="store_const", const="minimize", help="the metric is minimized")
    jd.add_argument("--classes", type=int, metavar="N", help="the task's class count: m0 = chance 1/N for accuracy, ln N for a loss")
    jd.add_argument("--m0", type=float, help="the no-learning value (overrides --classes)")
    jd.add_argument("--reference", metavar="S", help="the reference size (default: the smallest)")
    jd.add_argument("--epsilon", metavar="E", help="the regret a 'yes' allows (default 3%% of the row's gap between its best and m0)")
    jd.add_argument("--criterion", choices=("regret", "drift"), default="regret", help="what the verdict judges (default regret)")
    jd.add_argument("--tolerance", type=float, default=1.0, metavar="OCT", help="octaves of lr_drift a 'yes' allows with --criterion drift")
    jd.add_argument("--format", default="md", help="comma-separated: md,csv,tex,html (default: md)")
    jd.add_argument("--out", default="judged", help="output directory (default: ./judged)")
    jd.add_argument("--no-plots", action="store_true", help="write no figures")
    jd.set_defaults(func=cmd_judge)


def _add_validate(sub: argparse._SubParsersAction) -> None:
    """`nas-stab validate`: the spec, its overrides, and the opt-in timed estimate."""
    v = sub.add_parser("validate", help="check an experiment file; print the resolved configuration, the runs and their "
                                        "optimizer steps (--estimate: and the time they take)")
    v.add_argument("spec")
    v.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a dotted key")
    v.add_argument("--estimate", action="store_true", help="also time the cheapest and the dearest configuration (a few "
                   "steps and one whole run of each) and estimate the search's wall time: seconds to minutes")
    v.add_argument("--no-timing", action="store_true", help=argparse.SUPPRESS)  # the default since validate stopped training
    v.set_defaults(func=cmd_validate)
