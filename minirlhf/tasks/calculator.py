"""Tool use, the smallest version: long sums, and a calculator the policy may call in the middle of its answer.

A prompt is a sum of two 4-5 digit numbers, "12345+67890=". The calculator model (`load_model("tiny-calculator")`)
either answers in its head, or writes a call, which the environment answers (`sampling.Tool`), and then ends its
answer there, taking the result as its own:

    "12345+67890="   ->   "80235<EOS>"                             (in its head: a tiny model rarely gets it right)
    "12345+67890="   ->   "[12345+67890]" "=80235" "<EOS>"         (policy, calculator, policy)

(The model does not copy the result into an answer of its own: at 0.9M parameters it copies a 6-digit number too
badly for the contrast to be about the tool.)

The calculator reads only what lies between the call's "[" and "]": two whole numbers of at most `MAX_DIGITS` ASCII
digits joined by "+" (`calculate`); it refuses anything else (no result is appended) and never evaluates text. Its
answer "=80235" is the environment's: attended by the policy, never trained on (the loss mask is 0 there).

The reward is a verifier in TRL's shape that reads the final answer only: 1.0 when the text after the completion's
last "=" (the whole completion when there is none) is the sum, else 0.0: the policy may stop after the calculator's
result, or go on writing digits and spoil it. With the knob ``tool=false`` the same task runs without the
calculator: a call gets no answer, and the policy must write "=" and the result itself. Every problem
belongs to one split, fixed by a hash, as in `arithmetic`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
import re
from dataclasses import dataclass

import torch

from minirlhf.data import SFTData
from minirlhf.sampling import Tool, sample
from minirlhf.tasks import Task

OPERANDS = range(1000, 100_000)  # both numbers of a sum have 4 or 5 digits
CALL_START, CALL_END, RESULT = "[", "]", "="  # one token each in the tiny tokenizer
MAX_DIGITS = 6  # the calculator adds whole numbers of at most this many digits
CALL_SHARE = 0.6  # share of the SFT demonstrations that call the calculator; the others answer in the head
TEST_FRACTION = 0.1
MAX_NEW_TOKENS = 24  # a call (13 tokens), its result (up to 7), EOS, and slack
EVAL_PROBLEMS = 200  # held-out problems of the evaluation, one sampled answer each

_CALL = re.compile(rf"([0-9]{{1,{MAX_DIGITS}}})\+([0-9]{{1,{MAX_DIGITS}}})")
_PROMPT = re.compile(r"^([0-9]+)\+([0-9]+)=$")


@dataclass(frozen=True)
class CalculatorConfig:
    """The task's knob, checked when made (a ValueError names it and its value)."""

    tool: bool = True  # the calculator answers calls; false = the same task without it (a call gets no answer)

    def __post_init__(self) -> None:
        if not isinstance(self.tool, bool):
            raise ValueError(f"CalculatorConfig.tool={self.tool!r} must be true or false")

    def options(self) -> tuple[str, ...]:
        """The knobs moved from their defaults, as NAME=VALUE strings (`--task-option`) that rebuild this config."""
        return tuple(f"{f.name}={str(getattr(self, f.name)).lower()}" for f in dataclasses.fields(self)
                     if getattr(self, f.name) != f.default)


def calculate(expression: str) -> int | None:
    """a + b for an expression "a+b" of two whole numbers of 1..MAX_DIGITS ASCII digits, else None (refused)."""
    match = _CALL.fullmatch(expression)
    return None if match is None else int(match.group(1)) + int(match.group(2))


def calculator_run(response: str) -> str | None:
    """The environment's answer to the call that closes `response` (it ends with CALL_END): "=<sum>" for the
    expression after the last CALL_START, None when there is none or the calculator refuses it."""
    start = response.rfind(CALL_START)
    result = calculate(response[start + 1 : -1]) if start >= 0 and response.endswith(CALL_END) else None
    return None if result is None else f"{RESULT}{result}"


CALCULATOR = Tool(call_end=CALL_END, run=calculator_run)


def parse_prompt(prompt: str) -> tuple[int, int]:
    match = _PROMPT.match(prompt)
    if match is None:
        raise ValueError(f"{prompt!r} is not a calculator prompt (a+b=)")
    return int(match.group(1)), int(match.group(2))


