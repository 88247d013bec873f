"""Length, reading and study time of every notebook, as the README states them.

    python scripts/notebook_lengths.py

Length: cells, and words of markdown, where every run of letters or digits counts, formulas, code blocks and link
addresses included. A notebook holds one subject within MAX_CELLS cells and MAX_WORDS such words
(tests/test_notebook_lengths.py).

Reading time: the prose of the markdown cells (code blocks, formulas, table rules and links' addresses left out) at
200 words a minute. Study time adds what a student does besides reading, at the minutes per item below: run a code
cell and read what it prints, answer a quiz, work a numeric exercise, write an implement-it exercise or the
capstone's training step, move the sliders of an explorer. The minutes per item are an estimate, first fixed so that
the course's total matched the ~10 hours a student measured working through it; a reader's report then found three
places where the item counts miss the difficulty (dense derivations without an exercise, long code cells, the
capstone), so DIFFICULTY multiplies the study time of those notebooks, each with its reason, and the capstone's step
has its own rate.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
WORDS_PER_MINUTE = 200
MINUTES = {  # per item, on top of reading the prose
    "code cell": 1.5,  # run it (a live training run takes a minute or two), read its output or figure
    "quiz": 2.0,  # quiz.ask: read four options, answer, read the explanation
    "numeric exercise": 5.0,  # quiz.check_number: work it out by hand
    "implement-it exercise": 20.0,  # exercises.check_function: write the function, read the hints, fix it
    "capstone step": 50.0,  # capstone.check_step: a whole GRPO step, the first meeting with sample and
    # response_logprobs; a reader took 45-60 minutes
    "explorer": 3.0,  # a row of sliders: move them and watch the figure
}
MAX_CELLS = 55
MAX_WORDS = 3000
# Study time multiplied, for a notebook whose item counts miss its difficulty (a reader took about twice the
# unweighted estimate on each).
DIFFICULTY = {
    "04c_grpo_deeper.ipynb": 2.0,  # the k3 gradient's direction, the Lagrangian, GRPO's exact fixed point: derivations
    # to follow with pen and paper, and only a numeric exercise to check them
    "06a_showdown.ipynb": 2.0,  # long code cells (the race, the statistics, the table) to read, not only to run
}
FENCE = re.compile(r"```.*?```", re.S)
MATH = re.compile(r"\$\$.*?\$\$|\$[^$]*\$", re.S)
LINK = re.compile(r"\]\([^)]*\)")
WORD = re.compile(r"[A-Za-z0-9][\w'’.-]*")
RUN = re.compile(r"[^\W_]+")  # a run of letters or digits, in any script (θ, β count as letters)


def markdown_words(markdown: str) -> int:
    """Words of one markdown cell by the length rule: every run of letters or digits, formulas included."""
    return len(RUN.findall(markdown))


def prose_words(markdown: str) -> int:
    """Words of prose in one markdown cell: code blocks, formulas and link addresses removed."""
    text = LINK.sub("]", MATH.sub(" ", FENCE.sub(" ", markdown)))
    return len(WORD.findall(text))


def items(nb: nbformat.NotebookNode) -> dict[str, int]:
    """How many of each MINUTES item the notebook holds (a code cell counts once, under its most specific item)."""
    counts = dict.fromkeys(MINUTES, 0)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        source = cell.source
        if "capstone.check_step(" in source:
            counts["capstone step"] += 1
        elif "exercises.check_function(" in source:
            counts["implement-it exercise"] += 1
        elif "quiz.check_number(" in source:
            counts["numeric exercise"] += 1
        elif "quiz.ask(" in source:
            counts["quiz"] += 1
        elif re.search(r"widgets\.\w+_explorer\(", source):
            counts["explorer"] += 1
        elif "raise NotImplementedError" not in source:  # an exercise's stub belongs to its check
            counts["code cell"] += 1
    return counts


def lengths(path: Path) -> dict[str, float]:
    """Cells, markdown words (the length rule), reading minutes and study minutes of one notebook."""
    nb = nbformat.read(path, as_version=4)
    markdown = [cell.source for cell in nb.cells if cell.cell_type == "markdown"]
    reading = sum(prose_words(source) for source in markdown) / WORDS_PER_MINUTE
    counts = items(nb)
    factor = DIFFICULTY.get(path.name, 1.0)
    study = factor * (reading + sum(MINUTES[item] * n for item, n in counts.items()))
    words = sum(markdown_words(source) for source in markdown)
    return {"cells": len(nb.cells), "words": words, "reading": reading, "factor": factor, "study": study, **counts}


def main() -> None:
    rows = {path.name: lengths(path) for path in sorted((ROOT / "notebooks").glob("*.ipynb"))}
    print(f"{'notebook':<34}{'cells':>6}{'words':>7}{'reading':>9}{'factor':>7}{'study':>7}  items")
    for name, row in rows.items():
        listed = ", ".join(f"{row[item]} {item}" for item in MINUTES if row[item])
        print(f"{name:<34}{row['cells']:>6}{row['words']:>7}{row['reading']:>8.0f}m{row['factor']:>7.1f}"
              f"{row['study']:>6.0f}m  {listed}")
    reading, study = sum(r["reading"] for r in rows.values()), sum(r["study"] for r in rows.values())
    print(f"{'total':<34}{'':>13}{reading:>8.0f}m{study:>6.0f}m  ({study / 60:.1f} hours of study)")


if __name__ == "__main__":
    main()
