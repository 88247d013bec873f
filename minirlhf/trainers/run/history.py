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
from minirlhf.trainers.run.manifest import record_files


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


def make_history(
    config: Any, callbacks: Sequence[Callable[[History], None]] = (), rows: Sequence[dict] = ()
) -> History:
    path = Path(config.out_dir) / "metrics.jsonl" if config.out_dir else None
    record_files(config.out_dir, "metrics.jsonl")
    return History(path, callbacks, rows)