def answer_of(completion: str) -> int | None:
    """The completion's final answer: the number after its last RESULT (the whole completion when it has none), or
    None when that is not a number. "[1+2]=3" -> 3, "80235" -> 80235, "[1+2]" -> None."""
    text = completion.rsplit(RESULT, 1)[-1].strip()
    return int(text) if text.isascii() and text.isdigit() else None


def calls(completion: str) -> bool:
    """The completion writes a call: a CALL_START closed by a CALL_END."""
    start = completion.find(CALL_START)
    return start >= 0 and CALL_END in completion[start:]


def calculator_reward():
    """The verifier R(x, y): 1.0 when the completion's final answer is the sum, else 0.0."""

    def sum_correctness(prompts: list[str], completions: list[str], **columns) -> list[float]:
        if len(prompts) != len(completions):
            raise ValueError(f"prompts and completions differ in length: {len(prompts)} != {len(completions)}")
        return [1.0 if answer_of(c) == sum(parse_prompt(p)) else 0.0 for p, c in zip(prompts, completions, strict=True)]

    return sum_correctness


def split_of(a: int, b: int) -> str:
    digest = hashlib.sha256(f"calculator:{a}:{b}".encode()).digest()
    return "test" if digest[0] < 256 * TEST_FRACTION else "train"


def draw_prompts(split: str, n: int, rng: random.Random) -> list[str]:
    """`n` prompts of a split, drawn uniformly from its sums (too many to list: draws outside it are redrawn)."""
    prompts = []
    while len(prompts) < n:
        a, b = rng.choice(OPERANDS), rng.choice(OPERANDS)
        if split_of(a, b) == split:
            prompts.append(f"{a}+{b}=")
    return prompts


def sft_examples(n: int = 60_000, seed: int = 0) -> list[tuple[str, str]]:
    """(prompt, completion) demonstrations from the train split: a share CALL_SHARE calls the calculator and ends
    after its result ("[a+b]=s"), the others answer in the head ("s"). The result is in the text the model imitates
    (what it would have to write without the calculator)."""
    rng = random.Random(seed)
    examples = []
    for prompt in draw_prompts("train", n, rng):
        total = str(sum(parse_prompt(prompt)))
        call = f"{CALL_START}{prompt[:-1]}{CALL_END}{RESULT}" if rng.random() < CALL_SHARE else ""
        examples.append((prompt, call + total))
    return examples


@torch.no_grad()
def calculator_metrics(model, tokenizer, tool: bool = True, n: int = EVAL_PROBLEMS, seed: int = 0) -> dict[str, float]:
    """Held-out metrics of one sampled answer (temperature 1) to each of `n` fixed test problems, with the
    calculator (`tool`) or without: accuracy, and calls (the share of answers that write a call)."""
    prompts = draw_prompts("test", n, random.Random(seed))
    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    rollout = sample(model, tokenizer, prompts, max_new_tokens=MAX_NEW_TOKENS, generator=generator,
                     tool=CALCULATOR if tool else None)
    rewards = calculator_reward()(prompts, rollout.completions)
    return {"accuracy": sum(rewards) / n, "calls": sum(map(calls, rollout.completions)) / n}


def task(config: CalculatorConfig | None = None, **knobs) -> Task:
    """The calculator task with `config` (or its knob as a keyword: ``task(tool=False)``)."""
    if config is not None and knobs:
        raise ValueError("give either a CalculatorConfig or knobs as keywords, not both")
    config = config or CalculatorConfig(**knobs)
    return Task(
        name="calculator",
        train_prompts=lambda n, rng: draw_prompts("train", n, rng),
        reward_fn=calculator_reward(),
        evaluate=lambda model, tokenizer: calculator_metrics(model, tokenizer, config.tool),
        max_new_tokens=MAX_NEW_TOKENS,
        options=config.options(),
        tool=CALCULATOR if config.tool else None,
    )


def sft_data() -> SFTData:
    """The calculator model's SFT demonstrations, evaluated with the calculator."""
    return SFTData(sft_examples(), evaluate=lambda model, tokenizer: calculator_metrics(model, tokenizer))
