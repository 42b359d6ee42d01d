"""`nas-stab conform` against injected bugs: is each bug class caught, and how often does a correct model fail?

For each built-in model and parametrization (an MLP ResNet, the convolutional ResNet and the Transformer under
muP; the MLP ResNet and the ResNet under Depth-muP, the MLP ResNet under CompleteP), the correct model is checked,
then every bug of `nas_stab/conform/bugs.py` that applies to it is injected and checked again. A bug is *detected*
when the check exits 1 (a check fails); a bug class is detected when every case it applies to is. Then 20 correct
implementations (other seeds, other widths or depths, every model) measure the false alarms: a check that fails
on a correct model. Targets (issue 48): at least 9 of 10 bug classes detected, at most 1 false alarm in 20, each
check within 5 CPU-minutes.

    python benchmarks/bench_conform.py                 # the bug table and the 20 false-alarm runs (~6 min)
    python benchmarks/bench_conform.py --only bugs     # or: false-alarms
    python benchmarks/bench_conform.py --write         # both, stored in docs/conform/*.csv and rendered into the
                                                       # README's and docs/conform.md's table (a test keeps them equal)
"""
from __future__ import annotations

import argparse
import csv
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from nas_stab.config import loads_spec  # noqa: E402
from nas_stab.conform.bugs import BUGS  # noqa: E402
from nas_stab.conform.cmd import conform, verdict  # noqa: E402

MLP = """\
name: conform-mlp
task: {{dataset: {{name: digits}}}}
model: {{arch: mlp_resnet, depth: 2, width: 32, base_width: 32, parametrization: {form}, init: fan_in}}
train: {{optimizer: adam, lr: 0.003, batch_size: 64, steps: 1, threads: 1}}
space: {{model.width: {sizes}}}
"""
RESNET = """\
name: conform-resnet
task: {{dataset: {{name: synthetic, shape: [3, 8, 8], size: 512}}}}
model: {{arch: resnet, depth: 8, width: 8, base_width: 8, base_depth: 8, parametrization: {form}}}
train: {{optimizer: adam, lr: 0.001, batch_size: 64, steps: 1, threads: 1}}
space: {{model.{key}: {sizes}}}
"""
TRANSFORMER = """\
name: conform-transformer
task: {{kind: translation, dataset: {{name: synthetic, size: 256}}}}
model: {{arch: transformer, d_model: 16, base_width: 16, heads_per_branch: 2, ffn_ratio: 2.0, enc_layers: 1, dec_layers: 1,
        norm: ln, norm_position: pre, parametrization: {form}}}
train: {{optimizer: adam, lr: 0.001, batch_size: 32, steps: 1, threads: 1}}
search: {{objective: bleu}}
space: {{model.d_model: {sizes}}}
"""
DEPTH_MLP = """\
name: conform-depth-mlp
task: {{dataset: {{name: digits}}}}
model: {{arch: mlp_resnet, depth: 2, width: 64, base_width: 64, base_depth: 2, tau: 1, block: preact, parametrization: {form}}}
train: {{optimizer: adam, lr: 0.003, batch_size: 64, steps: 1, threads: 1}}
space: {{model.depth: {sizes}}}
"""

# (label, template, form, sizes, key)
CASES = [
    ("MLP ResNet, muP", MLP, "mup", [32, 64, 128, 256], "width"),
    ("ResNet (conv), muP", RESNET, "mup", [16, 32, 64, 128], "width"),
    ("Transformer, muP", TRANSFORMER, "mup", [16, 32, 64, 128], "d_model"),
    ("MLP ResNet, Depth-muP", DEPTH_MLP, "depth_mup", [2, 4, 8, 16], "depth"),
    ("ResNet (conv), Depth-muP", RESNET, "depth_mup", [8, 14, 26, 50], "depth"),
    ("MLP ResNet, CompleteP", DEPTH_MLP, "completep", [2, 4, 8, 16], "depth"),
]
# the 20 correct implementations of the false alarms: every case with its own sizes and other seeds, then every case
# at other sizes (and other seeds), then the first two cases at other sizes again with other seeds
OTHER_SIZES = {"MLP ResNet, muP": [64, 128, 256, 512], "ResNet (conv), muP": [8, 16, 32, 64],
               "Transformer, muP": [32, 64, 128, 256], "MLP ResNet, Depth-muP": [3, 6, 12, 24],
               "ResNet (conv), Depth-muP": [8, 20, 38, 74], "MLP ResNet, CompleteP": [3, 6, 12, 24]}


def case_spec(template: str, form: str, sizes: list[int], key: str):
    return loads_spec(template.format(form=form, sizes=sizes, key=key), probe=True)


def check(spec, form: str, mutate=None, first_seed: int = 0) -> tuple[str, list[str], float]:
    """(verdict, failing checks, CPU seconds) of one conform run."""
    t0 = resource.getrusage(resource.RUSAGE_SELF)
    axes = conform(spec, form, mutate=mutate, first_seed=first_seed)
    t1 = resource.getrusage(resource.RUSAGE_SELF)
    failing = sorted({f"{r.check} ({r.what})" for a in axes for r in a.results if r.status == "fail"})
    return verdict(axes), failing, (t1.ru_utime - t0.ru_utime) + (t1.ru_stime - t0.ru_stime)


