"""Simulated learning-rate sweeps with a known answer, for calibrating the leaderboard's verdicts.

Each *family* is a curve shape of the metric against ``x = log2(lr)`` that real sweeps produce, with a
noise model: a symmetric or asymmetric peak, a divergence cliff beside the optimum, an optimum at the
edge of a cliff, an accuracy ceiling with binomial noise, a flat (quartic) top, a 2-octave plateau,
heteroscedastic and heavy-tailed noise, random divergences, missing runs, run directories merged
per size, a peak 10x steeper above its optimum (`skew`), a largest size that trains at one or two lrs
only (`isolated`) and cells where some seeds get stuck (`bimodal`). `simulate` draws trials tables (the
columns of ``trials.csv``) of many independent tables at once; `truth` gives each table's true per-size optimum, drift and regrets; `evaluate` runs `analyze`
(the code that builds every leaderboard) and reports P(yes), P(no) and the coverage of the printed
intervals. `tests/test_calibration.py` runs a fast subset; ``benchmarks/bench_calibration.py`` the whole
table of docs/leaderboard.md.

Example:
    >>> import numpy as np
    >>> s = Setting("peak", drift=0.0, sizes=3, seeds=5, sd=0.01, grid="half")
    >>> r = evaluate([s], tables=20, n_boot=200, seed=0)
    >>> float(r.loc[0, "yes"]) >= 0.5
    True
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import pandas as pd

from nas_stab.analysis.more_seeds import plan
from nas_stab.analysis.table import Analysis, analyze

__all__ = ["FAMILIES", "GRIDS", "Setting", "evaluate", "fingerprint", "simulate", "truth"]

CHANCE = 0.1  # 10 classes
TOP = 0.9
FAMILIES = ("peak", "asym", "cliff", "edge", "ceiling", "quartic", "plateau", "hetero", "heavy", "rand_div",
            "missing", "merged", "skew", "isolated", "bimodal")
# the families whose truth is the expected curve itself, computed numerically (`_expected`): an optimum that
# trains at one or two lrs only at the largest size, cells where some seeds are stuck, a 10x asymmetric peak
_NUMERIC = ("skew", "isolated", "bimodal")
STUCK = 0.4  # "bimodal": the largest share of a cell's runs stuck at chance (at and above the optimum, largest size)
GRIDS = ("quarter", "half", "one", "irregular")
_SPAN = 6.0  # octaves the grid spans
LR0 = 0.001  # the learning rate at x = 0 of the simulated grids


@dataclass(frozen=True)
class Setting:
    """One simulated condition: `drift` is how far (octaves) the optimum moves from the smallest to the largest
    size, linearly in log2(size); `sizes` 2-5 sizes 1, 2, 4, ...; `sd` the noise of one run's metric."""

    family: str
    drift: float
    sizes: int
    seeds: int
    sd: float
    grid: str = "half"


def _grid(kind: str, rng: np.random.Generator) -> np.ndarray:
    if kind == "irregular":  # half-octave steps jittered by up to 0.15 octave, a few points missing
        g = np.arange(0, _SPAN + 1e-9, 0.5) + rng.uniform(-0.15, 0.15, int(_SPAN / 0.5) + 1)
        keep = np.ones(g.size, bool)
        keep[rng.choice(np.arange(2, g.size - 2), 2, replace=False)] = False
        return np.sort(g[keep])
    step = {"quarter": 0.25, "half": 0.5, "one": 1.0}[kind]
    return np.arange(0, _SPAN + 1e-9, step)


