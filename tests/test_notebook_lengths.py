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


def _readme_minutes(minutes: float) -> str:
    """Study minutes as README's table writes them: ~39 min, ~1 h 53."""
    whole = int(f"{minutes:.0f}")
    return f"~{whole} min" if whole < 60 else f"~{whole // 60} h {whole % 60:02d}"


def test_readme_table_gives_each_notebook_the_reading_and_study_time_the_script_computes():
    rows = {}
    for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0][:2].isdigit():
            rows[cells[0].split()[0]] = (cells[1], cells[2])
    assert set(rows) == {path.name.split("_")[0] for path in NOTEBOOKS}, "one README row per notebook"
    for path in NOTEBOOKS:
        row = notebook_lengths.lengths(path)
        expected = (f"{row['reading']:.0f} min", _readme_minutes(row["study"]))
        assert rows[path.name.split("_")[0]] == expected, (
            f"README's row for {path.name} says {rows[path.name.split('_')[0]]}, scripts/notebook_lengths.py "
            f"computes {expected}")
