"""The lab: a task family with knobs, made to show the effects that GRPO's variants and PPO's clip exist for.

Three kinds of problem, one per difficulty class of the lab model (`load_model("tiny-lab")`):

    easy     "23+4="     a two-digit and a one-digit number, no carry: the SFT model almost always solves them
    medium   "17+25="    two-digit sums: it solves them some of the time
    hard     "17*25="    two-digit products: it almost never does

and the knobs (`LabConfig`):

- ``mix``: the shares of easy, medium and hard prompts (all-right and all-wrong groups come from easy and hard);
- ``filler``: the free length channel. A completion may carry any number of filler tokens "." around its answer
  (the lab model writes them after it: "17+25=" -> "42......"); they never change correctness, so the length can
  drift on its own, and the model can make it depend on the answer it gave. Off: only the bare answer scores;
- ``max_new_tokens``: the response cap. The lab model writes 0-30 filler tokens, so a cap below ~34 straddles the
  natural lengths and truncates some answers;
- ``tolerance``: answer multiplicity. With tolerance d > 0 the prompt reads "17+25~2=" and every whole number
  within d of the result is right (2d + 1 right answers, fewer near 0).

Every problem belongs to one split, fixed by a hash (as in `arithmetic`), so held-out problems never reach the SFT
data or the RL prompts. The reward is a verifier in TRL's shape: 1.0 for a right answer, else 0.0.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from minirlhf.data import SFTData
from minirlhf.sampling import sample
from minirlhf.tasks import Task
from minirlhf.tasks.pass_at_k import check_ks, count_correct, mean_pass_at_k

KINDS = ("easy", "medium", "hard")
OPERATOR = {"easy": "+", "medium": "+", "hard": "*"}
OPERANDS = {"easy": (range(10, 100), range(10)), "medium": (range(10, 100), range(10, 100)),
            "hard": (range(10, 100), range(10, 100))}  # (first, second) operands of each kind
SFT_WEIGHTS = (1, 1, 1)  # relative shares of easy, medium and hard problems in the SFT demonstrations
FILLER = "."  # one token of the tiny tokenizer; a run of them is one token each
MAX_FILLER = 30  # the SFT data's filler runs are uniform in 0..MAX_FILLER tokens
MAX_TOLERANCE = 3  # the largest tolerance the SFT data shows
TEST_FRACTION = 0.1
DEFAULT_MAX_NEW_TOKENS = 40  # MAX_FILLER filler tokens + 4 answer digits + EOS, and slack
MAX_PROMPT_TOKENS = 8  # "99*99~3="
LAB_CONTEXT = 128  # positions of the lab model
PASS_AT_K_PER_KIND = 50  # held-out problems of each kind that held_out_pass_at_k samples by default

_PROMPT = re.compile(r"^(\d+)([+*])(\d+)(?:~(\d+))?=$")


@dataclass(frozen=True)
class LabConfig:
    """The lab's knobs, checked when made (a ValueError names the knob and its value)."""

    mix: tuple[float, float, float] = (0.25, 0.5, 0.25)  # shares of easy, medium, hard prompts (sum 1)
    filler: bool = True  # filler tokens "." are allowed around the answer (the free length channel)
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS  # response cap
    tolerance: int = 0  # d: every number within d of the result is right (2d + 1 answers); 0 = exactly one

    def __post_init__(self) -> None:
        mix = tuple(self.mix)
        if len(mix) != len(KINDS) or not all(isinstance(s, int | float) and not isinstance(s, bool) for s in mix):
            raise ValueError(f"LabConfig.mix={self.mix!r} must be three shares (easy, medium, hard)")
        if any(not math.isfinite(s) or s < 0 for s in mix) or not math.isclose(sum(mix), 1.0, abs_tol=1e-6):
            raise ValueError(f"LabConfig.mix={self.mix!r} must be three non-negative shares that sum to 1")
        object.__setattr__(self, "mix", tuple(float(s) for s in mix))
        if not isinstance(self.filler, bool):
            raise ValueError(f"LabConfig.filler={self.filler!r} must be true or false")
        room = LAB_CONTEXT - MAX_PROMPT_TOKENS
        if isinstance(self.max_new_tokens, bool) or not isinstance(self.max_new_tokens, int) or not (
                1 <= self.max_new_tokens <= room):
            raise ValueError(f"LabConfig.max_new_tokens={self.max_new_tokens!r} must be a whole number in 1..{room} "
                             f"(the lab model reads {LAB_CONTEXT} positions, prompts take up to {MAX_PROMPT_TOKENS})")
        if isinstance(self.tolerance, bool) or not isinstance(self.tolerance, int) or not (
                0 <= self.tolerance <= MAX_TOLERANCE):
            raise ValueError(f"LabConfig.tolerance={self.tolerance!r} must be a whole number in 0..{MAX_TOLERANCE} "
                             f"(the tolerances the lab model's SFT data shows)")

    def options(self) -> tuple[str, ...]:
        """The knobs moved from their defaults, as NAME=VALUE strings (`--task-option`) that rebuild this config."""
        moved = [f for f in dataclasses.fields(self) if getattr(self, f.name) != f.default]
        return tuple(f"{f.name}={_spelled(getattr(self, f.name))}" for f in moved)


