"""No write reaches a read: `paths.check_apart` over generated pairs of spellings of places on a real file tree
(the same folder, a parent, a child, a symlink to one, `..`, `.`, `~`, a trailing slash, relative and absolute),
compared with the answer of an independent rule: two places overlap when one real path is a prefix of the other's
parts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirlhf.errors import UserError
from minirlhf.paths import absolute, check_apart, overlap

FUZZ = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
PLACES = ["run", "run/checkpoints", "run/checkpoints/step-000040", "run/final", "other", "other/run", "runs",
          "data/pairs.jsonl", "data", "link-to-run", "link-to-run/checkpoints", "link-to-pairs"]


@pytest.fixture
def tree(tmp_path, monkeypatch):
    for folder in ("run/checkpoints/step-000040", "run/final", "other/run", "runs", "data"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "data/pairs.jsonl").write_text("{}\n")
    (tmp_path / "link-to-run").symlink_to(tmp_path / "run")
    (tmp_path / "link-to-pairs").symlink_to(tmp_path / "data/pairs.jsonl")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    return tmp_path


def _spell(tree: Path, place: str, how: str) -> str:
    return {"relative": place, "absolute": str(tree / place), "dot": f"./{place}", "slash": f"{place}/",
            "dotdot": f"other/../{place}", "home": f"~/{place}"}[how]


def _real_parts(tree: Path, place: str) -> tuple[str, ...]:
    return Path(os.path.realpath(tree / place)).parts


spelling = st.sampled_from(["relative", "absolute", "dot", "slash", "dotdot", "home"])


@FUZZ
@given(st.sampled_from(PLACES), spelling, st.sampled_from(PLACES), spelling)
def test_a_write_overlapping_a_read_is_refused_naming_both(tree, read, read_how, write, write_how):
    r, w = _real_parts(tree, read), _real_parts(tree, write)
    expected = r[:len(w)] == w or w[:len(r)] == r  # one is the other, or lies inside it
    read_as, write_as = _spell(tree, read, read_how), _spell(tree, write, write_how)
    assert overlap(read_as, write_as) == expected == overlap(write_as, read_as)
    if expected:
        with pytest.raises(UserError, match=rf"fork_to={write_as!r} .* resume={read_as!r}"):
            check_apart(reads={"model": None, "resume": read_as}, writes={"out_dir": None, "fork_to": write_as})
    else:
        check_apart(reads={"resume": read_as}, writes={"fork_to": write_as})


def test_a_tilde_is_the_home_folder_never_a_folder_named_tilde(tree):
    assert absolute("~/x") == tree / "x" and absolute("~") == tree
    assert not (tree / "~").exists()
