"""Sampling G completions per prompt, with the masks and log-probs that the training step needs.

    rollout = sample(model, tokenizer, prompts, group_size=G, max_new_tokens=8, temperature=1.0)

Completions of prompt i are rows i*G ... i*G + G-1 (consecutive groups, as `grpo_advantages` expects).
The returned batch uses the layout of `minirlhf.logprobs`: left-padded prompts in columns [0, P), responses
in columns [P, P + max_new_tokens). Everything after a completion's first EOS is masked out of
`response_mask`; the EOS itself is kept, so "stop here" is an action that gets credit and blame too.

`logprobs` are the sampling-time log-probs log p_θold(y_t | x, y_<t) of the *temperature-scaled*
distribution, before top-k/top-p filtering: the same numbers `response_logprobs(..., temperature)` recomputes,
so the first PPO/GRPO ratio is exactly 1. (With top-k/top-p the tokens come from the truncated distribution;
the log-probs stay those of the full one, as TRL and most libraries do.) `sampler_logprobs` are the log-probs of
the distribution each token was actually drawn from, the sampler μ: filtered and renormalised, in the precision
sampling ran in (equal to `logprobs` without top-k/top-p; see minirlhf.losses.importance for what μ ≠ p_θold does).

With a `Tool` the environment takes part in the answer: when a row samples the tool's closing token, the tool reads
the response so far and its text is appended, token by token, before the policy samples again:

    prompt "12345+67890="   policy "[12345+67890]"   tool "=80235"   policy "<EOS>"

The appended tokens are context, not actions: attended (`attention_mask` 1) but off `response_mask`, with log-prob 0
(`Rollout.tool_mask` marks them), so no loss ever puts a gradient on them or counts them in a ratio.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedTokenizerBase

from minirlhf.checks import check_choice, check_count, check_interval, check_positive
from minirlhf.cuda_graphs import StaticDecoder, supports_static_decoding
from minirlhf.logprobs import cache_keyword, logprobs_from_logits, position_ids_from_mask
from minirlhf.models import context_size, eval_mode

DECODERS = ("auto", "dynamic", "static", "graph")


@dataclass
class Rollout:
    prompts: list[str]  # (B,) the prompt of each row (repeated G times)
    completions: list[str]  # (B,) decoded responses, EOS and padding removed
    input_ids: torch.Tensor  # (B, P + N) prompt + response ids
    attention_mask: torch.Tensor  # (B, P + N) 1 on every real token: prompt, response, tool results
    response_mask: torch.Tensor  # (B, P + N) 1 on the policy's response tokens up to and including EOS
    logprobs: torch.Tensor  # (B, P + N) sampling-time log p_θold(y_t | ...), zero off the response
    prompt_length: int  # P: responses start at this column
    ended_with_eos: torch.Tensor  # (B,) bool: False means truncated at max_new_tokens
    sampler_logprobs: torch.Tensor | None = None  # (B, P + N) log μ(y_t | ...) of the drawn tokens, zero elsewhere

    @property
    def response_lengths(self) -> torch.Tensor:  # (B,) the policy's tokens
        return self.response_mask.sum(-1)

    @property
    def tool_mask(self) -> torch.Tensor:  # (B, P + N) 1 on the tokens a tool appended: attended, not the policy's
        mask = self.attention_mask - self.response_mask
        mask[:, : self.prompt_length] = 0
        return mask


@dataclass(frozen=True)
class Tool:
    """An environment the policy may call in the middle of its answer. Sampling `call_end` (one token) closes a call:
    `run` reads the row's response so far (tool results included) and returns the text to append, or None for
    nothing (a call it refuses). A tool with randomness of its own (a coin it flips) gives `reseeded`, so that an
    evaluation can sample on a stream of its own and leave training's draws untouched, and its stream as `rng`, so
    that a run's checkpoints keep the stream's state and a resume continues its draws instead of replaying them."""

    call_end: str  # the one token that closes a call
    run: Callable[[str], str | None]  # response so far -> the environment's text
    # seed -> the same environment drawing from that seed; None = `run` is a function of the response alone
    reseeded: Callable[[int], Tool] | None = None
    rng: random.Random | None = None  # the stream `run` draws from, if any: kept in a run's checkpoints

    def __post_init__(self) -> None:
        # refused here, not at the first checkpoint: a run keeps a stream by its getstate (SystemRandom has none)
        if self.rng is not None and not (isinstance(self.rng, random.Random)
                                         and not isinstance(self.rng, random.SystemRandom)):
            raise TypeError(f"Tool.rng must be a random.Random (the stream a run's checkpoints keep), got "
                            f"{type(self.rng).__name__}: draw the tool's randomness from a random.Random")


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Keep the top-k tokens and/or the smallest set whose probability reaches top_p; the rest get -inf."""
    if top_k > 0:
        kth = torch.topk(logits, min(top_k, logits.size(-1)), dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        drop_sorted = cumulative - sorted_logits.softmax(-1) >= top_p  # keep the token that crosses top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


@torch.no_grad()
def sample(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[str],
    group_size: int = 1,
    max_new_tokens: int = 16,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    batch_rows: tuple[int, int] | None = None,
    decoder: str = "auto",
    tool: Tool | None = None,
) -> Rollout:
    """Sample `group_size` completions for each prompt with a KV cache, stopping at EOS.

    `greedy=True` takes the argmax at every step (evaluation); log-probs are still reported at `temperature`.
    `batch_rows=(first, total)`: these completions are rows first.. of a batch of `total` that several processes
    sample with identical generators (`minirlhf.distributed`). Each process draws the noise of all `total` rows
    and uses its own, and keeps drawing until every process is done, so it samples exactly the tokens that one
    process sampling the whole batch would.
    `decoder` says how the one-token steps run: "dynamic" with transformers' growing KV cache (the code below);
    "static" over a preallocated cache, "graph" the same replayed as a CUDA graph (`minirlhf.cuda_graphs`);
    "auto" is "graph" for a model on CUDA with SDPA attention and "dynamic" everywhere else.
    `tool`: a row that samples `tool.call_end` is fed the tool's text before it samples again (module docstring);
    the tool's tokens count against `max_new_tokens`.
    """
    _check_sampling_args(prompts, group_size, max_new_tokens, temperature, top_k, top_p, decoder)
    device = next(model.parameters()).device
    if decoder == "auto":
        decoder = "graph" if device.type == "cuda" and supports_static_decoding(model) else "dynamic"
    repeated = [p for p in prompts for _ in range(group_size)]
    # each prompt once (n rows): the G completions of a prompt share its forward pass and KV cache
    enc = tokenizer(prompts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)
    prompt_ids, prompt_mask = enc["input_ids"].to(device), enc["attention_mask"].to(device)  # (n, P)
    P = prompt_ids.shape[1]
    B = len(repeated)
    max_positions = context_size(model)
    if max_positions is not None and int(prompt_mask.sum(-1).max()) + max_new_tokens > max_positions:
        raise ValueError(
            f"longest prompt ({int(prompt_mask.sum(-1).max())} tokens) + max_new_tokens ({max_new_tokens}) exceeds "
            f"the model's context of {max_positions} positions; shorten the prompts or max_new_tokens"
        )
    eos_id = tokenizer.eos_token_id
    pad_id = tokenizer.pad_token_id
    generator = _generator_on(device, generator)
    keyword = cache_keyword(model)
    first, total = batch_rows or (0, B)
    rows = slice(first, first + B)
    call_end = _one_token(tokenizer, tool.call_end, "tool.call_end") if tool is not None else None
    if call_end is not None and call_end == eos_id:
        raise ValueError(f"tool.call_end={tool.call_end!r} is the EOS token: a call must leave the answer open")
    pending: list[list[int]] = [[] for _ in range(B)]  # per row, the tool's tokens still to feed

    with eval_mode(model):  # dropout off while sampling; the model's own mode is restored after
        tokens = torch.full((B, max_new_tokens), pad_id, dtype=torch.long, device=device)  # (B, N)
        token_logp = torch.zeros((B, max_new_tokens), dtype=torch.float32, device=device)  # (B, N)
        sampler_logp = torch.zeros((B, max_new_tokens), dtype=torch.float32, device=device)  # (B, N) log μ
        alive = torch.ones(B, dtype=torch.bool, device=device)  # no EOS yet
        from_tool = torch.zeros((B, max_new_tokens), dtype=torch.bool, device=device)  # (B, N) appended by the tool
        lengths = torch.zeros(B, dtype=torch.long, device=device)  # response length incl. EOS
        # First the n prompts; their KV cache and last logits are then repeated G times (row i*G + g <- prompt i).
        position_ids = position_ids_from_mask(prompt_mask)
        out = model(input_ids=prompt_ids, attention_mask=prompt_mask, position_ids=position_ids, use_cache=True)
        prompt_of_row = torch.arange(len(prompts), device=device).repeat_interleave(group_size)  # (B,)
        cache = getattr(out, keyword)
        cache.reorder_cache(prompt_of_row)
        logits = out.logits[prompt_of_row, -1].float()  # (B, V)
        prompt_ids, prompt_mask = prompt_ids[prompt_of_row], prompt_mask[prompt_of_row]  # (B, P)
        position_ids = position_ids[prompt_of_row, -1:]  # (B, 1) the last prompt position, +1 per new token
        attention_mask = prompt_mask  # (B, P), grows by one column per new token
        static = None
        if decoder != "dynamic":  # the prompt's cache moves into a preallocated one; the loop then calls static.step
            static = StaticDecoder(model, cache, attention_mask, position_ids, max_new_tokens, graph=decoder == "graph")
            cache = None
        # Then one token per step for all B rows, reusing the KV cache.
        for t in range(max_new_tokens):
            if greedy:
                next_token = logits.argmax(-1)
            else:
                filtered = filter_logits(logits / temperature, top_k, top_p)  # (B, V) μ's logits
                probs = filtered.softmax(-1)
                next_token = (probs / _exponential_noise(total, probs, generator)[rows]).argmax(-1)
            next_token = torch.where(alive, next_token, torch.full_like(next_token, pad_id))
            if tool is not None:  # (no tool: no per-row loop on the sampling hot path)
                for row in (i for i in range(B) if pending[i]):  # the tool is speaking: its token, not the policy's
                    next_token[row], from_tool[row, t] = pending[row].pop(0), True
            policy = alive & ~from_tool[:, t]
            tokens[:, t] = next_token
            token_logp[:, t] = torch.where(policy, logprobs_from_logits(logits, next_token, temperature), 0.0)
            if not greedy:  # (greedy: μ is a point mass, log μ = 0)
                sampler_logp[:, t] = torch.where(policy, logprobs_from_logits(filtered, next_token), 0.0)
            lengths += alive.long()
            alive &= next_token != eos_id
            if tool is not None:
                for row in (policy & (next_token == call_end)).nonzero().flatten().tolist():
                    pending[row] = _tool_tokens(tokenizer, tool, tokens[row, : t + 1])
            if not bool(alive.any()) or t + 1 == max_new_tokens:
                break
            if static is not None:
                logits = static.step(next_token)  # (B, V)
                continue
            # the new token is attended (even after EOS: masking it changes nothing for finished rows)
            attention_mask = torch.cat([attention_mask, torch.ones_like(attention_mask[:, :1])], dim=1)
            position_ids = position_ids + 1
            out = model(
                input_ids=next_token[:, None], attention_mask=attention_mask, position_ids=position_ids, use_cache=True,
                **{keyword: cache},
            )
            cache = getattr(out, keyword)
            logits = out.logits[:, -1].float()  # (B, V)
        if batch_rows is not None and not greedy:
            _draw_like_the_other_processes(t + 1, total, probs, generator)

    N = max_new_tokens
    real = torch.arange(N, device=device)[None, :] < lengths[:, None]  # (B, N) up to and including EOS
    response_mask = policy_token_mask(lengths, from_tool)  # (B, N) the policy's own tokens
    completions = [
        tokenizer.decode(row[: int(n)][row[: int(n)] != eos_id].tolist()) for row, n in zip(tokens, lengths)
    ]
    zeros = torch.zeros_like(prompt_mask)
    return Rollout(
        prompts=repeated,
        completions=completions,
        input_ids=torch.cat([prompt_ids, tokens], dim=1),
        attention_mask=torch.cat([prompt_mask, real.long()], dim=1),
        response_mask=torch.cat([zeros, response_mask.long()], dim=1),
        logprobs=torch.cat([zeros.float(), token_logp], dim=1),
        prompt_length=P,
        ended_with_eos=~alive,
        sampler_logprobs=torch.cat([zeros.float(), sampler_logp], dim=1),
    )


def policy_token_mask(lengths: torch.Tensor, from_tool: torch.Tensor) -> torch.Tensor:
    """(B, N) bool: the tokens the policy sampled, its actions. A row's first `lengths` tokens (EOS included, the
    tool's tokens counted) are real; of those, the ones a tool appended (`from_tool`, (B, N) bool) are context.

        m_t = 1[t < length] · (1 - tool_t)
    """
    if lengths.dim() != 1 or from_tool.dim() != 2 or lengths.shape[0] != from_tool.shape[0]:
        raise ValueError(f"lengths must be (B,) and from_tool (B, N), got shapes {tuple(lengths.shape)} and "
                         f"{tuple(from_tool.shape)}")
    real = torch.arange(from_tool.shape[-1], device=from_tool.device)[None, :] < lengths[:, None]  # (B, N)
    return real & ~from_tool.bool()


def _one_token(tokenizer: PreTrainedTokenizerBase, text: str, name: str) -> int:
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise ValueError(f"{name}={text!r} must be one token of the tokenizer, it is {len(ids)}: {ids}")
    return ids[0]


def _tool_tokens(tokenizer: PreTrainedTokenizerBase, tool: Tool, response: torch.Tensor) -> list[int]:
    """The tokens of the tool's answer to a call that closes `response` (its ids so far); [] when it refuses."""
    text = tool.run(tokenizer.decode(response.tolist()))
    if text is not None and not isinstance(text, str):
        raise TypeError(f"tool.run returned {text!r} ({type(text).__name__}): it returns the text to append, a str, "
                        "or None for nothing")
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] if text else []
    if tokenizer.eos_token_id in ids:
        raise ValueError(f"the tool answered {text!r}, which holds the EOS token: a tool cannot end the answer")
    return ids


