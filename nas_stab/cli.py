"""The `nas-stab` command line (commands in the README). Thin: parse, call the library, print.

Exit codes: 0 done, 1 some trials failed, 2 bad input. Heavy libraries
(torch, Optuna, Ray) are imported inside the commands, so `--help` is fast.
"""
from __future__ import annotations

import argparse
import contextlib
import shlex
import sys
from pathlib import Path

from nas_stab import __version__
from nas_stab.errors import NasStabError, SpecErrors, Terminated


def _on_sigterm(signum, frame) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is cmd_run:
        import signal

        signal.signal(signal.SIGTERM, _on_sigterm)  # like Ctrl-C: close what runs, keep what is written
        args.keep_frozen = argv is None  # the `nas-stab` process ends with this command (nas_stab/gcsetup.py)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return args.func(args) or 0
    except SpecErrors as e:
        for line in e.lines():
            print(f"error: {line}", file=sys.stderr)
        return e.exit_code
    except NasStabError as e:
        print(f"error: {e}", file=sys.stderr)
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
        print(f"error: {where}{e.strerror or e}; nothing finished was lost, rerun the same command to resume", file=sys.stderr)
        return 2
    except Exception as e:
        optuna = sys.modules.get("optuna")
        if optuna is None or not isinstance(e, optuna.exceptions.StorageInternalError):
            raise
        # the study's database refused a write (a full disk under study.db, a lost connection): one line
        why = " ".join(str(e.__cause__ or e).split("\n")[0].split())
        print(f"error: the Optuna storage failed to record ({why}); nothing finished was lost, rerun the same command "
              "to resume", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="nas-stab", description="Stability-aware neural architecture search, from YAML to leaderboards.")
    p.add_argument("--version", action="version", version=f"nas_stab {__version__}")
    sub = p.add_subparsers(metavar="COMMAND")

    v = sub.add_parser("validate", help="check an experiment file; print the resolved configuration, trial count and cost estimate")
    v.add_argument("spec")
    v.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a dotted key")
    v.add_argument("--no-timing", action="store_true", help="skip the few timed training steps of the cost estimate")
    v.set_defaults(func=cmd_validate)

    r = sub.add_parser("run", help="run an experiment (resumes if it was interrupted)")
    r.add_argument("spec")
    r.add_argument("--out", default="runs", help="output root; the run goes to OUT/<name>/ (default: runs)")
    r.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a dotted key")
    r.add_argument("--runner", choices=["local", "ray"], help="override runner.kind")
    r.add_argument("--address", help="Ray cluster address (with --runner ray): auto, HOST:PORT, or ray://HOST:PORT (Ray Client)")
    r.add_argument("--trials", type=int, help="override search.trials: a total, so a rerun with the same N trains nothing more (grid: its first N runs; bracket: N runs; samplers: N trials; a transfer search: N outer trials)")
    r.add_argument("--fresh", action="store_true", help="move an existing run of this name aside and start over")
    r.set_defaults(func=cmd_run)

    pr = sub.add_parser("probe", help="stability metrics at init (and after K steps) for every configuration, as a table and plots")
    pr.add_argument("spec")
    pr.add_argument("--steps", type=int, default=0, help="train K steps on the fixed probe batch before measuring again")
    pr.add_argument("--seeds", type=int, metavar="N", help="probe the first N seeds of the experiment file's seeds (default: all)")
    pr.add_argument("--out", default="runs", help="output root (default: runs); writes OUT/<name>/probe.* and plots/")
    pr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    pr.set_defaults(func=cmd_probe)

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
    lb.set_defaults(func=cmd_leaderboard)

    st = sub.add_parser("status", help="trials by status, best so far, time used and left")
    st.add_argument("run_dir")
    st.set_defaults(func=cmd_status)

    ls = sub.add_parser("list", help="registered architectures, datasets, knobs, samplers and pruners")
    ls.set_defaults(func=cmd_list)

    tb = sub.add_parser("tensorboard", help="(re)write the TensorBoard logs of a run directory's runs")
    tb.add_argument("run_dir")
    tb.set_defaults(func=cmd_tensorboard)

    sc = sub.add_parser("schema", help="print the JSON Schema of experiment files (for editors: completion and checks as you type)")
    sc.add_argument("--format", choices=["json", "markdown"], default="json",
                    help="json: the JSON Schema (default); markdown: the reference page docs/experiment-file.md")
    sc.add_argument("--out", help="write it to this file instead of standard output")
    sc.set_defaults(func=cmd_schema)
    return p


