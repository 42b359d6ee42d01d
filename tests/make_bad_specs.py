"""Generate the corpus of malformed experiment files in tests/bad_specs/.

Run `python tests/make_bad_specs.py` to rebuild it. Each file's first line is
`# expect: <key or ->` naming the dotted key its error must name (`-` for
file-level errors: syntax, encoding, empty file). `tests/test_bad_specs.py`
checks that every file exits 2 with a one-line message naming file and line.
"""
from __future__ import annotations

import dataclasses
import typing
import zlib
from pathlib import Path

OUT = Path(__file__).parent / "bad_specs"

GOOD = {
    "name": "bad",
    "task": "  dataset: {name: digits}\n",
    "model": "  arch: mlp_resnet\n  width: 16\n",
    "train": "  lr: 0.1\n  steps: 10\n",
}


def doc(sections: dict[str, str], top: str = "name: bad\n") -> str:
    out = top
    for name, body in sections.items():
        out += f"{name}:\n{body}"
    return out


def base(**replace: str) -> str:
    secs = {k: v for k, v in GOOD.items() if k != "name"}
    secs.update(replace)
    return doc({k: v for k, v in secs.items() if v is not None})


def main() -> None:
    from nas_stab.config import schema
    from nas_stab.config.build import public_fields

    OUT.mkdir(exist_ok=True)
    for p in OUT.glob("*.yaml"):
        p.unlink()
    cases: list[tuple[str, str, str | bytes]] = []

    def add(name: str, expect: str, text: str | bytes) -> None:
        cases.append((name, expect, text))

    sections = {"task": schema.TaskConfig, "model": schema.ModelConfig, "train": schema.TrainConfig,
                "stability": schema.StabilityConfig, "search": schema.SearchConfig, "runner": schema.RunnerConfig,
                "leaderboard": schema.LeaderboardConfig}
    # 1. a misspelt key in every section
    for sec, cls in sections.items():
        for f in public_fields(cls):
            if dataclasses.is_dataclass(typing.get_type_hints(cls)[f.name]):
                continue
            typo = f.name[:-1] + f.name[-1] * 2 + "x"
            body = GOOD.get(sec, "") + f"  {typo}: 1\n"
            add(f"unknown-{sec}-{f.name}", f"{sec}.{typo}", base(**{sec: body}))
    for f in public_fields(schema.DatasetConfig):
        add(f"unknown-dataset-{f.name}", f"task.dataset.{f.name}zz", base(task=f"  dataset: {{name: digits, {f.name}zz: 1}}\n"))
    # 2. wrong types
    hints = {sec: typing.get_type_hints(cls) for sec, cls in sections.items()}
    wrong = {int: "'many'", float: "'fast'", bool: "'yes please'", str: "[1, 2]"}
    for sec, cls in sections.items():
        for f in public_fields(cls):
            tp = hints[sec][f.name]
            origin = typing.get_origin(tp)
            if tp in wrong:
                val = wrong[tp]
            elif origin is typing.Literal:
                val = "'" + typing.get_args(tp)[0] + "_x'"
            elif origin is typing.Union and type(None) in typing.get_args(tp):
                inner = [a for a in typing.get_args(tp) if a is not type(None)][0]
                if inner not in wrong:
                    continue
                val = wrong[inner]
            else:
                continue
            if sec == "model" and f.name in ("aggregation",):
                val = "'mean'"
            body = GOOD.get(sec, "") + f"  {f.name}: {val}\n"
            if sec in ("model", "train") and f.name in GOOD[sec]:
                body = "".join(line + "\n" for line in GOOD[sec].splitlines() if not line.strip().startswith(f.name + ":")) + f"  {f.name}: {val}\n"
            add(f"type-{sec}-{f.name}", f"{sec}.{f.name}", base(**{sec: body}))
    # 3. out of range
    for sec, cls in sections.items():
        for f in public_fields(cls):
            m = f.metadata
            for op in ("ge", "gt", "le", "lt"):
                if op in m:
                    bound = m[op]
                    v = bound - 1 if op in ("ge", "gt") else bound * 10 + 1
                    if op == "gt":
                        v = bound
                    if op == "lt":
                        v = bound
                    body = GOOD.get(sec, "")
                    body = "".join(line + "\n" for line in body.splitlines() if not line.strip().startswith(f.name + ":"))
                    add(f"range-{sec}-{f.name}-{op}", f"{sec}.{f.name}", base(**{sec: body + f"  {f.name}: {v}\n"}))
    # 4. conflicting knobs and cross-field rules
    conflicts = [
        ("steps-and-epochs", "train.epochs", {"train": "  lr: 0.1\n  steps: 10\n  epochs: 2\n"}),
        ("rskip-fractional-lambda", "model.skip_lambda", {"model": "  arch: mlp_resnet\n  skip: rskip_ln\n  skip_lambda: 1.5\n"}),
        ("rskip-zero-lambda", "model.skip_lambda", {"model": "  arch: mlp_resnet\n  skip: rskip_ln\n  skip_lambda: 0\n"}),
        ("negative-lambda", "model.skip_lambda", {"model": "  arch: mlp_resnet\n  skip: xskip\n  skip_lambda: -1\n"}),
        ("mlp-branches", "model.branches", {"model": "  arch: mlp\n  branches: 4\n"}),
        ("objective-bleu-on-classification", "search.objective", {"search": "  objective: bleu\n"}),
        ("objective-unknown", "search.objective", {"search": "  objective: accuracy\n"}),
        ("tpe-without-trials", "search.trials", {"search": "  sampler: tpe\n", "space": "  train.lr: {loguniform: [0.001, 1]}\n"}),
        ("grid-continuous", "space.train.lr", {"space": "  train.lr: {uniform: [0.001, 1]}\n"}),
        ("random-empty-space", "search.sampler", {"search": "  sampler: random\n  trials: 3\n"}),
        ("address-on-local", "runner.address", {"runner": "  kind: local\n  address: auto\n"}),
        ("resources-unknown", "runner.resources.tpu", {"runner": "  resources: {tpu: 1}\n"}),
        ("resources-negative", "runner.resources.gpu", {"runner": "  resources: {gpu: -1}\n"}),
        ("resources-not-mapping", "runner.resources", {"runner": "  resources: [1, 2]\n"}),
        ("leaderboard-bad-key", "leaderboard.transfer", {"leaderboard": "  transfer: model.brnches\n"}),
        ("leaderboard-section-key", "leaderboard.lr", {"leaderboard": "  lr: train\n"}),
        ("leaderboard-bad-metric", "leaderboard.metric", {"leaderboard": "  metric: acc\n"}),
        ("leaderboard-transfer-not-searched", "leaderboard.transfer", {"leaderboard": "  transfer: model.width\n"}),
        ("leaderboard-transfer-one-value", "leaderboard.transfer",
         {"space": "  model.width: [16]\n  train.lr: [0.1, 0.2, 0.4]\n", "leaderboard": "  transfer: model.width\n"}),
        ("leaderboard-lr-two-values", "leaderboard.lr",
         {"space": "  model.width: [16, 32]\n  train.lr: [0.1, 0.2]\n", "leaderboard": "  transfer: model.width\n"}),
        ("pruner-unknown", "search.pruner", {"search": "  pruner: early\n"}),
        ("pruner-bad-option", "search.pruner", {"search": "  pruner: {median: {warmup: 3}}\n"}),
        ("pruner-two-names", "search.pruner", {"search": "  pruner: {median: {}, asha: {}}\n"}),
        ("pruner-options-list", "search.pruner.median", {"search": "  pruner: {median: [1]}\n"}),
        ("pruner-bad-value", "search.pruner", {"search": "  pruner: {asha: {reduction_factor: 1}}\n"}),
        ("dataset-unknown", "task.dataset.name", {"task": "  dataset: {name: imagenet21k}\n"}),
        ("dataset-task-mismatch", "task.dataset.name", {"task": "  dataset: {name: multi30k}\n"}),
        ("kind-unknown", "task.kind", {"task": "  kind: regression\n  dataset: {name: digits}\n"}),
        ("arch-unknown", "model.arch", {"model": "  arch: vit\n"}),
        ("tau-bad-string", "model.tau", {"model": "  arch: mlp_resnet\n  tau: 1/L^2x\n"}),
        ("tau-negative", "model.tau", {"model": "  arch: mlp_resnet\n  tau: -0.5\n"}),
        ("tau-mapping-no-init", "model.tau", {"model": "  arch: mlp_resnet\n  tau: {learnable: true}\n"}),
        ("tau-mapping-unknown", "model.tau", {"model": "  arch: mlp_resnet\n  tau: {init: 1, trainable: true}\n"}),
        ("tau-bool", "model.tau", {"model": "  arch: mlp_resnet\n  tau: true\n"}),
        ("aggregation-zero", "model.aggregation", {"model": "  arch: mlp_resnet\n  aggregation: 0\n"}),
        ("aggregation-word", "model.aggregation", {"model": "  arch: mlp_resnet\n  aggregation: mean\n"}),
        ("device-bad", "train.device", {"train": "  lr: 0.1\n  steps: 10\n  device: tpu\n"}),
        ("betas-three", "train.betas", {"train": "  lr: 0.1\n  steps: 10\n  betas: [0.9, 0.99, 0.999]\n"}),
        ("betas-one", "train.betas", {"train": "  lr: 0.1\n  steps: 10\n  betas: [1.0, 0.9]\n"}),
        ("warmup-longer-than-training", "train.warmup_steps", {"train": "  lr: 0.1\n  steps: 10\n  warmup_steps: 20\n"}),
        ("hessian-every-not-multiple", "stability.hessian_every", {"stability": "  every: 50\n  hessian_every: 75\n"}),
        ("hessian-every-without-snapshots", "stability.hessian_every", {"stability": "  every: 0\n  hessian_every: 100\n"}),
        ("space-invalid-combination", "space.model.depth", {"space": "  model.depth: [2, 0]\n"}),
        ("stam-forward-init-with-stam-aggregation", "model.init",
         {"model": "  arch: mlp_resnet\n  branch_depth: 2\n  branches: 4\n  aggregation: stam\n  init: stam_forward\n"}),
        ("stam-update-init-with-avg-aggregation", "model.init",
         {"model": "  arch: resnet\n  depth: 8\n  branches: 4\n  aggregation: avg\n  init: stam_update\n"}),
        ("preact-block-on-mlp", "model.block", {"model": "  arch: mlp\n  block: preact\n"}),
        ("fan-in-init-on-resnet", "model.init", {"model": "  arch: resnet\n  depth: 8\n  init: fan_in\n"}),
        ("readout-zero-init-without-mup", "model.readout_zero_init", {"model": "  arch: mlp_resnet\n  readout_zero_init: true\n"}),
        ("completep-with-sgd", "model.parametrization",
         {"model": "  arch: mlp_resnet\n  depth: 4\n  parametrization: completep\n", "train": "  optimizer: sgd\n"}),
        ("umup-with-sgd", "model.parametrization",
         {"model": "  arch: mlp_resnet\n  parametrization: umup\n", "train": "  optimizer: sgd\n"}),
        ("umup-on-resnet", "model.parametrization",
         {"model": "  arch: resnet\n  depth: 8\n  parametrization: umup\n", "train": "  optimizer: adam\n"}),
        ("preact-block-with-path-bn", "model.block", {"model": "  arch: resnet\n  depth: 8\n  norm: path_bn\n  block: preact\n"}),
        ("xavier-branch-on-resnet", "model.init", {"model": "  arch: resnet\n  depth: 8\n  init: xavier_branch\n"}),
        ("layer-skip-in-path-space", "model.layer_skip", {"model": "  arch: mlp\n  norm: path_bn\n  layer_skip: true\n"}),
        ("normalize-unit-on-translation", "task.dataset.normalize",
         {"task": "  kind: translation\n  dataset: {name: synthetic, normalize: unit}\n"}),
    ]
    for name, expect, secs in conflicts:
        add(f"rule-{name}", expect, base(**secs))
    # 5. space forms
    spaces = [
        ("not-mapping", "space", "space: [1, 2]\n"),
        ("unknown-key", "space.model.brnches", "space:\n  model.brnches: [1, 2]\n"),
        ("section-key", "space.model", "space:\n  model: [1, 2]\n"),
        ("top-key", "space.name", "space:\n  name: [a, b]\n"),
        ("empty-values", "space.train.lr.values", "space:\n  train.lr: {values: []}\n"),
        ("two-kinds", "space.train.lr", "space:\n  train.lr: {values: [1], grid: [0, 1, 2]}\n"),
        ("no-kind", "space.train.lr", "space:\n  train.lr: {low: 0.1}\n"),
        ("log-grid-zero", "space.train.lr.log_grid", "space:\n  train.lr: {log_grid: [0, 1, 3]}\n"),
        ("log-grid-count", "space.train.lr.log_grid", "space:\n  train.lr: {log_grid: [0.1, 1, 0]}\n"),
        ("grid-short", "space.train.lr.grid", "space:\n  train.lr: {grid: [0.1, 1]}\n"),
        ("grid-reversed", "space.train.lr.grid", "space:\n  train.lr: {grid: [1, 0.1, 3]}\n"),
        ("grid-strings", "space.train.lr.grid", "space:\n  train.lr: {grid: [a, b, 3]}\n"),
        ("uniform-reversed", "space.train.lr.uniform", "search: {sampler: random, trials: 2}\nspace:\n  train.lr: {uniform: [1, 0.5]}\n"),
        ("loguniform-zero", "space.train.lr.loguniform", "search: {sampler: random, trials: 2}\nspace:\n  train.lr: {loguniform: [0, 1]}\n"),
        ("int-float-bounds", "space.model.depth.int", "space:\n  model.depth: {int: [1.5, 4]}\n"),
        ("int-step-zero", "space.model.depth.step", "space:\n  model.depth: {int: [1, 4], step: 0}\n"),
        ("int-log-bad", "space.model.depth.int", "space:\n  model.depth: {int: [0, 4], log: true}\n"),
        ("int-log-not-bool", "space.model.depth.log", "space:\n  model.depth: {int: [1, 4], log: maybe}\n"),
        ("unknown-option", "space.train.lr.base", "space:\n  train.lr: {values: [0.1], base: 2}\n"),
        ("value-mapping", "space.train.lr.values", "space:\n  train.lr: [{a: 1}]\n"),
        ("value-wrong-type", "space.model.depth", "space:\n  model.depth: [2, deep]\n"),
        ("when-not-mapping", "space.model.depth.when", "space:\n  model.depth: {values: [2], when: yes}\n"),
        ("when-unknown-key", "space.model.depth.when.model.wdth", "space:\n  model.depth: {values: [2], when: {model.wdth: 3}}\n"),
        ("when-self", "space.model.depth.when.model.depth", "space:\n  model.depth: {values: [2], when: {model.depth: 2}}\n"),
        ("when-cycle", "space.model.depth.when",
         "space:\n  model.depth: {values: [2, 3], when: {model.width: 16}}\n  model.width: {values: [16], when: {model.depth: 2}}\n"),
        ("scalar", "space.train.lr", "space:\n  train.lr: 0.1\n"),
    ]
    for name, expect, tail in spaces:
        add(f"space-{name}", expect, base() + tail)
    # 6. top level, seeds, name
    add("seeds-zero-count", "seeds", "seeds: 0\n" + base())
    add("seeds-negative", "seeds", "seeds: [-1]\n" + base())
    add("seeds-duplicate", "seeds", "seeds: [1, 1]\n" + base())
    add("seeds-string", "seeds", "seeds: many\n" + base())
    add("seeds-empty", "seeds", "seeds: []\n" + base())
    add("name-traversal", "name", base().replace("name: bad", "name: ../../etc"))
    add("name-upper", "name", base().replace("name: bad", "name: Bad"))
    add("name-slash", "name", base().replace("name: bad", "name: a/b"))
    add("name-empty", "name", base().replace("name: bad", "name: ''"))
    add("name-number", "name", base().replace("name: bad", "name: 12.5"))
    add("missing-name", "-", base().replace("name: bad\n", ""))
    add("missing-model", "-", doc({"task": GOOD["task"]}))
    add("missing-task", "-", doc({"model": GOOD["model"]}))
    add("section-scalar", "model", base(model=None) + "model: 3\n")
    add("section-list", "train", base(train=None) + "train: [1, 2]\n")
    add("unknown-top", "trian", base() + "trian: {lr: 1}\n")
    add("meta-not-allowed", "meta", base() + "meta: {spec_hash: x}\n")
    # 7. YAML itself
    add("yaml-unclosed-flow", "-", base() + "space: {train.lr: [0.1, 0.2}\n")
    add("yaml-bad-indent", "-", base().replace("  width: 16", "    width: 16\n  depth: 2\n   x: 1"))
    add("yaml-tab-indent", "-", base().replace("  width: 16", "\twidth: 16"))
    add("yaml-unterminated-quote", "-", base() + "description: 'never ends\n")
    add("yaml-duplicate-key", "model.arch", base().replace("  width: 16", "  width: 16\n  arch: mlp"))
    add("yaml-duplicate-top", "name", base() + "name: again\n")
    add("yaml-merge-key", "model", base(model="  <<: {arch: mlp}\n  width: 16\n"))
    add("yaml-complex-key", "model", base(model="  ? [a, b]\n  : 1\n"))
    add("yaml-null-key", "model", base(model="  ~: 1\n  arch: mlp\n"))
    add("yaml-empty", "-", "")
    add("yaml-comment-only", "-", "# nothing here\n")
    add("yaml-top-list", "-", "- name: bad\n")
    add("yaml-top-scalar", "-", "just a string\n")
    add("yaml-two-documents", "-", base() + "---\nname: other\n")
    add("yaml-directive", "-", "%YAML 9.9\n---\n" + base())
    # 8. hostile input
    for tag in ("!!python/object/apply:os.system ['echo pwned']", "!!python/name:os.system", "!!python/object:object {}",
                "!!python/module:os", "!!binary aGVsbG8=", "!custom 1", "!!set {a: null}"):
        add(f"tag-{zlib.crc32(tag.encode()) % 10**6:06d}", "description", base() + f"description: {tag}\n")  # stable across runs
    bomb = "[" + ", ".join(["&a0 lol"] + ["*a0"] * 9) + "]"
    for i in range(1, 9):
        bomb = "[" + ", ".join([f"&a{i} {bomb}"] + [f"*a{i}"] * 9) + "]"
    add("alias-bomb", "leaderboard.reference", base() + f"leaderboard:\n  reference: {bomb}\n")
    add("deep-nesting", "leaderboard.reference", base() + "leaderboard:\n  reference: " + "[" * 200 + "]" * 200 + "\n")
    add("deep-nesting-maps", "leaderboard.reference", base() + "leaderboard:\n  reference: " + "{a: " * 100 + "1" + "}" * 100 + "\n")
    add("non-utf8-latin1", "-", base().encode() + "description: caf\xe9\n".encode("latin-1"))
    add("non-utf8-binary", "-", base().encode() + b"\x89PNG\r\n\x1a\n\x00\x00")
    add("utf16", "-", base().encode("utf-16"))
    add("nul-bytes", "-", base().encode() + b"description: a\x00b\n")
    add("control-chars", "-", base() + "description: \x07bell\n")
    # 9. hostile values that used to pass validation and fail later, or exhaust memory (issue 16)
    for i, tau in enumerate(("L^1/0", "L^(1/0)", "L^9999", "L^-1e400", "L^.")):
        add(f"tau-expression-{i}", "model.tau", base(model=f"  arch: mlp_resnet\n  width: 16\n  tau: '{tau}'\n"))
    add("seed-2-64", "seeds", base() + "seeds: [18446744073709551616]\n")
    add("search-seed-2-64", "search.seed", base() + "search: {seed: 18446744073709551616}\n")
    add("split-seed-huge", "task.dataset.split_seed", base(task="  dataset: {name: digits, split_seed: 1.0e+18}\n"))
    add("epochs-1e308", "train.epochs", base(train="  lr: 0.1\n  epochs: 1.0e+308\n"))
    for field in ("weight_decay: 1.0e+300", "warmup_steps: 1000000000000", "eval_every: 1000000000000", "eval_batch: 1000000000000"):
        add(f"train-huge-{field.split(':')[0]}", f"train.{field.split(':')[0]}", base(train=f"  lr: 0.1\n  steps: 10\n  {field}\n"))
    add("stability-every-huge", "stability.every", base() + "stability: {every: 1000000000000000}\n")
    add("runner-checkpoint-huge", "runner.checkpoint_every", base() + "runner: {checkpoint_every: 1000000000000000}\n")
    add("model-alpha-scale-huge", "model.alpha_scale", base(model="  arch: mlp_resnet\n  width: 16\n  alpha_scale: 1.0e+300\n"))
    add("synthetic-noise-huge", "task.dataset.noise", base(task="  dataset: {name: synthetic, noise: 1.0e+300}\n"))
    for shape in ("[-1, 8, 8]", "[0, 8, 8]", "[8, 8]", "[100000, 1000, 1000]"):
        add(f"synthetic-shape-{zlib.crc32(shape.encode()) % 10**6:06d}", "task.dataset.shape", base(task=f"  dataset: {{name: synthetic, shape: {shape}}}\n"))
    add("device-cuda-absent", "train.device", base(train="  lr: 0.1\n  steps: 10\n  device: 'cuda:999'\n"))
    for url in ("foo://bar", "postgresql+nodriver://u@h/db", "sqlite:////nonexistent-dir-nas-stab/study.db",
                "journal:///nonexistent-dir-nas-stab/j.log", "not a url"):
        add(f"storage-{zlib.crc32(url.encode()) % 10**6:06d}", "search.storage", base() + f"search: {{storage: '{url}'}}\n")
    add("name-300-chars", "name", base().replace("name: bad", "name: " + "a" * 300))
    add("grid-1e9-points", "space", base() + "space:\n" + "".join(
        f"  {k}: {{grid: [0.01, 0.5, 1000]}}\n" for k in ("train.lr", "train.momentum", "model.dropout")))
    add("grid-int-1e12", "space.model.width", base() + "space:\n  model.width: {int: [1, 1000000000000]}\n")
    add("grid-int-1e9-points", "space", base() + "space:\n  model.width: {int: [1, 1000000000]}\n")
    add("log-grid-1e10", "space.train.lr", base() + "space:\n  train.lr: {log_grid: [0.001, 1, 10000000000]}\n")
    add("uniform-1e300", "space.train.lr", base() + "search: {sampler: random, trials: 2}\nspace:\n  train.lr: {uniform: [0.1, 1.0e+300]}\n")

    # 10. sampler bracket and pruner sweep (issue 19); appended last so the other files keep their numbers
    for name, expect, secs in [
        ("bracket-without-sampler", "search.bracket", {"search": "  bracket: {step_octaves: 2}\n"}),
        ("bracket-resolution-above-step", "search.bracket.resolution_octaves",
         {"search": "  sampler: bracket\n  bracket: {step_octaves: 0.5, resolution_octaves: 1}\n", "space": "  train.lr: [0.1]\n"}),
        ("bracket-limits-reversed", "search.bracket.lr_limits",
         {"search": "  sampler: bracket\n  bracket: {lr_limits: [1, 0.001]}\n", "space": "  train.lr: [0.1]\n"}),
        ("bracket-limits-one", "search.bracket.lr_limits",
         {"search": "  sampler: bracket\n  bracket: {lr_limits: [0.1]}\n", "space": "  train.lr: [0.1]\n"}),
        ("bracket-start-outside-limits", "space.train.lr",
         {"search": "  sampler: bracket\n  bracket: {lr_limits: [0.001, 0.01]}\n", "space": "  train.lr: [0.1]\n"}),
        ("bracket-lr-not-searched", "search.sampler", {"search": "  sampler: bracket\n", "space": "  model.depth: [2, 4]\n"}),
        ("bracket-continuous", "space.model.width",
         {"search": "  sampler: bracket\n", "space": "  train.lr: [0.1]\n  model.depth: {int: [2, 4]}\n  model.width: {uniform: [8, 16]}\n"}),
        ("bracket-step-zero", "search.bracket.step_octaves", {"search": "  sampler: bracket\n  bracket: {step_octaves: 0}\n", "space": "  train.lr: [0.1]\n"}),
        ("pruner-sweep-bad-margin", "search.pruner", {"search": "  pruner: {sweep: {margin: -1}}\n"}),
    ]:
        add(f"rule-{name}", expect, base(**secs))

    # 11. search.transfer and the exponent knobs (issue 20); appended last
    arch = "  model.branches: [1, 4]\n  train.lr: [0.01, 0.1, 1]\n  model.aggregation_exponent: {uniform: [0, 1]}\n"
    lb = "  lr: train.lr\n  transfer: model.branches\n"
    for name, expect, secs in [
        ("transfer-grid-sampler", "search.sampler", {"search": "  transfer: {}\n", "space": arch, "leaderboard": lb}),
        ("transfer-unknown-objective", "search.transfer.objectives.0",
         {"search": "  sampler: tpe\n  trials: 2\n  transfer: {objectives: [regret]}\n", "space": arch, "leaderboard": lb}),
        ("transfer-no-objective", "search.transfer.objectives",
         {"search": "  sampler: tpe\n  trials: 2\n  transfer: {objectives: []}\n", "space": arch, "leaderboard": lb}),
        ("transfer-cmaes-two-objectives", "search.sampler",
         {"search": "  sampler: cmaes\n  trials: 2\n  transfer: {objectives: [best, lr_drift]}\n", "space": arch, "leaderboard": lb}),
        ("transfer-no-size-axis", "leaderboard.transfer",
         {"search": "  sampler: tpe\n  trials: 2\n  transfer: {}\n", "space": arch}),
        ("transfer-continuous-lr", "space.train.lr",
         {"search": "  sampler: tpe\n  trials: 2\n  transfer: {}\n", "leaderboard": lb,
          "space": "  model.branches: [1, 4]\n  train.lr: {loguniform: [0.01, 1]}\n  model.tau_exponent: {uniform: [0, 1]}\n"}),
        ("transfer-lr-not-searched", "leaderboard.lr",
         {"search": "  sampler: tpe\n  trials: 2\n  transfer: {}\n", "leaderboard": lb,
          "space": "  model.branches: [1, 4]\n  model.aggregation_exponent: {uniform: [0, 1]}\n"}),
        ("transfer-no-architecture", "space",
         {"search": "  sampler: tpe\n  trials: 2\n  transfer: {}\n", "leaderboard": lb,
          "space": "  model.branches: [1, 4]\n  train.lr: [0.01, 0.1, 1]\n"}),
        ("nsga2-without-transfer", "search.sampler",
         {"search": "  sampler: nsga2\n  trials: 2\n", "space": "  train.lr: {uniform: [0.01, 1]}\n"}),
        ("aggregation-exponent-with-stam", "model.aggregation_exponent",
         {"model": "  arch: mlp_resnet\n  aggregation: stam\n  aggregation_exponent: 0.5\n"}),
        ("tau-exponent-with-tau", "model.tau_exponent", {"model": "  arch: mlp_resnet\n  tau: 1/L\n  tau_exponent: 0.5\n"}),
        ("aggregation-exponent-on-mlp", "model.aggregation_exponent", {"model": "  arch: mlp\n  aggregation_exponent: 0.5\n"}),
        ("stages-on-resnet", "model.stages", {"model": "  arch: resnet\n  depth: 8\n  stages: 1\n"}),
    ]:
        add(f"rule-{name}", expect, base(**secs))

    # 12. search.transfer.inner: bracket (issue 20, h54); appended last
    start = "  model.branches: [1, 4]\n  train.lr: [0.05, 0.1]\n  model.aggregation_exponent: {uniform: [0, 1]}\n"
    for name, expect, secs in [
        ("transfer-sampler-bracket", "search.sampler",
         {"search": "  sampler: bracket\n  transfer: {inner: bracket}\n", "space": start, "leaderboard": lb}),
        ("transfer-bracket-settings-with-grid-inner", "search.bracket",
         {"search": "  sampler: tpe\n  trials: 2\n  transfer: {}\n  bracket: {step_octaves: 2}\n", "space": arch, "leaderboard": lb}),
        ("transfer-inner-unknown", "search.transfer.inner",
         {"search": "  sampler: tpe\n  trials: 2\n  transfer: {inner: brackets}\n", "space": arch, "leaderboard": lb}),
        ("transfer-bracket-start-outside-limits", "space.train.lr",
         {"search": "  sampler: tpe\n  trials: 2\n  transfer: {inner: bracket}\n  bracket: {lr_limits: [0.06, 1]}\n",
          "space": start, "leaderboard": lb}),
    ]:
        add(f"rule-{name}", expect, base(**secs))

    # 13. search.population_size (nsga2's population, h57); appended last
    nsga2 = "  sampler: nsga2\n  trials: 8\n  transfer: {}\n"
    for name, expect, secs in [
        ("population-without-nsga2", "search.population_size",
         {"search": "  sampler: tpe\n  trials: 8\n  population_size: 4\n  transfer: {}\n", "space": arch, "leaderboard": lb}),
        ("population-of-one", "search.population_size",
         {"search": nsga2 + "  population_size: 1\n", "space": arch, "leaderboard": lb}),
    ]:
        add(f"rule-{name}", expect, base(**secs))

    # 14. reliability round 3 (issue 35): leaderboard roles and reference, bracket floors, inner: bracket starts
    lb3 = "  model.branches: [1, 2, 4]\n  train.lr: [0.01, 0.02, 0.04]\n"
    for name, expect, secs in [
        ("leaderboard-reference-not-a-size", "leaderboard.reference",
         {"space": lb3, "leaderboard": "  transfer: model.branches\n  reference: 999\n"}),
        ("leaderboard-reference-text", "leaderboard.reference",
         {"space": lb3, "leaderboard": "  transfer: model.branches\n  reference: abc\n"}),
        ("leaderboard-reference-nan", "leaderboard.reference",
         {"space": lb3, "leaderboard": "  transfer: model.branches\n  reference: .nan\n"}),
        ("leaderboard-reference-without-transfer", "leaderboard.reference", {"space": lb3, "leaderboard": "  reference: 2\n"}),
        ("leaderboard-transfer-is-lr", "leaderboard.transfer", {"space": lb3, "leaderboard": "  transfer: train.lr\n"}),
        ("leaderboard-compare-lr", "leaderboard.compare.0",
         {"space": lb3, "leaderboard": "  transfer: model.branches\n  compare: [train.lr]\n"}),
        ("leaderboard-compare-size", "leaderboard.compare.0",
         {"space": lb3, "leaderboard": "  transfer: model.branches\n  compare: [model.branches]\n"}),
        ("leaderboard-lr-not-an-lr", "leaderboard.lr", {"space": lb3, "leaderboard": "  lr: model.branches\n"}),
        ("leaderboard-tolerance-inf", "leaderboard.tolerance_octaves",
         {"space": lb3, "leaderboard": "  transfer: model.branches\n  tolerance_octaves: .inf\n"}),
        ("bracket-step-below-floor", "search.bracket.step_octaves",
         {"search": "  sampler: bracket\n  bracket: {step_octaves: 0.0001, resolution_octaves: 0.0001}\n", "space": "  train.lr: [0.1]\n"}),
        ("bracket-resolution-below-floor", "search.bracket.resolution_octaves",
         {"search": "  sampler: bracket\n  bracket: {resolution_octaves: 1.0e-12}\n", "space": "  train.lr: [0.1]\n"}),
        ("transfer-bracket-one-start", "space.train.lr",
         {"search": "  sampler: tpe\n  trials: 2\n  transfer: {inner: bracket}\n", "leaderboard": lb,
          "space": "  model.branches: [1, 4]\n  train.lr: [0.1]\n  model.aggregation_exponent: {uniform: [0, 1]}\n"}),
    ]:
        add(f"rule-{name}", expect, base(**secs))

    for i, (name, expect, text) in enumerate(cases):
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        header = f"# expect: {expect}\n".encode()
        if name == "utf16":
            (OUT / f"{i:03d}-{name}.yaml").write_bytes(data)
        else:
            (OUT / f"{i:03d}-{name}.yaml").write_bytes(header + data)
    print(f"wrote {len(cases)} files to {OUT}")


if __name__ == "__main__":
    main()
