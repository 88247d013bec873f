"""The README is the front door and docs/ holds the rest: every page in the book, every link alive, the command-line
reference as the command line prints it, and the door table naming tests that exist.

The rendered pages in a browser, offline, are tests/browser/test_book_offline.py's; here the pages are checked as
files, and rendered once by Sphinx with warnings as errors (a broken cross-reference, a heading out of order).
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
README_MAX_LINES = 250
LINK = re.compile(r"\]\(([^)\s]+)\)")  # [text](target)


def heading_anchors(page: Path) -> set[str]:
    """The anchors GitHub and the book (myst_heading_anchors) give a page's headings: lower case, punctuation but
    hyphens and underscores dropped, spaces as hyphens."""
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.DOTALL)
    headings = re.findall(r"^#+ (.+)$", text, flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", heading.lower().replace("`", "")).replace(" ", "-") for heading in headings}


def toctree_entries(caption: str) -> list[str]:
    """The entries of book/index.md's toctree with this caption."""
    index = (ROOT / "book" / "index.md").read_text(encoding="utf-8")
    for block in re.findall(r"```\{toctree\}\n(.*?)```", index, flags=re.DOTALL):
        if f":caption: {caption}\n" in block:
            return [line.strip() for line in block.splitlines() if line.strip() and not line.startswith(":")]
    raise AssertionError(f"book/index.md has no toctree with caption {caption!r}")


def test_the_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES}): move detail to docs/"


def test_every_docs_page_is_in_the_book_and_linked_from_the_readme():
    listed = toctree_entries("Using the library")
    pages = [f"docs/{page.stem}" for page in DOCS]
    assert sorted(listed) == sorted(pages), f"book/index.md lists {listed}; docs/ holds {pages}"
    linked = {target.partition("#")[0] for target in LINK.findall(README.read_text(encoding="utf-8"))}
    unlinked = [page for page in pages if page + ".md" not in linked]
    assert not unlinked, f"README.md does not link to {unlinked}"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(page):
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if re.match(r"[a-z]+:", target):
            continue  # another site
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and anchor not in heading_anchors(file):
            broken.append(f"{target} (no heading #{anchor} in {file.name})")
    assert not broken, f"{page.name}: broken links: {broken}"


def test_the_readme_test_command_is_the_one_ci_runs():
    readme = README.read_text(encoding="utf-8")
    commands = re.findall(r"^(make \w+)\s+#", readme, flags=re.MULTILINE)
    assert "make test" in commands, f"the README's commands {commands} do not include `make test`"
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "make test" in ci, ".ci/run does not run `make test`, the test command the README gives"


def test_the_cli_reference_is_what_the_command_line_prints():
    checked = subprocess.run([sys.executable, "scripts/cli_reference.py", "--check"], cwd=ROOT,
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stderr or checked.stdout


def test_the_door_table_names_tests_that_exist():
    """Each boundary's "generated test" cell names tests by name or by the start of a name (`test_x...`), in
    tests/test_door.py unless a `tests/...py` before them in the cell names another file."""
    door = (ROOT / "docs" / "door.md").read_text(encoding="utf-8")
    rows = [line for line in door.split("## What is checked at the door")[1].split("\n## ")[0].splitlines()
            if line.startswith("| ") and not line.startswith("| boundary")]
    assert len(rows) >= 10, f"the door table has {len(rows)} rows"
    missing = []
    for row in rows:
        cell = row.rstrip(" |").rsplit(" | ", 1)[1]
        file = "tests/test_door.py"
        for name in re.findall(r"`([^`]+)`", cell):
            if "::" in name:
                file, name = name.split("::")
            elif name.endswith(".py"):
                file = name
                continue
            prefix = name.removesuffix("...")
            source = (ROOT / file).read_text(encoding="utf-8")
            pattern = rf"^def {re.escape(prefix)}" + (r"\w*\(" if name.endswith("...") else r"\(")
            if not re.search(pattern, source, flags=re.MULTILINE):
                missing.append(f"{file}::{name}")
    assert not missing, f"the door table names tests that do not exist: {missing}"


def test_the_docs_pages_render_without_warnings(tmp_path):
    """Sphinx with the book's configuration over the notebooks as shipped (nothing executed) and the pages of docs/:
    a warning (a broken cross-reference, a heading level skipped, a page outside every toctree) fails."""
    source = tmp_path / "source"
    source.mkdir()
    for notebook in (ROOT / "notebooks").glob("*.ipynb"):
        shutil.copy(notebook, source)
    rendered = subprocess.run([sys.executable, "-m", "sphinx", "-q", "-W", "-b", "html", "-c", str(ROOT / "book"),
                               str(source), str(tmp_path / "site")], cwd=ROOT, capture_output=True, text=True)
    assert rendered.returncode == 0, f"sphinx:\n{rendered.stdout}{rendered.stderr}"
    for page in DOCS:
        assert (tmp_path / "site" / "docs" / f"{page.stem}.html").is_file(), f"{page.name} has no page"


@pytest.mark.parametrize("page", [README, *DOCS], ids=lambda p: p.name)
def test_every_lab_command_names_the_lab_model(page):
    """The model is not implied by --task: a lab command without --model tiny-lab trains the arithmetic policy."""
    commands = re.findall(r"(?:python -m minirlhf|`)[^`\n]*--task lab\b[^`\n]*", page.read_text())
    assert all("--model tiny-lab" in command for command in commands), [c for c in commands if "tiny-lab" not in c]
