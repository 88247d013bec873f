"""The notebooks as a student uses them: in JupyterLab in headless Chromium, run, sliders moved, quizzes clicked.

Each test opens a notebook in a fresh browser context, runs it with Run > Run All Cells, waits until every code cell has
run, and then acts through the page only:

- test_slider_redraws: focuses a slider's handle (.noUi-handle), presses arrow keys and checks that the readout, the
  plot (the <img> in the explorer's output) and the summary line the kernel prints (which quotes the slider's value)
  all change. The sliders have continuous_update=False: ipywidgets sends the value on noUiSlider's "change" event,
  which each key press fires (as does the release of a drag), so every press is one kernel round trip;
- test_quiz_feedback: answers every `quiz.ask(...)` of the notebook wrongly, then rightly, by clicking a radio option
  and the Check button, and reads the feedback ("Not quite ..." then "Correct! ...");
- test_voila_slider_redraws: the same slider check on a notebook rendered by Voila.

Fixtures (servers, browser, screenshots on failure, the leftover-process check) are in conftest.py.
Run them alone with `pytest -m browser` (add `-x -s` to see progress).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from minirlhf.course import quiz

pytestmark = pytest.mark.browser

NOTEBOOK_DIR = Path(__file__).resolve().parents[2] / "notebooks"
RUN_ALL_TIMEOUT_MS = 600_000  # a whole notebook in quick mode on a shared CPU
REDRAW_TIMEOUT_MS = 90_000  # one slider change: kernel round trip plus a matplotlib render
PLOT_TIMEOUT_S = 30  # from the summary line showing the new value to the new plot (already there in practice)
KEY_PRESSES = 3

VOILA_TIMEOUT_MS = 300_000  # Voila runs the notebook before showing its widgets
VOILA_STALL_S = 120  # the same "Executing k of N" for this long: a stuck kernel, not a slow cell


def expect(*args, **kwargs):
    """playwright.sync_api.expect, imported on use: without Playwright the module still imports (and the tests skip)."""
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(*args, **kwargs)


# ---------------------------------------------------------------------------------------------------------
# What to test
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Move:
    label: str  # the slider's description, e.g. "ε"
    summary: str  # how the explorer's summary line prints the slider's value, e.g. "ε = {:.2f}"
    key: str = "ArrowRight"  # ArrowLeft for a slider that starts at its maximum


@dataclass(frozen=True)
class ExplorerCase:
    id: str
    notebook: str
    marker: str  # text only this explorer's summary line contains (tells the two β explorers of 01 apart)
    moves: tuple[Move, ...]  # the sliders to move, one after the other


EXPLORER_CASES = [
    ExplorerCase("01-kl-objective-beta", "01_kl_regularised_objective.ipynb", "p* = [", (Move("β", "β = {:.2f}"),)),
    ExplorerCase("03-ppo-clip-eps", "03a_ppo.ipynb", "flat outside", (Move("ε", "ε = {:.2f}"),)),
    ExplorerCase("03-ppo-gae-gamma-lambda", "03a_ppo.ipynb", "Â_t = [",
                 (Move("γ", "γ = {:.2f}", key="ArrowLeft"), Move("λ", "λ = {:.2f}"))),
    ExplorerCase("04-grpo-group-size", "04a_grpo.ipynb", "baseline std", (Move("G", "G = {:.0f}"),)),
    ExplorerCase("05-dpo-beta", "05a_dpo.ipynb", "gradient weight", (Move("β", "β = {:.2f}"),)),
    ExplorerCase("07-clip-higher-eps", "07a_grpo_since_r1.ipynb", "clip-higher lets",
                 (Move("ε_low", "ε_low = {:.2f}"), Move("ε_high", "ε_high = {:.2f}"))),
]
VOILA_CASE = EXPLORER_CASES[0]  # the cheapest notebook to render: no training


def _notebook_path(prefix_or_name: str) -> Path | None:
    """The notebook with this exact name, or else the one whose name starts with its two-digit prefix."""
    exact = NOTEBOOK_DIR / prefix_or_name
    if exact.exists():
        return exact
    matches = sorted(NOTEBOOK_DIR.glob(prefix_or_name[:3] + "*.ipynb"))
    return matches[0] if matches else None


def _require_notebook(name: str) -> str:
    path = _notebook_path(name)
    if path is None:
        pytest.skip(f"notebook {name} (or another {name[:2]}_*.ipynb) does not exist yet")
    return path.name


def quiz_ids(path: Path) -> list[str]:
    """The ids of every quiz.ask("...") in the notebook's code cells, in order."""
    nb = json.loads(path.read_text(encoding="utf-8"))
    ids = []
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            ids += re.findall(r"""^\s*quiz\.ask\(\s*["']([\w-]+)["']""", source, flags=re.MULTILINE)
    return ids


