"""The run directory (docs/run-directory.md): what a search writes and every reader reads.

- `rundir.RunDir`: the one writer (the lock on log.txt, spec.yaml, trials.csv appends and rewrites, histories,
  the disk reserve), and `RecordView`, the protocol of what it keeps beside the records (TensorBoard,
  MLflow, W&B: `trackers/views.py`);
- `reader`: the one reader (`read_run`: the typed spec, the trials, histories; `read_rows` for the driver);
- `decisions`: ``decisions.jsonl``, what a search decided as results came in;
- `atomic`: atomic writes; `rundir_meta`: provenance (commit, versions, hardware, the command).

The store sits below the search that writes it and the leaderboard that reads it, and imports neither.
"""
