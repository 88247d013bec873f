"""A small, seeded grammar of movie-review text for the controlled-sentiment task.

The corpus plays the role that IMDb plays in the DPO paper's sentiment experiment: the tiny GPT-2 is first
trained on these reviews, then post-trained to continue *review openings* (neutral prompts such as
"The soundtrack was") with positive text.

Each review is built around an intended label (1 = positive, 0 = negative) and mixes several phenomena, so a
sentiment scorer has to do more than count words:

* plain judgements with intensifiers and downtoners ("the plot was extremely dull"),
* negations that flip polarity ("the acting was not good", "the pacing was never boring"),
* contrast clauses where the second half carries the verdict ("the plot was slow, but the cast was lovely"),
* verbs of liking and disliking ("I really enjoyed the soundtrack", "I did not like the ending"),
* closing verdicts ("I would not recommend it") and neutral filler ("It runs about two hours.").

A few adjectives are deliberately outside common sentiment lexicons ("tedious", "gripping"), so the label is
the grammar's intent and an off-the-shelf scorer will not agree with it every time.

Text is ASCII, lowercase except for the first letter of a sentence and the pronoun "I", and uses only
periods and commas, which keeps the byte-level BPE vocabulary small.

Public API: :class:`Review`, :func:`generate_reviews`, :func:`review_openings`, :func:`sentiment_prompts`,
:func:`all_openings`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from minirlhf.checks import check_choice, check_count

# --------------------------------------------------------------------------------------------------
# Word lists. Every entry here is neutral for sentiment unless it sits in a list named after a polarity.
# --------------------------------------------------------------------------------------------------

# (noun phrase without article, is_plural)
SUBJECTS: list[tuple[str, bool]] = [
    ("film", False),
    ("movie", False),
    ("story", False),
    ("plot", False),
    ("script", False),
    ("acting", False),
    ("cast", False),
    ("soundtrack", False),
    ("music", False),
    ("ending", False),
    ("opening", False),
    ("director", False),
    ("lead actor", False),
    ("characters", True),
    ("dialogue", False),
    ("camera work", False),
    ("pacing", False),
    ("visuals", True),
    ("writing", False),
    ("cinematography", False),
    ("effects", True),
    ("score", False),
    ("final act", False),
    ("editing", False),
    ("performances", True),
    ("costumes", True),
]

POSITIVE_ADJ = [
    "good",
    "great",
    "wonderful",
    "excellent",
    "brilliant",
    "charming",
    "delightful",
    "beautiful",
    "clever",
    "fun",
    "funny",
    "superb",
    "fantastic",
    "enjoyable",
    "lovely",
    "amazing",
    "stunning",
    "perfect",
    "smart",
    "impressive",
    "entertaining",
    "powerful",
    "engaging",
    "thrilling",
    "gripping",
    "witty",
    "moving",
]
NEGATIVE_ADJ = [
    "bad",
    "boring",
    "dull",
    "awful",
    "terrible",
    "weak",
    "messy",
    "poor",
    "painful",
    "stupid",
    "annoying",
    "horrible",
    "lame",
    "disappointing",
    "ugly",
    "lazy",
    "confusing",
    "awkward",
    "tedious",
    "bland",
    "forgettable",
    "clumsy",
]

INTENSIFIERS = [
    "really",
    "very",
    "extremely",
    "truly",
    "incredibly",
    "so",
    "absolutely",
    "quite",
    "totally",
    "remarkably",
    "utterly",
]
# Intensifiers that read well before "adjective noun" ("a truly wonderful film").
ATTRIBUTIVE_INTENSIFIERS = ["really", "very", "extremely", "truly", "incredibly", "absolutely", "utterly"]
DOWNTONERS = ["somewhat", "slightly", "kind of", "fairly", "a little", "rather", "mostly"]

NEGATIONS = ["not", "never", "not at all"]

POSITIVE_VERBS = ["loved", "enjoyed", "liked", "adored", "admired", "appreciated"]
NEGATIVE_VERBS = ["hated", "disliked", "despised", "regretted watching"]
# Base forms used after "did not": negating a liking verb gives a negative clause.
LIKING_BASE = ["enjoy", "like", "love", "care for"]

POSITIVE_REACTIONS = ["smile", "laugh", "grin"]
NEGATIVE_REACTIONS = ["cry for the wrong reasons", "yawn", "cringe", "fall asleep", "check my phone"]

WORK_NOUNS = ["film", "movie", "picture", "story"]
WATCHED_NOUNS = ["film", "movie", "picture"]  # what one "watched" or "saw"

# Sentence leads that introduce a judgement without judging anything themselves.
LEADS = ["Overall", "Frankly", "In my opinion", "For me", "In the end", "Personally", "At first"]
VIEWERS = ["sister", "brother", "dad", "mom", "wife", "husband", "roommate", "son", "daughter"]
WHEN = ["last weekend", "on a sunday night", "on a long flight", "at the cinema", "at home", "last night"]
COMPANY = ["with my sister", "with my parents", "with my roommate", "with my kids", "alone", "with my dad"]

POSITIVE_VERDICTS = [
    "I would {int} recommend it",
    "it was worth every minute",
    "I would happily watch it again",
    "it is one of the best films of the year",
    "I left the cinema in a great mood",
]
NEGATIVE_VERDICTS = [
    "I would not recommend it",
    "it was a waste of time",
    "I want my money back",
    "it is one of the worst films of the year",
    "I left the cinema in a bad mood",
]

# Neutral filler: "{template}" with slots filled from the lists below.
FILLER_TEMPLATES = [
    "I watched it {when} {company}.",
    "It runs about {length}.",
    "The {work} is set in {place}.",
    "The story follows {who} in {place}.",
    "It came out {year}.",
    "I saw it {when}.",
    "My {viewer} picked it {when}.",
]
LENGTHS = ["two hours", "ninety minutes", "two and a half hours", "an hour and a half"]
PLACES = ["a small town", "a big city", "the future", "a hospital", "a school", "the desert", "a ship"]
WHO = ["a young teacher", "two brothers", "an old detective", "a family", "a taxi driver", "a pilot"]
YEARS = ["last year", "in the nineties", "a few years ago", "this spring", "a long time ago"]


@dataclass(frozen=True)
class Review:
    """One generated review and the sentiment the grammar intended (1 positive, 0 negative)."""

    text: str
    label: int


# --------------------------------------------------------------------------------------------------
# Clause builders. Each returns (text, polarity) with polarity +1 or -1, all lowercase.
# --------------------------------------------------------------------------------------------------


def _subject(rng: random.Random) -> tuple[str, str]:
    """Return ("the plot", "was") or ("the characters", "were")."""
    noun, plural = rng.choice(SUBJECTS)
    return f"the {noun}", "were" if plural else "was"


def _adjective(rng: random.Random, polarity: int) -> str:
    return rng.choice(POSITIVE_ADJ if polarity > 0 else NEGATIVE_ADJ)


def _modified_adjective(rng: random.Random, polarity: int) -> str:
    """An adjective of the given polarity, sometimes boosted or softened."""
    adj = _adjective(rng, polarity)
    r = rng.random()
    if r < 0.35:
        return f"{rng.choice(INTENSIFIERS)} {adj}"
    if r < 0.5:
        return f"{rng.choice(DOWNTONERS)} {adj}"
    return adj


def _judgement(rng: random.Random, polarity: int) -> str:
    """A clause with the given polarity, built in one of several ways."""
    subj, be = _subject(rng)
    kind = rng.random()
    if kind < 0.40:  # the plot was really dull
        return f"{subj} {be} {_modified_adjective(rng, polarity)}"
    if kind < 0.60:  # the plot was not good / the pacing was never boring
        return f"{subj} {be} {rng.choice(NEGATIONS)} {_adjective(rng, -polarity)}"
    if kind < 0.75:  # I really enjoyed the plot / I did not like the plot
        if polarity > 0:
            adverb = rng.choice(["", "", "really ", "truly ", "thoroughly "])
            return f"I {adverb}{rng.choice(POSITIVE_VERBS)} {subj}"
        if rng.random() < 0.5:
            return f"I did not {rng.choice(LIKING_BASE)} {subj}"
        return f"I {rng.choice(NEGATIVE_VERBS)} {subj}"
    if kind < 0.85:  # the ending made me smile
        reaction = rng.choice(POSITIVE_REACTIONS if polarity > 0 else NEGATIVE_REACTIONS)
        return f"{subj} made me {reaction}"
    # it was a truly wonderful film
    adj = _adjective(rng, polarity)
    phrase = f"{rng.choice(ATTRIBUTIVE_INTENSIFIERS)} {adj}" if rng.random() < 0.4 else adj
    article = "an" if phrase[0] in "aeiou" else "a"
    return f"it was {article} {phrase} {rng.choice(WORK_NOUNS)}"


def _sentiment_clause(rng: random.Random, polarity: int) -> str:
    """A judgement, sometimes preceded by a contrasting judgement of the opposite polarity."""
    r = rng.random()
    if r < 0.22:  # the verdict comes after "but"
        return f"{_judgement(rng, -polarity)}, but {_judgement(rng, polarity)}"
    if r < 0.30:  # concession first, verdict in the main clause
        return f"although {_judgement(rng, -polarity)}, {_judgement(rng, polarity)}"
    return _judgement(rng, polarity)


def _verdict(rng: random.Random, polarity: int) -> str:
    template = rng.choice(POSITIVE_VERDICTS if polarity > 0 else NEGATIVE_VERDICTS)
    return template.format(int=rng.choice(["", "really", "highly", "definitely"])).replace("  ", " ")


def _filler(rng: random.Random) -> str:
    template = rng.choice(FILLER_TEMPLATES)
    text = template.format(
        when=rng.choice(WHEN),
        company=rng.choice(COMPANY),
        length=rng.choice(LENGTHS),
        work=rng.choice(WORK_NOUNS),
        place=rng.choice(PLACES),
        who=rng.choice(WHO),
        year=rng.choice(YEARS),
        viewer=rng.choice(VIEWERS),
    )
    return text


def _sentence(text: str) -> str:
    """Capitalise the first letter and end with a period."""
    text = text.strip()
    if not text.endswith("."):
        text += "."
    return text[0].upper() + text[1:]


def _first_sentence(rng: random.Random, polarity: int) -> str:
    """The opening sentence; its first words follow the same shapes as :func:`all_openings`."""
    r = rng.random()
    if r < 0.45:
        return _sentence(_sentiment_clause(rng, polarity))
    if r < 0.65:
        return _sentence(f"{rng.choice(LEADS)}, {_sentiment_clause(rng, polarity)}")
    if r < 0.80:
        verb = rng.choice(["watched", "saw"])
        extra = rng.choice(["", "", f" {rng.choice(WHEN)}", f" {rng.choice(COMPANY)}"])
        work = rng.choice(WATCHED_NOUNS)
        return _sentence(f"I {verb} this {work}{extra} and {_judgement(rng, polarity)}")
    if r < 0.90:
        subj, be = _subject(rng)
        viewer = rng.choice(VIEWERS)
        said = rng.choice(["thought", "said"])
        return _sentence(f"My {viewer} {said} {subj} {be} {_modified_adjective(rng, polarity)}")
    be = rng.choice(["was", "is"])
    return _sentence(f"This {rng.choice(WORK_NOUNS)} {be} {_modified_adjective(rng, polarity)}")


def _review(rng: random.Random, label: int) -> str:
    polarity = 1 if label == 1 else -1
    sentences = [_first_sentence(rng, polarity)]
    for _ in range(rng.choice([0, 1, 1, 2])):
        r = rng.random()
        if r < 0.45:
            sentences.append(_sentence(_sentiment_clause(rng, polarity)))
        elif r < 0.75:
            sentences.append(_filler(rng))
        else:
            sentences.append(_sentence(_verdict(rng, polarity)))
    return " ".join(sentences)


def generate_reviews(n: int, seed: int = 0) -> list[Review]:
    """Generate ``n`` reviews (1-3 sentences, 8-30 words), half positive and half negative on average.

    Deterministic for a given ``seed``; uses its own ``random.Random`` and never the global RNG.
    """
    check_count("n", n, minimum=0)
    rng = random.Random(seed)
    reviews: list[Review] = []
    while len(reviews) < n:
        label = rng.randint(0, 1)
        text = _review(rng, label)
        if 8 <= len(text.split()) <= 30:
            reviews.append(Review(text=text, label=label))
    return reviews


# --------------------------------------------------------------------------------------------------
# Openings (prompts). The continuation, not the opening, decides the sentiment.
# --------------------------------------------------------------------------------------------------

N_TEST_OPENINGS = 100
_SPLIT_SEED = 20240611


@lru_cache(maxsize=1)
def all_openings() -> tuple[str, ...]:
    """Every review opening the grammar can produce (2-6 words, sentiment-neutral), sorted."""
    subjects = [f"the {noun}" for noun, _ in SUBJECTS]
    be = {f"the {noun}": ("were" if plural else "was") for noun, plural in SUBJECTS}
    found: set[str] = set()
    for subj in subjects:
        found.add(subj[0].upper() + subj[1:])
        found.add(f"{subj[0].upper()}{subj[1:]} {be[subj]}")
        for lead in LEADS:
            found.add(f"{lead}, {subj}")
            found.add(f"{lead}, {subj} {be[subj]}")
        for viewer in VIEWERS:
            found.add(f"My {viewer} thought {subj}")
    for work in WORK_NOUNS:
        found.add(f"This {work}")
        found.add(f"This {work} was")
    for work in WATCHED_NOUNS:
        for verb in ["watched", "saw"]:
            found.add(f"I {verb} this {work} and")
            for when in WHEN:
                found.add(f"I {verb} this {work} {when}")
    return tuple(sorted(o for o in found if 2 <= len(o.split()) <= 6))


@lru_cache(maxsize=1)
def _split() -> dict[str, tuple[str, ...]]:
    openings = list(all_openings())
    random.Random(_SPLIT_SEED).shuffle(openings)
    return {
        "test": tuple(sorted(openings[:N_TEST_OPENINGS])),
        "train": tuple(sorted(openings[N_TEST_OPENINGS:])),
    }


def sentiment_prompts(split: str = "train", n: int | None = None) -> list[str]:
    """The fixed prompt set of the sentiment task: ``"train"`` (several hundred) or ``"test"`` (100).

    The two splits are disjoint and never change between runs. ``n`` keeps the first ``n`` (sorted) prompts.
    """
    check_choice("split", split, ("train", "test"))
    prompts = list(_split()[split])
    return prompts if n is None else prompts[:n]


def review_openings(n: int, seed: int, split: str = "train") -> list[str]:
    """Draw ``n`` openings (with replacement) from one split, deterministically for ``seed``.

    ``split`` is ``"train"`` (default, so training code cannot leak held-out prompts), ``"test"`` or
    ``"all"``.
    """
    check_count("n", n, minimum=0)
    pool = list(all_openings()) if split == "all" else sentiment_prompts(split)
    rng = random.Random(seed)
    return [rng.choice(pool) for _ in range(n)]