QUIZ_NOTEBOOKS = [path for path in sorted(NOTEBOOK_DIR.glob("*.ipynb")) if quiz_ids(path)]


def test_quiz_notebooks_are_found():
    """No notebook with a quiz.ask(...) would mean the discovery regex went stale, and test_quiz_feedback vanished."""
    assert QUIZ_NOTEBOOKS, "no notebook calls quiz.ask(...)"


# ---------------------------------------------------------------------------------------------------------
# Acting on JupyterLab
# ---------------------------------------------------------------------------------------------------------

# Run All marks every code cell [*] at once; when it has finished (or stopped at a cell that raised) none is left
# and the kernel is idle.
RUN_ALL_FINISHED = """() => {
  const prompts = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')];
  const indicator = document.querySelector('.jp-NotebookPanel .jp-Notebook-ExecutionIndicator');
  return prompts.length > 0 && !prompts.some(p => p.textContent.includes('*'))
    && indicator?.getAttribute('data-status') === 'idle';
}"""
RUN_ALL_STARTED = """() => [...document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt')]
  .some(p => /\\[(\\*|\\d+)\\]/.test(p.textContent))"""
# Code cells (with code) that have no execution count, and the output of the last one that has.
RUN_ALL_REPORT = """() => {
  const cells = [...document.querySelectorAll('.jp-Notebook .jp-CodeCell')]
    .filter(cell => (cell.querySelector('.cm-content')?.textContent ?? '').trim() !== '');
  const ran = cell => /\\[\\d+\\]/.test(cell.querySelector('.jp-InputPrompt')?.textContent ?? '');
  const notRun = cells.filter(cell => !ran(cell));
  const last = cells.filter(ran).at(-1);
  return {
    cells: cells.length,
    notRun: notRun.length,
    firstNotRun: notRun.length ? (notRun[0].querySelector('.cm-content')?.textContent ?? '').slice(0, 200) : '',
    lastRun: last ? (last.querySelector('.cm-content')?.textContent ?? '').slice(0, 200) : '',
    lastOutput: last ? (last.querySelector('.jp-OutputArea')?.textContent ?? '').slice(-3000) : '',
  };
}"""


def open_in_lab(page, server, name: str) -> None:
    """Open a notebook as a student would, from a link to it, and wait until its kernel is connected and idle.

    `reset` starts from an empty workspace: without it JupyterLab would reopen the notebooks of earlier tests too.
    """
    page.goto(f"{server.url}/lab/tree/{name}?token={server.token}&reset")
    expect(page.locator(".jp-NotebookPanel .jp-Notebook .jp-Cell").first).to_be_visible(timeout=120_000)
    # The status bar says "Python 3 (ipykernel) | Idle" only once the kernel is connected: Run All before that
    # would find no kernel and run nothing.
    kernel_status = page.locator(".jp-StatusBar-TextItem", has_text=re.compile(r"^.+ \| Idle$"))
    expect(kernel_status).to_be_visible(timeout=180_000)


