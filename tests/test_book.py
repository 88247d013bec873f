"""The rendered course that `make book` builds: one HTML page per notebook, with its figures and no errors.

The book is built outside the test suite (it renders notebooks executed once, by `make book` in CI's .ci/run), and
this test reads the result. Without a built book the test is skipped locally and fails under CI=true.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXECUTED = ROOT / "build" / "executed"
SITE = ROOT / "build" / "book"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"

if not (SITE / "index.html").is_file():
    if os.environ.get("CI") == "true":
        raise RuntimeError(f"no rendered course at {SITE}: .ci/run must run `make book` before the tests")
    pytest.skip(f"no rendered course at {SITE}: run `make book` first", allow_module_level=True)


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_executed_copy_has_outputs_and_no_errors(notebook):
    executed = nbformat.read(EXECUTED / notebook.name, as_version=4)
    code = [cell for cell in executed.cells if cell.cell_type == "code"]
    errors = [i for i, cell in enumerate(code) if any(out.output_type == "error" for out in cell.outputs)]
    assert not errors, f"{notebook.name}: code cells {errors} ended in an error in build/executed/"
    unrun = [i for i, cell in enumerate(code) if cell.execution_count is None]
    assert not unrun, f"{notebook.name}: code cells {unrun} were not executed"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_page_shows_figures_and_no_traceback(notebook):
    page = SITE / f"{notebook.stem}.html"
    assert page.is_file(), f"{notebook.name} has no page in {SITE}"
    html = page.read_text(encoding="utf-8")
    images = re.findall(r'<img [^>]*src="(_images/[^"]+)"', html)
    assert images, f"{page.name} embeds no image"
    missing = [src for src in images if not (SITE / src).is_file()]
    assert not missing, f"{page.name} points at images that are not in the site: {missing}"
    assert "traceback" not in html.lower(), f"{page.name} shows a traceback"


def test_sliders_render_with_their_plot():
    """A page with an explorer carries the widget state, and the explorer's Output widget holds a PNG figure: the
    state that the ipywidgets HTML manager (loaded by the page) draws as the slider box with its plot. It is the
    state at the end of the run: where a later cell moves a slider from code, the page shows that redrawn plot."""
    pages_with_plots = 0
    for notebook in NOTEBOOKS:
        html = (SITE / f"{notebook.stem}.html").read_text(encoding="utf-8")
        match = re.search(rf'<script type="{re.escape(WIDGET_STATE)}">(.*?)</script>', html, re.DOTALL)
        if match is None:
            continue
        state = json.loads(match.group(1))["state"]
        captured = [m["state"].get("outputs", []) for m in state.values() if m["model_name"] == "OutputModel"]
        pages_with_plots += any("image/png" in out.get("data", {}) for outputs in captured for out in outputs)
    explorer_notebooks = [p for p in NOTEBOOKS if "_explorer(" in p.read_text(encoding="utf-8")]
    assert pages_with_plots >= len(explorer_notebooks) > 0, (
        f"{pages_with_plots} pages carry a widget figure, but {len(explorer_notebooks)} notebooks open an explorer"
    )
