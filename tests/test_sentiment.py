"""Tests for the review grammar (minirlhf.tasks.reviews) and the VADER scorer (minirlhf.tasks.sentiment)."""

from __future__ import annotations

import re

import pytest

from minirlhf.tasks.reviews import (
    Review,
    all_openings,
    generate_reviews,
    review_openings,
    sentiment_prompts,
)
from minirlhf.tasks.sentiment import join_prompt_completion, sentiment_reward, sentiment_scores

N_CORPUS = 20000


@pytest.fixture(scope="module")
def corpus() -> list[Review]:
    return generate_reviews(N_CORPUS, seed=0)


@pytest.fixture(scope="module")
def corpus_scores(corpus: list[Review]) -> list[float]:
    return sentiment_scores([r.text for r in corpus])


def _sentences(text: str) -> list[str]:
    return re.split(r"(?<=\.) ", text)


# ---------------------------------------------------------------------------------------------- grammar


def test_generation_is_deterministic_by_seed() -> None:
    assert generate_reviews(200, seed=3) == generate_reviews(200, seed=3)
    assert generate_reviews(200, seed=3) != generate_reviews(200, seed=4)
    assert generate_reviews(50, seed=3) == generate_reviews(200, seed=3)[:50]
    assert review_openings(30, seed=1) == review_openings(30, seed=1)
    assert review_openings(30, seed=1) != review_openings(30, seed=2)


def test_generation_does_not_touch_global_rng() -> None:
    import random

    random.seed(123)
    expected = random.random()
    random.seed(123)
    generate_reviews(100, seed=0)
    review_openings(10, seed=0)
    assert random.random() == expected


def test_reviews_shape(corpus: list[Review]) -> None:
    assert len(corpus) == N_CORPUS
    for review in corpus:
        assert review.label in (0, 1)
        assert review.text.isascii()
        assert 8 <= len(review.text.split()) <= 30
        assert 1 <= len(_sentences(review.text)) <= 3
        assert review.text[0].isupper() and review.text.endswith(".")
        assert set(review.text) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ ,.")
    positive = sum(r.label for r in corpus) / len(corpus)
    assert 0.45 < positive < 0.55


def test_thousands_of_distinct_sentences(corpus: list[Review]) -> None:
    sentences = {s for r in corpus for s in _sentences(r.text)}
    print(f"\ndistinct sentences in {N_CORPUS} reviews: {len(sentences)}")
    assert len(sentences) >= 3000
    assert len({r.text for r in corpus}) >= 0.95 * N_CORPUS


def test_linguistic_phenomena_occur(corpus: list[Review]) -> None:
    texts = [r.text.lower() for r in corpus]

    def share(pattern: str) -> float:
        return sum(bool(re.search(pattern, t)) for t in texts) / len(texts)

    assert share(r"\b(was|were) (not|never) ") > 0.05  # negation
    assert share(r"\bnever (boring|dull|bad|annoying)\b") > 0.001  # "never boring"
    assert share(r"\bnot (good|great|funny|fun)\b") > 0.005  # "not good"
    assert share(r"\bdid not (enjoy|like|love)\b") > 0.01
    assert share(r", but ") > 0.05  # contrast
    assert share(r"^although |\balthough ") > 0.01
    assert share(r"\b(really|extremely|incredibly|absolutely|utterly) ") > 0.1  # intensifiers
    assert share(r"\b(somewhat|slightly|kind of|fairly|a little) ") > 0.03  # downtoners
    assert share(r"\b(it runs about|is set in|came out|the story follows)\b") > 0.05  # neutral filler
    subjects = [
        "plot",
        "acting",
        "soundtrack",
        "ending",
        "director",
        "characters",
        "dialogue",
        "camera work",
        "pacing",
    ]
    for subject in subjects:
        assert share(rf"\bthe {subject}\b") > 0.01, subject


# ---------------------------------------------------------------------------------------------- openings


def test_openings_splits_are_disjoint_and_fixed() -> None:
    train, test = sentiment_prompts("train"), sentiment_prompts("test")
    assert len(test) == 100
    assert len(train) >= 300
    assert not set(train) & set(test)
    assert set(train) | set(test) == set(all_openings())
    assert sentiment_prompts("test") == test
    assert sentiment_prompts("train", n=7) == train[:7]
    for opening in train + test:
        assert 2 <= len(opening.split()) <= 6
        assert opening.isascii() and opening[0].isupper()
    with pytest.raises(ValueError):
        sentiment_prompts("validation")


def test_review_openings_default_to_train_split() -> None:
    test = set(sentiment_prompts("test"))
    drawn = review_openings(2000, seed=0)
    assert len(drawn) == 2000
    assert not set(drawn) & test
    assert set(review_openings(500, seed=0, split="test")) <= test


def test_openings_are_neutral() -> None:
    scores = sentiment_scores(list(all_openings()))
    assert max(abs(s) for s in scores) < 0.05


# ---------------------------------------------------------------------------------------------- scorer


def test_scores_are_in_range(corpus_scores: list[float]) -> None:
    assert all(-1.0 <= s <= 1.0 for s in corpus_scores)
    assert sentiment_scores([]) == []


def test_vader_agrees_with_intended_label(corpus: list[Review], corpus_scores: list[float]) -> None:
    agree = [(s > 0) == (r.label == 1) for r, s in zip(corpus, corpus_scores, strict=True)]
    rate = sum(agree) / len(agree)

    def rate_where(pattern: str) -> tuple[float, int]:
        hits = [a for r, a in zip(corpus, agree, strict=True) if re.search(pattern, r.text)]
        return sum(hits) / max(len(hits), 1), len(hits)

    print(f"\nVADER agrees with the grammar's label on {rate:.1%} of {len(agree)} reviews")
    for name, pattern in [("negation", r"\b(not|never)\b"), ("contrast", r", but |[Aa]lthough ")]:
        sub_rate, count = rate_where(pattern)
        print(f"  {name}: {sub_rate:.1%} of {count}")
    assert rate >= 0.75


def test_vader_reads_the_grammars_negations() -> None:
    negative, positive = sentiment_scores(
        [
            "The acting was not good.",
            "The pacing was never boring.",
        ]
    )
    assert negative < 0 < positive
    (plain, boosted, softened) = sentiment_scores(
        [
            "The plot was dull.",
            "The plot was extremely dull.",
            "The plot was somewhat dull.",
        ]
    )
    assert boosted < plain < softened < 0
    (contrast_pos, contrast_neg) = sentiment_scores(
        [
            "The plot was slow and boring, but the acting was wonderful.",
            "The soundtrack was lovely, but the ending was terrible.",
        ]
    )
    assert contrast_neg < 0 < contrast_pos
    assert sentiment_scores(["I did not enjoy the dialogue."])[0] < 0


def test_sentiment_reward_scores_prompt_plus_completion() -> None:
    prompts = ["The acting was", "The soundtrack"]
    completions = [" not good.", "was wonderful."]
    rewards = sentiment_reward(prompts, completions, label=[0, 1])  # extra columns are ignored
    assert rewards[0] < 0 < rewards[1]
    assert rewards == sentiment_scores(["The acting was not good.", "The soundtrack was wonderful."])
    assert join_prompt_completion("The plot", "was") == "The plot was"
    assert join_prompt_completion("The plot", " was") == "The plot was"
    assert join_prompt_completion("The plot", ", sadly") == "The plot, sadly"
    assert sentiment_reward([], []) == []


def test_sentiment_reward_validates_lengths() -> None:
    with pytest.raises(ValueError, match="prompts.*completions"):
        sentiment_reward(["The plot"], ["was fine.", "was bad."])
