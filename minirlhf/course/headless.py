"""Run the course notebooks top to bottom without a browser: the tests, the book build and the Colab check share it.

    python -m minirlhf.course.headless notebooks/*.ipynb --quick --out build/executed

    from minirlhf.course.headless import execute_notebook
    nb, seconds = execute_notebook("notebooks/03a_ppo.ipynb", quick=True)   # seconds[i]: cell i, 0 for markdown

Why not plain nbclient. nbclient waits for a cell's `execute_reply` with one poll of the shell socket that
lasts the whole cell timeout, and for the cell's outputs with one IOPub poll that has no timeout at all. pyzmq
resolves such a poll when the socket's file descriptor wakes the event loop, and a ZeroMQ descriptor is
edge-triggered: it says "the socket's state changed", once, and any other look at the socket's events consumes the
signal. Caught in the act (a fresh kernel, its first explorer cell, a loaded machine): the kernel sent its reply and
went idle, and nbclient's poll slept on with the reply queued in its socket until the cell timeout ran out, when
pyzmq's last check of the socket found it at once; with no timeout it would have slept forever (nbclient issue 312).
A poll that starts afresh asks the socket first and reads a queued reply immediately. So the client here polls for
at most POLL_INTERVAL seconds at a time and polls again until its caller's own timeout: a lost wake-up costs at most
POLL_INTERVAL seconds, not the cell timeout. Nothing else changes: every cell, widget cells included, runs as in
nbclient.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from queue import Empty
from typing import Any

import nbformat
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError
from nbformat import NotebookNode
from traitlets import Type

POLL_INTERVAL = 1.0  # seconds: the longest one poll waits before it asks the socket again
LATE = 0.25  # seconds: a message older than this when a poll's timer found it had been sitting in the socket
THIS_PYTHON = "minirlhf-headless-python"  # kernel name used when none is given: the interpreter running this


class RepollingChannel(AsyncZMQSocketChannel):
    """A shell/IOPub/control channel whose `get_msg(timeout)` polls in slices of at most POLL_INTERVAL seconds.

    `RepollingChannel.recovered` counts (process-wide) the lost wake-ups a slice caught: a message that the slice's
    poll did not wake for, found by pyzmq's last look when the slice ran out, though it had been sent more than
    LATE seconds before. Plain nbclient's poll would have slept on past it, up to the cell timeout or for ever.
    """

    recovered = 0

    async def get_msg(self, timeout: float | None = None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            left = POLL_INTERVAL if deadline is None else max(0.0, deadline - time.monotonic())
            piece, started = min(POLL_INTERVAL, left), time.monotonic()
            try:
                msg = await super().get_msg(timeout=piece)
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise
                continue
            waited_out = time.monotonic() - started >= piece > 0  # found by the slice's last look, not a wake-up
            if waited_out and (datetime.now(timezone.utc) - msg["header"]["date"]).total_seconds() > LATE:
                RepollingChannel.recovered += 1
            return msg


class RepollingKernelClient(AsyncKernelClient):
    """nbclient's asynchronous kernel client, with channels that look at their socket at least every POLL_INTERVAL s."""

    shell_channel_class = Type(RepollingChannel)
    iopub_channel_class = Type(RepollingChannel)
    control_channel_class = Type(RepollingChannel)


CLIENT_CLASS = f"{RepollingKernelClient.__module__}.{RepollingKernelClient.__qualname__}"
# The same client for a server that executes notebooks itself through nbclient (Voila: `make voila` spells it out).
SERVER_OPTION = f"--ServerKernelManager.client_class={CLIENT_CLASS}"


class HeadlessClient(NotebookClient):
    """nbclient's NotebookClient talking to the kernel through RepollingKernelClient.

    `kernel_dirs`, when given, are the only folders searched for the kernelspec named `kernel_name`.
    `wall_seconds[i]`: seconds this client waited for cell i, from sending it to holding its reply and outputs. The
    kernel's own timestamps (nbclient's cell metadata) cannot show a stall: the kernel had finished.
    """

    def __init__(self, nb: NotebookNode, kernel_dirs: list[str] | None = None, **kwargs: Any):
        super().__init__(nb, **kwargs)
        self.kernel_dirs = kernel_dirs
        self.wall_seconds: dict[int, float] = {}

    async def async_execute_cell(self, cell: NotebookNode, cell_index: int, *args: Any, **kwargs: Any) -> NotebookNode:
        if cell.cell_type != "code":
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        start = time.perf_counter()
        try:
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        finally:
            self.wall_seconds[cell_index] = time.perf_counter() - start

    def create_kernel_manager(self) -> KernelManager:
        km = super().create_kernel_manager()
        km.client_class = CLIENT_CLASS
        if self.kernel_dirs is not None:
            km.kernel_spec_manager = KernelSpecManager(kernel_dirs=self.kernel_dirs)
        return km


