"""The teaching notebooks: committed without outputs, and each one runs top to bottom headless.

Every `notebooks/*.ipynb` is picked up automatically (sorted), so a new notebook is tested as soon as it exists.

The execution test runs each notebook in a fresh kernel with MINIRLHF_QUICK=1 (tiny training budgets) and the
notebooks folder as working directory, with every implement-it exercise solved (exercises.fill_solutions) and its
check strict (MINIRLHF_EXERCISES_STRICT=1), so a solution that fails its check fails the test. The kernel is
launched with this test's own interpreter (`sys.executable`, through a throw-away kernelspec on JUPYTER_PATH), so it
sees exactly the environment the tests run in, whatever other "python3" kernels the machine knows about. Run them
alone with `pytest -m slow tests/test_notebooks.py`.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import datetime
from pathlib import Path

import nbformat
import pytest

from minirlhf.course import exercises

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT = 300  # seconds per cell; quick-mode training cells take a few seconds
# Seconds to wait for the kernel's answer to the kernel_info request sent before the first cell. It once came
# only after ~300 s on a loaded machine (the kernel idle, the reply lost on the way); after this many seconds the
# test goes on to the cells, which then run or fail on their own timeout.
KERNEL_INFO_TIMEOUT = 30
KERNEL_NAME = "minirlhf-test-python"
CHECK_ENVIRONMENT = "import sys; print('kernel prefix:', sys.prefix)"


def test_notebooks_exist():
    assert NOTEBOOKS, f"no notebooks found in {NOTEBOOK_DIR}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path):
    """Outputs and execution counts make noisy diffs and can hide a notebook that no longer runs."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    dirty = [
        i for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and (cell.get("outputs") or cell.get("execution_count") is not None)
    ]
    assert not dirty, (
        f"{path.name}: code cells {dirty} still have outputs or an execution count; clear them before committing "
        f"(JupyterLab: Edit > Clear Outputs of All Cells, or `jupyter nbconvert --clear-output --inplace {path.name}`)"
    )


@pytest.fixture(scope="module")
def kernel_name(tmp_path_factory):
    """A kernelspec that starts `sys.executable -m ipykernel_launcher`, found first on JUPYTER_PATH."""
    from ipykernel.kernelspec import write_kernel_spec

    jupyter_path = tmp_path_factory.mktemp("jupyter")
    write_kernel_spec(jupyter_path / "kernels" / KERNEL_NAME)  # argv[0] is sys.executable
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = os.pathsep.join([str(jupyter_path)] + ([old] if old else []))
    yield KERNEL_NAME
    if old is None:
        os.environ.pop("JUPYTER_PATH", None)
    else:
        os.environ["JUPYTER_PATH"] = old


def _cell_seconds(cell) -> float:
    """Execution time nbclient recorded in a cell's metadata (0 for markdown cells)."""
    timing = cell.get("metadata", {}).get("execution", {})
    if "iopub.execute_input" not in timing or "shell.execute_reply" not in timing:
        return 0.0
    start, end = (datetime.fromisoformat(timing[key].replace("Z", "+00:00"))
                  for key in ("iopub.execute_input", "shell.execute_reply"))
    return (end - start).total_seconds()


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, kernel_name, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("MINIRLHF_QUICK", "1")  # every training cell switches to a tiny budget
    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.setenv(exercises.STRICT_ENV, "1")  # a check that fails raises, and so fails this test
    nb = exercises.fill_solutions(nbformat.read(path, as_version=4))
    nb.cells.append(nbformat.v4.new_code_cell(CHECK_ENVIRONMENT))
    client = NotebookClient(
        nb,
        timeout=KERNEL_INFO_TIMEOUT,  # waits that belong to no cell
        timeout_func=lambda cell: CELL_TIMEOUT,
        # a silent kernel_info only costs KERNEL_INFO_TIMEOUT; a cell that times out is still an error
        interrupt_on_timeout=True,
        error_on_timeout={"ename": "CellTimeoutError", "evalue": f"no reply within {CELL_TIMEOUT} s", "traceback": []},
        kernel_name=kernel_name,
        resources={"metadata": {"path": str(NOTEBOOK_DIR)}},  # the kernel's working directory
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the failing cell and its traceback, on any error
    slowest = sorted(((_cell_seconds(cell), i) for i, cell in enumerate(nb.cells)), reverse=True)[:3]
    print(f"{path.name}: {time.perf_counter() - start:.1f} s in quick mode; slowest cells: "
          + ", ".join(f"#{i} {seconds:.1f} s" for seconds, i in slowest))

    printed = "".join(out.get("text", "") for out in nb.cells[-1].outputs)
    kernel_prefix = printed.split("kernel prefix:")[-1].strip()
    assert kernel_prefix == sys.prefix, f"the kernel ran in another environment: {printed}"
