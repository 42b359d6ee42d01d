"""Which kind of search an experiment runs, decided once from its spec.

The YAML spells it with three keys (``search.sampler``, ``search.transfer`` with its ``inner``, and ``seeds:
{min, max}``), and ``search.sampler`` means a different thing in each mode: the job source of a grid or bracket
search, the Optuna sampler of a sampled search, the sampler of a transfer search's outer trials. Code asks a
`SearchMode` instead of reading those keys::

    mode = search_mode(spec)
    if mode.brackets: ...          # a bracket search, or a transfer search bracketing inside its outer trials
    if mode.job_source: ...        # "grid" or "bracket": the driver's job source (search/sources/)

| mode | ``search.sampler`` | ``search.transfer`` | runs |
| --- | --- | --- | --- |
| grid | grid | - | every point x seed, known in advance |
| bracket | bracket | - | each size's lr widened and refined until bracketed |
| sampled | tpe, random, cmaes, qmc | - | ``search.trials`` configurations, each x seed |
| transfer (inner grid) | tpe, random, cmaes, qmc, nsga2 | inner: grid | outer trials x sizes x lrs x seeds |
| transfer (inner bracket) | same | inner: bracket | outer trials x each size's bracketed lrs x seeds |

Adaptive seeds (``seeds: {min, max}``) apply to grid and bracket searches (``adaptive``).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

Kind = Literal["grid", "bracket", "sampled", "transfer"]
JOB_SOURCES = ("grid", "bracket")  # the search.sampler values that name a job source, not an Optuna sampler


@dataclass(frozen=True)
class SearchMode:
    kind: Kind
    sampler: str  # search.sampler as written: the job source (grid, bracket) or the Optuna sampler
    inner: Literal["grid", "bracket"] | None = None  # a transfer search: how each outer trial searches its lr
    adaptive: bool = False  # seeds: {min, max}

    @property
    def transfer(self) -> bool:
        return self.kind == "transfer"

    @property
    def job_source(self) -> str | None:
        """"grid" or "bracket" where the jobs come from a job source (not an Optuna sampler), else None."""
        return self.kind if self.kind in JOB_SOURCES else None

    @property
    def optuna_sampler(self) -> str | None:
        """The Optuna sampler that proposes trials (sampled) or outer trials (transfer), else None."""
        return self.sampler if self.kind in ("sampled", "transfer") else None

    @property
    def inner_bracket(self) -> bool:
        """A transfer search that brackets each size's learning rate inside its outer trials."""
        return self.kind == "transfer" and self.inner == "bracket"

    @property
    def brackets(self) -> bool:
        """The learning rates are bracketed (a bracket search, or a transfer search's inner bracket): search.bracket applies."""
        return self.kind == "bracket" or self.inner_bracket

    @property
    def planned(self) -> bool:
        """The number of runs is known before the first one trains (a grid without adaptive seeds)."""
        return self.kind == "grid" and not self.adaptive

    def describe(self) -> str:
        """One line for the CLI and the logs: "grid", "bracket + adaptive seeds", "transfer (tpe outer, inner bracket)"."""
        text = {"grid": "grid", "bracket": "bracket", "sampled": f"{self.sampler} sampler",
                "transfer": f"transfer ({self.sampler} outer trials, inner {self.inner})"}[self.kind]
        return text + (" + adaptive seeds" if self.adaptive else "")


def search_mode(spec: Any) -> SearchMode:
    """The `SearchMode` of a spec (a `Spec`, or a stored spec from before transfer or adaptive seeds existed)."""
    s = spec.search
    transfer = getattr(s, "transfer", None)
    adaptive = bool(getattr(spec, "seeds_more", ()))
    if transfer is not None:
        return SearchMode("transfer", s.sampler, inner=getattr(transfer, "inner", "grid"), adaptive=adaptive)
    kind: Kind = s.sampler if s.sampler in JOB_SOURCES else "sampled"
    return SearchMode(kind, s.sampler, inner=None, adaptive=adaptive)
