"""The one way into Colab: the badge and setup cell of every notebook follow pyproject's repository URL, and the setup
cell, run in a simulated Colab runtime (tests/_colab.py), installs minirlhf and runs the notebook top to bottom.

The slow test reads conftest's `colab_run`: every notebook in quick mode, each in a fresh venv that has the notebook
dependencies but not minirlhf, with a fake google.colab, from a folder outside the repository, the setup cell
installing from a local git copy of this checkout through MINIRLHF_REPO_URL. Its executed copies are what the book
renders (tests/test_book.py). Run alone with `pytest -m slow tests/test_colab.py`.
"""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path

import nbformat
import pytest
from _colab import KERNEL_NAME, colab_venv, kernel_env, write_kernelspec
from nbclient.exceptions import CellExecutionError

from minirlhf.course.headless import execute_notebook

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
_spec = importlib.util.spec_from_file_location("sync_notebooks", ROOT / "scripts" / "sync_notebooks.py")
sync_notebooks = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sync_notebooks)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_badge_and_setup_cell_follow_the_repository_url(path):
    nb = nbformat.read(path, as_version=4)
    committed = [cell.source for cell in nb.cells[:2]]
    expected = [cell.source for cell in sync_notebooks.synced(nb, path.name, sync_notebooks.repository_url()).cells[:2]]
    assert committed[0] == expected[0], f"{path.name}: the Colab badge drifted; run python scripts/sync_notebooks.py"
    assert committed[1] == expected[1], f"{path.name}: the setup cell drifted; run python scripts/sync_notebooks.py"


def test_the_repository_url_is_written_only_in_pyproject():
    """Notebooks carry it as stamped by the script (checked above); any other tracked file must not write it."""
    url = sync_notebooks.repository_url()
    address = url.removeprefix("https://")
    listed = subprocess.run(["git", "grep", "-l", "-F", address.split("/", 1)[1]], cwd=ROOT, capture_output=True,
                            text=True).stdout.split()
    elsewhere = [name for name in listed if name != "pyproject.toml" and not name.startswith("notebooks/")]
    assert not elsewhere, f"{elsewhere} write the repository's address; read it from pyproject.toml instead"


def test_a_broken_url_stops_the_setup_cell_with_its_own_message(tmp_path, monkeypatch):
    python = colab_venv(tmp_path / "venv")
    write_kernelspec(tmp_path / "jupyter", python)
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "jupyter"))
    monkeypatch.delenv("PYTHONPATH", raising=False)
    broken = (tmp_path / "no-such-repository").as_uri()
    first_cells = nbformat.read(NOTEBOOKS[0], as_version=4)
    first_cells.cells = first_cells.cells[:2]
    with pytest.raises(CellExecutionError) as failure:
        execute_notebook(first_cells, quick=True, cwd=tmp_path, kernel_name=KERNEL_NAME,
                         extra_env=kernel_env(broken, tmp_path / "widget_manager.log"), timeout_per_cell=120)
    assert failure.value.ename == "RuntimeError"
    assert f"installing minirlhf from {broken} failed" in failure.value.evalue, failure.value.evalue
    assert "Restart session and run this cell again" in failure.value.evalue


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_in_a_simulated_colab(path, colab_run):
    run = colab_run[path.name]
    print(f"{path.name}: {run.seconds:.1f} s in the simulated Colab (venv, install and quick-mode run)")
    assert run.error is None, f"{path.name} failed in the simulated Colab: {run.error}"
    assert run.widget_manager_calls == 1, f"enable_custom_widget_manager was called {run.widget_manager_calls} times"
    installed_at = run.where_from.split("minirlhf:")[-1].split()[0]
    assert Path(installed_at).resolve().is_relative_to(run.prefix.resolve()), (
        f"minirlhf was not imported from the simulated runtime's install: {run.where_from}")