def _curve(family: str, x: np.ndarray, xs: np.ndarray | float) -> np.ndarray:
    """The noiseless metric at x for optimum xs (broadcast)."""
    dx = x - xs
    if family == "asym":  # 4x steeper above the optimum than below
        v = TOP - 0.04 * dx**2 * np.where(dx > 0, 4.0, 1.0)
    elif family == "skew":  # 10x steeper above the optimum than below (a loss curve's slow rise, fast fall)
        v = TOP - 0.02 * dx**2 * np.where(dx > 0, 10.0, 1.0)
    elif family == "edge":  # still rising at the cliff (the cliff is at xs): the optimum is the cliff's edge
        v = TOP - 0.05 * (dx - 0.75) ** 2
    elif family == "ceiling":  # near 100%: shallow, binomial noise
        v = 0.985 - 0.015 * dx**2
    elif family == "quartic":
        v = TOP - 0.01 * dx**4
    elif family == "plateau":  # flat within 1 octave of xs
        v = TOP - 0.05 * np.maximum(np.abs(dx) - 1.0, 0.0) ** 2
    else:
        v = TOP - 0.05 * dx**2
    return np.maximum(v, CHANCE)


def _diverges(family: str, x: np.ndarray, xs: np.ndarray, cliff: np.ndarray) -> np.ndarray:
    if family == "cliff":  # a divergence cliff between the optimum and one grid step above it
        return x > xs + cliff
    if family == "edge":
        return x > xs
    return np.zeros(np.broadcast_shapes(x.shape, xs.shape), bool)


def _optima(s: Setting, tables: int, rng: np.random.Generator) -> np.ndarray:
    u = np.arange(s.sizes) / max(1, s.sizes - 1)
    centre = _SPAN / 2 + rng.uniform(-0.5, 0.5, size=(tables, 1))
    return centre + s.drift * (u[None, :] - 0.5)  # [table, size]


def simulate(settings: list[Setting], tables: int, seed: int = 0) -> tuple[pd.DataFrame, dict[int, dict]]:
    """A trials table holding `tables` tables per setting (columns ``setting``, ``table``, ``seed``,
    ``status``, ``model.width``, ``train.lr``, ``val_acc``) and, per setting index, its truth."""
    rng = np.random.default_rng(seed)
    frames, truths = [], {}
    for si, s in enumerate(settings):
        x = _grid(s.grid, rng)
        xs = _optima(s, tables, rng)  # [T, S]
        cliff = rng.uniform(0.05, 1.0, size=xs.shape) * (x[1] - x[0] if x.size > 1 else 1.0)
        mean = _curve(s.family, x[None, None, :], xs[..., None])  # [T, S, L]
        shape = mean.shape + (s.seeds,)
        if s.family == "ceiling":
            noise = rng.normal(size=shape) * np.sqrt(mean * (1 - mean) / 500.0)[..., None] * (s.sd / 0.01)
        elif s.family == "hetero":  # noisier away from the optimum
            noise = rng.normal(size=shape) * s.sd * (1.0 + np.abs(x[None, None, :] - xs[..., None]))[..., None]
        elif s.family == "heavy":  # Student t with 3 degrees of freedom, scaled to sd
            noise = rng.standard_t(3, size=shape) * s.sd / np.sqrt(3.0)
        else:
            noise = rng.normal(size=shape) * s.sd
        val = np.clip(mean[..., None] + noise, 0.0, 1.0)
        div = np.broadcast_to(_diverges(s.family, x[None, None, :], xs[..., None], cliff[..., None])[..., None], shape).copy()
        if s.family == "rand_div":
            div |= rng.random(shape) < 0.03
        step = _step(x)
        if s.family in ("isolated", "bimodal"):
            largest = (np.arange(s.sizes) == s.sizes - 1)[None, :, None]
            if s.family == "isolated":  # the largest size trains only from one step below its optimum to its cliff
                above, below = _outside_window(x[None, None, :], xs[..., None], cliff[..., None], step)
                div |= np.broadcast_to((largest & above)[..., None], shape)
                stuck = np.broadcast_to((largest & below)[..., None], shape)
            else:  # some seeds of a cell stuck at chance: none below the optimum, up to STUCK of them above it
                stuck = rng.random(shape) < (_stuck_share(x[None, None, :], xs[..., None]) * largest)[..., None]
            val = np.where(stuck, np.clip(CHANCE + rng.normal(size=shape) * s.sd * 0.5, 0.0, 1.0), val)
        keep = np.ones(shape, bool)
        if s.family == "missing":
            keep = rng.random(shape) >= 0.1
        t, sz, lr, k = np.meshgrid(np.arange(tables), np.arange(s.sizes), np.arange(x.size), np.arange(s.seeds), indexing="ij")
        seed_id = k + (100 * sz if s.family == "merged" else 0)  # merged run directories: each size its own seeds
        frame = pd.DataFrame({
            "setting": si, "table": t.ravel(), "seed": seed_id.ravel(),
            "status": np.where(div.ravel(), "diverged", "complete"),
            "model.width": (2 ** sz).ravel(), "train.lr": LR0 * np.exp2(x[lr.ravel()]),
            "val_acc": np.where(div.ravel(), np.nan, val.ravel()),
        })
        frames.append(frame[keep.ravel()])
        truths[si] = {**truth(s, xs, cliff, step), "xs": xs, "cliff": cliff, "step": step}
    return pd.concat(frames, ignore_index=True), truths


