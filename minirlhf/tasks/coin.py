"""A guess the environment judges aloud: the smallest task where the policy can see that it was wrong (lab effect (a)).

The prompt asks for a coin's side. The policy guesses and closes the call; the environment (`sampling.Tool`) flips
its own coin and answers with the side and its verdict, "!" for a right guess, "?" for a wrong one. Then the policy
writes a tail of free length and EOS: "." after a right guess, "," after a wrong one (as the coin model,
`load_model("tiny-lab-coin")`, learned in SFT):

    "H or T?"   ->   "H]"  "=H!"  "....<EOS>"           (policy, environment, policy: right, reward 1)
    "H or T?"   ->   "T]"  "=H?"  ",,,,,,,,,<EOS>"      (wrong, reward 0)

The reward is the coin: half of all guesses are right whatever the policy does, so nothing but the tail can move,
and its length never changes the reward (a free length channel). What the task adds to the lab's sums is that the
policy knows, while it writes its tail, whether it was wrong: a model that slips a digit cannot tell, as a reasoning
model can tell that a derivation went nowhere. Without that, the tails after right and wrong answers follow one law
and a group's advantages, which sum to zero, give the length no push under any normaliser (lab effect (a)).

Every flip comes from the tool's own `random.Random(seed)`, so a run is reproducible from its seed, and a resume
continues the flips where the checkpoint left them (`Tool.rng`); eval/kl_ref flips from a copy on a seed of its own
(`Tool.reseeded`), so evaluating leaves training's flips alone. The environment's tokens ("=H!") are attended by the
policy and never trained on (`Rollout.tool_mask`).
"""

from __future__ import annotations

import random
import re

import torch

from minirlhf.checks import check_count
from minirlhf.data import SFTData
from minirlhf.sampling import Tool, sample
from minirlhf.tasks import Task

PROMPT = "H or T?"
SIDES = "HT"
CALL_END, RESULT = "]", "="  # the policy closes its guess; the environment's answer starts with "="
VERDICT = {True: "!", False: "?"}  # the environment's verdict after the side: right, wrong
TAIL = {True: ".", False: ","}  # the tail's token after a right and after a wrong guess (the coin model's SFT data)
MAX_TAIL = 15  # SFT tails are uniform in 0..MAX_TAIL tokens, whatever the verdict: the length starts untied to it
MAX_NEW_TOKENS = 40  # guess, call end, the environment's 3 tokens, then up to 35 tokens of tail
EVAL_ANSWERS = 200  # answers of the held-out evaluation (there is one prompt)

_CALL = re.compile(rf"([{SIDES}])\{CALL_END}")  # a guess alone, then the call's end: the one call judged right
_ANSWER = re.compile(rf"^([{SIDES}])\{CALL_END}{RESULT}([{SIDES}])([!?])")


def _check_seed(seed: int) -> None:
    """The environment's seed is an int >= 0: random.Random would also take None (a seed from the clock: no run
    could be repeated), a string or a float, and a negative int draws its absolute value's flips."""
    check_count("seed", seed, minimum=0, why="the environment's coin flips from random.Random(seed)")


def coin_tool(seed: int) -> Tool:
    """The environment: the answer's first call is answered by a fresh flip of `random.Random(seed)` and its verdict,
    "!" only for a guess alone ("H]") that the side matches, else "?" ("=H?" after "T]", and after a call without a
    guess or with more, "HH]", "Th]", which scores 0): every verdict shown is the reward. A call after the flip, or
    after an "=" of the policy's own, is refused, so an answer gets at most one flip."""
    _check_seed(seed)
    rng = random.Random(seed)

    def flip(response: str) -> str | None:
        if RESULT in response:  # this answer already has its flip, or wrote the environment's mark itself
            return None
        side = rng.choice(SIDES)
        guess = _CALL.fullmatch(response)  # None: not a guess alone, judged wrong
        return f"{RESULT}{side}{VERDICT[guess is not None and guess.group(1) == side]}"

    return Tool(call_end=CALL_END, run=flip, reseeded=coin_tool, rng=rng)


def right_guess(completion: str) -> bool | None:
    """True for a guess the environment found right, False for a wrong one, None for an answer without a guess and
    its flip (no reward can be read)."""
    match = _ANSWER.match(completion)
    return None if match is None else match.group(1) == match.group(2)


def coin_reward(prompts: list[str], completions: list[str], **columns) -> list[float]:
    """1.0 for a right guess, else 0.0 (an answer without a guess and flip is wrong); one float per completion."""
    return [1.0 if right_guess(completion) else 0.0 for completion in completions]


def tail_length(completion: str) -> int:
    """The tail's length in characters after the environment's answer, each "." or "," one token (the whole
    completion when it holds no guess and flip)."""
    match = _ANSWER.match(completion)
    return len(completion) - (match.end() if match else 0)


def sft_examples(n: int = 20_000, seed: int = 0) -> list[tuple[str, str]]:
    """(prompt, completion) demonstrations: a uniform guess and flip, the verdict, then a tail of the verdict's
    token whose length is uniform in 0..MAX_TAIL for right and wrong alike."""
    check_count("n", n)
    _check_seed(seed)
    rng = random.Random(seed)
    examples = []
    for _ in range(n):
        guess, side = rng.choice(SIDES), rng.choice(SIDES)
        right, tail = guess == side, rng.randint(0, MAX_TAIL)
        examples.append((PROMPT, f"{guess}{CALL_END}{RESULT}{side}{VERDICT[right]}" + TAIL[right] * tail))
    return examples


@torch.no_grad()
def coin_metrics(model, tokenizer, n: int = EVAL_ANSWERS, seed: int = 0) -> dict[str, float]:
    """`n` answers at temperature 1, flips from `coin_tool(seed)`: the share right (about 0.5 for any policy that
    guesses), and the mean tail length after right and after wrong guesses (nan when there was none)."""
    check_count("n", n)
    _check_seed(seed)
    generator = torch.Generator(device=next(model.parameters()).device).manual_seed(seed)
    rollout = sample(model, tokenizer, [PROMPT], group_size=n, max_new_tokens=MAX_NEW_TOKENS, generator=generator,
                     tool=coin_tool(seed))
    verdicts = [right_guess(completion) for completion in rollout.completions]
    metrics = {"accuracy": sum(v is True for v in verdicts) / n}
    for name, right in (("right", True), ("wrong", False)):
        tails = [tail_length(c) for c, v in zip(rollout.completions, verdicts, strict=True) if v is right]
        metrics[f"tail/{name}"] = sum(tails) / len(tails) if tails else float("nan")
    return metrics


def task(seed: int = 0) -> Task:
    """The coin task: one prompt, the coin as the reward, the environment flipping from `seed`."""
    return Task(name="coin", train_prompts=lambda n, rng: [PROMPT] * n, reward_fn=coin_reward,
                evaluate=coin_metrics, max_new_tokens=MAX_NEW_TOKENS,
                tool=coin_tool(seed))


def sft_data() -> SFTData:
    """The coin model's SFT demonstrations, evaluated by `coin_metrics`."""
    return SFTData(sft_examples(), evaluate=coin_metrics)
