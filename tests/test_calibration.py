"""The leaderboard's verdicts are calibrated: simulated LR-transfer tables with a known optimum
path go through `analyze` (the code that builds every leaderboard), and the rates of `yes` and
`no` must meet the bounds of docs/leaderboard.md. Every simulated table is one row of a single
`analyze` call, so the 200+ tables per setting are computed together (vectorized)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from nas_stab.analysis.table import analyze

TABLES = 200  # simulated tables per setting
GRID = np.arange(11) * 0.5  # a half-octave grid of 11 lrs: x = log2(lr) - log2(base), 0 .. 5
SIZES = {3: (1, 4, 16), 4: (1, 2, 4, 8)}
SEEDS = (1, 2, 3, 5, 10)
NOISE = (0.01, 0.06)
DRIFTS = (0, 1, 2, 3)
TOL = 1.0


def curve(x, x_star):
    """acc(x) = 0.9 - 0.05 (x - x*)^2, clipped below at 0.1 (chance of 10 classes)."""
    return np.maximum(0.9 - 0.05 * (x - x_star) ** 2, 0.1)


def simulate(settings, rng, *, untrainable=None):
    """One trials table holding TABLES tables per setting (drift, n_sizes, seeds, sd). The optimum moves
    linearly in log2(size) by `drift` octaves across the sizes, centred on the grid's middle with a random
    offset in [-0.25, 0.25] per table, so a 3-octave path stays an octave inside the grid.
    `untrainable`: None, "chance" (every cell at chance) or "largest" (the largest size at chance)."""
    frames = []
    for si, (drift, n_sizes, seeds, sd) in enumerate(settings):
        sizes = np.array(SIZES[n_sizes])
        u = np.log2(sizes) / np.log2(sizes[-1])
        centre = 2.5 + rng.uniform(-0.25, 0.25, size=(TABLES, 1))
        x_star = centre + drift * (u[None, :] - 0.5)  # [table, size]
        acc = curve(GRID[None, None, :], x_star[..., None])  # [table, size, lr]
        if untrainable == "chance":
            acc[:] = 0.1
        elif untrainable == "largest":
            acc[:, -1, :] = 0.1
        vals = acc[..., None] + rng.normal(0.0, sd, size=acc.shape + (seeds,))
        t, s, g, k = np.meshgrid(np.arange(TABLES), np.arange(n_sizes), np.arange(len(GRID)), np.arange(seeds), indexing="ij")
        frames.append(pd.DataFrame({
            "setting": si, "table": t.ravel(), "seed": k.ravel(), "status": "complete",
            "model.width": sizes[s.ravel()], "train.lr": 0.01 * np.exp2(GRID[g.ravel()]), "val_acc": vals.ravel(),
        }))
    return pd.concat(frames, ignore_index=True)


def verdict_rates(settings, *, seed=0, **kw):
    trials = simulate(settings, np.random.default_rng(seed), **kw)
    a = analyze(trials, transfer="model.width", compare=["setting", "table"], metric="val_acc", classes=10,
                tolerance=TOL, n_boot=200, boot_seed=seed, criterion="drift")
    counts = a.rows.groupby(["setting", "transfers"]).size().unstack(fill_value=0)
    rates = counts.div(counts.sum(axis=1), axis=0).reindex(columns=["yes", "inconclusive", "no"], fill_value=0.0)
    rates.index = [settings[int(i)] for i in rates.index]
    rates.index.name = "(drift, sizes, seeds, sd)"
    return rates, a


@pytest.fixture(scope="module")
def rates():
    settings = [(d, n, k, sd) for d in DRIFTS for n in (3, 4) for k in SEEDS for sd in NOISE]
    r, _ = verdict_rates(settings)
    print("\n" + r.to_string(float_format=lambda v: f"{v:.3f}"))
    return r


def _fmt(r: pd.DataFrame) -> str:
    return "\n" + r.to_string(float_format=lambda v: f"{v:.3f}")


@pytest.mark.slow  # over 15 s: CI runs it in its slow stage (pytest -m slow)
def test_no_yes_when_the_optimum_moves(rates):
    moving = rates[[i[0] >= 2 * TOL for i in rates.index]]
    assert (moving["yes"] <= 0.05).all(), "P(yes | drift >= 2 x tolerance) above 5%:" + _fmt(moving)


def test_no_no_when_the_optimum_stays(rates):
    still = rates[[i[0] == 0 for i in rates.index]]
    assert (still["no"] <= 0.05).all(), "P(no | drift 0, every size trains) above 5%:" + _fmt(still)


def test_yes_when_it_transfers_with_enough_seeds(rates):
    clean = rates[[i[0] == 0 and i[2] == 5 and i[3] == 0.01 for i in rates.index]]
    assert (clean["yes"] >= 0.80).all(), "P(yes | drift 0, 5 seeds, sd 0.01) below 80%:" + _fmt(clean)


def test_one_or_two_seeds_never_yes(rates):
    few = rates[[i[2] <= 2 for i in rates.index]]
    assert (few["yes"] == 0).all(), "a table with 1 or 2 seeds said yes:" + _fmt(few)


def test_untrainable_size_is_no_and_ranked_below():
    settings = [(0, 4, 5, 0.01)]
    trials = pd.concat([simulate(settings, np.random.default_rng(1)).assign(kind="trains"),
                        simulate(settings, np.random.default_rng(2), untrainable="largest").assign(kind="dead")])
    a = analyze(trials, transfer="model.width", compare=["kind", "table"], metric="val_acc", classes=10, n_boot=200)
    dead = a.rows[a.rows["kind"] == "dead"]
    rate = (dead["transfers"] == "no").mean()
    assert rate == 1.0, f"P(no | a size at chance) = {rate:.3f}, want 1"
    assert dead["why"].str.contains("8: no lr trains").all()
    worst_live = a.rows.loc[a.rows["kind"] == "trains", "rank"].max()
    assert dead["rank"].min() > worst_live, "a row with an untrainable size ranks above one that trains everywhere"


def test_chance_everywhere_is_never_yes():
    settings = [(0, n, k, sd) for n in (3, 4) for k in (3, 5, 10) for sd in NOISE]
    r, _ = verdict_rates(settings, untrainable="chance", seed=3)
    assert (r["yes"] == 0).all(), "a row at chance everywhere said yes:" + _fmt(r)
