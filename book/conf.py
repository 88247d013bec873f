"""Sphinx + myst-nb configuration of the rendered course (`make book`).

The source folder is build/executed/: the notebooks as one quick-mode run left them, with their outputs and the state
of their widgets. That run is the simulated Colab of the tests (tests/test_colab.py, which CI runs) or, for notebooks
it has not executed, `make book`'s headless executor. Nothing is executed here: the book renders what that one run
produced. The pages written by hand are copied in at each build (`copy_pages`): index.md from this folder and the
library's pages from docs/, the same files the repository shows.

The site reads offline: MathJax and the ipywidgets HTML manager come from _static/vendor/ (written by
scripts/vendor_book_assets.py), and no page loads anything from another host (tests/browser/test_book_offline.py).
"""

import shutil
from pathlib import Path

import tomllib
from docutils import nodes

project = "minirlhf"
author = "the minirlhf authors"
copyright = "minirlhf authors, MIT licence"

extensions = ["myst_nb"]
root_doc = "index"
exclude_patterns = ["_build", "**.ipynb_checkpoints"]
html_static_path = ["_static"]  # relative to this folder, book/

nb_execution_mode = "off"  # render the stored outputs; never run a notebook during the build
nb_output_stderr = "show"  # warnings and progress lines are part of what the student sees
myst_enable_extensions = ["dollarmath", "amsmath"]  # the notebooks' $...$ and $$...$$ equations
myst_heading_anchors = 3  # `[text](door.md#error-messages)` links to a heading, as on GitHub

# MathJax 3 with every TeX extension built in (nothing is fetched on demand); it finds its fonts next to itself.
mathjax_path = "vendor/mathjax/tex-chtml-full.js"
mathjax_config_path = "mathjax_hub.js"  # MathJax 2's MathJax.Hub.Queue, which the widget manager calls

# The sliders: each explorer is an ipywidgets box whose Output widget holds the initial figure. The executed notebook
# keeps the widget state in its metadata (nbclient stores it), and on a page that has some, myst-nb adds the scripts
# of nb_ipywidgets_js: here the HTML manager's standalone bundle (the core widgets built in, so no RequireJS and no
# CDN), which draws the boxes from that state: the sliders show their plot as it stood at the end of the run.
nb_ipywidgets_js = {"vendor/html-manager/embed.js": {}}

BOOK = Path(__file__).resolve().parent
ROOT = BOOK.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))

html_theme = "sphinx_book_theme"  # Jupyter Book's: a sidebar listing every notebook, previous/next at each page's foot
html_title = "minirlhf: the course"
html_theme_options = {
    "repository_url": PYPROJECT["project"]["urls"]["Repository"],  # written once, as the notebooks' badges read it
    "path_to_docs": "notebooks",  # where the pages' notebooks live in the repository, for the Colab button
    "repository_branch": "main",
    "use_repository_button": True,
    "launch_buttons": {"colab_url": "https://colab.research.google.com"},
    "home_page_in_toc": True,
}
html_context = {"default_mode": "light"}  # the figures are drawn on white; the reader can switch to dark


def drop_remote_images(app, doctree: nodes.document) -> None:
    """Each notebook opens with an "Open in Colab" badge, an image from colab.research.google.com: offline it is a
    broken image and a failed request. The page keeps the link, with the image's alt text as its words (the theme's
    launch button opens Colab too)."""
    for image in list(doctree.findall(nodes.image)):
        if image["uri"].startswith(("http://", "https://")):
            image.replace_self(nodes.Text(image.get("alt", image["uri"])))


def copy_pages(srcdir: Path) -> None:
    """index.md and docs/*.md into the source folder, beside the executed notebooks (docs/ replaced whole, so a page
    deleted from the repository leaves the book too). index.md's toctrees list them: the notebooks, then docs/."""
    shutil.copy(BOOK / "index.md", srcdir / "index.md")
    shutil.rmtree(srcdir / "docs", ignore_errors=True)
    shutil.copytree(ROOT / "docs", srcdir / "docs")


def setup(app) -> None:
    copy_pages(Path(app.srcdir))  # before Sphinx looks for the source files
    app.connect("doctree-read", drop_remote_images)
