from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import pytest
import torch
from hypothesis import settings

from minirlhf.models import load_model

# The generated (property and fuzz) tests draw the same examples on every run: CI's verdict on a commit does not depend
# on a random seed. HYPOTHESIS_PROFILE=random draws new examples on each run, to explore further.
settings.register_profile("derandomized", derandomize=True)
settings.register_profile("random", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "derandomized"))

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXECUTED = ROOT / "build" / "executed"  # what the book renders (tests/test_book.py, `make book`)
SITE = ROOT / "build" / "book"  # the rendered course, the folder to publish
WHERE_FROM = "import minirlhf, sys; print('minirlhf:', minirlhf.__file__); print('prefix:', sys.prefix)"


@pytest.fixture(scope="session")
def tiny():
    """The shipped tiny GPT-2 and its tokenizer, on CPU, float32."""
    torch.manual_seed(0)
    model, tokenizer = load_model("tiny", device="cpu")
    return model.eval(), tokenizer


@dataclass
class ColabRun:
    """One notebook run top to bottom in a simulated Colab runtime (tests/_colab.py)."""

    error: str | None  # the failing cell's error name and value, None when every cell ran
    seconds: float
    widget_manager_calls: int  # calls of the fake google.colab.output.enable_custom_widget_manager
    where_from: str  # what the kernel printed after the last cell: minirlhf's file and the kernel's sys.prefix
    prefix: Path  # the fresh venv of this run


@pytest.fixture(scope="session")
def colab_run(tmp_path_factory) -> dict[str, ColabRun]:
    """Every notebook, in quick mode, each in its own fresh simulated Colab runtime, from a folder outside the
    repository: the setup cell installs minirlhf from a git copy of this checkout. The executed copies go to
    build/executed/, the book's input, so one execution serves tests/test_colab.py and tests/test_book.py."""
    from _colab import colab_venv, kernel_env, repository_copy, write_kernelspec
    from nbclient.exceptions import CellExecutionError

    from minirlhf.course.headless import execute_notebook

    base = tmp_path_factory.mktemp("colab")
    repo_url = repository_copy(base / "repository")
    EXECUTED.mkdir(parents=True, exist_ok=True)
    runs = {}
    for path in NOTEBOOKS:
        home = base / path.stem
        python = colab_venv(home / "venv")
        write_kernelspec(home / "jupyter", python)
        (home / "content").mkdir()  # the working directory, as Colab's /content: not the repository
        widget_log = home / "widget_manager.log"
        nb = nbformat.read(path, as_version=4)
        nb.cells.append(nbformat.v4.new_code_cell(WHERE_FROM))
        start, error, where_from = time.perf_counter(), None, ""
        with pytest.MonkeyPatch.context() as patch:
            for name in ("PYTHONPATH", "PYTHONHOME"):
                patch.delenv(name, raising=False)
            patch.setenv("JUPYTER_PATH", str(home / "jupyter"))
            try:
                nb, _ = execute_notebook(nb, quick=True, cwd=home / "content", kernel_name="colab-simulation",
                                         extra_env=kernel_env(repo_url, widget_log), timeout_per_cell=300)
                where_from = "".join(out.get("text", "") for out in nb.cells.pop().outputs)
            except CellExecutionError as failure:
                error = f"{failure.ename}: {failure.evalue}"
            except Exception as failure:  # a kernel that died or never started: this notebook fails, the rest run
                error = f"{type(failure).__name__}: {failure}"
        calls = widget_log.read_text().count("enable_custom_widget_manager") if widget_log.exists() else 0
        runs[path.name] = ColabRun(error, time.perf_counter() - start, calls, where_from, home / "venv")
        executed = EXECUTED / path.name
        if error is None:
            nbformat.write(nb, executed)
        else:
            executed.unlink(missing_ok=True)  # never leave the book a stale copy
    return runs


@pytest.fixture(scope="session")
def book_site(colab_run) -> Path:
    """build/book/, rendered by Sphinx from the simulated-Colab run's executed copies (the Makefile's `book` recipe);
    checked by tests/test_book.py and, in Chromium without a network, by tests/browser/test_book_offline.py."""
    rendered = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-b", "html", "-c", str(ROOT / "book"),
                               str(EXECUTED), str(SITE)], cwd=ROOT, capture_output=True, text=True)
    assert rendered.returncode == 0, f"sphinx failed:\n{rendered.stdout}{rendered.stderr}"
    return SITE