def run_all_cells(page) -> None:
    """Run > Run All Cells; wait until it has finished, and fail with the last output if it stopped early."""
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()
    page.wait_for_function(RUN_ALL_STARTED, timeout=30_000, polling=200)
    page.wait_for_function(RUN_ALL_FINISHED, timeout=RUN_ALL_TIMEOUT_MS, polling=500)
    report = page.evaluate(RUN_ALL_REPORT)
    assert report["notRun"] == 0, (
        f"Run All Cells stopped: {report['notRun']} of {report['cells']} code cells did not run, from\n"
        f"{report['firstNotRun']}\nThe last cell that ran:\n{report['lastRun']}\nwith output:\n{report['lastOutput']}")


def _exact(text: str) -> re.Pattern:
    return re.compile(rf"^\s*{re.escape(text)}\s*$")


def find_explorer(page, case: ExplorerCase):
    """The Explorer box (sliders above an output) with the case's sliders, whose summary contains its marker."""
    box = page.locator(".widget-vbox").filter(has=page.locator(".widget-output")).filter(has_text=case.marker)
    for move in case.moves:
        box = box.filter(has=page.locator(".widget-slider .widget-label").filter(has_text=_exact(move.label)))
    expect(box).to_have_count(1, timeout=60_000)
    return box


def _digest(text: str | None) -> str:
    return hashlib.sha1((text or "").encode()).hexdigest()[:12]


def _wait_for_new_src(image, old_src: str | None, timeout_s: float) -> str:
    """The plot's src as soon as it differs from `old_src`, or the unchanged src once `timeout_s` has passed.

    Polled here rather than with expect(...).not_to_have_attribute, whose failure message would print the whole
    base64 PNG.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        src = image.get_attribute("src") if image.count() == 1 else None  # None while the output is being redrawn
        if (src is not None and src != old_src) or time.monotonic() > deadline:
            return src or ""
        image.page.wait_for_timeout(200)


def move_slider_and_check_redraw(page, box, move: Move) -> str:
    """Move one slider by keyboard; its readout, the plot and the kernel's summary line must all follow."""
    slider = box.locator(".widget-slider").filter(has=page.locator(".widget-label").filter(has_text=_exact(move.label)))
    readout = slider.locator(".widget-readout")
    handle = slider.locator(".noUi-handle")
    image = box.locator(".widget-output img")
    summary = box.locator('.widget-output [data-mime-type="application/vnd.jupyter.stdout"]')
    expect(image).to_have_count(1)
    box.scroll_into_view_if_needed()  # what a student looks at (and off-screen cells may skip rendering)

    old_readout = readout.text_content().strip()
    old_src = image.get_attribute("src")
    expect(summary).to_contain_text(move.summary.format(float(old_readout)))  # the starting point agrees

    handle.focus()
    start = time.perf_counter()
    for _ in range(KEY_PRESSES):
        handle.press(move.key)

    expect(readout).not_to_have_text(old_readout, timeout=REDRAW_TIMEOUT_MS)
    new_readout = readout.text_content().strip()
    new_value = float(new_readout)
    assert (new_value > float(old_readout)) == (move.key == "ArrowRight"), (
        f"{move.key} moved {move.label} from {old_readout} to {new_readout}")
    # The kernel re-rendered at the new value: its summary line quotes it (summaries round to 2 decimals) ...
    expect(summary).to_contain_text(move.summary.format(new_value), timeout=REDRAW_TIMEOUT_MS)
    # ... and the plot drawn with it replaced the old one (it is displayed before the summary is printed).
    new_src = _wait_for_new_src(image, old_src, PLOT_TIMEOUT_S)
    if new_src == old_src:  # pytest.fail, not assert: assert's introspection would print both base64 PNGs
        pytest.fail(f"{move.label} moved {old_readout} -> {new_readout} and the summary line followed, but the plot "
                    f"did not change: the <img> still shows the PNG drawn before (sha1 {_digest(old_src)})")
    if not new_src.startswith("data:image/png"):
        pytest.fail(f"the plot is not a PNG: {new_src[:60]}")
    return f"{move.label} {old_readout} -> {new_readout} (redrawn in {time.perf_counter() - start:.1f} s)"


def move_sliders(page, case: ExplorerCase) -> str:
    box = find_explorer(page, case)
    return "; ".join(move_slider_and_check_redraw(page, box, move) for move in case.moves)