def bug_table() -> tuple[list[tuple], dict[str, list[bool]]]:
    rows, by_class = [], {b.name: [] for b in BUGS}
    for label, template, form, sizes, key in CASES:
        spec = case_spec(template, form, sizes, key)
        v, failing, cpu = check(spec, form)
        rows.append((label, "(none: the correct model)", v, ", ".join(failing) or "-", cpu))
        print(f"{label:<26} {'(correct)':<46} {v:<10} {cpu:5.1f} s  {', '.join(failing) or '-'}", flush=True)
        for bug in BUGS:
            if not bug.applies(spec):
                continue
            v, failing, cpu = check(spec, form, bug.mutate)
            by_class[bug.name].append(v == "fails")
            rows.append((label, bug.name, v, ", ".join(failing) or "-", cpu))
            print(f"{label:<26} {bug.name:<46} {v:<10} {cpu:5.1f} s  {', '.join(failing) or '-'}", flush=True)
    return rows, by_class


def false_alarms() -> list[tuple]:
    runs = []
    for i in range(20):
        label, template, form, sizes, key = CASES[i % len(CASES)]
        if i >= len(CASES):
            sizes = OTHER_SIZES[label]
        seed = 100 + 10 * i
        spec = case_spec(template, form, sizes, key)
        v, failing, cpu = check(spec, form, first_seed=seed)
        runs.append((label, " ".join(map(str, sizes)), seed, v, ", ".join(failing) or "-", cpu))
        print(f"correct #{i + 1:<3} {label:<26} sizes {sizes} seeds {seed}+: {v:<10} {cpu:5.1f} s  {', '.join(failing) or '-'}",
              flush=True)
    return runs


STORE = ROOT / "docs" / "conform"
BEGIN, END = "<!-- conform table: begin -->", "<!-- conform table: end -->"
PAGES = (ROOT / "README.md", ROOT / "docs" / "conform.md")


def store(rows: list[tuple], runs: list[tuple]) -> None:
    STORE.mkdir(parents=True, exist_ok=True)
    with open(STORE / "bugs.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["case", "bug", "verdict", "failing", "cpu_s"])
        w.writerows([(*r[:4], f"{r[4]:.1f}") for r in rows])
    with open(STORE / "false_alarms.csv", "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["case", "sizes", "first_seed", "verdict", "failing", "cpu_s"])
        w.writerows([(*r[:5], f"{r[5]:.1f}") for r in runs])


def render() -> str:
    """The table of the stored results (docs/conform/bugs.csv, false_alarms.csv), as the README shows it."""
    with open(STORE / "bugs.csv") as f:
        bugs = list(csv.DictReader(f))
    with open(STORE / "false_alarms.csv") as f:
        runs = list(csv.DictReader(f))
    lines = ["| bug class | cases caught | checks that failed |", "|---|---|---|"]
    classes: dict[str, list[dict]] = {}
    for r in bugs:
        if not r["bug"].startswith("(none"):
            classes.setdefault(r["bug"], []).append(r)
    for name, rs in classes.items():
        caught = sum(r["verdict"] == "fails" for r in rs)
        checks = sorted({c.strip() for r in rs for c in r["failing"].split(",") if c.strip() not in ("", "-")})
        lines.append(f"| {name} | {caught} of {len(rs)} ({'; '.join(r['case'] for r in rs)}) | {', '.join(checks)} |")
    detected = sum(all(r["verdict"] == "fails" for r in rs) for rs in classes.values())
    correct = [r for r in bugs if r["bug"].startswith("(none")]
    alarms = sum(r["verdict"] == "fails" for r in runs)
    undecided = sum(r["verdict"] == "undecided" for r in runs)
    cpu = max(float(r["cpu_s"]) for r in bugs + runs)
    lines += ["", f"**{detected} of {len(classes)} bug classes caught** in every case they apply to (target 9 of 10); "
              f"**{alarms} false alarm(s) in {len(runs)} correct implementations** (target at most 1; "
              f"{len(runs) - alarms - undecided} conform, {undecided} undecided: no check failed, some inconclusive); "
              "the shipped correct models: " + "; ".join(f"{r['case']} {r['verdict']}" for r in correct)
              + f"; the dearest check {cpu:.0f} CPU-s (target 300). `python benchmarks/bench_conform.py --write`."]
    return "\n".join(lines) + "\n"


def write_pages() -> None:
    block = render()
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        if BEGIN not in text or END not in text:
            raise SystemExit(f"{page}: no {BEGIN} ... {END} markers")
        head, rest = text.split(BEGIN, 1)
        page.write_text(head + BEGIN + "\n" + block + END + rest.split(END, 1)[1], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", choices=("bugs", "false-alarms"))
    ap.add_argument("--write", action="store_true", help="store both (docs/conform/) and render the pages' tables")
    args = ap.parse_args(argv)
    if args.write and args.only:
        raise SystemExit("--write runs both parts")
    start = time.time()
    rows: list[tuple] = []
    runs: list[tuple] = []
    if args.only != "false-alarms":
        rows, by_class = bug_table()
        detected = [name for name, hits in by_class.items() if hits and all(hits)]
        tried = [name for name, hits in by_class.items() if hits]
        print(f"\nbug classes detected in every case they apply to: {len(detected)} of {len(tried)} (target >= 9 of 10)")
        for name, hits in by_class.items():
            print(f"  {name:<46} {sum(hits)} of {len(hits)} cases")
        cpu = max(r[4] for r in rows)
        print(f"dearest check: {cpu:.0f} CPU-s (target <= 300)")
    if args.only != "bugs":
        runs = false_alarms()
        alarms = sum(r[3] == "fails" for r in runs)
        undecided = sum(r[3] == "undecided" for r in runs)
        print(f"\nfalse alarms: {alarms} of {len(runs)} correct implementations (target <= 1); undecided {undecided}; "
              f"conforms {len(runs) - alarms - undecided}")
    print(f"wall {time.time() - start:.0f} s")
    if args.write:
        store(rows, runs)
        write_pages()
        print(render())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
