"""The rendered course (build/book/) in headless Chromium without a network, opened from file:// as a reader does.

Every request to another host is aborted and counted, and so is every request that fails (a file missing from the
site) and every uncaught script error; each page must have none. On each notebook's page:

- test_page_reads_offline: every equation is typeset by MathJax (each `.math` element holds an mjx-container, and no
  TeX delimiter is left in the text outside code), every widget the page saved is drawn by the ipywidgets HTML
  manager from its saved state (a visible view next to each widget-view script), each explorer's figure (the PNG
  in its Output widget's state) is shown and loaded, and each slider of the state is drawn;
- test_navigation: the home page's sidebar lists every notebook's page in order, and each page links to the one
  before and after it.

Which book (conftest's `book`). In CI (CI=true), build/book/ rendered from the simulated-Colab run (tests/conftest.py's
`book_site`, shared with tests/test_colab.py and tests/test_book.py). Elsewhere the folder as `make book` (or an
earlier test run) left it, or the one MINIRLHF_BOOK_DIR names, and the tests skip when there is none; a notebook
without a page (a book built from some of the notebooks) skips its test, and in CI fails it. Chromium, screenshots on
failure and the leftover-process check come from conftest.py too.
Run alone with `pytest -m browser tests/browser/test_book_offline.py`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # slow: in CI it renders the book from every notebook's run

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
RENDER_TIMEOUT_MS = 60_000  # MathJax and the widget manager, on a shared CPU


class Offline:
    """Aborts every request of a page that leaves the machine; records those, the failed ones and the page's uncaught
    script errors (a widget that throws while it is drawn, say)."""

    def __init__(self, page) -> None:
        self.blocked: list[str] = []
        self.failed: list[str] = []
        self.errors: list[str] = []
        page.context.route("**/*", self._route)
        page.context.on("requestfailed", lambda request: self.failed.append(f"{request.url} ({request.failure})"))
        page.on("pageerror", lambda error: self.errors.append(str(error)))

    def _route(self, route) -> None:
        url = urlparse(route.request.url)
        if url.scheme in ("file", "data", "blob") or url.hostname in LOCAL_HOSTS:
            route.continue_()
        else:
            self.blocked.append(route.request.url)
            route.abort("internetdisconnected")

    def check(self, page_name: str) -> None:
        assert not self.blocked, f"{page_name} asked another host for {sorted(set(self.blocked))}"
        failed = [entry for entry in self.failed if entry.split(" ")[0] not in self.blocked]
        assert not failed, f"{page_name}: requests failed: {failed}"
        assert not self.errors, f"{page_name}: uncaught script errors: {self.errors}"


@pytest.fixture
def offline(page) -> Offline:
    return Offline(page)


def saved_widgets(html: str) -> tuple[int, int]:
    """(figures, sliders) in a page's saved widget state: Output widgets holding a PNG, and slider models."""
    match = re.search(rf'<script type="{re.escape(WIDGET_STATE)}">(.*?)</script>', html, re.DOTALL)
    if match is None:
        return 0, 0
    models = json.loads(match.group(1))["state"].values()
    figures = sum(any("image/png" in output.get("data", {}) for output in model["state"].get("outputs", []))
                  for model in models if model["model_name"] == "OutputModel")
    sliders = sum(model["model_name"].endswith("SliderModel") for model in models)
    return figures, sliders


# What the page shows, read in the page: equations, widget views and their figures, TeX left as text.
READ_PAGE = r"""() => {
  const visible = (element) => !!element && element.getClientRects().length > 0
      && getComputedStyle(element).visibility !== "hidden";
  const maths = Array.from(document.querySelectorAll("span.math, div.math"));
  const views = Array.from(document.querySelectorAll('script[type="application/vnd.jupyter.widget-view+json"]'));
  const drawn = views.filter((script) => {
    const area = script.previousElementSibling;
    return area && area.classList.contains("widget-subarea") && visible(area.querySelector(".jupyter-widgets"));
  });
  const figures = Array.from(document.querySelectorAll(".widget-output img"));
  const prose = [];  // the page's text outside code (read in place: a copy of the page would load its images again)
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    if (!walker.currentNode.parentElement.closest("pre, code, script, style, mjx-container")) {
      prose.push(walker.currentNode.textContent);
    }
  }
  return {
    maths: maths.length,
    typeset: maths.filter((element) => element.querySelector("mjx-container")).length,
    views: views.length,
    drawn: drawn.length,
    figures: figures.filter((image) => visible(image) && image.complete && image.naturalWidth > 0).length,
    sliders: Array.from(document.querySelectorAll(".widget-slider")).filter(visible).length,
    tex: (prose.join(" ").match(/\\\(|\\\[|\$\$/g) || []).length,
  };
}"""


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_page_reads_offline(notebook, book_page, page, offline):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout  # on use: without Playwright the tests skip

    path = book_page(notebook)
    figures, sliders = saved_widgets(path.read_text(encoding="utf-8"))
    page.goto(path.as_uri(), wait_until="load")
    try:
        page.wait_for_function(f"() => {{ const seen = ({READ_PAGE})(); "
                               "return seen.typeset === seen.maths && seen.drawn === seen.views; }",
                               timeout=RENDER_TIMEOUT_MS)
    except PlaywrightTimeout:
        pass  # the checks below say what is missing
    seen = page.evaluate(READ_PAGE)
    offline.check(path.name)
    assert seen["maths"] > 0, f"{path.name} has no equation"
    assert seen["typeset"] == seen["maths"], f"{path.name}: MathJax typeset {seen['typeset']} of {seen['maths']}"
    assert seen["tex"] == 0, f"{path.name} shows {seen['tex']} TeX delimiters outside code: MathJax left them"
    assert seen["drawn"] == seen["views"], f"{path.name}: {seen['drawn']} of {seen['views']} widgets drawn"
    assert seen["figures"] >= figures, f"{path.name}: {seen['figures']} of the {figures} saved explorer figures shown"
    assert seen["sliders"] >= sliders, f"{path.name}: {seen['sliders']} of the {sliders} saved sliders drawn"


def test_navigation(book, page, offline):
    """The sidebar of the home page lists every page rendered from a notebook (the notebooks Sphinx copied into
    _sources/), in order; from each page the theme's previous and next links walk that list."""
    sources = sorted((book / "_sources").glob("*.ipynb*"))  # .ipynb.txt where the theme keeps Sphinx's suffix
    pages = [book / (source.name.removesuffix(".txt").removesuffix(".ipynb") + ".html") for source in sources]
    assert pages, f"{book} has no page rendered from a notebook"
    page.goto((book / "index.html").as_uri(), wait_until="load")
    listed = page.locator("nav.bd-docs-nav a.reference").evaluate_all(
        "(links) => links.map((link) => link.getAttribute('href'))")
    assert [href for href in listed if href != "#"] == [path.name for path in pages], (
        f"the sidebar lists {listed}, the book has {[path.name for path in pages]}")
    for before, path, after in zip([book / "index.html", *pages], pages, [*pages[1:], None]):
        page.goto(path.as_uri(), wait_until="load")
        prev_link = page.locator(".prev-next-area a.left-prev")
        assert prev_link.get_attribute("href") == before.name, f"{path.name}: 'previous' does not lead to {before.name}"
        next_link = page.locator(".prev-next-area a.right-next")
        if after is None:
            assert next_link.count() == 0, f"{path.name}, the last page, has a 'next' link"
        else:
            assert next_link.get_attribute("href") == after.name, f"{path.name}: 'next' does not lead to {after.name}"
    offline.check("the pages")