def answer_quiz(page, quiz_id: str, occurrence: int = 0) -> None:
    """Click a wrong option and Check, then the right one and Check; read the feedback each time.

    `occurrence` picks the n-th widget of this question on the page (a notebook may ask one twice).
    """
    question = quiz.QUESTIONS[quiz_id]
    letters = list(question.options)
    wrong = next(letter for letter in letters if letter != question.answer)
    box = (page.locator(".widget-vbox")
           .filter(has=page.locator(".widget-radio-box"))
           .filter(has=page.locator(".widget-button", has_text="Check"))
           .filter(has_text=question.question[:60])).nth(occurrence)
    options = box.locator(".widget-radio-box label")
    check = box.locator(".widget-button", has_text="Check")
    feedback = box.locator(".widget-html-content").last
    expect(options).to_have_count(len(letters))

    for letter, verdict in ((wrong, "Not quite"), (question.answer, "Correct")):
        option = options.nth(letters.index(letter))
        expect(option).to_contain_text(f"{letter}) {question.options[letter]}")
        option.click()
        expect(option.locator("input")).to_be_checked()
        check.click()
        expect(feedback).to_have_text(re.compile(rf"^\s*{verdict}"), timeout=REDRAW_TIMEOUT_MS)


# ---------------------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------------------


def test_lab_starts_without_news_or_update_checks(lab):
    """The isolated settings reached JupyterLab: no "get news?" pop-up over the notebook, no update check."""
    schema = lab.api("GET", "/lab/api/settings/@jupyterlab/apputils-extension:notification")["schema"]
    defaults = {name: schema["properties"][name].get("default") for name in ("fetchNews", "checkForUpdates")}
    assert defaults == {"fetchNews": "false", "checkForUpdates": False}, defaults  # overrides.json's values


@pytest.mark.parametrize("case", EXPLORER_CASES, ids=[case.id for case in EXPLORER_CASES])
def test_slider_redraws(case, lab, page):
    name = _require_notebook(case.notebook)
    open_in_lab(page, lab, name)
    run_all_cells(page)
    print(f"{name}: {move_sliders(page, case)}")


@pytest.mark.parametrize("path", QUIZ_NOTEBOOKS, ids=[path.name for path in QUIZ_NOTEBOOKS])
def test_quiz_feedback(path, lab, page):
    ids = quiz_ids(path)
    open_in_lab(page, lab, path.name)
    run_all_cells(page)
    for i, quiz_id in enumerate(ids):
        answer_quiz(page, quiz_id, occurrence=ids[:i].count(quiz_id))
    print(f"{path.name}: {len(ids)} quizzes answered wrongly then rightly: {', '.join(ids)}")


def open_in_voila(page, url: str) -> str:
    """Load a Voila page until its widgets show; returns how long it took.

    Voila executes the whole notebook before the page's "load" event, which can take minutes on a busy machine, so
    the page is not awaited: its "Executing k of N" heading is watched instead. Voila runs the cells through
    nbclient; started as Voila is by default, a cell's reply can sit unread in its kernel client's socket for ever
    (the lost wake-up; `benchmarks/widget_stall.py --client voila` counts it: benchmarks/README.md). The server here has
    the re-polling client of `make voila` (headless.SERVER_OPTION), so the heading standing still for VOILA_STALL_S is a
    failure, not something to reload past. A notebook that is merely slow keeps moving and is waited for up to
    VOILA_TIMEOUT_MS."""
    page.goto(url, wait_until="commit", timeout=VOILA_TIMEOUT_MS)
    start = last_change = time.monotonic()
    progress = None
    while time.monotonic() - start < VOILA_TIMEOUT_MS / 1000:
        if page.locator(".widget-slider").first.is_visible():
            return f"widgets shown after {time.monotonic() - start:.0f} s"
        heading = " ".join(page.get_by_role("heading").all_text_contents())  # "Executing 37 of 42"
        if heading != progress:
            progress, last_change = heading, time.monotonic()
        elif time.monotonic() - last_change > VOILA_STALL_S:
            pytest.fail(f"Voila stopped at {progress!r} for {time.monotonic() - last_change:.0f} s: {url}")
        page.wait_for_timeout(1000)
    pytest.fail(f"Voila never showed the widgets of {url} within {VOILA_TIMEOUT_MS / 1000:.0f} s (at {progress!r})")


