"""The experiment schema (docs/experiment-file.md) as frozen, typed dataclasses.

Every YAML key is a field here; its type annotation, default and metadata
(`ge`, `gt`, `le`, `lt`, `check`, `doc`) are all the validator needs. To add a
knob: add a field to the right section, then use it where it is built.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

Number = int | float
DEFAULT_BUDGET = 0.03  # stability.budget: the share of a run's training time its measurements may take


def _f(default: Any = None, doc: str = "", **meta: Any) -> Any:
    """A dataclass field with validation metadata."""
    if isinstance(default, (list, dict, set)):
        raise TypeError("use a tuple or None for container defaults")
    return field(default=default, metadata={"doc": doc, **meta})


option = _f  # a component's own option (a dataset's `options` class): `noise: float = option(0.1, "doc", ge=0)`


# ---------------------------------------------------------------- task


@dataclass(frozen=True)
class DatasetConfig:
    """The keys every dataset takes. The others under `task.dataset` are the named dataset's own options: the
    `options` class of its registry entry (data/catalog.py; a plugin's own), built into `options` with the same
    checks, and named `task.dataset.<key>` in errors (`nas-stab list` shows each dataset's)."""

    COMPONENT: ClassVar[str] = "dataset"  # config.hooks.options_class("dataset", ...) names the options class
    COMPONENT_KEY: ClassVar[str] = "name"  # the key that names the entry
    # the dataset options of the flat `task.dataset` section before each dataset owned its own (to 2026-11-29), at
    # their defaults then: accepted where the named dataset does not read them (kept in `ignored`), and part of every
    # spec hash and run key at these values unless set (config/load.py): run directories made before keep theirs
    RETIRED: ClassVar[dict[str, Any]] = {
        "classes": 10, "shape": [1, 8, 8], "size": 2000, "noise": 0.5, "src": "de", "tgt": "en",
        "train_src": None, "train_tgt": None, "val_src": None, "val_tgt": None, "test_src": None, "test_tgt": None,
        "vocab_size": 8000, "max_len": 64, "tokenizer": "bpe",
    }

    name: str = _f("digits", "dataset name (nas-stab list)")
    root: str = _f("data", "where the files are: '~' is expanded and a relative path is taken from the experiment file's directory (the working directory for "
                           "--set and specs given as text)")
    train: int | None = _f(None, "training subset size (deterministic)", ge=1)
    val: int | None = _f(None, "validation subset size (carved from the training split when there is none)", ge=1)
    test: int | None = _f(None, "test subset size", ge=1)
    download: bool = _f(False, "download through torchvision when files are missing")
    split_seed: int = _f(0, "seed of the subset and train/val/test split (the same data for every trial)", ge=0)
    augment: bool = _f(True, "random crop + flip on whole batches (image datasets of 32x32)")
    normalize: Literal["standard", "unit"] = _f("standard", "classification inputs: standard = per-channel standardization; unit = standardized, then each "
                                                            "example scaled to L2 norm 1 (the tau and STAM papers' assumption ||x|| = 1)")
    cache: str | None = _f(None, "cache directory (default ~/.cache/nas_stab or $NAS_STAB_CACHE)")
    options: Any = _f(None, internal=True)  # the named dataset's own options (its entry's class), None: it has none
    ignored: tuple[tuple[str, Any], ...] = _f((), internal=True)  # RETIRED keys it does not read: (key, value)


@dataclass(frozen=True)
class TaskConfig:
    kind: Literal["classification", "translation"] = _f("classification")
    dataset: DatasetConfig = _f(None)
    beam: int = _f(1, "translation: beam size for decoding (1 = greedy)", ge=1, le=64)
    max_decode_len: int = _f(64, "translation: longest decoded output in tokens, beyond the source length", ge=1)
    length_penalty: float = _f(1.0, "translation: beam scores are log-probability / length ** length_penalty", ge=0, le=10)


# ---------------------------------------------------------------- model


@dataclass(frozen=True)
class ModelConfig:
    """The architecture and its knobs. A plugin architecture's own options (the `options` class of its registry
    entry) sit beside these keys, built into `options` (as a dataset's: `DatasetConfig`)."""

    COMPONENT: ClassVar[str] = "model"  # config.hooks.options_class("model", ...): the named arch's options class
    COMPONENT_KEY: ClassVar[str] = "arch"
    arch: str = _f("mlp_resnet", "architecture (nas-stab list)")
    depth: int = _f(4, "layers (mlp), residual blocks (mlp_resnet), 6n+2 (resnet), 9n+2 (resnext), conv layers (plainnet)", ge=1, le=10_000)
    width: int = _f(128, "hidden width (MLPs) or base channels (CNNs)", ge=1, le=65_536)
    stages: int = _f(3, "plainnet: stages of conv layers (stage of layer i: floor(stages i / depth)); stage s has width * 2^s channels and its first layer (s "
                        "> 0) stride 2. 3 = He et al.'s CIFAR plain net (w, 2w, 4w); 1 = every layer width channels at stride 1 (the Path-BN paper's Figure 4 "
                        "stacked CNN); fewer than stages layers: one per stage", ge=1, le=3)
    branches: int = _f(1, "C, parallel branches per residual block", ge=1, le=4096)
    branch_depth: int = _f(1, "b, layers in each residual branch (mlp_resnet)", ge=1, le=16)
    aggregation: str | float = _f("sum", "sum | avg | stam | a number: alpha")
    aggregation_exponent: float | None = _f(None, "p: alpha = (C / C0)^-p in place of aggregation (0 = sum, 0.5 = stam, 1 = avg), a number a search can vary "
                                                  "continuously; leave aggregation at sum", ge=-4, le=4)
    aggregation_base: Number = _f(1, "C0: alpha = f(C / C0)", gt=0)
    alpha_scale: Number = _f(1.0, "multiplies alpha", gt=0)
    tau: Any = _f(1, "residual-branch scale: number, '1/L', '1/sqrt(L)', 'L^-p', or {init: ..., learnable: true}")
    tau_exponent: float | None = _f(None, "p: tau = L^-p in place of tau (0.5 = 1/sqrt(L), 1 = 1/L), a number a search can vary continuously; leave tau at 1 "
                                          "(tau_learnable still applies)", ge=-4, le=4)
    tau_learnable: bool = _f(False, "make tau learnable (the searchable form of tau: {init: ..., learnable: true})")
    skip: Literal["plain", "none", "xskip", "xskip_ln", "rskip_ln", "deepnorm"] = _f("plain")
    skip_lambda: Number = _f(1, "lambda of xskip / xskip_ln / rskip_ln")
    skip_norm: Literal["ln", "bn"] = _f("ln", "the Norm of xskip_ln / rskip_ln")
    norm: Literal["none", "bn", "ln", "path_bn"] = _f("none", "normalization inside the residual branches")
    block: Literal["post", "preact"] = _f("post", "resnet/resnext/mlp_resnet: post = conv-norm-relu branches, relu after the addition; preact = He et "
                                                  "al.'s pre-activation block (norm-relu-conv branches, nothing after the addition, a final norm and relu "
                                                  "before pooling; for mlp_resnet the residual stream of Tensor Programs VI and Bordelon et al., "
                                                  "h + tau F(relu(h)), with nothing nonlinear on it)")
    layer_skip: bool = _f(False, "mlp and plainnet in weight space: every layer after the first that keeps its width (stride 1) adds its input back after its "
                                 "norm, relu(Norm(W h) + h): the identity path of a Path-BN layer without the path space (the control of a Path-BN "
                                 "comparison)")
    init: Literal["kaiming", "fixup", "zero_last", "deepnorm", "stam_forward", "stam_update", "xavier_branch", "fan_in"] = _f(
        "kaiming", "kaiming: the stock init of each architecture (He for ReLU nets, fairseq's Xavier on whole projections for the transformer; "
                   "for mlp_resnet the tau paper's: fan-out on the input layer A and the readout B, so hidden units shrink like width^-1/2); "
                   "xavier_branch: transformer only, Xavier with the fans of one mini block; fan_in: mlp_resnet only, every weight N(0, gain / "
                   "fan_in) (gain 2 before a ReLU, 1 on the readout): the standard parametrization of Tensor Programs V, and the base model "
                   "mup and depth_mup are stated relative to")
    dropout: float = _f(0.0, ge=0, lt=1)
    ln_mode: Literal["chw", "channel"] = _f("chw", "LN in CNNs: chw = each sample over (channels, H, W), per-channel affine (GroupNorm, one group per "
                                                   "branch); channel = over channels at each position")
    parametrization: Literal["weight", "path", "sp", "mup", "depth_mup", "completep", "umup"] = _f("weight", "weight (= sp): weight space, every init as "
                                                                                        "model.init gives it (the default, kaiming, is the architecture's "
                                                                                        "papers' init; Tensor Programs V's standard parametrization is sp "
                                                                                        "with init fan_in); path: the path-space "
                                                                                        "network of the Path-BN paper (G-SGD); mup: the Maximal Update "
                                                                                        "Parametrization relative to base_width (Tensor Programs V, Table 3: "
                                                                                        "hidden init variance 1/fan_in, a 1/width-multiplier on the readout, "
                                                                                        "per-layer learning rates; the mup package's rules); depth_mup: mup "
                                                                                        "plus Depth-muP relative to base_depth (branches x "
                                                                                        "sqrt(base_depth/depth), with Adam the blocks' lr x "
                                                                                        "sqrt(base_depth/depth)). mup: mlp, mlp_resnet, resnet and "
                                                                                        "transformer (width: d_model; also a 1/width multiplier on the tied "
                                                                                        "readout, a constant embedding multiplier, attention logits scaled by "
                                                                                        "1/head_dim; needs ffn_ratio and no head_dim when d_model changes); "
                                                                                        "depth_mup: mlp_resnet and resnet; completep: mup plus CompleteP "
                                                                                        "(Dey et al. 2025, depth exponent 1) relative to base_depth: branches "
                                                                                        "x base_depth/depth, the blocks' Adam lr unchanged and their Adam "
                                                                                        "eps x base_depth/depth; Adam or AdamW, mlp_resnet and resnet; "
                                                                                        "umup: u-muP's width rules (Blake et al. 2024; the unit-scaling "
                                                                                        "package's): every weight of fan-in n N(0, 1) times n^-1/2 (the "
                                                                                        "readout n^-1), Adam lr x n^-1/2 (readout x 1), absolute in n (no "
                                                                                        "base width); Adam or AdamW, mlp_resnet, depth not searched "
                                                                                        "(docs/papers.md)")
    base_width: int | None = _f(None, "mup, depth_mup, completep: the width at which the parametrization equals sp, for the transformer "
                                      "the base d_model (default: width, or d_model, itself; set it when width or d_model is searched)", ge=1, le=65_536)
    base_depth: int | None = _f(None, "depth_mup, completep: the depth at which the branch multiplier and lr are those of mup (default: "
                                      "depth itself; set it when depth is searched)", ge=1, le=10_000)
    readout_zero_init: bool = _f(False, "mup, depth_mup, completep, umup: start the readout (the logits layer) at zero, as Tensor Programs V "
                                        "recommends; not the transformer's (its readout is the input embedding, tied)")
    scalar_bias: bool | None = _f(None, "Fixup-style scalar biases in the residual branches, for normalization-free nets (the tau paper's CIFAR ResNets); "
                                        "default: on with init fixup")
    # transformer
    d_model: int = _f(128, "the transformer's width (under mup, the width base_width refers to)", ge=8, le=65_536)
    heads_per_branch: int = _f(1, ge=1, le=1024)
    head_dim: int | None = _f(None, "default d_model / (branches * heads_per_branch)", ge=1)
    ffn_per_branch: int = _f(128, "units of each FFN branch, fixed whatever d_model (ffn_ratio scales them with d_model instead)", ge=1, le=1_000_000)
    ffn_ratio: float | None = _f(None, "the FFN width as a multiple of d_model, in place of ffn_per_branch: each branch's FFN has round(ffn_ratio * d_model / "
                                       "branches) units, so it grows with d_model (mup needs this when d_model changes; e.g. 4 = the usual 4 d_model over all "
                                       "branches)", gt=0, le=1024)
    enc_layers: int = _f(2, ge=1, le=1000)
    dec_layers: int = _f(2, ge=1, le=1000)
    head_dropout: float = _f(0.0, ge=0, lt=1)
    norm_position: Literal["post", "pre"] = _f("post")
    options: Any = _f(None, internal=True)  # a plugin architecture's own options (its entry's class), None: none
    ignored: tuple[tuple[str, Any], ...] = _f((), internal=True)  # (no retired model keys: always empty)


# ---------------------------------------------------------------- training


@dataclass(frozen=True)
class TrainConfig:
    optimizer: Literal["sgd", "adam", "adamw"] = _f("sgd")
    lr: float = _f(0.1, "learning rate", gt=0, le=1e6)
    momentum: float = _f(0.9, "sgd momentum", ge=0, lt=1)
    nesterov: bool = _f(False)
    weight_decay: float = _f(0.0, ge=0)
    betas: tuple[float, ...] = _f((0.9, 0.999), "adam/adamw betas")
    eps: float = _f(1e-8, gt=0)
    batch_size: int = _f(128, ge=1, le=1_000_000)
    max_tokens: int | None = _f(None, "translation: token budget per batch (overrides batch_size)", ge=16)
    steps: int | None = _f(None, "optimizer steps (exactly one of steps / epochs)", ge=1)
    epochs: float | None = _f(None, "passes over the training set", gt=0, le=100_000)
    schedule: Literal["constant", "cosine", "step", "inverse_sqrt", "linear"] = _f("constant")
    warmup_steps: int = _f(0, ge=0)
    step_every: int | None = _f(None, "step schedule: steps between decays (default a third of training)", ge=1)
    step_gamma: float = _f(0.1, "step schedule: decay factor", gt=0, le=1)
    final_lr_frac: float = _f(0.0, "cosine/linear: final lr as a fraction of lr", ge=0, le=1)
    grad_clip: float | None = _f(None, "clip the global gradient norm", gt=0)
    scalar_lr_mult: float = _f(0.1, "lr multiplier of scalar parameters (learnable tau, Fixup biases)", gt=0)
    scalar_weight_decay: float | None = _f(None, "weight decay of scalar parameters (learnable tau, Fixup biases and multipliers); default: "
                                                 "train.weight_decay", ge=0)
    label_smoothing: float = _f(0.0, ge=0, lt=1)
    eval_every: int | None = _f(None, "steps between validation evaluations; default (null): chosen within stability.budget, at most 10 per run (every "
                                      "ceil(steps / 10) steps; the last at the end); 10 per run with a pruner (its reports) or with stability.budget null",
                                ge=1)
    eval_batch: int = _f(1024, ge=1)
    device: str = _f("auto", "auto | cpu | cuda | cuda:N")
    threads: int | None = _f(None, "torch threads per trial (default: cpus / concurrency)", ge=1, le=1024)


# ---------------------------------------------------------------- stability


@dataclass(frozen=True)
class DivergenceConfig:
    loss_factor: float = _f(10.0, "diverged when loss > factor x the loss of a uniform prediction (ln classes, ln vocabulary); a huge factor leaves only "
                                  "non-finite values", gt=1, le=1e300)


@dataclass(frozen=True)
class StabilityConfig:
    every: int | None = _f(None, "steps between stability snapshots (0 = only at init and end); default (null): chosen within stability.budget, at most 10 "
                                 "snapshots per run (every ceil(steps / 10) steps); with budget null exactly that (the default was 50 before; a run directory "
                                 "made then keeps it)", ge=0)
    probe_batch: int = _f(256, ge=1, le=1_000_000)
    hessian: bool = _f(True, "top Hessian eigenvalue at init and end")
    hessian_iters: int = _f(20, "Lanczos steps (Hessian-vector products) at most", ge=1, le=1000)
    hessian_tol: float = _f(1e-3, "relative tolerance between successive top Ritz values (Lanczos)", gt=0, lt=1)
    hessian_every: int = _f(0, "steps between sharpness estimates during training (0 = only at init and end); taken at the snapshots, so a "
                               "multiple of every", ge=0)
    hessian_batch: int = _f(64, "examples of the probe batch (its first ones) whose loss Hessian gives the sharpness (0 = the whole probe batch); fewer "
                                "examples: cheaper Hessian-vector products, a larger top eigenvalue", ge=0, le=1_000_000)
    budget: float | None = _f(DEFAULT_BUDGET, "the share of a run's training time its measurements may take: the stability snapshots (at init, during "
                                              "training and at the end, with their Hessian estimates) and the mid-run validations. The cadences left unset "
                                              "(every, train.eval_every) are chosen within it from a cost model of the measurements (docs/run-directory.md, "
                                              "'The measurements' budget'): up to 10 per run each (9 during training, 1 at the end), fewer when they would "
                                              "not fit; the snapshots and Hessian estimates at init and at the end are always taken, and with a pruner the "
                                              "validations stay at 10 per run (its reports). Each run records its measuring and training time (trials.csv "
                                              "measure_s, train_s). 0: nothing during training; null: no budget, 10 snapshots and 10 validations per run "
                                              "whatever their cost (the defaults before the budget)", ge=0, le=1)
    divergence: DivergenceConfig = _f(None)


# ---------------------------------------------------------------- search


@dataclass(frozen=True)
class PrunerConfig:
    name: str = _f("none", "none | median | percentile | asha | hyperband | threshold | sweep. sweep (nas_stab's) compares a run only with the other learning "
                           "rates of its own configuration (same searched values but the lr) and prunes it when at least min_better (3) of them are better at "
                           "the same step by more than margin (0.01, in the objective's units), never the best lr of the sweep nor its two lr neighbours. It "
                           "is never chosen automatically: an lr-transfer experiment with another pruner gets a warning, since those compare across sizes and "
                           "rows")
    options: Any = _f(None, "keyword arguments of the Optuna pruner, plus n_warmup_steps etc.; sweep: min_better, margin, n_warmup_steps, lr_key (default "
                            "leaderboard.lr)")


@dataclass(frozen=True)
class BracketConfig:
    step_octaves: float = _f(1.0, "bracket: how far beyond an edge that holds the optimum the next learning rate is, in octaves (log2)", gt=0, le=20)
    resolution_octaves: float = _f(0.5, "bracket: the spacing of the learning rates around the optimum at the end, in octaves (<= step_octaves)", gt=0, le=20)
    lr_limits: tuple[float, ...] = _f((1e-6, 10.0), "bracket: [lowest, highest] learning rate ever tried; a sweep whose optimum stays at a limit ends 'limit'")


@dataclass(frozen=True)
class TransferConfig:
    objectives: tuple[str, ...] = _f(("transfer_score",), "what each outer trial (one architecture: the values of the searched keys other than leaderboard.lr "
                                                          "and leaderboard.transfer) is scored by, computed by the leaderboard's analysis on its runs "
                                                          "(docs/leaderboard.md): transfer_score, best (the metric's direction), transfer_regret, "
                                                          "worst_regret, lr_drift, lr_sensitivity (minimized), stable_octaves (maximized); two or more: a "
                                                          "multi-objective search whose leaderboard shows the Pareto front")
    inner: Literal["grid", "bracket"] = _f("grid", "how each outer trial searches the learning rate at each size: grid = every size x lr of space x seed; "
                                                   "bracket = per size, the lr values of space are a coarse start, extended until the optimum is bracketed, "
                                                   "then resolved, as sampler bracket does (settings in search.bracket)")
    start: Any = _f(None, "architectures the outer study evaluates first, before its sampler chooses: a list of mappings {searched key: value} (e.g. the "
                          "papers' exponents [{model.aggregation_exponent: 0.5, model.tau_exponent: 0.5}]); keys left out are sampled")


@dataclass(frozen=True)
class SearchConfig:
    sampler: Literal["grid", "bracket", "random", "tpe", "cmaes", "qmc", "nsga2"] = _f("grid", "grid: every point of space; bracket: per configuration of the "
                                                                                               "other keys, the learning-rate dimension of space is a coarse "
                                                                                               "start, extended until the optimum is bracketed, then resolved "
                                                                                               "(search.bracket); with search.transfer, the sampler of the "
                                                                                               "outer trials (random, tpe, cmaes, qmc, nsga2)")
    trials: int | None = _f(None, "required unless sampler is grid or bracket", ge=1, le=10_000_000)
    population_size: int | None = _f(None, "nsga2 only: individuals per generation, the population_size of Optuna's NSGAIISampler (>= 2: its uniform "
                                           "crossover takes two distinct parents). A generation starts once population_size outer trials of the previous one "
                                           "have completed (failed ones do not count; those opened meanwhile, runner.concurrency > 1, join the current one), "
                                           "so with population_size >= search.trials the search is random sampling and never evolves. Default (null): "
                                           "search.trials // 4, at least 2 and at most 50 (Optuna's default): about four generations up to 200 trials, three "
                                           "quarters of the budget bred from selected parents", ge=2, le=1_000_000)
    objective: str = _f("val_acc", "a metric name (docs/run-directory.md, docs/metrics.md)")
    direction: Literal["auto", "maximize", "minimize"] = _f("auto", "auto: from the metric")
    pruner: PrunerConfig = _f(None, "none | median | percentile | asha | hyperband | threshold | sweep, or {name: {options}}")
    bracket: BracketConfig = _f(None, "settings of sampler bracket and of search.transfer.inner: bracket (only with one of them; the learning rate is "
                                      "leaderboard.lr, a key of space)")
    transfer: TransferConfig | None = _f(None, "search for architectures whose learning rate transfers: each outer trial samples the searched keys other than "
                                               "leaderboard.lr and leaderboard.transfer, trains every size x lr x seed of space with them, or brackets each "
                                               "size's lr (inner: bracket) (inner runs, ordinary rows of trials.csv with its number in outer_trial) and is "
                                               "scored by search.transfer.objectives; search.trials counts outer trials. {} takes the defaults")
    storage: str | None = _f(None, "Optuna storage URL; default sqlite:///<run dir>/study.db")
    seed: int = _f(0, "sampler seed", ge=0)


@dataclass(frozen=True)
class RunnerConfig:
    kind: Literal["local", "ray", "table"] = _f("local", "local: train here; ray: on a Ray cluster; table: train nothing, serve the recorded runs of "
                                                         "a published table (runner.table; nas_stab.bench, docs/bench.md)")
    address: str | None = _f(None, "ray: null starts a local Ray; 'auto' or 'ray://host:port' joins")
    resources: Any = _f(None, "per trial: {cpu: 1, gpu: 0}")
    concurrency: int = _f(1, "trials at once", ge=1, le=100_000)
    max_failures: int = _f(1, "retries of a trial whose worker died", ge=0, le=1000)
    checkpoint_every: int = _f(0, "steps between trial checkpoints (ray; 0 = none)", ge=0)
    storage: str | None = _f(None, "ray: where Tune keeps trial checkpoints, a path every node sees or s3://...; default <run dir>/ray")
    table: str | None = _f(None, "table: the published table whose recorded runs are served (nas-stab bench tables)")
    table_file: str = _f("trials", "table: its run file (trials, or a confirmation beside it: confirm, equivalence, ...)")
    connect_timeout_s: float = _f(60.0, "ray: seconds to wait for runner.address to answer as Ray (a head's GCS or a Ray Client server) before giving up with "
                                        "one line", gt=0, le=3600)


@dataclass(frozen=True)
class LeaderboardConfig:
    lr: str = _f("train.lr", "the learning-rate key")
    transfer: str | None = _f(None, "the size axis across which one lr should transfer")
    compare: tuple[str, ...] = _f((), "keys whose values label the rows")
    metric: str | None = _f(None, "default: search.objective")
    reference: Any = _f(None, "s_ref; default the smallest size")
    tolerance_octaves: float = _f(1.0, "lr_drift a 'yes' allows, in octaves (criterion: drift)", gt=0)
    criterion: Literal["regret", "drift"] = _f("regret", "what 'transfers' judges: regret = what carrying the reference size's optimum lr costs at the size "
                                                         "it serves worst, within epsilon; drift = how far the optimum moves, within tolerance_octaves")
    epsilon: float | str = _f("3%", "the regret a 'yes' allows (criterion: regret): a number in the metric's units (0.01 = one point of accuracy), or a "
                                    "percentage of the row's gap between its best value and the no-learning value ('3%')")
    report: str | None = _f(None, "the metric reported at each size's lr chosen on metric (never re-optimized on it): default (null) the held-out "
                                  "counterpart of metric when the trials record it (val_acc -> test_acc, val_loss -> test_loss, bleu -> test_bleu), "
                                  "none without one; 'none' for no report, or a metric name (docs/leaderboard.md, Reported on a held-out split)")


@dataclass(frozen=True)
class LoggingConfig:
    tensorboard: bool = _f(True, "TensorBoard logs of every run under <run dir>/tensorboard/ (nas-stab tensorboard RUN_DIR rebuilds them)")
    tracking: Literal["none", "mlflow", "wandb"] | tuple[Literal["mlflow", "wandb"], ...] = _f("none", "experiment tracking of every recorded run, from its "
                                                                                                       "records as TensorBoard's: none, mlflow, wandb or a "
                                                                                                       "list of both. One tracked run per run (named by its "
                                                                                                       "run id: params, the history's curves, trials.csv's "
                                                                                                       "final metrics, status as a tag) and a run named "
                                                                                                       "leaderboard holding the leaderboard files; best "
                                                                                                       "effort (a failure is a line in log.txt, never a "
                                                                                                       "failed search); a resumed search logs nothing twice. "
                                                                                                       "Needs the package: pip install 'nas_stab[mlflow]' or "
                                                                                                       "'nas_stab[wandb]' (docs/run-directory.md)")
    mlflow_uri: str | None = _f(None, "mlflow: the tracking URI (any MLflow URI: http://host:5000, databricks, sqlite:///path.db, ...); default (null): "
                                      "sqlite:///<run dir>/mlflow.db with the artifacts in <run dir>/mlartifacts, offline. One MLflow experiment per nas_stab "
                                      "experiment (its name)")
    wandb_project: str | None = _f(None, "wandb: the W&B project (default: the experiment's name). Runs are written offline under <run dir>/wandb/ (wandb "
                                         "sync uploads them) unless WANDB_MODE says otherwise", pattern=r"[^/\\#?%:]{1,128}")


@dataclass(frozen=True)
class Spec:
    name: str = _f(None, "names the run directory (at most 100 characters)", pattern=r"[a-z0-9][a-z0-9_-]{0,99}")
    description: str = _f("")
    seeds: tuple[int, ...] = _f((0,), "a list, or a count n meaning [0..n-1], or adaptive seeds {min: n, max: m}: seeds 0..n-1 everywhere, more (up to m) "
                                      "only where a verdict is still open (grid and bracket searches, docs/leaderboard.md)")
    task: TaskConfig = _f(None)
    model: ModelConfig = _f(None)
    train: TrainConfig = _f(None)
    stability: StabilityConfig = _f(None)
    space: Any = _f(None, "dotted key -> values or a distribution")
    search: SearchConfig = _f(None)
    runner: RunnerConfig = _f(None)
    leaderboard: LeaderboardConfig = _f(None)
    logging: LoggingConfig = _f(None)
    # filled in by the loader, never from YAML
    source: str = field(default="<string>", compare=False, metadata={"internal": True})
    raw: Any = field(default=None, compare=False, repr=False, metadata={"internal": True})
    notes: tuple = field(default=(), compare=False, repr=False, metadata={"internal": True})  # warnings, `file:line: key: message`
    # adaptive seeds (`seeds: {min, max}`): the seeds after `seeds`, added in order where a verdict is still open
    seeds_more: tuple = field(default=(), compare=False, repr=False, metadata={"internal": True})


REQUIRED_TOP = ("name", "task", "model")
