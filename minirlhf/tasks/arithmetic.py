"""The verifiable-reward task: two-number addition with an exact-answer reward.

A prompt is ``"17+25="`` and the right completion is ``"42"`` followed by the end-of-sequence token.
The reward is a *verifier*, not a learned model: 1.0 when the completion's answer is exactly right, else 0.0
(the DeepSeek-R1 recipe at toy scale). Every problem ``a+b`` with ``0 <= a, b < 100`` belongs to exactly one
split, fixed by a hash of the pair, so the held-out ("test") problems never appear in the pre-training corpus,
the SFT data or the RL prompts.
"""

from __future__ import annotations

import functools
import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from minirlhf.checks import check_choice
from minirlhf.data import SFTData
from minirlhf.sampling import sample
from minirlhf.tasks import Task
from minirlhf.tasks.pass_at_k import check_ks, count_correct, mean_pass_at_k

MAX_OPERAND = 100  # operands are drawn from range(MAX_OPERAND)
TEST_FRACTION = 0.1  # share of all 10 000 problems held out for evaluation
MAX_NEW_TOKENS = 5  # three answer digits, EOS, and one token of slack to see what a model adds


@dataclass(frozen=True)
class Problem:
    a: int
    b: int

    @property
    def prompt(self) -> str:
        return f"{self.a}+{self.b}="

    @property
    def answer(self) -> str:
        return str(self.a + self.b)

    @property
    def text(self) -> str:
        """The whole solved problem as it appears in training text, without the EOS token."""
        return self.prompt + self.answer


def split_of(a: int, b: int) -> str:
    """'test' for the held-out problems, 'train' otherwise; fixed forever by a hash of the pair."""
    digest = hashlib.sha256(f"{a}+{b}".encode()).digest()
    return "test" if digest[0] < 256 * TEST_FRACTION else "train"


def problems(split: str) -> list[Problem]:
    """All problems of one split ('train' or 'test') in a fixed order."""
    check_choice("split", split, ("train", "test"))
    return [Problem(a, b) for a in range(MAX_OPERAND) for b in range(MAX_OPERAND) if split_of(a, b) == split]


def sample_problems(split: str, n: int, seed: int) -> list[Problem]:
    """`n` problems of a split drawn with replacement by a seeded generator."""
    rng = random.Random(seed)
    pool = problems(split)
    return [rng.choice(pool) for _ in range(n)]


def correctness_reward(prompts: list[str], completions: list[str], **columns) -> list[float]:
    """Verifiable reward R(x, y): 1.0 when the completion is exactly the sum, 0.0 otherwise.

    "Exactly" means the completion, stripped of surrounding white space, is the answer's digits and nothing
    else: ``"42"`` scores 1, ``"42 is it"`` and ``"420"`` score 0. Same call shape as TRL reward functions.
    """
    if len(prompts) != len(completions):
        raise ValueError(f"prompts and completions differ in length: {len(prompts)} != {len(completions)}")
    rewards = []
    for prompt, completion in zip(prompts, completions, strict=True):
        a, b = (int(x) for x in prompt.rstrip("=").split("+"))
        rewards.append(1.0 if completion.strip() == str(a + b) else 0.0)
    return rewards


def train_prompts(n: int, rng: random.Random) -> list[str]:
    """`n` RL prompts from the train split (never a held-out problem)."""
    pool = _train_pool()
    return [rng.choice(pool).prompt for _ in range(n)]


def sft_examples() -> list[tuple[str, str]]:
    """(prompt, answer) for every train problem: the SFT data (EOS is appended when encoding)."""
    return [(p.prompt, p.answer) for p in _train_pool()]


def sft_data() -> SFTData:
    """The SFT demonstrations with the task's held-out accuracy as their evaluation (what `train_sft` takes)."""
    return SFTData(sft_examples(), evaluate=task().evaluate)


@functools.cache
def _train_pool() -> list[Problem]:
    return problems("train")


@torch.no_grad()
def correct_answers(model, tokenizer, held_out: list[Problem] | None = None, batch_size: int = 512) -> list[float]:
    """1.0 or 0.0 per held-out problem, in order: is the greedy answer exactly right (all ~1000 test problems by
    default)? Two models scored on the same problems can be compared problem by problem (minirlhf.course.stats)."""
    held_out = held_out if held_out is not None else problems("test")
    correct = []
    for start in range(0, len(held_out), batch_size):
        chunk = held_out[start : start + batch_size]
        prompts = [p.prompt for p in chunk]
        rollout = sample(model, tokenizer, prompts, max_new_tokens=MAX_NEW_TOKENS, greedy=True)
        correct += correctness_reward(prompts, rollout.completions)
    return correct


def accuracy(model, tokenizer, held_out: list[Problem] | None = None, batch_size: int = 512) -> float:
    """Greedy exact-match accuracy on held-out problems (all ~1000 test problems by default)."""
    correct = correct_answers(model, tokenizer, held_out, batch_size)
    return sum(correct) / len(correct)



def held_out_pass_at_k(
    model, tokenizer, n: int = 16, ks: Sequence[int] = (1, 4, 16), held_out: list[Problem] | None = None,
    seed: int = 0,
) -> dict[str, float]:
    """pass@k on held-out problems (all ~1000 test problems by default): n answers sampled per problem at
    temperature 1, {"pass@k": value} for each k of ``ks`` (``minirlhf.tasks.pass_at_k``)."""
    check_ks(ks, n)
    held_out = held_out if held_out is not None else problems("test")
    counts = count_correct(model, tokenizer, [p.prompt for p in held_out], correctness_reward, n,
                           max_new_tokens=MAX_NEW_TOKENS, seed=seed)
    return mean_pass_at_k(counts, n, ks)


def task() -> Task:
    """The arithmetic task as the online trainers consume it."""
    return Task(
        name="arithmetic",
        train_prompts=train_prompts,
        reward_fn=correctness_reward,
        evaluate=lambda model, tokenizer: {"accuracy": accuracy(model, tokenizer)},
        max_new_tokens=MAX_NEW_TOKENS,
    )
