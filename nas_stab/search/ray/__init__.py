"""Ray Tune as a runner (`runner.kind: ray`): `runner.py` starts a search on a Ray cluster, `bridge.py` and
`faces.py` put the driver behind Tune's searcher and scheduler, `trial.py` is the trainable a worker runs,
`cluster.py`, `loopback.py` and `procs.py` start and stop a local cluster, `compat.py` pins what nas_stab
relies on in Ray's API. Importing this package does not import Ray: each module that needs it does."""