# ---------------------------------------------------------------- commands


def _load(args, *, probe: bool = False):
    from nas_stab.config import load_spec

    overrides = list(args.set)
    if getattr(args, "runner", None):
        overrides.append(f"runner.kind={args.runner}")
    if getattr(args, "address", None):
        overrides.append(f"runner.address={args.address}")
    spec = load_spec(args.spec, overrides, probe=probe)
    for note in spec.notes:
        print(f"warning: {note}", file=sys.stderr)
    from nas_stab.config.rules import leaderboard_warnings

    for w in ([] if probe else leaderboard_warnings(spec)):
        print(f"warning: {args.spec}: leaderboard: {w}", file=sys.stderr)
    return spec


def cmd_validate(args) -> int:
    import yaml

    from nas_stab.config.display import applicable_plain
    from nas_stab.search.plan import base_lookup

    spec = _load(args)
    plain = applicable_plain(spec)
    print(yaml.safe_dump(plain, sort_keys=False, allow_unicode=True).rstrip())
    print("---")
    n_seeds = len(spec.seeds)
    if spec.search.transfer is not None:
        from nas_stab.search.transfer import inner_points

        inner = len(inner_points(spec))
        runs = spec.search.trials * inner * n_seeds
        if spec.search.transfer.inner == "bracket":
            n_sizes = len(spec.space.values_of(spec.space.get(spec.leaderboard.transfer)))
            print(f"trials: {spec.search.trials} architectures sampled by {spec.search.sampler} x {n_sizes} sizes x "
                  f"{inner // max(1, n_sizes)} start lrs x "
                  f"{n_seeds} seed(s) = {runs} runs at least; bracket adds learning rates until each size's optimum is "
                  f"bracketed (search.transfer: {', '.join(spec.search.transfer.objectives)}, inner: bracket)")
        else:
            n_sizes = len(spec.space.values_of(spec.space.get(spec.leaderboard.transfer)))
            print(f"trials: {spec.search.trials} architectures sampled by {spec.search.sampler} x {n_sizes} sizes x "
                  f"{inner // max(1, n_sizes)} lrs x {n_seeds} seed(s) = {runs} runs "
                  f"(search.transfer: {', '.join(spec.search.transfer.objectives)})")
    elif spec.search.sampler in ("grid", "bracket"):
        points = len(spec.space.grid(base_lookup(spec))) if spec.space.dims else 1
        runs = points * n_seeds
        more = "; bracket adds learning rates until each optimum is bracketed" if spec.search.sampler == "bracket" else ""
        print(f"trials: {points} configurations x {n_seeds} seed(s) = {runs} runs ({spec.search.sampler}{more})")
        if spec.seeds_more:
            print(f"adaptive seeds: then up to {len(spec.seeds_more)} more seed(s) each, only at the cells a still-open "
                  f"verdict rests on (at most {points * len(spec.seeds_more)} more runs; docs/leaderboard.md, Adaptive seeds)")
    else:
        runs = spec.search.trials * n_seeds
        print(f"trials: {spec.search.trials} sampled by {spec.search.sampler} x {n_seeds} seed(s) = {runs} runs at most")
    from nas_stab.estimate import estimate_cost, process_age

    _preflight_data(spec)
    print(estimate_cost(spec, runs, timed=not args.no_timing, startup_s=process_age()))
    print(f"ok: {args.spec} is valid")
    return 0


def _preflight_data(spec) -> str:
    """Load the base configuration's dataset once, so a missing or corrupt file is
    one clear error (exit 2) before anything is written, not a failure per trial.
    Returns, and prints, how its splits were made (provenance)."""
    from nas_stab.data import load_dataset

    if spec.task.kind == "classification":
        data = load_dataset(spec, "cpu")
    else:
        from nas_stab.tasks import load_task

        data = load_task(spec, spec.seeds[0], "cpu").data
    note = f"{spec.task.dataset.name}: {getattr(data, 'note', '') or 'splits as found'}"
    print(f"data: {note}", file=sys.stderr)
    return note


