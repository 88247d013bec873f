"""Helpers for the tests that tamper with checkpoints or interrupt a run."""

from __future__ import annotations

import json
from pathlib import Path

from minirlhf.trainers.run.checkpoint import STATE_FILE, file_digests


def restamp_checkpoint(folder: Path) -> None:
    """Write the sha256 of a checkpoint's files, as they are now, into its state.json: a tampered file then passes
    the digest check (as in a checkpoint written before digests were kept), so that the deeper checks of what the
    file holds are the ones tested."""
    state = json.loads((folder / STATE_FILE).read_text())
    state["files"] = file_digests(folder)
    (folder / STATE_FILE).write_text(json.dumps(state))


class Interrupt(Exception):
    """Stops a run after it logged a step, as a kill would."""


def stop_after(step: int):
    """A trainer callback that raises Interrupt once the history's last row is `step`."""
    def callback(history):
        if history[-1]["step"] == step:
            raise Interrupt
    return callback
