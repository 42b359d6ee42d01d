"""The commands of `nas-stab` (the parser and the exit codes are in cli/__init__.py): each takes the parsed
arguments, calls the library and prints.

Imports are inside the commands, deferred for start-up time: `nas-stab --help` imports this module, and a
command pays only for what it uses (config and yaml ~0.1 s, pandas ~0.5 s, torch, Optuna, Ray; even
dataclasses, typing, json and difflib would add a third to `--help`'s ~40 ms).
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import shlex
import sys
import typing
from pathlib import Path

from nas_stab import gcsetup, metrics
from nas_stab.errors import RunError, SpecError
from nas_stab.search.plan import base_lookup
from nas_stab.search.ray.cluster import check_reachable
from nas_stab.store.atomic import atomic_write
from nas_stab.store.reader import iter_rows, read_run
from nas_stab.textfmt import did_you_mean, printable
from nas_stab.trackers.tensorboard import rebuild

if typing.TYPE_CHECKING:
    from nas_stab.config.schema import Spec


def _load(args: argparse.Namespace, *, probe: bool = False) -> Spec:
    from nas_stab.config import load_spec  # deferred: loads PyYAML only when this runs

    overrides = list(args.set)
    if getattr(args, "runner", None):
        overrides.append(f"runner.kind={args.runner}")
    if getattr(args, "address", None):
        overrides.append(f"runner.address={args.address}")
    spec = load_spec(args.spec, overrides, probe=probe)
    for note in spec.notes:
        print(f"warning: {note}", file=sys.stderr)
    from nas_stab.config.rules_leaderboard import leaderboard_warnings  # deferred: loads PyYAML only when this runs

    for w in ([] if probe else leaderboard_warnings(spec)):
        print(f"warning: {args.spec}: leaderboard: {w}", file=sys.stderr)
    return spec


def cmd_validate(args: argparse.Namespace) -> int:
    import yaml  # deferred: loads PyYAML only when this runs

    from nas_stab.config.display import applicable_plain  # deferred: loads PyYAML only when this runs

    spec = _load(args)
    plain = applicable_plain(spec)
    print(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True).rstrip())
    print("---")
    runs = _print_trials(spec)
    from nas_stab.estimate import estimate_cost, process_age  # deferred: loads torch, PyYAML, NumPy only when this runs

    _preflight_data(spec)
    timed = bool(args.estimate)
    print(estimate_cost(spec, runs, timed=timed, startup_s=process_age()))
    if not timed:
        print(f"time: nas-stab validate {args.spec} --estimate times a few steps and one whole run of the cheapest "
              "and the dearest configuration")
    print(f"ok: {args.spec} is valid")
    return 0


def _print_trials(spec: Spec) -> int:
    """Print what the search trains (trials x seeds, or a transfer search's outer x inner); returns the runs."""
    from nas_stab.config.mode import search_mode  # deferred: nas_stab.config loads the YAML and schema machinery (~40 ms of --help)
    from nas_stab.search.sources.transfer import inner_points  # deferred: loads PyYAML only when this runs

    n_seeds = len(spec.seeds)
    mode = search_mode(spec)
    if mode.transfer:
        inner = len(inner_points(spec))
        assert spec.search.trials is not None and spec.search.transfer is not None, "a transfer search (validated)"
        objectives = ", ".join(spec.search.transfer.objectives)
        runs = spec.search.trials * inner * n_seeds
        if mode.inner_bracket:
            n_sizes = len(spec.space.values_of(spec.space.get(spec.leaderboard.transfer)))
            print(f"trials: {spec.search.trials} architectures sampled by {spec.search.sampler} x {n_sizes} sizes x "
                  f"{inner // max(1, n_sizes)} start lrs x "
                  f"{n_seeds} seed(s) = {runs} runs at least; bracket adds learning rates until each size's optimum is "
                  f"bracketed (search.transfer: {objectives}, inner: bracket)")
        else:
            n_sizes = len(spec.space.values_of(spec.space.get(spec.leaderboard.transfer)))
            print(f"trials: {spec.search.trials} architectures sampled by {spec.search.sampler} x {n_sizes} sizes x "
                  f"{inner // max(1, n_sizes)} lrs x {n_seeds} seed(s) = {runs} runs "
                  f"(search.transfer: {objectives})")
    elif mode.job_source:
        points = len(spec.space.grid(base_lookup(spec))) if spec.space.dims else 1
        runs = points * n_seeds
        more = "; bracket adds learning rates until each optimum is bracketed" if mode.kind == "bracket" else ""
        print(f"trials: {points} configurations x {n_seeds} seed(s) = {runs} runs ({mode.kind}{more})")
        if mode.adaptive:
            print(f"adaptive seeds: then up to {len(spec.seeds_more)} more seed(s) each, only at the cells a still-open "
                  f"verdict rests on (at most {points * len(spec.seeds_more)} more runs; docs/leaderboard.md, Adaptive seeds)")
    else:
        assert spec.search.trials is not None, "a sampled search has search.trials (validated)"
        runs = spec.search.trials * n_seeds
        print(f"trials: {spec.search.trials} sampled by {spec.search.sampler} x {n_seeds} seed(s) = {runs} runs at most")
    return runs


def _preflight_data(spec: Spec) -> str:
    """Load the base configuration's dataset once, so a missing or corrupt file is
    one clear error (exit 2) before anything is written, not a failure per trial.
    Returns, and prints, how its splits were made (provenance)."""
    from nas_stab.data import load_dataset  # deferred: loads torch, PyYAML, NumPy only when this runs

    if spec.task.kind == "classification":
        data = load_dataset(spec, "cpu")
    else:
        from nas_stab.tasks import load_task  # deferred: loads torch, PyYAML, NumPy only when this runs

        data = load_task(spec, spec.seeds[0], "cpu").data
    note = f"{spec.task.dataset.name}: {getattr(data, 'note', '') or 'splits as found'}"
    print(f"data: {note}", file=sys.stderr)
    return note


def cmd_run(args: argparse.Namespace) -> int:
    with gcsetup.setup(getattr(args, "keep_frozen", False)) as setup_done:
        return _run(args, setup_done)


def _run(args: argparse.Namespace, setup_done: typing.Callable[[], None]) -> int:
    from nas_stab.data import reuse_loaded  # deferred: loads torch, PyYAML, NumPy only when this runs
    from nas_stab.store.rundir import RunDir  # deferred: loads PyYAML only when this runs
    from nas_stab.trackers.views import record_views  # deferred: loads PyYAML only when this runs

    if args.trials is not None and not 1 <= args.trials <= 10_000_000:
        raise SpecError(f"must be a count from 1 to 10000000, got {args.trials}", key="--trials")
    loaded = _load(args)
    spec = RunDir.adopt_earlier_defaults(args.out, loaded)  # a run directory made before a default changed keeps it
    if spec.runner.kind == "ray" and spec.runner.address:
        check_reachable(spec.runner.address, spec.runner.connect_timeout_s)  # before the run directory is written
    # runs trained in this process (local runner, one at a time) use the data the check loads;
    # worker processes (Ray, local concurrency > 1) load their own
    in_process = spec.runner.kind == "local" and spec.runner.concurrency == 1
    with reuse_loaded() if in_process else contextlib.nullcontext():
        if spec.runner.kind == "table":  # served from a published table: no data, nothing trained
            from nas_stab.search.table_runner import data_note as table_note  # deferred: loads pandas only when this runs

            data_note = table_note(spec)
        else:
            data_note = _preflight_data(spec)
        with RunDir.open(args.out, spec, fresh=args.fresh, data_note=data_note, views=record_views) as rd:
            rd.log(f"nas-stab run {args.spec} (runner {spec.runner.kind})")
            rd.log(f"data: {data_note}")
            if spec is not loaded:
                rd.log("this run directory was made before defaults changed; it keeps its values (spec.yaml)")
            print(f"run directory: {rd.path}", file=sys.stderr)
            from nas_stab.results.status import watch_commands  # deferred: loads PyYAML, pandas, NumPy only when this runs

            for c in watch_commands(spec, rd.path):
                print(f"watch it: {c}", file=sys.stderr)
            run: typing.Callable[..., dict]
            if spec.runner.kind == "ray":
                from nas_stab.search.ray.runner import run_ray as run  # deferred: loads PyYAML, pandas, NumPy only when this runs
            elif spec.runner.kind == "table":
                from nas_stab.search.table_runner import run_table as run  # deferred: loads pandas only when this runs
            else:
                from nas_stab.search.local import run_local as run  # deferred: loads PyYAML, pandas, NumPy only when this runs
            setup_done()
            counts = run(spec, rd, trials=args.trials)
            rd.log(f"finished: {counts}")
            paths = _write_leaderboard(rd)
            for line in rd.track_end(paths):  # MLflow / W&B (logging.tracking): best effort, said in log.txt
                print(f"warning: tracking: {line}", file=sys.stderr)
            for line in rd.track_summary():
                print(f"tracking: {line}")
    return 1 if counts.get("failed") else 0


def _write_leaderboard(rd) -> dict[str, Path]:
    """leaderboard.md at the end of every run; the figures are `nas-stab leaderboard`'s
    (drawing them here cost ~1.5 s of every run, matplotlib's import included). Returns what was written."""
    from nas_stab.results.leaderboard import build_leaderboard  # deferred: loads PyYAML, pandas, NumPy only when this runs

    paths = build_leaderboard([rd.path], formats=("md",), plots=False)
    print(Path(paths["md"]).read_text(encoding="utf-8"))  # what was written, not a second analysis
    print(f"plots and an HTML page: nas-stab leaderboard {rd.path} --format md,html", file=sys.stderr)
    return paths


def cmd_probe(args: argparse.Namespace) -> int:
    from nas_stab.probe.cmd import run_probe  # deferred: loads NumPy only when this runs

    spec = _load(args, probe=True)
    command = "nas-stab " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["probe"] else None
    return run_probe(spec, steps=args.steps, out_root=Path(args.out), seeds=args.seeds, command=command) or 0


def cmd_conform(args: argparse.Namespace) -> int:
    from nas_stab.conform.cmd import EXIT, conform, report, verdict, write_csvs, write_outputs  # deferred: loads torch only when this runs

    spec = _load(args, probe=True)
    if args.steps < 1 or args.seeds < 2:
        raise SpecError("--steps must be >= 1 and --seeds >= 2 (an interval needs two seeds)", key="--steps" if args.steps < 1 else "--seeds")
    found = conform(spec, args.expect, steps=args.steps, seeds=args.seeds)
    report(spec, args.expect, found)
    out = Path(args.out) / f"{spec.name}.conform-{args.expect}"
    for p in (write_csvs if args.no_plots else write_outputs)(out, found):
        print(f"{p.stem}: {p}")
    return EXIT[verdict(found)]


BENCH_COLUMNS = ("table", "file", "seed", "status", "train.lr", "objective", "run_id")


def cmd_bench(args: argparse.Namespace) -> int:
    from nas_stab import bench  # deferred: loads pandas only when this runs
    from nas_stab.analysis.values import number_or_text  # deferred: loads pandas, NumPy only when this runs

    if args.what == "verify":
        files = bench.verify()
        m = bench.manifest()
        print(f"release {m['release']} (schema {m['schema_version']}): {', '.join(files)} match the manifest; "
              f"{m['rows']['runs.parquet']} runs")
        return 0
    if args.what == "tables":
        print(bench.tables().to_string(index=False))
        return 0
    if args.what == "fields":
        print("\n".join(bench.load().columns))
        return 0
    bad = [f for f in args.filters if "=" not in f]
    if bad:
        raise SpecError(f"expected KEY=VALUE, got {' '.join(bad)}", key="bench query")
    filters = {k: number_or_text(v) for k, v in (f.split("=", 1) for f in args.filters)}
    if args.what == "history":
        return _bench_history(bench.history(**filters), args.out, bench.history_tables())
    found = bench.query(**filters)
    cols = [c.strip() for c in args.columns.split(",")] if args.columns else \
        [c for c in dict.fromkeys([*BENCH_COLUMNS[:2], *filters, *BENCH_COLUMNS[2:]]) if c in found.columns]
    missing = [c for c in cols if c not in found.columns]
    if missing:
        raise SpecError(f"no field {missing[0]!r} (nas-stab bench fields lists them)", key="--columns")
    if args.format == "csv":
        print(found[cols].to_csv(index=False), end="")
    else:
        print(found[cols].to_string(index=False) if len(found) else "(no run)")
        print(f"{len(found)} run(s)", file=sys.stderr)
    return 0


def _bench_history(steps: typing.Any, out: str | None, held: dict) -> int:
    """`nas-stab bench history`: the steps to a CSV file (`--out`), or one line per run: its steps and last values."""
    if steps.empty:
        print(f"(no history: the release holds the histories of {', '.join(held) or 'no table'})", file=sys.stderr)
        return 0
    if out:
        steps.to_csv(out, index=False)
        print(f"{steps['key'].nunique()} run(s), {len(steps):,} steps: {out}", file=sys.stderr)
        return 0
    show = [c for c in ("train_loss", "val_loss", "val_acc", "fwd_ratio", "update_ratio") if c in steps.columns]
    last = steps.groupby(["table", "run_id", "key"], sort=False).agg(steps=("step", "max"), **{
        c: (c, lambda x: x.dropna().iloc[-1] if x.notna().any() else float("nan")) for c in show})
    print(last.reset_index().to_string(index=False))
    print(f"{len(last)} run(s) (the last value of each column; --out FILE for every step)", file=sys.stderr)
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    from nas_stab.analysis.values import number_or_text  # deferred: loads pandas, NumPy only when this runs
    from nas_stab.results.leaderboard import build_leaderboard  # deferred: loads PyYAML, pandas, NumPy only when this runs

    formats = tuple(f.strip() for f in args.format.split(",") if f.strip())
    bad = [f for f in formats if f not in ("md", "csv", "tex", "html")]
    if bad or not formats:
        raise SpecError(f"unknown format {bad[0] if bad else '(none)'!r}; choose from md, csv, tex, html", key="--format")
    if args.epsilon is not None:
        try:
            metrics.parse_epsilon(args.epsilon)
        except ValueError as e:
            raise SpecError(str(e), key="--epsilon") from None
    overrides = {"metric": args.metric, "transfer": args.transfer, "lr": args.lr, "tolerance": args.tolerance,
                 "criterion": args.criterion, "epsilon": args.epsilon, "report": args.report,
                 "compare": tuple(k.strip() for k in args.compare.split(",") if k.strip()) if args.compare is not None else None,
                 "reference": number_or_text(args.reference) if args.reference is not None else None}
    if args.metric is not None and args.metric not in metrics.OBJECTIVES:
        raise SpecError(f"unknown metric {args.metric!r}" + did_you_mean(args.metric, metrics.OBJECTIVES), key="--metric")
    if args.report is not None and args.report != "none" and args.report not in metrics.REPORTS:
        raise SpecError(f"unknown metric {args.report!r} (or none)" + did_you_mean(args.report, metrics.REPORTS), key="--report")
    if args.tolerance is not None and not args.tolerance > 0:
        raise SpecError(f"must be > 0 octaves, got {args.tolerance}", key="--tolerance")
    for d in args.run_dirs:
        upgrade_decisions(Path(d))
    paths = build_leaderboard([Path(d) for d in args.run_dirs], formats=formats, out_dir=Path(args.out) if args.out else None,
                              overrides=overrides)
    for kind, p in paths.items():
        print(f"{kind}: {p}")
    if len(args.run_dirs) == 1 and (args.out is None or Path(args.out).resolve() == Path(args.run_dirs[0]).resolve()):
        _track_leaderboard(Path(args.run_dirs[0]), paths)
    md = paths.get("md")
    if md:
        print()
        print(Path(md).read_text(encoding="utf-8"))
    return 0


def cmd_judge(args: argparse.Namespace) -> int:
    from nas_stab.results.judge import SweepColumns, judge, read_sweep, split_keys  # deferred: loads pandas only when this runs
    from nas_stab.results.leaderboard import write_leaderboard  # deferred: loads pandas, matplotlib only when this runs

    if args.epsilon is not None:
        try:
            metrics.parse_epsilon(args.epsilon)
        except ValueError as e:
            raise SpecError(str(e), key="--epsilon") from None
    if args.tolerance is not None and not args.tolerance > 0:
        raise SpecError(f"must be > 0 octaves, got {args.tolerance}", key="--tolerance")
    sweep = read_sweep(args.sweep, mlflow_uri=args.mlflow, experiment=args.experiment, optuna_storage=args.optuna, study=args.study)
    cols = SweepColumns(lr=args.lr, metric=args.metric, size=args.size, seed=args.seed, status=args.status,
                        compare=split_keys(args.compare))
    a, prov = judge(sweep, cols, kind=args.kind, direction=args.direction, classes=args.classes, m0=args.m0,
                    epsilon=args.epsilon, reference=args.reference, criterion=args.criterion, tolerance=args.tolerance)
    paths = write_leaderboard(a, prov, Path(args.out), args.format, plots=not args.no_plots)
    for kind, p in paths.items():
        print(f"{kind}: {p}")
    md = paths.get("md")
    if md:
        print()
        print(Path(md).read_text(encoding="utf-8"))
    return 0


def upgrade_decisions(run_dir: Path, *, quiet: bool = False) -> bool:
    """A run directory made before searches recorded their decisions gets them, replayed from its trials.csv
    (`search/replay.py`), once, under its lock; whether it wrote them. A run that needs none, has them, is in
    use by a driver or cannot be written is left as it is (the command reading it then says what to do)."""
    from nas_stab.store.decisions import DECISIONS, needs_decisions, read_decisions
    from nas_stab.store.rundir import RunDir  # deferred: loads PyYAML only when this runs

    try:
        run = read_run(run_dir)
        if not needs_decisions(run.spec):
            return False
        have = read_decisions(run.path)
    except (RunError, OSError, ValueError):
        return False  # the command reading the run says what is wrong with it
    if have is not None and have.complete:
        return False
    try:
        from nas_stab.search.replay import upgrade  # deferred: loads Optuna, pandas only when this runs

        with RunDir.lock(run.path):
            records = run.trials.to_dict("records") if (run.path / "trials.csv").is_file() else []
            done = upgrade(run.path, run.spec, records)
    except (RunError, OSError, ValueError) as e:
        if not quiet:
            print(f"warning: {run_dir}: decisions not replayed ({e})", file=sys.stderr)
        return False
    if done and not quiet:
        print(f"{run.path / DECISIONS}: the search's decisions replayed from trials.csv (once: a run directory "
              "made before nas_stab recorded them)", file=sys.stderr)
    return done


def cmd_upgrade(args: argparse.Namespace) -> int:
    for d in args.run_dirs:
        read_run(Path(d))  # not a run directory: an error naming the file
        if not upgrade_decisions(Path(d)):
            print(f"{d}: nothing to upgrade")
    return 0


def cmd_claims(args: argparse.Namespace) -> int:
    from nas_stab.results.claims_table import claims_csv, judge_run  # deferred: loads pandas, SciPy only when this runs
    from nas_stab.store.atomic import atomic_write  # deferred: keeps --help fast

    upgrade_decisions(Path(args.run_dir))
    df = judge_run(Path(args.run_dir), args.claims)
    out = Path(args.out) if args.out else Path(args.run_dir) / "claims.csv"
    atomic_write(out, claims_csv(df))
    for r in df.to_dict("records"):  # a claim's text is the user's: no terminal control sequence reaches the terminal
        print(printable(f"{r['id']}: {r['verdict']} ({int(r['seeds'])} seeds run, {int(r['needed'])} needed; "
                        f"{r['estimate']:+.4g}, 90% {r['lo']:+.4g} to {r['hi']:+.4g}; {r['criterion']})"))
    print(f"claims_csv: {out}")
    return 0


def _track_leaderboard(run_dir: Path, paths: dict[str, Path]) -> None:
    """`nas-stab leaderboard RUN_DIR` of a run with logging.tracking: its tables into MLflow / W&B, with the
    runs a failure left out. Under the run directory's lock (a driver running there logs at its end);
    best effort, as during the search: a failure is a warning and a line in log.txt, never an error."""
    from nas_stab.store.rundir import RunDir  # deferred: loads PyYAML only when this runs
    from nas_stab.trackers.tracking import backends, open_tracking  # deferred: loads PyYAML, pandas, NumPy only when this runs

    run = read_run(run_dir)
    if not backends(run.spec.logging.tracking):
        return
    try:
        with RunDir.lock(run.path) as rd:
            tracking = open_tracking(run.spec, run.path, run.meta, rd.log)
            assert tracking is not None, "its backends were checked above"
            try:
                tracking.finish(paths, run.path, again=True)
            finally:
                tracking.close()
    except RunError as e:
        print(f"warning: tracking: not logged ({e}); the driver logs the leaderboard when it ends", file=sys.stderr)
        return
    for line in tracking.failures:
        print(f"warning: tracking: {line}", file=sys.stderr)
    for line in tracking.summary():
        print(f"tracking: {line}")


def cmd_status(args: argparse.Namespace) -> int:
    from nas_stab.results.status import status_text  # deferred: loads PyYAML, pandas, NumPy only when this runs

    upgrade_decisions(Path(args.run_dir))
    print(status_text(Path(args.run_dir)))
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    from nas_stab.config import schema  # deferred: loads PyYAML only when this runs
    from nas_stab.data import DATASETS  # deferred: loads torch, PyYAML, NumPy only when this runs
    from nas_stab.models import ARCHS  # deferred: loads torch, PyYAML, NumPy only when this runs
    from nas_stab.search.optuna_study import PRUNERS, SAMPLERS  # deferred: loads PyYAML only when this runs

    def section(title, reg):
        print(f"{title}:")
        for name, e in reg.items():
            extra = f" [{e.info['task']}]" if "task" in e.info else ""
            print(f"  {name:<22}{extra} {e.info.get('doc', '')}")
            if e.info.get("options") is not None:  # its own options: task.dataset.<key>
                own = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(e.info["options"]))
                print(f"  {'':<22} options: {own}")

    section("architectures", ARCHS)
    section("datasets", DATASETS)
    section("samplers", SAMPLERS)
    section("pruners", PRUNERS)
    print("knobs (model.*):")

    hints = typing.get_type_hints(schema.ModelConfig)
    for f in dataclasses.fields(schema.ModelConfig):
        tp = hints[f.name]
        choices = typing.get_args(tp) if typing.get_origin(tp) is typing.Literal else ()
        vals = " | ".join(choices) if choices else f"default {f.default!r}"
        doc = f.metadata.get("doc", "")
        print(f"  {f.name:<18} {vals}{'  -- ' + doc if doc else ''}")
    print("every key of an experiment file, with types, ranges and defaults: docs/experiment-file.md (nas-stab schema --format markdown)")
    return 0


def cmd_tensorboard(args: argparse.Namespace) -> int:
    from nas_stab.store.rundir import RunDir  # deferred: loads PyYAML only when this runs

    run = read_run(args.run_dir)  # a run directory with a valid spec.yaml, before anything is touched
    if next(iter_rows(run.path), None) is None:  # (also refuses a trials.csv that is not a regular file)
        raise RunError(f"{run.path / 'trials.csv'}: no run recorded yet: nothing to write TensorBoard logs of")
    with RunDir.lock(run.path):  # no driver writes it meanwhile
        n, root = rebuild(run.path, list(run.spec.space.keys), run.spec.task.kind)
    print(f"{n} runs: tensorboard --logdir {root}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    from nas_stab.config.json_schema import json_schema  # deferred: loads PyYAML only when this runs
    from nas_stab.config.reference import markdown_reference  # deferred: loads PyYAML only when this runs

    plugins = not args.builtin
    text = json.dumps(json_schema(plugins), indent=2) + "\n" if args.format == "json" else markdown_reference(plugins)
    if args.out:
        atomic_write(Path(args.out), text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
