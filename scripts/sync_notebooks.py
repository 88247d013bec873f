"""Stamp the repository URL of pyproject.toml into every notebook: its Colab badge and its setup cell.

    python scripts/sync_notebooks.py           # rewrite the notebooks that drifted
    python scripts/sync_notebooks.py --check   # only list them; exit 1 if any

The address is written once, as `[project.urls] Repository` in pyproject.toml. Every notebook opens with a markdown
cell holding the badge that opens it in Colab, then the same setup cell (SETUP_CELL below, the URL filled in).
tests/test_colab.py runs the check, so a notebook whose badge or setup cell differs from what this script writes
fails the tests. Cell ids and every other cell are kept as they are.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import nbformat
import tomllib

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
BADGE = re.compile(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)")
URL_ENV = "MINIRLHF_REPO_URL"  # overrides the URL at run time (the Colab simulation test points it at a local clone)

# The first code cell of every notebook. On Colab (google.colab importable) it installs the package and its `course`
# extra straight from the repository, with the loose ranges of pyproject.toml, so Colab's own torch, matplotlib and
# ipywidgets stay; an address in MINIRLHF_REPO_URL that pip's git+URL cannot take stops it naming the variable and
# its value, and a failed install stops the notebook with pip's error, the URL and what to do. Elsewhere the
# package is already in the kernel's environment and the cell only imports.
SETUP_CELL = '''\
# Setup, the same in every notebook. On Colab: install minirlhf and its `course` extra from the repository below
# (Colab's own torch, matplotlib and ipywidgets stay). Anywhere else minirlhf is already installed: only imports.
import os
import re
import subprocess
import sys

try:
    from google.colab import output as colab_output
    IN_COLAB = True
except ImportError:
    IN_COLAB = False
if IN_COLAB:
    REPO_URL = os.environ.get("{env}", "{url}")
    if not re.fullmatch(r"(https?|ssh|git|file)://\\S+", REPO_URL):  # what pip's git+URL takes
        raise ValueError(f"environment variable {env}={{REPO_URL!r}} is not a git repository's address: "
                         "give one like {url} (https, ssh, git or file://, "
                         "no spaces), or unset it")
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", f"minirlhf[course] @ git+{{REPO_URL}}"],
                         capture_output=True, text=True)
    if pip.returncode != 0:
        raise RuntimeError(
            f"installing minirlhf from {{REPO_URL}} failed (pip's message is below). Check that the address opens in a "
            "browser and that the runtime is online, then Runtime > Restart session and run this cell again.\\n"
            + pip.stderr[-3000:])
    colab_output.enable_custom_widget_manager()  # lets Colab draw the ipywidgets sliders

import torch

from minirlhf.course import notebook

DEVICE, QUICK = notebook.setup()  # the GPU when there is one; QUICK: tiny budgets (the test suite); inline figures'''


def repository_url() -> str:
    """`[project.urls] Repository` of pyproject.toml: https://github.com/OWNER/NAME."""
    pyproject = ROOT / "pyproject.toml"
    url = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("project", {}).get("urls", {}).get("Repository")
    if not url or not re.fullmatch(r"https://github\.com/[\w.-]+/[\w.-]+", url):
        raise ValueError(f"{pyproject}: [project.urls] Repository must be https://github.com/OWNER/NAME, not {url!r}")
    return url


def badge(url: str, notebook: str) -> str:
    github_path = url.removeprefix("https://github.com/")
    return ("[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
            f"(https://colab.research.google.com/github/{github_path}/blob/main/notebooks/{notebook})")


def setup_cell(url: str) -> str:
    return SETUP_CELL.format(url=url, env=URL_ENV)


def synced(nb: nbformat.NotebookNode, name: str, url: str) -> nbformat.NotebookNode:
    """The notebook with its badge (first cell, markdown) and setup cell (second cell, code) as this script writes
    them. Raises ValueError, naming the notebook, when the first two cells are not a badge cell and a code cell."""
    if len(nb.cells) < 2 or nb.cells[0].cell_type != "markdown" or nb.cells[1].cell_type != "code":
        raise ValueError(f"{name}: the first cell must be markdown (title and badge), the second the setup code cell")
    title = nb.cells[0].source
    if not BADGE.search(title):
        raise ValueError(f"{name}: cell 0 has no '[![Open In Colab](...)](...)' badge to keep in step")
    nb.cells[0].source = BADGE.sub(lambda _: badge(url, name), title, count=1)
    nb.cells[1].source = setup_cell(url)
    return nb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Stamp pyproject's repository URL into the notebooks' badge and setup")
    parser.add_argument("--check", action="store_true", help="list the notebooks that drifted; change nothing")
    args = parser.parse_args(argv)
    url = repository_url()
    drifted = []
    for path in NOTEBOOKS:
        nb = nbformat.read(path, as_version=4)
        before = [cell.source for cell in nb.cells[:2]]
        if [cell.source for cell in synced(nb, path.name, url).cells[:2]] != before:
            drifted.append(path.name)
            if not args.check:
                nbformat.write(nb, path)
    verb = "drifted from" if args.check else "rewritten from"
    print(f"{len(drifted)} notebook(s) {verb} {url}" + (f": {', '.join(drifted)}" if drifted else ""))
    return 1 if args.check and drifted else 0


if __name__ == "__main__":
    sys.exit(main())
