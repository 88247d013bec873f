"""The rendered course (build/book/) in headless Chromium without a network, opened from file:// as a reader does.

Every request to another host is aborted and counted, and so is every request that fails (a file missing from the
site) and every uncaught script error; each page must have none. On each notebook's page:

- test_page_reads_offline: every equation is typeset by MathJax (each `.math` element holds an mjx-container, and no
  TeX delimiter is left in the text outside code), every widget the page saved is drawn by the ipywidgets HTML
  manager from its saved state (a visible view next to each widget-view script), each explorer's figure (the PNG
  in its Output widget's state) is shown and loaded, and each slider of the state is drawn;
- test_docs_page_reads_offline, on each page of docs/ (the library's pages, after the notebooks): its title, every
  table drawn as a table, no markdown left as text, and every link within the site leading to a file and heading;
- test_navigation: the home page's sidebar lists every notebook's page in order, then the pages of docs/ in the order
  of book/index.md, and each page links to the one before and after it.

Which book (conftest's `book`). In CI (CI=true), build/book/ rendered from the simulated-Colab run (tests/conftest.py's
`book_site`, shared with tests/test_colab.py and tests/test_book.py). Elsewhere the folder as `make book` (or an
earlier test run) left it, or the one MINIRLHF_BOOK_DIR names, and the tests skip when there is none; a notebook
without a page (a book built from some of the notebooks) skips its test, and in CI fails it. Chromium, screenshots on
failure and the leftover-process check come from conftest.py too.
Run alone with `pytest -m browser tests/browser/test_book_offline.py`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from urllib.parse import urlparse

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.slow]  # slow: in CI it renders the book from every notebook's run

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
DOCS = sorted((ROOT / "docs").glob("*.md"))
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


def docs_in_book_order() -> list[str]:
    """The pages of docs/ as book/index.md's "Using the library" toctree lists them: docs/install, docs/tasks, ..."""
    index = (ROOT / "book" / "index.md").read_text(encoding="utf-8")
    block = re.search(r"```\{toctree\}\n:maxdepth: 1\n:caption: Using the library\n(.*?)```", index, re.DOTALL)
    assert block, "book/index.md has no toctree with the caption 'Using the library'"
    return [line.strip() for line in block.group(1).splitlines() if line.strip()]


# What a page of docs/ shows, read in the page: its title, tables, markdown left as text, and its links in the site.
READ_DOCS_PAGE = r"""() => {
  const article = document.querySelector("article.bd-article");
  const prose = [];
  const walker = document.createTreeWalker(article, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    if (!walker.currentNode.parentElement.closest("pre, code, script, style")) {
      prose.push(walker.currentNode.textContent);
    }
  }
  const visible = (element) => element.getClientRects().length > 0;
  return {
    title: (article.querySelector("h1") || {textContent: ""}).textContent.replace(/#$/, "").trim(),
    tables: Array.from(article.querySelectorAll("table")).filter(visible).length,
    markdown: (prose.join(" ").match(/```|\]\(|^\|\s*---|\|---\|/gm) || []),
    links: Array.from(article.querySelectorAll("a[href]")).map((link) => link.getAttribute("href"))
        .filter((href) => !/^[a-z]+:/.test(href)),
  };
}"""


@pytest.mark.parametrize("doc", DOCS, ids=[p.stem for p in DOCS])
def test_docs_page_reads_offline(doc, book, page, offline):
    path = book / "docs" / f"{doc.stem}.html"
    if not path.is_file():
        pytest.fail(f"{doc.name} has no page in {book}", pytrace=False)
    source = doc.read_text(encoding="utf-8")
    page.goto(path.as_uri(), wait_until="load")
    seen = page.evaluate(READ_DOCS_PAGE)
    offline.check(path.name)
    title = re.search(r"^# (.+)$", source, re.MULTILINE).group(1).replace("`", "")
    assert seen["title"] == title, f"{path.name} is titled {seen['title']!r}, docs/{doc.name} {title!r}"
    tables = len(re.findall(r"^\|[-:| ]+\|$", source, re.MULTILINE))  # one separator row per markdown table
    assert seen["tables"] == tables, f"{path.name} draws {seen['tables']} tables, docs/{doc.name} has {tables}"
    assert not seen["markdown"], f"{path.name} shows markdown as text: {seen['markdown']}"
    broken = []
    for href in seen["links"]:
        target, _, anchor = href.partition("#")
        file = (path.parent / target).resolve() if target else path
        if not file.is_file():
            broken.append(href)
        elif anchor and f'id="{anchor}"' not in file.read_text(encoding="utf-8"):
            broken.append(href)
    assert not broken, f"{path.name} links to what the site does not hold: {broken}"


def test_navigation(book, page, offline):
    """The sidebar of the home page lists every page rendered from a notebook (the notebooks Sphinx copied into
    _sources/), in order, then the pages of docs/ in the order of book/index.md; from each page the theme's previous
    and next links walk that list."""
    sources = sorted((book / "_sources").glob("*.ipynb*"))  # .ipynb.txt where the theme keeps Sphinx's suffix
    pages = [book / (source.name.removesuffix(".txt").removesuffix(".ipynb") + ".html") for source in sources]
    assert pages, f"{book} has no page rendered from a notebook"
    pages += [book / f"{doc}.html" for doc in docs_in_book_order()]
    page.goto((book / "index.html").as_uri(), wait_until="load")
    listed = page.locator("nav.bd-docs-nav a.reference").evaluate_all(
        "(links) => links.map((link) => link.getAttribute('href'))")
    expected = [path.relative_to(book).as_posix() for path in pages]
    assert [href for href in listed if href != "#"] == expected, f"the sidebar lists {listed}, the book has {expected}"
    for before, path, after in zip([book / "index.html", *pages], pages, [*pages[1:], None]):
        page.goto(path.as_uri(), wait_until="load")
        name = path.relative_to(book).as_posix()
        prev_link = page.locator(".prev-next-area a.left-prev")
        assert prev_link.get_attribute("href") == link(path, before), f"{name}: 'previous' does not lead to {before}"
        next_link = page.locator(".prev-next-area a.right-next")
        if after is None:
            assert next_link.count() == 0, f"{name}, the last page, has a 'next' link"
        else:
            assert next_link.get_attribute("href") == link(path, after), f"{name}: 'next' does not lead to {after}"
    offline.check("the pages")


def link(page: Path, target: Path) -> str:
    """The href of a link on `page` to `target`, as Sphinx writes it: relative to the page's folder."""
    return Path(os.path.relpath(target, page.parent)).as_posix()
