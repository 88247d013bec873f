"""Helpers for the tests that tamper with checkpoints."""

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
