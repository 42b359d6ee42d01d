"""`nas-stab probe` (docs/metrics.md): the stability metrics of every searched point measured at
initialization and over a short training, without the search: `cmd` (the command), `measure` (one point),
`seeds` (medians over seeds, log-log slopes with bootstrap intervals), `table` and `plots` (its outputs).

An application above `training`, `search` and `results`: the probes themselves live in `nas_stab.stability`.
"""
