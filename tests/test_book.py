"""The rendered course: one HTML page per notebook, with its figures and no errors.

The notebooks are not executed here: the site is rendered from the copies that the simulated-Colab run wrote into
build/executed/ (conftest's `colab_run`, shared with tests/test_colab.py), so a test run executes each notebook once
for both. The rendering is `make book`'s (Sphinx + myst-nb, book/conf.py), into build/book/, the folder to publish
(conftest's `book_site`; tests/browser/test_book_offline.py opens the same pages in Chromium without a network).
Run alone with `pytest -m slow tests/test_book.py` (it runs the simulated Colab first).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.slow  # it needs every notebook executed

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
EXECUTED = ROOT / "build" / "executed"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_executed_copy_has_outputs_and_no_errors(notebook, book_site):
    copy = EXECUTED / notebook.name
    assert copy.is_file(), f"{notebook.name} has no executed copy: it failed in the simulated Colab (test_colab.py)"
    code = [cell for cell in nbformat.read(copy, as_version=4).cells if cell.cell_type == "code"]
    errors = [i for i, cell in enumerate(code) if any(out.output_type == "error" for out in cell.outputs)]
    assert not errors, f"{notebook.name}: code cells {errors} ended in an error in build/executed/"
    unrun = [i for i, cell in enumerate(code) if cell.execution_count is None]
    assert not unrun, f"{notebook.name}: code cells {unrun} were not executed"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_page_shows_figures_and_no_traceback(notebook, book_site):
    page = book_site / f"{notebook.stem}.html"
    assert page.is_file(), f"{notebook.name} has no page in {book_site}"
    html = page.read_text(encoding="utf-8")
    images = re.findall(r'<img [^>]*src="(_images/[^"]+)"', html)
    assert images, f"{page.name} embeds no image"
    missing = [src for src in images if not (book_site / src).is_file()]
    assert not missing, f"{page.name} points at images that are not in the site: {missing}"
    assert "traceback" not in html.lower(), f"{page.name} shows a traceback"


def test_pages_load_nothing_from_another_host(book_site):
    """Every script, stylesheet, image and font a page names is in the site (MathJax and the widget manager from
    _static/vendor/): the book reads offline. Links to other sites (Colab, the repository) are fine: they are only
    followed when clicked."""
    loading_links = {"stylesheet", "preload", "modulepreload", "icon"}
    for page in sorted([*book_site.glob("*.html"), *book_site.glob("docs/*.html")]):  # the notebooks, docs/
        urls = []
        for tag, attributes in re.findall(r"<(script|img|source|iframe|link)\b([^>]*)>", page.read_text("utf-8")):
            values = dict(re.findall(r'([\w-]+)="([^"]*)"', attributes))
            if tag != "link":
                urls.append(values.get("src", ""))
            elif loading_links & set(values.get("rel", "").split()):
                urls.append(values.get("href", ""))
        remote = [url for url in urls if re.match(r"(?:[a-z]+:)?//", url)]
        assert not remote, f"{page.name} loads from another host: {remote}"


def test_sliders_render_with_their_plot(book_site):
    """A page with an explorer carries the widget state, and the explorer's Output widget holds a PNG figure: the
    state that the ipywidgets HTML manager (loaded by the page) draws as the slider box with its plot. It is the
    state at the end of the run: where a later cell moves a slider from code, the page shows that redrawn plot."""
    pages_with_plots = 0
    for notebook in NOTEBOOKS:
        html = (book_site / f"{notebook.stem}.html").read_text(encoding="utf-8")
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