def cmd_run(args) -> int:
    from nas_stab import gcsetup

    with gcsetup.setup(getattr(args, "keep_frozen", False)) as setup_done:
        return _run(args, setup_done)


def _run(args, setup_done) -> int:
    from nas_stab.data import reuse_loaded
    from nas_stab.errors import SpecError
    from nas_stab.results.rundir import RunDir

    if args.trials is not None and not 1 <= args.trials <= 10_000_000:
        raise SpecError(f"must be a count from 1 to 10000000, got {args.trials}", key="--trials")
    loaded = _load(args)
    spec = RunDir.adopt_earlier_defaults(args.out, loaded)  # a run directory made before a default changed keeps it
    if spec.runner.kind == "ray" and spec.runner.address:
        from nas_stab.search.ray_runner import check_reachable

        check_reachable(spec.runner.address, spec.runner.connect_timeout_s)  # before the run directory is written
    # runs trained in this process (local runner, one at a time) use the data the check loads;
    # worker processes (Ray, local concurrency > 1) load their own
    in_process = spec.runner.kind == "local" and spec.runner.concurrency == 1
    with reuse_loaded() if in_process else contextlib.nullcontext():
        data_note = _preflight_data(spec)
        with RunDir.open(args.out, spec, fresh=args.fresh, data_note=data_note) as rd:
            rd.log(f"nas-stab run {args.spec} (runner {spec.runner.kind})")
            rd.log(f"data: {data_note}")
            if spec is not loaded:
                rd.log("this run directory was made before defaults changed; it keeps its values (spec.yaml)")
            print(f"run directory: {rd.path}", file=sys.stderr)
            from nas_stab.results.status import watch_commands

            for c in watch_commands(spec, rd.path):
                print(f"watch it: {c}", file=sys.stderr)
            if spec.runner.kind == "ray":
                from nas_stab.search.ray_runner import run_ray as run
            else:
                from nas_stab.search.local import run_local as run
            setup_done()
            counts = run(spec, rd, trials=args.trials)
            rd.log(f"finished: {counts}")
            paths = _write_leaderboard(rd)
            for line in rd.track_end(paths):  # MLflow / W&B (logging.tracking): best effort, said in log.txt
                print(f"warning: tracking: {line}", file=sys.stderr)
    return 1 if counts.get("failed") else 0


def _write_leaderboard(rd) -> dict[str, Path]:
    """leaderboard.md at the end of every run; the figures are `nas-stab leaderboard`'s
    (drawing them here cost ~1.5 s of every run, matplotlib's import included). Returns what was written."""
    from nas_stab.results.leaderboard import build_leaderboard

    paths = build_leaderboard([rd.path], formats=("md",), plots=False)
    print(Path(paths["md"]).read_text(encoding="utf-8"))  # what was written, not a second analysis
    print(f"plots and an HTML page: nas-stab leaderboard {rd.path} --format md,html", file=sys.stderr)
    return paths


def cmd_probe(args) -> int:
    from nas_stab.stability.probe_cmd import run_probe

    spec = _load(args, probe=True)
    command = "nas-stab " + " ".join(shlex.quote(a) for a in sys.argv[1:]) if sys.argv[1:2] == ["probe"] else None
    return run_probe(spec, steps=args.steps, out_root=Path(args.out), seeds=args.seeds, command=command) or 0


def cmd_leaderboard(args) -> int:
    from nas_stab.errors import SpecError
    from nas_stab.results.leaderboard import build_leaderboard
    from nas_stab.results.values import number_or_text

    formats = tuple(f.strip() for f in args.format.split(",") if f.strip())
    bad = [f for f in formats if f not in ("md", "csv", "tex", "html")]
    if bad or not formats:
        raise SpecError(f"unknown format {bad[0] if bad else '(none)'!r}; choose from md, csv, tex, html", key="--format")
    if args.epsilon is not None:
        from nas_stab.metrics import parse_epsilon

        try:
            parse_epsilon(args.epsilon)
        except ValueError as e:
            raise SpecError(str(e), key="--epsilon") from None
    overrides = {"metric": args.metric, "transfer": args.transfer, "lr": args.lr, "tolerance": args.tolerance,
                 "criterion": args.criterion, "epsilon": args.epsilon,
                 "compare": tuple(k.strip() for k in args.compare.split(",") if k.strip()) if args.compare is not None else None,
                 "reference": number_or_text(args.reference) if args.reference is not None else None}
    if args.metric is not None:
        from nas_stab import metrics
        from nas_stab.textfmt import did_you_mean

        if args.metric not in metrics.OBJECTIVES:
            raise SpecError(f"unknown metric {args.metric!r}" + did_you_mean(args.metric, metrics.OBJECTIVES), key="--metric")
    if args.tolerance is not None and not args.tolerance > 0:
        raise SpecError(f"must be > 0 octaves, got {args.tolerance}", key="--tolerance")
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