def _spelled(value: bool | int | float | tuple) -> str:
    """A knob's value as an option writes it: true, 24, 0.5,0.5,0.0."""
    if isinstance(value, tuple):
        return ",".join(_spelled(item) for item in value)
    return str(value).lower() if isinstance(value, bool) else repr(value)


@dataclass(frozen=True)
class LabProblem:
    kind: str
    a: int
    b: int
    tolerance: int = 0

    @property
    def prompt(self) -> str:
        return f"{self.a}{OPERATOR[self.kind]}{self.b}{f'~{self.tolerance}' if self.tolerance else ''}="

    @property
    def result(self) -> int:
        return self.a * self.b if OPERATOR[self.kind] == "*" else self.a + self.b

    @property
    def answers(self) -> tuple[int, ...]:
        """Every right answer: the whole numbers within `tolerance` of the result (none below 0)."""
        return tuple(range(max(0, self.result - self.tolerance), self.result + self.tolerance + 1))


def parse_prompt(prompt: str) -> LabProblem:
    """The problem a lab prompt states ("17+25=", "17*25~2="); a ValueError for anything else."""
    match = _PROMPT.match(prompt)
    if match is None:
        raise ValueError(f"{prompt!r} is not a lab prompt (a+b=, a*b=, or either with ~d before the =)")
    a, op, b, tolerance = match.groups()
    a, b = int(a), int(b)
    kind = "hard" if op == "*" else ("easy" if b < 10 else "medium")
    return LabProblem(kind, a, b, int(tolerance or 0))


def answer_of(completion: str, filler: bool = True) -> int | None:
    """The number a completion answers, or None when it is not one: its digits between any runs of filler tokens
    (when `filler`), surrounding white space ignored. "42..." -> 42 with filler, None without; "4.2" -> None."""
    text = completion.strip()
    if filler:
        text = text.strip(FILLER)
    return int(text) if text.isascii() and text.isdigit() else None


def lab_reward(filler: bool = True):
    """The verifier R(x, y): 1.0 when the completion's answer is one of the prompt's right answers, else 0.0.
    `filler`: filler tokens around the answer are allowed (the free length channel)."""

    def lab_correctness(prompts: list[str], completions: list[str], **columns) -> list[float]:
        if len(prompts) != len(completions):
            raise ValueError(f"prompts and completions differ in length: {len(prompts)} != {len(completions)}")
        rewards = []
        for prompt, completion in zip(prompts, completions, strict=True):
            answer = answer_of(completion, filler)
            rewards.append(1.0 if answer is not None and answer in parse_prompt(prompt).answers else 0.0)
        return rewards

    return lab_correctness


def split_of(kind: str, a: int, b: int) -> str:
    digest = hashlib.sha256(f"lab:{kind}:{a}:{b}".encode()).digest()
    return "test" if digest[0] < 256 * TEST_FRACTION else "train"


def pairs(kind: str) -> list[tuple[int, int]]:
    """Every (a, b) of one kind, in a fixed order: its operands (`OPERANDS`), and for easy sums no carry (the units
    digits add up to at most 9)."""
    firsts, seconds = OPERANDS[kind]
    return [(a, b) for a in firsts for b in seconds if kind != "easy" or a % 10 + b < 10]


@functools.cache
def problems(kind: str, split: str) -> tuple[LabProblem, ...]:
    """Every problem of one kind and split (tolerance 0), in a fixed order."""
    return tuple(LabProblem(kind, a, b) for a, b in pairs(kind) if split_of(kind, a, b) == split)


def draw_problems(config: LabConfig, split: str, n: int, rng: random.Random) -> list[LabProblem]:
    """`n` problems of a split: each one's kind drawn by `config.mix`, with the config's tolerance."""
    kinds = rng.choices(KINDS, weights=config.mix, k=n)
    return [dataclasses.replace(rng.choice(problems(kind, split)), tolerance=config.tolerance) for kind in kinds]


