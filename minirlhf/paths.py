"""Where a command reads and where it writes: a path is made absolute once, and no write may reach a read.

    absolute("~/runs/a")                      /home/me/runs/a   (never a folder named "~"; symlinks followed)
    check_apart(reads={"resume": "run/checkpoints/step-000040"}, writes={"fork_to": "run"})
        UserError: fork_to='run' holds resume='run/checkpoints/step-000040' (/home/me/run, /home/me/run/checkpoints/
        step-000040): writing or deleting there could destroy what the command reads; choose a place apart from it

Two places overlap when one is the other or lies inside it, compared after `~` is expanded, the path made absolute
against the working directory and every symlink followed: the same folder, a parent, a child, a symlink to one, and
the same file under another spelling all count. A command lists everything it reads (a checkpoint, a model folder,
a prompt or pair file, a notebook) and everything it writes or deletes (out_dir, fork_to, --out), and calls
`check_apart` before it touches anything. `check_writable` refuses a file that could not be written, before a command
that ends by writing it starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from minirlhf.errors import UserError

PathLike = str | os.PathLike


def absolute(path: PathLike) -> Path:
    """`path` with `~` expanded, made absolute against the working directory, symlinks followed (a path that does
    not exist yet is resolved as far as it exists)."""
    return Path(path).expanduser().resolve()


def overlap(a: PathLike, b: PathLike) -> bool:
    """Whether `a` and `b` are one place, or one lies inside the other (see the module's docstring)."""
    a, b = absolute(a), absolute(b)
    return a == b or a.is_relative_to(b) or b.is_relative_to(a)


def check_apart(reads: Mapping[str, PathLike | None], writes: Mapping[str, PathLike | None]) -> None:
    """Refuse, naming both, any place written (or deleted) that overlaps a place read. None values are skipped."""
    for write_name, write in writes.items():
        if write is None:
            continue
        for read_name, read in reads.items():
            if read is None or not overlap(write, read):
                continue
            w, r = absolute(write), absolute(read)
            relation = "is the same place as" if w == r else "holds" if r.is_relative_to(w) else "lies inside"
            raise UserError(f"{write_name}={str(write)!r} {relation} {read_name}={str(read)!r} ({w}, {r}): writing "
                            "or deleting there could destroy what the command reads; choose a place apart from it")


def check_writable(name: str, file: PathLike) -> None:
    """Refuse, naming it, a file that cannot be written: one whose path runs through a file, a read-only file, one
    in a folder this process may not write in (its nearest existing folder, when the folders are still to be made).
    Creates nothing: a command checks it when its config is made, not after minutes of work."""
    target = absolute(file)
    folder = target.parent
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise UserError(f"{name}={str(file)!r} lies inside the file {folder}: give a path in a folder")
    if target.exists() and not os.access(target, os.W_OK):
        raise UserError(f"{name}={str(file)!r} is read-only ({target}): give a file that may be written")
    if not target.exists() and not os.access(folder, os.W_OK | os.X_OK):
        raise UserError(f"{name}={str(file)!r} cannot be written: this process may not write in {folder}")