def _step(x: np.ndarray) -> float:
    return float(np.median(np.diff(x))) if x.size > 1 else 1.0


def _outside_window(x: np.ndarray, xs: np.ndarray, cliff: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """"isolated": where the largest size diverges (above its cliff) and where it is stuck (more than a step below its
    optimum)."""
    return x > xs + cliff, x < xs - step


def _stuck_share(x: np.ndarray, xs: np.ndarray) -> np.ndarray:
    """"bimodal": the share of runs stuck at chance at x, rising from 0 half an octave below the optimum to STUCK
    half an octave above it."""
    return STUCK * np.clip(x - xs + 0.5, 0.0, 1.0)


def _expected(s: Setting, x: np.ndarray, xs: np.ndarray, cliff: np.ndarray, step: float) -> np.ndarray:
    """The expected metric [table, size, ...] of the families in `_NUMERIC` at x (broadcast against xs[..., None]):
    chance where a run diverges or is stuck, a stuck run's share of chance in a bimodal cell."""
    xs_, cl = xs[..., None], cliff[..., None]
    v = _curve(s.family, x, xs_)
    largest = (np.arange(xs.shape[1]) == xs.shape[1] - 1)[None, :, None]
    if s.family == "isolated":
        above, below = _outside_window(x, xs_, cl, step)
        v = np.where(largest & (above | below), CHANCE, v)
    elif s.family == "bimodal":
        p = _stuck_share(x, xs_) * largest
        v = (1 - p) * v + p * CHANCE
    return v


def _numeric_truth(s: Setting, xs: np.ndarray, cliff: np.ndarray, step: float) -> dict:
    """`truth` from the expected curve on a fine grid (1/200 octave) around each optimum."""
    fine = np.linspace(-4.0, 4.0, 1601)
    cand = xs[..., None] + fine  # [T, S, F]
    m = _expected(s, cand, xs, cliff, step)
    best = m.max(-1)
    xstar = np.take_along_axis(cand, m.argmax(-1)[..., None], -1)[..., 0]
    at = _expected(s, xstar[:, :1, None], xs, cliff, step)[..., 0]  # the smallest size's true optimum, carried
    regret = np.maximum(best - at, 0.0)
    return {"xstar": xstar + np.log2(LR0), "drift": xstar.max(1) - xstar.min(1), "worst": regret.max(1), "regret": regret,
            "best": best}


def truth(s: Setting, xs: np.ndarray, cliff: np.ndarray | None = None, step: float = 0.5) -> dict:
    """True per-size optima (log2 lr; NaN on a plateau, where the optimum is not a point), drift and the worst
    size's regret of carrying the smallest size's optimum (regret: NaN on a plateau's own flat top)."""
    T = xs.shape[0]
    if s.family in _NUMERIC:
        return _numeric_truth(s, xs, np.zeros_like(xs) if cliff is None else cliff, step)
    xstar = xs.copy()  # with "edge", the supremum of the lrs that train
    best = _best(s.family)
    x_ref = xs[:, :1]  # the smallest size's optimum (a plateau's centre is one of its optima)
    at = _curve(s.family, x_ref, xs)
    if s.family == "edge":
        at = np.where(x_ref > xs, CHANCE, at)  # carried beyond a size's cliff it diverges
    regret = np.maximum(best - at, 0.0)  # [T, S]
    drift = xs.max(1) - xs.min(1)
    if s.family == "plateau":
        # every lr of the reference size's plateau is one of its optima: the truth is the regret of the most
        # favourable one (so a "yes" counts as false only when even that one loses 2 epsilon)
        cand = xs[:, :1, None] + np.linspace(-1.0, 1.0, 81)[None, None, :]
        regret = np.maximum(best - _curve(s.family, cand, xs[..., None]), 0.0).min(-1)
        xstar = np.full_like(xs, np.nan)
        drift = np.full(T, np.nan)
    return {"xstar": xstar + np.log2(LR0), "drift": drift, "worst": regret.max(1), "regret": regret}


def _best(family: str) -> float:
    """The true best value of a family's curve, over the lrs that train (below the cliff of "edge")."""
    fine = np.linspace(-4, 4, 3201)
    top = _curve(family, fine, 0.0)
    return float(np.where(fine <= 0, top, -np.inf).max() if family == "edge" else top.max())


def carried_regret(s: Setting, tr: dict, x_ref: np.ndarray) -> np.ndarray:
    """The true regret [table, size] of carrying x_ref[table] (log2 lr as the trials hold it) to every size: the
    size's true best minus its true curve there (chance where it diverges there)."""
    x = (np.asarray(x_ref, dtype=float) - np.log2(LR0))[:, None]
    xs, cliff = tr["xs"], tr["cliff"]
    if s.family in _NUMERIC:
        at = _expected(s, x[:, :, None], xs, cliff, tr["step"])[..., 0]
        return np.maximum(tr["best"] - at, 0.0)
    at = np.where(_diverges(s.family, x, xs, cliff), CHANCE, _curve(s.family, x, xs))
    return np.maximum(_best(s.family) - at, 0.0)


def evaluate(settings: list[Setting], tables: int = 200, n_boot: int = 200, seed: int = 0, *,
             epsilon: float | str | None = None, criterion: str = "regret", tolerance: float = 1.0,
             adaptive: tuple[int, int] | None = None) -> pd.DataFrame:
    """Per setting: P(yes), P(inconclusive), P(no) and the coverage of the printed 90% intervals of each size's
    optimum (x), the drift and the worst regret, with the true drift and worst regret (means over tables), and
    ``runs``, the runs a table used. `adaptive` (min, max): adaptive seeds (`more_seeds.plan`), each table
    starting with min seeds per cell and growing where its verdict is open, up to max (each setting's `seeds`
    is then ignored); ``batches``: the most batches of seeds a table added."""
    if adaptive is not None:
        settings = [replace(s, seeds=int(adaptive[1])) for s in settings]
    trials, truths = simulate(settings, tables, seed)
    kw: dict[str, Any] = dict(transfer="model.width", compare=["setting", "table"], metric="val_acc", classes=10,
                              n_boot=n_boot, boot_seed=seed, epsilon=epsilon, criterion=criterion, tolerance=tolerance)
    looks = None
    a: Analysis | _Final
    if adaptive is None:
        a = analyze(trials, **kw)
    else:
        a, trials, looks = _adaptive(trials, adaptive, kw)  # looks: the batches each table added
    runs = trials.groupby(["setting", "table"]).size()
    rows = a.rows.sort_values(["setting", "table"])
    sizes = a.sizes.sort_values(["setting", "table", "size"])
    out = []
    for si, s in enumerate(settings):
        r = rows[rows["setting"] == si]
        tr = truths[si]
        z = sizes[sizes["setting"] == si]
        xs = tr["xstar"][z["table"].to_numpy(dtype=int), np.log2(z["size"].to_numpy(dtype=float)).astype(int)]
        has = np.isfinite(xs) & z["trains"].to_numpy(bool) & np.isfinite(z["x_lo"].to_numpy(float))
        cov_x = float(((z["x_lo"].to_numpy(float) <= xs + 1e-9) & (xs <= z["x_hi"].to_numpy(float) + 1e-9))[has].mean()) if has.any() else np.nan
        td = tr["drift"][r["table"].to_numpy(dtype=int)]
        hd = np.isfinite(td) & np.isfinite(r["lr_drift_lo"].to_numpy(float))
        cov_d = float(((r["lr_drift_lo"] <= td + 1e-9) & (td <= r["lr_drift_hi"] + 1e-9)).to_numpy()[hd].mean()) if hd.any() else np.nan
        tw = tr["worst"][r["table"].to_numpy(dtype=int)]
        hw = np.isfinite(tw) & np.isfinite(r["worst_regret_lo"].to_numpy(float))
        cov_w = float(((r["worst_regret_lo"] <= tw + 1e-9) & (tw <= r["worst_regret_hi"] + 1e-9)).to_numpy()[hw].mean()) if hw.any() else np.nan
        # what carrying the lr the reference size's fit found costs, on the true curves (the verdict's question)
        tabs = r["table"].to_numpy(dtype=int)
        ref = z[z["size"] == 1].set_index("table")["x_star"].reindex(tabs).to_numpy(dtype=float)
        sub = {k: tr[k][tabs] for k in ("xs", "cliff", "best") if k in tr} | {"step": tr["step"]}
        tc = np.where(np.isfinite(ref), carried_regret(s, sub, ref).max(-1), np.nan)
        hc = np.isfinite(tc) & np.isfinite(lo_w := r["worst_regret_lo"].to_numpy(float))
        hi_w = r["worst_regret_hi"].to_numpy(float)
        cov_c = float(((lo_w <= tc + 1e-9) & (tc <= hi_w + 1e-9))[hc].mean()) if hc.any() else np.nan
        # the upper end alone (a `yes` is decided on it): P(the carried lr's true cost <= worst_regret_hi)
        cov_hi = float((tc <= hi_w + 1e-9)[hc].mean()) if hc.any() else np.nan
        said = r["transfers"].to_numpy()
        costly = np.isfinite(tc) & (tc >= 2 * r["epsilon"].to_numpy(float))
        cheap = np.isfinite(tc) & (tc < r["epsilon"].to_numpy(float))
        v = r["transfers"].value_counts(normalize=True)
        out.append({**asdict(s), "adaptive": "" if adaptive is None else f"{adaptive[0]}-{adaptive[1]}",
                    "runs": float(runs.loc[si].mean()),
                    "batches": float(looks.loc[si].max()) if looks is not None else 0.0,
                    "true_worst": float(np.nanmean(tw)), "carried_worst": float(np.nanmean(tc)),
                    "epsilon": float(r["epsilon"].mean()),
                    "yes": float(v.get("yes", 0.0)), "inconclusive": float(v.get("inconclusive", 0.0)), "no": float(v.get("no", 0.0)),
                    "yes_if_costly": float((said[costly] == "yes").mean()) if costly.sum() >= 10 else np.nan,
                    # a `no` while carrying the found lr truly costs under epsilon: the false `no` (with a cliff that
                    # moves between sizes a `no` at drift 0 can be right: the carried lr diverges at another size)
                    "no_if_cheap": float((said[cheap] == "no").mean()) if cheap.sum() >= 10 else np.nan,
                    "cover_x": cov_x, "cover_drift": cov_d, "cover_worst": cov_w, "cover_carried": cov_c, "cover_upper": cov_hi})
    return pd.DataFrame(out)


def fingerprint(tables: int = 12, n_boot: int = 100) -> pd.DataFrame:
    """The verdict of fixed simulated tables (every family at true drifts 0, 1 and 2 octaves, 3 and 5 seeds,
    3 sizes, a half-octave grid; simulation and bootstrap seeds fixed): what a rules version stores so that a change
    that moves a verdict without bumping the version is caught (`nas_stab.analysis.rules`)."""
    settings = [Setting(f, d, 3, k, 0.01, "half") for k in (3, 5) for f in FAMILIES for d in (0.0, 1.0, 2.0)]
    trials, _ = simulate(settings, tables, seed=0)
    a = analyze(trials, transfer="model.width", compare=["setting", "table"], metric="val_acc", classes=10,
                n_boot=n_boot, boot_seed=0)
    r = a.rows.sort_values(["setting", "table"])
    st = pd.DataFrame([asdict(settings[int(i)]) for i in r["setting"]])
    return pd.DataFrame({"family": st["family"].to_numpy(), "drift": st["drift"].to_numpy(), "seeds": st["seeds"].to_numpy(),
                         "table": r["table"].to_numpy(dtype=int), "transfers": r["transfers"].to_numpy()})


def _adaptive(trials: pd.DataFrame, adaptive: tuple[int, int], kw: dict) -> tuple[_Final, pd.DataFrame, pd.Series]:
    """Adaptive seeds on simulated tables drawn with `max` seeds per cell: the first `min` seeds of every cell,
    then, look after look, the seeds `more_seeds.plan` asks for (a cell's seeds in order), until it asks for
    none. (the final analysis, the trials it used, the number of looks)"""
    lo, hi = int(adaptive[0]), int(adaptive[1])
    cell = ["setting", "table", "model.width", "train.lr"]
    # a run's place among its cell's runs, in seed order: a cell grown to n seeds holds its first n runs (where the
    # family "missing" dropped one, the next seed stands in, as a rerun would give a lost run's cell another seed)
    k = (trials.groupby(cell, sort=False)["seed"].rank(method="first") - 1).to_numpy()
    target = pd.Series(lo, index=pd.MultiIndex.from_frame(trials[cell].drop_duplicates()))
    tab = ["setting", "table"]
    looks = pd.Series(0, index=pd.MultiIndex.from_frame(trials[tab].drop_duplicates()))
    active = trials  # the tables still growing (a table no plan touched is final: its runs do not change)
    rows, sizes = [], []
    while True:
        want = target.reindex(pd.MultiIndex.from_frame(active[cell])).to_numpy()
        used = active[k[active.index] < want]
        a = analyze(used.reset_index(drop=True), **kw)
        p = plan(a, hi)
        first = a.records.groupby(["_k", "_s", "_l"], sort=False)[cell].first()
        grow = first.loc[pd.MultiIndex.from_frame(p.cells[["_k", "_s", "_l"]])].reset_index(drop=True)
        # a cell asked for seeds it already has (a simulated run that is missing, as the family "missing" drops
        # them) does not grow: a table none of whose cells grows is final
        more = p.cells["target"].to_numpy() > target.loc[pd.MultiIndex.from_frame(grow)].to_numpy()
        grow, targets = grow[more], p.cells["target"].to_numpy()[more]
        tabs = pd.MultiIndex.from_frame(grow[tab].drop_duplicates().reset_index(drop=True))
        final = ~pd.MultiIndex.from_frame(a.rows[tab]).isin(tabs)
        rows.append(a.rows[final])
        sizes.append(a.sizes[~pd.MultiIndex.from_frame(a.sizes[tab]).isin(tabs)])
        if grow.empty:
            done = trials.loc[trials.index.isin(used.index) | ~trials.index.isin(active.index)]
            done = done[k[done.index] < target.reindex(pd.MultiIndex.from_frame(done[cell])).to_numpy()]
            return _Final(pd.concat(rows, ignore_index=True), pd.concat(sizes, ignore_index=True)), done, looks
        looks.loc[tabs] += 1
        idx = pd.MultiIndex.from_frame(grow)
        target.loc[idx] = np.maximum(target.loc[idx].to_numpy(), targets)
        active = active[pd.MultiIndex.from_frame(active[tab]).isin(tabs)]


@dataclass
class _Final:
    """The rows and sizes of tables analysed at different looks (what `evaluate` scores)."""

    rows: pd.DataFrame
    sizes: pd.DataFrame