def problems_of_kind(kind: str, split: str, n: int, tolerance: int, rng: random.Random) -> list[LabProblem]:
    """`n` problems of one kind and split, drawn with replacement by `rng`, with `tolerance`."""
    pool = problems(kind, split)
    return [dataclasses.replace(rng.choice(pool), tolerance=tolerance) for _ in range(n)]


def sft_examples(n: int = 60_000, seed: int = 0) -> list[tuple[str, str]]:
    """(prompt, completion) demonstrations from the train split: kinds in the shares of SFT_WEIGHTS, a filler run of
    0..MAX_FILLER tokens after the answer (uniform: a broad length distribution), tolerance 0 half the time and
    1..MAX_TOLERANCE otherwise, with the answer uniform over the right ones (a broad answer distribution)."""
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        kind = rng.choices(KINDS, weights=SFT_WEIGHTS)[0]
        tolerance = 0 if rng.random() < 0.5 else rng.randint(1, MAX_TOLERANCE)
        problem = dataclasses.replace(rng.choice(problems(kind, "train")), tolerance=tolerance)
        examples.append((problem.prompt, str(rng.choice(problem.answers)) + FILLER * rng.randint(0, MAX_FILLER)))
    return examples


@torch.no_grad()
def lab_metrics(model, tokenizer, config: LabConfig, per_kind: int = 100, seed: int = 0,
                kinds: Sequence[str] = KINDS) -> dict[str, float]:
    """Held-out metrics of one sampled answer (temperature 1) per problem, `per_kind` problems of each of `kinds`:
    accuracy/<kind>, and response_length (tokens, EOS included) and truncated (share cut at the cap) over all."""
    unknown = [kind for kind in kinds if kind not in KINDS]
    if unknown or not kinds:
        raise ValueError(f"lab_metrics kinds={list(kinds)!r} must be some of {', '.join(KINDS)}")
    rng = random.Random(seed)
    metrics, lengths, truncated = {}, [], []
    for kind in kinds:
        prompts = [p.prompt for p in problems_of_kind(kind, "test", per_kind, config.tolerance, rng)]
        generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
        rollout = sample(model, tokenizer, prompts, max_new_tokens=config.max_new_tokens, generator=generator)
        rewards = lab_reward(config.filler)(prompts, rollout.completions)
        metrics[f"accuracy/{kind}"] = sum(rewards) / len(rewards)
        lengths += rollout.response_lengths.tolist()
        truncated += (~rollout.ended_with_eos).tolist()
    return metrics | {"response_length": sum(lengths) / len(lengths), "truncated": sum(truncated) / len(truncated)}


def held_out_pass_at_k(
    model, tokenizer, config: LabConfig | None = None, n: int = 16, ks: Sequence[int] = (1, 4, 16),
    per_kind: int = PASS_AT_K_PER_KIND, seed: int = 0,
) -> dict[str, float]:
    """pass@k on held-out problems, `per_kind` of each kind with the config's tolerance: n answers sampled per
    problem at temperature 1, "pass@k/<kind>" for each k of ``ks`` and kind (``minirlhf.tasks.pass_at_k``)."""
    config = config or LabConfig()
    check_ks(ks, n)
    rng = random.Random(seed)
    metrics = {}
    for kind in KINDS:
        prompts = [p.prompt for p in problems_of_kind(kind, "test", per_kind, config.tolerance, rng)]
        counts = count_correct(model, tokenizer, prompts, lab_reward(config.filler), n,
                               max_new_tokens=config.max_new_tokens, seed=seed)
        metrics |= {f"{name}/{kind}": value for name, value in mean_pass_at_k(counts, n, ks).items()}
    return metrics


def task(config: LabConfig | None = None, **knobs) -> Task:
    """The lab task with `config` (or the knobs as keywords: ``task(mix=(0, 1, 0), max_new_tokens=20)``)."""
    if config is not None and knobs:
        raise ValueError("give either a LabConfig or knobs as keywords, not both")
    config = config or LabConfig(**knobs)

    def train_prompts(n: int, rng: random.Random) -> list[str]:
        return [p.prompt for p in draw_problems(config, "train", n, rng)]

    return Task(
        name="lab",
        train_prompts=train_prompts,
        reward_fn=lab_reward(config.filler),
        evaluate=lambda model, tokenizer: lab_metrics(model, tokenizer, config),
        max_new_tokens=config.max_new_tokens,
        options=config.options(),
    )


def sft_data() -> SFTData:
    """The lab model's SFT demonstrations (`sft_examples`), evaluated by the lab task's held-out metrics at its
    default knobs."""
    return SFTData(sft_examples(), evaluate=task().evaluate)


def kinds_of(prompts: Sequence[str]) -> list[str]:
    """The difficulty class of each lab prompt."""
    return [parse_prompt(p).kind for p in prompts]
