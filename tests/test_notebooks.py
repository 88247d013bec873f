"""The teaching notebooks: committed without outputs, and each one runs top to bottom headless.

Every `notebooks/*.ipynb` is picked up automatically (sorted), so a new notebook is tested as soon as it exists.

The execution test runs each notebook in a fresh kernel with MINIRLHF_QUICK=1 (tiny training budgets) and the
notebooks folder as working directory, with every implement-it exercise solved (exercises.fill_solutions) and its
check strict (MINIRLHF_EXERCISES_STRICT=1), so a solution that fails its check fails the test. It runs through
`minirlhf.course.headless` (the executor the book build and the Colab check use too, which never sleeps through a
reply that already came). The kernel is this test's own interpreter (`sys.executable`), so it sees exactly
the environment the tests run in, whatever other "python3" kernels the machine knows about. Run them alone with
`pytest -m slow tests/test_notebooks.py`.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import nbformat
import pytest

from minirlhf.course import exercises
from minirlhf.course.headless import execute_notebook

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
NOTEBOOKS = sorted(NOTEBOOK_DIR.glob("*.ipynb"))
CELL_TIMEOUT = 300  # seconds per cell; quick-mode training cells take a few seconds
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_ends_with_its_further_reading(path):
    """Each notebook closes with the papers it teaches from: a rewrite of its last cell once dropped them (09b)."""
    last = nbformat.read(path, as_version=4).cells[-1]
    reading = last.source.partition("## Further reading")[2] if last.cell_type == "markdown" else ""
    assert re.search(r"^\* \S", reading, flags=re.MULTILINE), f"{path.name}: no '## Further reading' list at its end"


LAB_KEY = re.compile(r"""(?:EFFECTS\[|run_seed\(|settings_of\(|run_effect\()\s*["'](\w+)["']""")


def test_every_lab_effect_a_notebook_names_is_one():
    """A lab key renamed in minirlhf.lab and not in a notebook fails there only at run time (the slow test below)."""
    from minirlhf.lab import EFFECTS

    named = {(path.name, key) for path in NOTEBOOKS for cell in nbformat.read(path, as_version=4).cells
             if cell.cell_type == "code" for key in LAB_KEY.findall(cell.source)}
    assert any(path == "09a_toolbox.ipynb" for path, _ in named)
    assert not [(path, key) for path, key in named if key not in EFFECTS], sorted(EFFECTS)


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path, monkeypatch):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    monkeypatch.setenv(exercises.STRICT_ENV, "1")  # a check that fails raises, and so fails this test
    nb = exercises.fill_solutions(nbformat.read(path, as_version=4))
    nb.cells.append(nbformat.v4.new_code_cell(CHECK_ENVIRONMENT))
    start = time.perf_counter()
    # raises CellExecutionError, with the failing cell and its traceback, on any error or cell timeout
    nb, seconds = execute_notebook(nb, quick=True, cwd=NOTEBOOK_DIR, timeout_per_cell=CELL_TIMEOUT)
    slowest = sorted(((s, i) for i, s in enumerate(seconds)), reverse=True)[:3]
    print(f"{path.name}: {time.perf_counter() - start:.1f} s in quick mode; slowest cells: "
          + ", ".join(f"#{i} {s:.1f} s" for s, i in slowest))

    printed = "".join(out.get("text", "") for out in nb.cells[-1].outputs)
    kernel_prefix = printed.split("kernel prefix:")[-1].strip()
    assert kernel_prefix == sys.prefix, f"the kernel ran in another environment: {printed}"
