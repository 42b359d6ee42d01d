"""The views of a run directory's records the driver keeps as it records runs (`store.rundir.RecordView`): the
experiment's TensorBoard logs (`logging.tensorboard`) and tracking (`logging.tracking`: MLflow, W&B). The store
knows only the protocol; `record_views` is what `nas-stab run` hands `RunDir.open`.

    with RunDir.open(out, spec, views=record_views) as rd: ...
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nas_stab.trackers.tensorboard import write_rows

if TYPE_CHECKING:
    from nas_stab.config.schema import Spec
    from nas_stab.store.rundir import RecordView, RunDir
    from nas_stab.trackers.tracking import Tracking


class TensorBoardView:
    """TensorBoard logs of runs whose records are on disk; a view, so a failure is logged, never raised."""

    def __init__(self, rd: RunDir):
        self.rd = rd

    def runs(self, new_rows: list[dict[str, Any]], searched: Sequence[str], task_kind: str) -> None:
        try:
            write_rows(self.rd.path, new_rows, list(searched), task_kind)
        except Exception as e:  # the records are written; the view must not stop the run
            self.rd.log(f"tensorboard: could not write logs ({type(e).__name__}: {e}); nas-stab tensorboard "
                        f"{self.rd.path} retries")

    def finish(self, files: dict[str, Path] | None, path: Path) -> list[str]:
        return []

    def summary(self) -> list[str]:
        return []  # `nas-stab run` names the TensorBoard command when it starts

    def close(self) -> None:
        pass


class TrackingView:
    """The runs whose records are on disk, into MLflow / W&B (logging.tracking): a failure is a line in log.txt
    (`Tracking.runs` never raises); the end logs what is missing, then the leaderboard files."""

    def __init__(self, tracking: Tracking):
        self.tracking = tracking

    def runs(self, new_rows: list[dict[str, Any]], searched: Sequence[str], task_kind: str) -> None:
        self.tracking.runs(new_rows)

    def finish(self, files: dict[str, Path] | None, path: Path) -> list[str]:
        self.tracking.finish(files, path)
        return list(self.tracking.failures)

    def summary(self) -> list[str]:
        return self.tracking.summary()

    def close(self) -> None:
        self.tracking.close()


def record_views(spec: Spec, rd: RunDir) -> list[RecordView]:
    """The views `spec` asks for: TensorBoard logs (`logging.tensorboard`), then its trackers (`logging.tracking`)."""
    views: list[RecordView] = []
    if spec.logging.tensorboard:
        views.append(TensorBoardView(rd))
    from nas_stab.trackers.tracking import open_tracking  # deferred: loads pandas, NumPy only when this runs

    tracking = open_tracking(spec, rd.path, rd.read_meta(), rd.log)
    if tracking is not None:
        views.append(TrackingView(tracking))
    return views
