"""The learning-rate transfer analysis (docs/leaderboard.md): from a table of runs to ranked rows and verdicts.

Shared by the search (a bracket's sweeps, adaptive seeds, a transfer search's objectives judge their runs with
it) and the results (the leaderboard), below both: it imports only the configuration's schema and numerics.

- `settings.settings(spec)`: a run's analysis settings (the ``leaderboard:`` section with its defaults);
- `table.analyze(trials, ...)` -> `table.Analysis` (``rows``: the ranked leaderboard, ``cells``: row x size x lr);
- `optimum`: each size's optimum and its interval; `verdicts`: the transfer verdicts; `intervals`: Student-t
  and bootstrap intervals; `values`: canonical values and their display; `more_seeds`: where adaptive seeds go;
  `calibration`: the verdicts' error rates on simulated sweeps; `plateau`: whether each optimum is bracketed
  by its seeds (reported only); `report`: the held-out metric reported at the lrs chosen.
"""
