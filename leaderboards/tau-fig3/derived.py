"""The tau-fig3 README's figures that probe_slopes.csv and claims.csv do not hold (run by leaderboards/derive.py into
derived.csv), from probe.csv, claims.yaml and probe_provenance.txt in this directory.

- ``k-{row}`` (``tau1``: tau = 1, ``tausqrt``: tau = 1/sqrt(L)): the exponent k of ``fwd_ratio ~ L^k`` against the
  number of residual blocks L = (depth - 2) / 2, the least-squares slope of log2 on log2 through the per-depth seed
  means of log2(init_fwd_ratio), with a 90% bootstrap over the 5 seeds (paired across the depths; 1000 replicates, a
  generator seeded 0 per row) widened for the seed count (``widen_replicates``, docs/leaderboard.md). The code the
  README carried before these figures were generated (probe_slopes.csv fits against the depth instead);
- ``k-tau1-distance-from-claim``: |k - the slope claims.yaml declares for tau = 1| (Claim 1's 0.5);
- ``tausqrt-loss-drop-median-min`` / ``-max``: with tau = 1/sqrt(L), the smallest and largest over the depths of the
  median (over seeds) ``init_loss_drop``;
- ``probe-wall-s`` and ``probe-wall-minutes``: the probe's wall time as its provenance records it (``compute:``).
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from nas_stab.analysis.intervals import widen_replicates

ROWS = {"1": "tau1", "1/sqrt(L)": "tausqrt"}


def derive(table: Path) -> pd.DataFrame:
    nan = float("nan")
    out: list[tuple[str, float, float, float]] = []
    d = pd.read_csv(table / "probe.csv", usecols=["seed", "model.depth", "model.tau", "init_fwd_ratio", "init_loss_drop"])
    d["L"] = (d["model.depth"] - 2) // 2  # depth 6n + 2, L = 3n blocks
    k = {}
    for tau, g in d.groupby("model.tau"):
        y = np.log2(g.pivot(index="seed", columns="L", values="init_fwd_ratio"))  # seeds x depths
        x, seeds = np.log2(y.columns.to_numpy(float)), y.index.to_numpy()
        rng = np.random.default_rng(0)
        reps = [np.polyfit(x, y.loc[rng.choice(seeds, seeds.size)].mean().to_numpy(), 1)[0] for _ in range(1000)]
        lo, hi = widen_replicates(reps, seeds.size)  # 90%, widened for the seed count (docs/leaderboard.md)
        k[ROWS[str(tau)]] = float(np.polyfit(x, y.mean().to_numpy(), 1)[0])
        out.append((f"k-{ROWS[str(tau)]}", k[ROWS[str(tau)]], lo, hi))
    claims = yaml.safe_load((table / "claims.yaml").read_text(encoding="utf-8"))["claims"]
    expect = next(c["expect"] for c in claims if c["a"].get("model.tau") == 1)
    out.append(("k-tau1-distance-from-claim", abs(k["tau1"] - float(expect)), nan, nan))
    med = d[d["model.tau"].astype(str) == "1/sqrt(L)"].groupby("model.depth")["init_loss_drop"].median()
    out.append(("tausqrt-loss-drop-median-min", float(med.min()), nan, nan))
    out.append(("tausqrt-loss-drop-median-max", float(med.max()), nan, nan))
    prov = (table / "probe_provenance.txt").read_text(encoding="utf-8")
    wall = float(re.search(r"^compute: ([\d.]+) s wall", prov, flags=re.M).group(1))  # type: ignore[union-attr]
    out.append(("probe-wall-s", wall, nan, nan))
    out.append(("probe-wall-minutes", wall / 60, nan, nan))
    return pd.DataFrame(out, columns=["name", "value", "lo", "hi"])