def _track_leaderboard(run_dir: Path, paths: dict[str, Path]) -> None:
    """`nas-stab leaderboard RUN_DIR` of a run with logging.tracking: its tables into MLflow / W&B, with the
    runs a failure left out. Under the run directory's lock (a driver running there logs at its end);
    best effort, as during the search: a failure is a warning and a line in log.txt, never an error."""
    from nas_stab.errors import RunError
    from nas_stab.results.reader import read_run
    from nas_stab.results.rundir import RunDir
    from nas_stab.results.tracking import backends, open_tracking

    run = read_run(run_dir)
    if not backends(run.spec.logging.tracking):
        return
    try:
        with RunDir.lock(run.path) as rd:
            tracking = open_tracking(run.spec, run.path, run.meta, rd.log)
            try:
                n = tracking.finish(paths, run.path, again=True)
            finally:
                tracking.close()
    except RunError as e:
        print(f"warning: tracking: not logged ({e}); the driver logs the leaderboard when it ends", file=sys.stderr)
        return
    for line in tracking.failures:
        print(f"warning: tracking: {line}", file=sys.stderr)
    if not tracking.failures:
        print(f"tracking: the leaderboard logged to {', '.join(tracking.trackers)}"
              + (f", with {n} run(s) not logged before" if n else ""))


def cmd_status(args) -> int:
    from nas_stab.results.status import status_text

    print(status_text(Path(args.run_dir)))
    return 0


def cmd_list(args) -> int:
    from nas_stab.config import schema
    from nas_stab.data import DATASETS
    from nas_stab.models import ARCHS
    from nas_stab.search.optuna_study import PRUNERS, SAMPLERS

    def section(title, reg):
        print(f"{title}:")
        for name, e in reg.items():
            extra = f" [{e.info['task']}]" if "task" in e.info else ""
            print(f"  {name:<22}{extra} {e.info.get('doc', '')}")

    section("architectures", ARCHS)
    section("datasets", DATASETS)
    section("samplers", SAMPLERS)
    section("pruners", PRUNERS)
    print("knobs (model.*):")
    import dataclasses
    import typing

    hints = typing.get_type_hints(schema.ModelConfig)
    for f in dataclasses.fields(schema.ModelConfig):
        tp = hints[f.name]
        choices = typing.get_args(tp) if typing.get_origin(tp) is typing.Literal else ()
        vals = " | ".join(choices) if choices else f"default {f.default!r}"
        doc = f.metadata.get("doc", "")
        print(f"  {f.name:<18} {vals}{'  -- ' + doc if doc else ''}")
    print("every key of an experiment file, with types, ranges and defaults: docs/experiment-file.md (nas-stab schema --format markdown)")
    return 0


def cmd_tensorboard(args) -> int:
    from nas_stab.results.reader import read_run
    from nas_stab.results.rundir import RunDir
    from nas_stab.results.tensorboard import rebuild

    run = read_run(args.run_dir)  # a run directory with a valid spec.yaml, before anything is touched
    with RunDir.lock(run.path):  # no driver writes it meanwhile
        n, root = rebuild(run.path, list(run.spec.space.keys), run.spec.task.kind)
    print(f"{n} runs: tensorboard --logdir {root}")
    return 0


def cmd_schema(args) -> int:
    import json

    from nas_stab.config.json_schema import json_schema
    from nas_stab.config.reference import markdown_reference

    text = json.dumps(json_schema(), indent=2) + "\n" if args.format == "json" else markdown_reference()
    if args.out:
        from nas_stab.results.atomic import atomic_write

        atomic_write(Path(args.out), text)
        print(f"wrote {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
