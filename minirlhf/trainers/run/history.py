"""The metrics of a run (`History`): one row per logged step, written to <out_dir>/metrics.jsonl as it is logged."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from minirlhf.trainers.run.guard import finite_row
from minirlhf.trainers.run.manifest import TENSORBOARD_FOLDER, record_files


class History(list):
    """The metrics of a run: a list of dicts {"step": int, metric: float, ...}, one per logged step.

    Notebooks plot it live (pass `callbacks`); with a `path`, each row is also appended to a JSONL file as soon
    as it is logged, so a run that dies keeps every metric written so far. `rows` are the metrics of a resumed
    run up to its checkpoint: the file is rewritten to hold exactly those (rows logged after the checkpoint by
    the interrupted run are dropped, so none appears twice).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        callbacks: Sequence[Callable[[History], None]] = (),
        rows: Sequence[dict[str, Any]] = (),
    ):
        super().__init__(finite_row(dict(row)) for row in rows)  # a NaN read back from a checkpoint -> None, flagged
        self.path = Path(path) if path is not None else None
        self.callbacks = list(callbacks)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text("".join(json.dumps(row, allow_nan=False) + "\n" for row in self))
            os.replace(tmp, self.path)  # never a half-written metrics file

    def log(self, step: int, **metrics: float) -> dict[str, Any]:
        row = finite_row({"step": step, **{k: plain(v) for k, v in metrics.items()}})  # inf/NaN -> None, flagged
        self.append(row)
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(row, allow_nan=False) + "\n")
        for callback in self.callbacks:
            callback(self)
        return row

    def column(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of one metric, skipping rows that do not have it (e.g. evaluations)."""
        rows = [r for r in self if key in r]
        return [r["step"] for r in rows], [r[key] for r in rows]

    def last(self, key: str, default: float | None = None) -> float | None:
        _, values = self.column(key)
        return values[-1] if values else default


def plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


class TensorBoardWriter:
    """A `History` callback that writes each new row's numbers as TensorBoard scalars (tag = the metric's name, e.g.
    loss, eval/accuracy; x = the row's step) into `folder`: `tensorboard --logdir <out_dir>` draws them. A resumed
    run starts at `start`: the events an interrupted run wrote from that step on are purged, as metrics.jsonl
    drops its rows."""

    def __init__(self, folder: Path, start: int = 0):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package (TrainConfig checks it)

        self.writer = SummaryWriter(str(folder), purge_step=start or None)

    def __call__(self, history: History) -> None:
        row = history[-1]
        for key, value in row.items():
            if key != "step" and isinstance(value, (int, float)):  # None: a non-finite value, flagged
                self.writer.add_scalar(key, value, row["step"])
        self.writer.flush()  # each row on disk as soon as it is logged, as in metrics.jsonl


def make_history(
    config: Any, callbacks: Sequence[Callable[[History], None]] = (), rows: Sequence[dict] = (), start: int = 0
) -> History:
    """The run's History: metrics.jsonl in config.out_dir (when there is one), and TensorBoard events beside it
    when config.report_to is "tensorboard" (`TensorBoardWriter`; `start`: the step a resumed run continues at)."""
    path = Path(config.out_dir) / "metrics.jsonl" if config.out_dir else None
    record_files(config.out_dir, "metrics.jsonl")
    if config.report_to == "tensorboard":
        record_files(config.out_dir, TENSORBOARD_FOLDER)
        # first, as metrics.jsonl: a row is on disk before a callback (a live plot) can fail
        callbacks = [TensorBoardWriter(Path(config.out_dir) / TENSORBOARD_FOLDER, start), *callbacks]
    return History(path, callbacks, rows)
