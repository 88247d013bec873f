"""The pairs of the lab's likelihood-displacement effect: the right answer against a wrong one as long that differs in
its last digit only (near-duplicate) or in every digit (disjoint), from one kind and split."""

import random

import pytest

from minirlhf.lab import displacement
from minirlhf.tasks import lab


@pytest.mark.parametrize("kind", ["hard", "medium"])
@pytest.mark.parametrize("split", ["train", "test"])
def test_chosen_is_the_right_answer_and_rejected_a_wrong_one_of_the_asked_kind(kind, split):
    pool = {p.prompt for p in lab.problems(kind, split)}
    for rejected in displacement.REJECTED:
        pairs = displacement.answer_pairs(kind, split, 200, rejected, random.Random(0))
        assert len({p.prompt for p in pairs}) == 200 and {p.prompt for p in pairs} <= pool
        for pair in pairs:
            right = str(lab.parse_prompt(pair.prompt).result)
            assert pair.chosen == right and len(right) == len(pair.rejected) and pair.rejected[0] != "0"
            differing = [a != b for a, b in zip(pair.chosen, pair.rejected, strict=True)]
            assert differing == ([False] * (len(right) - 1) + [True] if rejected == "near" else [True] * len(right))
            assert lab.lab_reward(filler=False)([pair.prompt] * 2, [pair.chosen, pair.rejected]) == [1.0, 0.0]


def test_an_unknown_kind_of_wrong_answer_is_refused_naming_it():
    with pytest.raises(ValueError, match="rejected='far'"):
        displacement.wrong_answer(42, "far", random.Random(0))
