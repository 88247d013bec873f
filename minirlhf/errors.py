"""The errors a user can fix: bad input (a file, a flag, a checkpoint, a reward function's value) named where it
came from. The command line prints such an error as one line (`python -m minirlhf grpo: error: ...`) and exits
with status 2; any other exception is a bug and keeps its traceback. `--traceback` or MINIRLHF_TRACEBACK=1 shows
the traceback of a user error too.

Which exceptions count as user errors (`is_user_error`): `UserError` (raised by the checks at the door), and the
ValueError, OSError (a missing file, a folder in use, an unreachable hub) and `guard.NonFiniteError` that the
library raises with a message naming the file, line, field and value.
"""

from __future__ import annotations

import os
import sys
import traceback
from pathlib import Path

TRACEBACK_ENV = "MINIRLHF_TRACEBACK"  # "1": the command line prints the full traceback of a user error too


class UserError(ValueError):
    """Input that cannot work, found before the first step: the message names its file, line, field and value."""


class CheckpointDamaged(UserError):
    """A checkpoint file that opens but does not hold what a checkpoint holds (a field missing or of a wrong type)."""


def is_user_error(error: BaseException) -> bool:
    """Whether the command line shows `error` as one line (a user can fix it) rather than as a bug's traceback."""
    return isinstance(error, ValueError | OSError | FloatingPointError)  # guard.NonFiniteError is a FloatingPointError


def env_flag(name: str) -> bool:
    """An on/off environment variable: unset, "" or "0" is off, "1" is on; anything else is a UserError."""
    value = os.environ.get(name, "")
    if value not in ("", "0", "1"):
        raise UserError(f"environment variable {name}={value!r}: expected 1 (on) or 0 (off)")
    return value == "1"


def raised_at(error: BaseException) -> str:
    """Where in the user's own code `error` was raised: "file.py, line 12, in make_task", the deepest frame of its
    traceback outside minirlhf, the standard library and installed packages (else the deepest frame of all)."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return "no traceback"
    library = [Path(__file__).resolve().parent] + [Path(p).resolve() for p in {sys.prefix, sys.base_prefix}]

    def own(frame: traceback.FrameSummary) -> bool:
        path = Path(frame.filename).resolve()
        return not frame.filename.startswith("<frozen") and not any(path.is_relative_to(lib) for lib in library)

    frame = next((f for f in reversed(frames) if own(f)), frames[-1])
    return f"{frame.filename}, line {frame.lineno}, in {frame.name}"
