"""The views kept beside a run directory's records as the driver records runs (`store.rundir.RecordView`):
TensorBoard logs (`tensorboard.py`, `logging.tensorboard`) and experiment tracking (`tracking.py`: MLflow in
`tracking_mlflow.py`, W&B in `tracking_wandb.py`, the records they log in `tracking_records.py`;
`logging.tracking`). `views.record_views` is what `nas-stab run` hands `RunDir.open`. Each is a view of the
records, never their source: a failure is a line in log.txt, and `nas-stab tensorboard` / `nas-stab
leaderboard` write what is missing.
"""