def execute_notebook(
    path: str | Path | NotebookNode,
    *,
    quick: bool,
    cwd: str | Path | None = None,
    timeout_per_cell: float = 300,
    kernel_name: str | None = None,
    extra_env: dict[str, str] | None = None,
    startup_timeout: float = 60,
) -> tuple[NotebookNode, list[float]]:
    """Run a notebook (a path, or a notebook already read) top to bottom in a fresh kernel; return it with its
    outputs and the seconds this process waited for each cell (0 for markdown cells).

    quick: MINIRLHF_QUICK=1 in the kernel (tiny training budgets); otherwise the full budgets.
    cwd: the kernel's working directory (default: the notebook's folder, or the current one for a NotebookNode).
    kernel_name: a kernelspec to use; None starts this interpreter (`sys.executable -m ipykernel_launcher`).
    extra_env: more environment variables for the kernel, on top of this process's.
    Raises nbclient's CellExecutionError (naming the cell and its traceback) when a cell fails, and a
    CellTimeoutError-named error when one runs longer than `timeout_per_cell` seconds.
    """
    if isinstance(path, NotebookNode):
        nb, folder = path, Path.cwd()
    else:
        nb, folder = nbformat.read(path, as_version=4), Path(path).resolve().parent
    env = {**os.environ, **(extra_env or {}), "MINIRLHF_QUICK": "1" if quick else "0"}
    with tempfile.TemporaryDirectory() as kernels:
        if kernel_name is None:
            from ipykernel.kernelspec import write_kernel_spec

            write_kernel_spec(Path(kernels) / THIS_PYTHON)  # argv[0] is sys.executable
        client = HeadlessClient(
            nb,
            kernel_dirs=[kernels] if kernel_name is None else None,
            kernel_name=kernel_name or THIS_PYTHON,
            timeout=startup_timeout,  # waits that belong to no cell (kernel_info before the first cell)
            timeout_func=lambda cell: timeout_per_cell,
            startup_timeout=startup_timeout,
            interrupt_on_timeout=True,
            error_on_timeout={"ename": "CellTimeoutError", "evalue": f"no reply within {timeout_per_cell} s",
                              "traceback": []},
            resources={"metadata": {"path": str(cwd or folder)}},
        )
        client.execute(env=env)
    return nb, [client.wall_seconds.get(i, 0.0) for i in range(len(nb.cells))]


EXECUTED_FROM = "minirlhf_executed_from"  # metadata of an executed copy in --out: the notebook it ran


def _path(text: str) -> Path:
    """A path as given, `~` expanded: "~/x" is never a folder named "~"."""
    return Path(text).expanduser()


def _positive_seconds(text: str) -> float:
    seconds = float(text)
    if not (seconds > 0 and seconds != float("inf")):
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r} (0 would mean no timeout)")
    return seconds


def _out_clash(notebooks: list[Path], out: Path) -> str | None:
    """Why writing the executed copies of `notebooks` into `out` would replace another notebook's copy (None when
    it would not): two notebooks of one name, or a copy in `out` that records another notebook as its source."""
    sources: dict[str, Path] = {}
    for path in notebooks:
        if path.name in sources and sources[path.name] != path.resolve():
            return f"--out {out}: {sources[path.name]} and {path} would both be written as {out / path.name}"
        sources[path.name] = path.resolve()
        existing = out / path.name
        if existing.exists() and existing.samefile(path):  # its own file: any spelling, a symlink, a hard link
            return (f"--out {out}: {path} would be overwritten by its own executed copy; choose a folder that holds "
                    "no notebook it runs")
        before = nbformat.read(existing, as_version=4).metadata.get(EXECUTED_FROM) if existing.is_file() else None
        if before is not None and before != str(path.resolve()):  # a copy without the record: its source is unknown
            return (f"--out {out}: {existing} exists (executed from {before}); writing {path} there would replace "
                    f"it: choose another --out folder, or remove that file")
    return None


def _unwritable(out: Path, notebooks: list[Path]) -> str | None:
    """Why the executed copies cannot be written into `out` (None when they can), found before any notebook runs:
    a run of minutes must not end in a traceback at its last line. Creates `out` when it is missing."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=out):
            pass
    except OSError as err:
        return f"--out {out}: cannot write there ({err.strerror or err})"
    for path in notebooks:
        target = out / path.name
        if target.exists() and (target.is_dir() or not os.access(target, os.W_OK)):
            why = "a folder" if target.is_dir() else "read-only"
            return f"--out {out}: {target} exists and cannot be replaced ({why})"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run notebooks headless; print per-notebook and slowest-cell times.")
    parser.add_argument("notebooks", nargs="+", type=_path)
    parser.add_argument("--quick", action="store_true", help="MINIRLHF_QUICK=1: tiny training budgets")
    parser.add_argument("--out", type=_path, help="write the executed copies (with outputs) into this folder")
    parser.add_argument("--timeout-per-cell", type=_positive_seconds, default=600, help="seconds, > 0 (default 600)")
    parser.add_argument("--kernel-name", help="a kernelspec (default: this interpreter)")
    args = parser.parse_args(argv)
    if args.out:
        problem = _out_clash(args.notebooks, args.out)
        if problem:
            parser.error(problem)
        problem = _unwritable(args.out, args.notebooks)
        if problem:
            parser.error(problem)
    mode = "quick" if args.quick else "full"
    failed = []
    for path in args.notebooks:
        start, recovered = time.perf_counter(), RepollingChannel.recovered
        try:
            nb, seconds = execute_notebook(path, quick=args.quick, timeout_per_cell=args.timeout_per_cell,
                                           kernel_name=args.kernel_name)
        except Exception as error:  # report every notebook, then fail
            what = (f"{error.ename}: {error.evalue}" if isinstance(error, CellExecutionError)
                    else f"{type(error).__name__}: {error}")
            print(f"{path.name}: FAILED after {time.perf_counter() - start:.1f} s ({mode}): {what}", flush=True)
            failed.append(path.name)
            continue
        slowest = sorted(((s, i) for i, s in enumerate(seconds)), reverse=True)[:3]
        print(f"{path.name}: {time.perf_counter() - start:.1f} s ({mode}); slowest cells: "
              + ", ".join(f"#{i} {s:.1f} s" for s, i in slowest)
              + f"; lost wake-ups recovered: {RepollingChannel.recovered - recovered}", flush=True)
        if args.out:
            nb.metadata[EXECUTED_FROM] = str(path.resolve())
            nbformat.write(nb, args.out / path.name)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
