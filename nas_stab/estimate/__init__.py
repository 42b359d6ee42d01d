"""The cost estimate printed by `nas-stab validate`: the wall time of `nas-stab run`.

A search's wall time is more than its training steps. On small runs (the
quickstart's 108 runs of 100 steps) the steps are a fraction of it; the rest is
(`wall.wall_model`, each piece measured here, in this process, on this machine):

- **start-up**: the interpreter, the imports, the spec and the data (this
  process's age when the estimate starts: `nas-stab validate` does what `run`
  does before its first run); one at a time, a first run's extra (a *cold*
  run, which loads the data again, minus a warm one); with
  `runner.concurrency` > 1 the worker processes' start and their first runs
  (the local runner's own worker pool, started here: `measure.pool_rounds`);
- **each run**, whole: model build, the training steps, the evaluations, the
  stability snapshots and probes (one real run of the cheapest and one of the
  dearest configuration through the run path, `plan.run_job`; a long run is
  timed shortened and its steps and snapshots extrapolated, see `measure.whole_run`);
- **each run's bookkeeping** in the driver: its records (history file,
  trials.csv, TensorBoard), Optuna's enqueue, ask and tell (a real driver in a
  temporary run directory records a few runs, `measure.bookkeeping`);
- **the end**: the leaderboard (and per outer trial of a transfer search its
  objectives, the same analysis).

Runs at once (`runner.concurrency`) divide the runs and their bookkeeping by
how much faster they go at once than one by one, measured on that pool (a
round of the cheapest run on every worker at once against the same run
alone): on a 2-core machine shared with other work two runs at once were
measured from 1.0x to 1.5x as fast, never the 2x the concurrency suggests.
Where it cannot be measured (the Ray runner) it is modelled from the cores
busy with other work (`wall.speedup`).

A grid's configurations can differ in cost by orders of magnitude (depth,
width, branches, batch size), so timing the base configuration alone misleads.
The distinct configurations are ranked by a cost proxy (parameters x examples
per batch); a few training steps of the cheapest and the most expensive are
timed in several rounds (the spread across rounds is printed: a busy machine
shows up there), one whole run of each, and every run's time is interpolated
linearly in the proxy between the two (`shape.py`: what a search trains).

A bracket search trains its start grid and then adds learning rates as results
come in: the estimate gives its start grid (fewest), the expected count and
a bound of its rules (`bracket.points_range`). A transfer search trains, for
each outer trial, its inner grid (sizes x learning rates x seeds): outer x inner.

The modules: `report.py` (`estimate_cost`, the text), `shape.py` (what is trained),
`measure.py` (what is timed on this machine), `wall.py` (the wall-time model).
"""
from nas_stab.estimate.measure import (
    BOOK_RUNS,
    ROUNDS,
    ROUNDS_AT_ONCE,
    RUN_BUDGET_S,
    STEPS_PER_ROUND,
    Timed,
    measure_costs,
    process_age,
    run_threads,
    shortened,
)
from nas_stab.estimate.report import estimate_cost
from nas_stab.estimate.shape import MAX_CONFIGS, PLANNED, Shape, search_shape
from nas_stab.estimate.wall import Costs, Wall, parallel, speedup, wall_model

__all__ = ["BOOK_RUNS", "MAX_CONFIGS", "PLANNED", "ROUNDS", "ROUNDS_AT_ONCE", "RUN_BUDGET_S", "STEPS_PER_ROUND", "Costs",
           "Shape", "Timed", "Wall", "estimate_cost", "measure_costs", "parallel", "process_age", "run_threads",
           "search_shape", "shortened", "speedup", "wall_model"]
