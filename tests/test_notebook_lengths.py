"""Every notebook holds one subject within the length limits of scripts/notebook_lengths.py, and its study-time
factors name notebooks that exist."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("notebook_lengths", ROOT / "scripts" / "notebook_lengths.py")
notebook_lengths = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(notebook_lengths)
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def test_every_run_of_letters_or_digits_counts_formulas_included():
    assert notebook_lengths.markdown_words("The KL, $\\log N - (N-1)/N$, is p_θ's bound.") == 12
    assert notebook_lengths.markdown_words("```python\nx = 1\n```") == 3
    assert notebook_lengths.prose_words("The KL, $\\log N - (N-1)/N$, is a bound.") == 5


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_within_the_length_limits(path):
    row = notebook_lengths.lengths(path)
    assert row["cells"] <= notebook_lengths.MAX_CELLS, (
        f"{path.name}: {row['cells']} cells, over {notebook_lengths.MAX_CELLS}; move a coherent section into its own "
        "notebook or merge cells")
    assert row["words"] <= notebook_lengths.MAX_WORDS, (
        f"{path.name}: {row['words']} words of markdown, over {notebook_lengths.MAX_WORDS}; move a coherent section "
        "into its own notebook or tighten the prose")


def test_difficulty_factors_name_existing_notebooks():
    names = {path.name for path in NOTEBOOKS}
    assert set(notebook_lengths.DIFFICULTY) <= names, set(notebook_lengths.DIFFICULTY) - names


def test_the_capstone_step_has_its_own_rate():
    capstone = ROOT / "notebooks" / "08_capstone.ipynb"
    row = notebook_lengths.lengths(capstone)
    assert row["capstone step"] == 1
    assert row["study"] >= row["reading"] + notebook_lengths.MINUTES["capstone step"]