def _exponential_noise(total: int, probs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """q ~ Exp(1), (total, V). argmax_v p_v / q_v is a draw from p (the "exponential race", Gumbel-max in another
    form), and it is exactly how torch.multinomial(p, 1) draws: the same noise gives the same tokens."""
    return torch.empty((total, probs.shape[-1]), dtype=probs.dtype, device=probs.device).exponential_(
        generator=generator
    )


def _draw_like_the_other_processes(steps: int, total: int, probs: torch.Tensor, generator) -> None:
    """Draw the noise of the steps that other processes still took after this one's rows had all ended, so that
    every process's generator stays where a single process's would be."""
    import torch.distributed as dist

    most = torch.tensor(steps, device=probs.device)
    dist.all_reduce(most, op=dist.ReduceOp.MAX)
    for _ in range(int(most) - steps):
        _exponential_noise(total, probs, generator)


def _generator_on(device: torch.device, generator: torch.Generator | None) -> torch.Generator | None:
    """torch.multinomial needs a generator on the device it samples on. A CPU generator given for a CUDA model
    seeds a CUDA one from its next draw, so runs stay reproducible from the one CPU seed."""
    if generator is None or generator.device.type == device.type:
        return generator
    seed = int(torch.randint(2**62, (1,), generator=generator))
    return torch.Generator(device).manual_seed(seed)


def _check_sampling_args(prompts, group_size, max_new_tokens, temperature, top_k, top_p, decoder) -> None:
    if isinstance(prompts, str):
        raise ValueError("prompts must be a list of strings, got a single string; wrap it in a list")
    if len(prompts) == 0:
        raise ValueError("prompts is empty: give at least one prompt")
    if any(len(p) == 0 for p in prompts):
        raise ValueError(f"prompts[{[len(p) for p in prompts].index(0)}] is an empty string")
    check_count("group_size", group_size)
    check_count("max_new_tokens", max_new_tokens)
    check_positive("temperature", temperature, why="use greedy=True for argmax")
    check_count("top_k", top_k, minimum=0, why="0 = off")
    check_interval("top_p", top_p, 0.0, 1.0, low_included=False, why="1 = off")
    check_choice("decoder", decoder, DECODERS)
