"""Execute one notebook headless and write the executed copy that the book renders (`make book`).

    python book/execute.py notebooks/03_ppo.ipynb build/executed/03_ppo.ipynb

Quick mode (MINIRLHF_QUICK=1), the notebooks folder as working directory, the kernel in this interpreter's
environment. Outputs and the widget state are kept, so the sliders appear in the book with the figure they showed.
Under load the kernel's answer to the kernel_info request sent before the first cell can get lost (the stall the
notebook tests work around too): waits that belong to no cell are capped at KERNEL_INFO_TIMEOUT seconds, each cell
gets CELL_TIMEOUT seconds. A cell that raises or times out fails the run, and nothing is written.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient

KERNEL_INFO_TIMEOUT = 30
CELL_TIMEOUT = 600


def execute(source: Path, target: Path) -> float:
    """Run `source` top to bottom into `target`; returns the seconds it took."""
    os.environ["MINIRLHF_QUICK"] = "1"
    nb = nbformat.read(source, as_version=4)
    client = NotebookClient(
        nb,
        timeout=KERNEL_INFO_TIMEOUT,
        timeout_func=lambda cell: CELL_TIMEOUT,
        interrupt_on_timeout=True,
        error_on_timeout={"ename": "CellTimeoutError", "evalue": f"no reply within {CELL_TIMEOUT} s", "traceback": []},
        store_widget_state=True,
        resources={"metadata": {"path": str(source.resolve().parent)}},
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError naming the cell on any error
    target.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, target)
    return time.perf_counter() - start


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python book/execute.py NOTEBOOK.ipynb EXECUTED_COPY.ipynb")
    source, target = Path(sys.argv[1]), Path(sys.argv[2])
    print(f"{source.name}: executed in {execute(source, target):.0f} s (quick mode) -> {target}")
