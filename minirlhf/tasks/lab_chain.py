"""The lab's chain problems: answers that need their length, for the effect of the response cap (lab effect (c)).

A prompt "45+6+...=" asks: keep adding 6 to 45 while the total stays below 100; the answer is the last total. The
lab-chain model (`load_model("tiny-lab-chain")`) writes the work, every total, and the answer is the last one:

    "45+6+...=" -> "....51,57,63,69,75,81,87,93,99"        (9 steps: a long answer)
    "88+5+...=" -> "..93,98"                                (2 steps: a short one)

Each step is a two-digit plus one-digit sum, which the model does well, but the answer is right only when every
step is: the work cannot be skipped, so ending early costs the answer (as a proof or a chain of thought needs its
length). The number of steps, s = floor((99 - a) / b), is set by the prompt (1 to 9), so some prompts need long
answers and others short ones. Before the work the model writes a filler run "." of free length (0 to
`MAX_FILLER` tokens in its SFT data, never changing correctness): with a cap near the long answers' length, some of
the long answers are cut off however right their work, and only those.

The reward is a verifier in TRL's shape that reads the final answer only (as a verifier reads a boxed answer): 1.0
when the completion's last total (the number after its last ",", filler before the work ignored) is the prompt's
answer, else 0.0. Every problem belongs to one split, fixed by a hash, as in `lab`.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from minirlhf.data import SFTData
from minirlhf.sampling import sample
from minirlhf.tasks import Task

BOUND = 100  # keep adding while the total stays below it
MAX_STEPS = 9
LONG_STEPS = 7  # a problem of at least this many steps is a long one
FILLER = "."
SEPARATOR = ","
MAX_FILLER = 12  # the SFT data's filler runs before the work are uniform in 0..MAX_FILLER tokens
TEST_FRACTION = 0.1
MAX_NEW_TOKENS = 48  # MAX_FILLER + 9 steps of 3 tokens (two digits and a separator) + EOS, and slack

_PROMPT = re.compile(r"^(\d+)\+(\d)\+\.\.\.=$")


@dataclass(frozen=True)
class ChainProblem:
    a: int
    b: int

    @property
    def prompt(self) -> str:
        return f"{self.a}+{self.b}+...="

    @property
    def totals(self) -> list[int]:
        """a + b, a + 2b, ... while below BOUND: the work, and its last total is the answer."""
        return list(range(self.a + self.b, BOUND, self.b))

    @property
    def steps(self) -> int:
        return len(self.totals)

    @property
    def work(self) -> str:
        return SEPARATOR.join(str(total) for total in self.totals)


def parse_prompt(prompt: str) -> ChainProblem:
    match = _PROMPT.match(prompt)
    if match is None:
        raise ValueError(f"{prompt!r} is not a chain prompt (a+b+...=)")
    return ChainProblem(int(match.group(1)), int(match.group(2)))


def answer_of(completion: str) -> int | None:
    """The completion's final answer: the number after its last separator, filler before the work ignored, or
    None when that is not a number. "..51,57" -> 57."""
    last = completion.strip().lstrip(FILLER).rsplit(SEPARATOR, 1)[-1]
    return int(last) if last.isascii() and last.isdigit() else None


def chain_reward():
    """The verifier R(x, y): 1.0 when the completion's final answer is the prompt's last total, else 0.0."""

    def chain_correctness(prompts: list[str], completions: list[str], **columns) -> list[float]:
        if len(prompts) != len(completions):
            raise ValueError(f"prompts and completions differ in length: {len(prompts)} != {len(completions)}")
        return [1.0 if answer_of(c) == parse_prompt(p).totals[-1] else 0.0
                for p, c in zip(prompts, completions, strict=True)]

    return chain_correctness


def split_of(a: int, b: int) -> str:
    digest = hashlib.sha256(f"chain:{a}:{b}".encode()).digest()
    return "test" if digest[0] < 256 * TEST_FRACTION else "train"


@functools.cache
def problems(split: str, long: bool | None = None) -> tuple[ChainProblem, ...]:
    """Every problem of a split (1 to MAX_STEPS steps, b in 2..9), or only the long (`long`) or short ones."""
    every = [ChainProblem(a, b) for b in range(2, 10) for a in range(1, BOUND - 1)
             if 1 <= ChainProblem(a, b).steps <= MAX_STEPS and split_of(a, b) == split]
    return tuple(p for p in every if long is None or (p.steps >= LONG_STEPS) == long)


def is_long(prompt: str) -> bool:
    return parse_prompt(prompt).steps >= LONG_STEPS


def sft_examples(n: int = 60_000, seed: int = 0) -> list[tuple[str, str]]:
    """(prompt, completion) demonstrations from the train split: a filler run of 0..MAX_FILLER tokens, then the
    work (every total, the last one the answer)."""
    rng = random.Random(seed)
    pool = problems("train")
    return [(p.prompt, FILLER * rng.randint(0, MAX_FILLER) + p.work) for p in (rng.choice(pool) for _ in range(n))]


@torch.no_grad()
def chain_metrics(model, tokenizer, max_new_tokens: int = MAX_NEW_TOKENS, samples: int = 4, seed: int = 0,
                  split: str = "test") -> dict[str, float]:
    """Accuracy on every problem of a split, `samples` answers each at temperature 1 under `max_new_tokens`:
    accuracy/long and accuracy/short, and over all the mean response length and the share cut off at the cap."""
    metrics, lengths, truncated = {}, [], []
    for name, long in (("long", True), ("short", False)):
        prompts = [p.prompt for p in problems(split, long)]
        generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
        rollout = sample(model, tokenizer, prompts, group_size=samples, max_new_tokens=max_new_tokens,
                         generator=generator)
        repeated = [p for p in prompts for _ in range(samples)]
        rewards = chain_reward()(repeated, rollout.completions)
        metrics[f"accuracy/{name}"] = sum(rewards) / len(rewards)
        lengths += rollout.response_lengths.tolist()
        truncated += (~rollout.ended_with_eos).tolist()
    return metrics | {"response_length": sum(lengths) / len(lengths), "truncated": sum(truncated) / len(truncated)}


def task(max_new_tokens: int = MAX_NEW_TOKENS, long_share: float = 0.5) -> Task:
    """The chain task: train prompts from the train split, a long problem with probability `long_share` and a short
    one otherwise; the verifier; the cap."""

    def train_prompts(n: int, rng: random.Random) -> list[str]:
        return [rng.choice(problems("train", rng.random() < long_share)).prompt for _ in range(n)]

    return Task(name="lab-chain", train_prompts=train_prompts, reward_fn=chain_reward(),
                evaluate=lambda model, tokenizer: chain_metrics(model, tokenizer, max_new_tokens),
                max_new_tokens=max_new_tokens)


def sft_data() -> SFTData:
    """The lab-chain model's SFT demonstrations, evaluated by `chain_metrics` with room to finish."""
    return SFTData(sft_examples(), evaluate=lambda model, tokenizer: chain_metrics(model, tokenizer, samples=1))


def long_prompts(prompts: Sequence[str]) -> list[bool]:
    return [is_long(p) for p in prompts]