def test_voila_slider_redraws(voila_server, page):
    name = _require_notebook(VOILA_CASE.notebook)
    how = open_in_voila(page, f"{voila_server.url}/voila/render/{name}?token={voila_server.token}")
    print(f"voila {name}: {how}; {move_sliders(page, VOILA_CASE)}")


# ---------------------------------------------------------------------------------------------------------
# Implement-it exercises
# ---------------------------------------------------------------------------------------------------------

EXERCISE_NOTEBOOK = "04a_grpo.ipynb"
EXERCISE_ID = "k3-estimator"
# The classic mistake to type first: k1 in place of k3, which the checker recognises by name.
WRONG_K3 = "import torch\n\n\ndef k3_estimate(logp, ref_logp):\n    return logp - ref_logp\n"


def code_cell(page, text: str):
    """The one code cell of the open notebook whose source contains `text`."""
    cell = page.locator(".jp-Notebook .jp-CodeCell").filter(has=page.locator(".cm-content", has_text=text))
    expect(cell).to_have_count(1, timeout=60_000)
    return cell


def replace_source(cell, source: str) -> None:
    """Select the cell's whole source and type `source` in its place (insert_text: no auto-indent, no auto-close)."""
    cell.scroll_into_view_if_needed()
    cell.locator(".cm-content").click()
    cell.page.keyboard.press("Control+A")
    cell.page.keyboard.insert_text(source)
    expect(cell.locator(".cm-content")).to_contain_text(source.strip().splitlines()[-1].strip())


def run_cell(cell) -> None:
    """Click into the cell and run it with Ctrl+Enter (which stays on the cell); wait for its new execution count."""
    prompt = cell.locator(".jp-InputPrompt")
    before = prompt.text_content()
    cell.scroll_into_view_if_needed()
    cell.locator(".cm-content").click()
    cell.page.keyboard.press("Control+Enter")
    expect(prompt).not_to_have_text(before, timeout=REDRAW_TIMEOUT_MS)
    expect(prompt).to_have_text(re.compile(r"\[\d+\]"), timeout=REDRAW_TIMEOUT_MS)


def test_exercise_stub_wrong_then_right(lab, page):
    """A student runs the stub's check (not implemented yet), types the k1 mistake (the checker names it), then the
    solution (the checker passes it): all in JupyterLab, without running the rest of the notebook."""
    from minirlhf.course import exercises

    name = _require_notebook(EXERCISE_NOTEBOOK)
    exercise = exercises.EXERCISES[EXERCISE_ID]
    open_in_lab(page, lab, name)
    stub = code_cell(page, f"def {exercise.stub}(")
    check = code_cell(page, f'check_function("{EXERCISE_ID}"')
    output = check.locator(".jp-OutputArea")

    run_cell(stub)
    run_cell(check)
    expect(output).to_contain_text(f"{EXERCISE_ID}: not implemented yet", timeout=REDRAW_TIMEOUT_MS)

    replace_source(stub, WRONG_K3)
    run_cell(stub)
    run_cell(check)
    k1 = next(m for m in exercise.mistakes if m.name == "k1")
    expect(output).to_contain_text(f"✗ {EXERCISE_ID}: case", timeout=REDRAW_TIMEOUT_MS)
    expect(output).to_contain_text(f"hint: ({k1.name}) {k1.hint}")

    replace_source(stub, exercises.solution_source(EXERCISE_ID))
    run_cell(stub)
    run_cell(check)
    expect(output).to_contain_text(f"✓ {EXERCISE_ID}: passed", timeout=REDRAW_TIMEOUT_MS)
    print(f"{name}: {EXERCISE_ID} not implemented, then the k1 hint, then passed")
