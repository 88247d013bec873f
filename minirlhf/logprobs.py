"""Per-token log-probabilities of responses: the one forward pass every method shares.

Layout of a batch (the same for sampling, RL and DPO):

    input_ids       (B, T)  prompt tokens then response tokens; padding anywhere (left or right)
    attention_mask  (B, T)  1 on real tokens, 0 on padding
    response_mask   (B, T)  1 on the response tokens y_1..y_n whose log-probs we want, 0 elsewhere

Output: logp (B, T) with logp[b, t] = log p_θ(input_ids[b, t] | input_ids[b, :t]) where response_mask is 1,
and exactly 0 elsewhere. Two details make padding invisible:
- GPT-2 has absolute position embeddings, so positions are counted over real tokens only
  (position_ids = cumsum(attention_mask) - 1): a left-padded prompt sees the same positions as an unpadded one.
- The log-softmax is always taken in float32, also when the forward runs in bf16/fp16.

Three things keep the forward cheap: the LM head (d -> V) and the log-softmax run only at the positions that predict
a response token (`logits_to_keep`); `packed_response_logprobs` takes the padding out of a batch altogether; and
`response_logprobs(..., prompt_length=P)` runs a prompt that several rows share (a GRPO group) once, not G times.
"""

from __future__ import annotations

import inspect
from functools import cache

import torch
import torch.nn.functional as F
import transformers
from packaging.version import Version
from torch import nn


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) positions 0, 1, 2, ... counted over real tokens; padding gets position 0 (it is never attended)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def logprobs_from_logits(logits: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0) -> torch.Tensor:
    """log softmax(logits / temperature)[target], in float32. logits (..., V), targets (...) -> (...)."""
    logits = logits.float()
    if temperature != 1.0:
        logits = logits / temperature
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """H(p) = -Σ_v p_v log p_v per position, in float32. (..., V) -> (...)."""
    logp = F.log_softmax(logits.float(), dim=-1)
    return -(logp.exp() * logp).sum(-1)


def _check_batch(input_ids: torch.Tensor, attention_mask: torch.Tensor, response_mask: torch.Tensor) -> None:
    if input_ids.dim() != 2:
        raise ValueError(f"input_ids must be (B, T), got shape {tuple(input_ids.shape)}")
    for name, mask in (("attention_mask", attention_mask), ("response_mask", response_mask)):
        if mask.shape != input_ids.shape:
            raise ValueError(f"{name} has shape {tuple(mask.shape)} but input_ids has {tuple(input_ids.shape)}")
    if bool((response_mask.bool() & ~attention_mask.bool()).any()):
        raise ValueError("response_mask marks padding tokens (attention_mask == 0) as response tokens")
    if bool(response_mask[:, 0].bool().any()):
        raise ValueError("response_mask marks the first column: a response token needs at least one token before it")


def forward_logits(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, **kwargs
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """One forward pass with padding-proof positions. Returns logits (B, T, V) and, when asked with
    `output_hidden_states=True`, the last hidden states (B, T, d) (for a value or reward head)."""
    out = model(
        input_ids=input_ids,
        attention_mask=attention_mask,
        position_ids=position_ids_from_mask(attention_mask),
        use_cache=False,
        **kwargs,
    )
    hidden = out.hidden_states[-1] if kwargs.get("output_hidden_states") else None
    return out.logits, hidden


def response_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
    return_entropy: bool = False,
    prompt_length: int = 0,
    entropy_grad: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """log p_θ(y_t | x, y_<t) for every response token, (B, T), zero off the response.

    With `return_entropy`, also the entropy of p_θ(· | x, y_<t) at each response token (B, T), zero elsewhere:
    a measurement without a gradient, unless `entropy_grad` (an entropy bonus in the loss).
    With `prompt_length=P` (the layout of `sampling.Rollout`: prompts in columns [0, P), left-padded), rows whose
    prompts are identical share one forward pass of it (`_shared_prompt_forward`); the result is the same.
    """
    _check_batch(input_ids, attention_mask, response_mask)
    position_ids = position_ids_from_mask(attention_mask)
    if prompt_length > 1:
        if bool(response_mask[:, :prompt_length].bool().any()):
            raise ValueError(f"response_mask marks tokens in the prompt columns [0, {prompt_length})")
        C = prompt_length - 1  # the prompt's last token goes with the response: its logits predict y_1
        prompt = torch.cat([input_ids[:, :C], attention_mask[:, :C]], dim=1)  # (B, 2C) a prompt: its ids and mask
        distinct, prompt_of_row = torch.unique(prompt, dim=0, return_inverse=True)  # (n, 2C), (B,)
        # share when some prompt repeats (else one pass is cheaper than two) and the model keeps a KV cache
        if len(distinct) < len(input_ids) and _keeps_cache(model):
            return _shared_prompt_forward(
                model, input_ids, attention_mask, position_ids, response_mask, distinct, prompt_of_row,
                temperature, return_entropy, entropy_grad,
            )
    return _response_forward(
        model, input_ids, response_mask, temperature, return_entropy, entropy_grad,
        attention_mask=attention_mask, position_ids=position_ids,
    )


def _keeps_cache(model: nn.Module) -> bool:
    """False under gradient checkpointing in training mode, where transformers keeps no KV cache."""
    body = unwrapped(model).base_model
    return not (getattr(body, "gradient_checkpointing", False) and body.training)


def _shared_prompt_forward(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
    response_mask: torch.Tensor, distinct: torch.Tensor, prompt_of_row: torch.Tensor, temperature: float,
    return_entropy: bool, entropy_grad: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """`response_logprobs` for a batch in which rows repeat prompts (G completions of each): every distinct prompt
    runs through the model once, and its keys/values are reused by all its rows. `distinct` (n, 2C): the distinct
    prompt columns [0, C) as ids then mask; `prompt_of_row` (B,): each row's prompt among them.

        columns   [0, C)                      [C, T)            C = P - 1: the prompt's last token goes with the
        pass 1    n distinct prompts -> KV    .                 response, since its logits predict y_1
        pass 2    (KV of row b's prompt)      x_P y_1 .. y_N    all B rows, attending to the cached prompt

    The cached keys/values are indexed by row (differentiably), so the gradient of every row flows back into its
    prompt's one pass: log-probs and gradients equal the unshared forward's up to float rounding (tested). For
    GRPO's 16 prompts x 8 rows of ~5 + 4 tokens, ~850 positions run instead of ~1400.
    """
    C = distinct.shape[1] // 2
    # 1. the n distinct prompts, without the LM head: their keys/values at every layer
    keyword = cache_keyword(model)
    body = unwrapped(model).base_model
    distinct_ids, distinct_mask = distinct[:, :C], distinct[:, C:]  # (n, C) each
    out = body(
        input_ids=distinct_ids, attention_mask=distinct_mask, position_ids=position_ids_from_mask(distinct_mask),
        use_cache=True,
    )
    cache = getattr(out, keyword)
    if cache is None or cache.get_seq_length() != C:
        raise RuntimeError(f"{type(body).__name__} returned no KV cache of the {C} prompt columns to share")
    cache.reorder_cache(prompt_of_row)  # every row gets its prompt's keys/values (n -> B; index_select)
    # 2. every row's last prompt token and response, attending to its prompt through the cache
    results = _response_forward(
        model, input_ids[:, C:], response_mask[:, C:], temperature, return_entropy, entropy_grad,
        attention_mask=attention_mask, position_ids=position_ids[:, C:], **{keyword: cache},
    )  # (B, T - C) each
    if return_entropy:
        return tuple(F.pad(r, (C, 0)) for r in results)
    return F.pad(results, (C, 0))  # (B, T): the prompt columns are 0


def packed_response_logprobs(
    model: nn.Module,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    response_mask: torch.Tensor,
    width: int = 64,
) -> torch.Tensor:
    """`response_logprobs` without computing on padding: the same (B, T) log-probs (up to float rounding), from
    a forward over the B sequences packed side by side into rows of `width` tokens (wider if one sequence is).

        padded batch (B = 3, T = 6)        packed (2 rows of width 8)          x = prompt, y = response,
        . . x x y y                        x x y y x x y y   <- sequences 0, 2  . = padding
        . x x x y y                        x x x y y . . .   <- sequence 1
        . . x x y y                        0 1 2 3 0 1 2 3   position ids of row 0

    Every sequence restarts its position ids at 0. Given no attention mask, transformers reads restarting
    positions as separate sequences and builds a block-diagonal causal mask: a token attends only to the earlier
    tokens of its own sequence, so each sequence is scored exactly as if it were alone. The tail padding of a row
    is never attended by a real token. For DPO's 64 sequences of ~20 tokens: ~1300 positions instead of ~2300.
    On CUDA that mask reaches SDPA as an (R, 1, W, W) boolean mask, so PyTorch runs one of its kernels that take a
    mask (not flash attention, which takes none); a variable-length kernel would also skip the masked-out blocks.
    """
    _check_batch(input_ids, attention_mask, response_mask)
    real = attention_mask.bool()  # (B, T)
    positions = position_ids_from_mask(attention_mask)  # (B, T) 0, 1, 2, ... within each sequence
    if bool((response_mask.bool() & (positions == 0)).any()):
        raise ValueError("response_mask marks the first token of a sequence: a response token needs a token before it")
    lengths = real.sum(-1).tolist()  # (B,)
    width = max(width, *lengths)

    # 1. where each sequence goes: first-fit decreasing, longest sequences first, each into the first row with room
    row_of, start_of, free = [0] * len(lengths), [0] * len(lengths), []  # per sequence; free space per row
    for b in sorted(range(len(lengths)), key=lambda b: -lengths[b]):
        row = next((r for r, space in enumerate(free) if space >= lengths[b]), len(free))
        if row == len(free):
            free.append(width)
        row_of[b], start_of[b] = row, width - free[row]
        free[row] -= lengths[b]

    # 2. move every real token (b, t) to (row_of[b], start_of[b] + its position in sequence b)
    device = input_ids.device
    seq = torch.arange(len(lengths), device=device)[:, None].expand_as(real)[real]  # (n,) sequence of each token
    pos = positions[real]  # (n,)
    dest = (torch.tensor(row_of, device=device)[seq], torch.tensor(start_of, device=device)[seq] + pos)
    shape = (len(free), width)
    packed_ids = torch.zeros(shape, dtype=input_ids.dtype, device=device)  # padding: token 0, never attended
    packed_ids[dest] = input_ids[real]
    packed_positions = torch.zeros(shape, dtype=torch.long, device=device)  # padding restarts at 0 too
    packed_positions[dest] = pos
    packed_response = torch.zeros(shape, dtype=torch.bool, device=device)
    packed_response[dest] = response_mask.bool()[real]

    # 3. one forward on the packed rows, then every log-prob back to its (b, t)
    packed_logp = _response_forward(model, packed_ids, packed_response, position_ids=packed_positions)  # (R, W)
    logp = torch.zeros(input_ids.shape, dtype=torch.float32, device=device)  # (B, T)
    logp[real] = packed_logp[dest]
    return logp


def unwrapped(model: nn.Module) -> nn.Module:
    """The model inside its training wrappers: torch.compile keeps it in `._orig_mod`, DistributedDataParallel in
    `.module` (`Runtime.prepare` compiles the DDP wrapper, so that order)."""
    for attribute in ("_orig_mod", "module"):
        model = getattr(model, attribute, model)
    return model


def cache_keyword(model: nn.Module) -> str:
    """The KV-cache argument's name: `cache` in recent transformers 5.x, `past_key_values` before."""
    forward = unwrapped(model).forward
    return "cache" if "cache" in inspect.signature(forward).parameters else "past_key_values"


@cache
def _takes_logits_mask(model_class: type) -> bool:
    """Does `model_class.forward` accept `logits_to_keep` as a (B, T) boolean mask? transformers' causal LMs do
    (checked with 5.24); older versions only take an int or a list of columns, so they get full logits instead."""
    takes = "logits_to_keep" in inspect.signature(model_class.forward).parameters
    return takes and Version(transformers.__version__) >= Version("5.24")


def _response_forward(
    model: nn.Module, input_ids: torch.Tensor, response_mask: torch.Tensor, temperature: float = 1.0,
    return_entropy: bool = False, entropy_grad: bool = False, **forward_kwargs,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """One forward pass whose LM head (hidden d -> V logits) and log-softmax run only at the N positions that
    predict a response token: the logits at column t-1 score the token at column t. (B, T) results, as
    `logprobs_on_response`."""
    targets = response_mask[:, 1:].bool()  # (B, T-1) the response tokens, at columns 1 .. T-1
    predictors = F.pad(targets, (0, 1))  # (B, T) the columns 0 .. T-2 whose logits predict them
    if _takes_logits_mask(type(unwrapped(model))):
        logits = model(input_ids=input_ids, use_cache=False, logits_to_keep=predictors, **forward_kwargs).logits
    else:
        logits = model(input_ids=input_ids, use_cache=False, **forward_kwargs).logits[predictors]
    return _scatter_logprobs(logits, input_ids, targets, temperature, return_entropy, entropy_grad)  # logits (N, V)


def logprobs_on_response(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
    return_entropy: bool = False,
    entropy_grad: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Turn full-sequence logits (B, T, V) into per-token response log-probs (B, T) (see `response_logprobs`).

    The logits at column t-1 predict the token at column t, so we score input_ids[:, 1:] with logits[:, :-1]
    and put the result back at column t.
    """
    mask = response_mask[:, 1:].bool()  # (B, T-1) which predictions we need
    pred_logits = logits[:, :-1][mask]  # (N, V) only the N response positions: no work on prompts or pads
    return _scatter_logprobs(pred_logits, input_ids, mask, temperature, return_entropy, entropy_grad)


def _scatter_logprobs(
    pred_logits: torch.Tensor, input_ids: torch.Tensor, targets: torch.Tensor, temperature: float,
    return_entropy: bool, entropy_grad: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Log-probs (and entropies, differentiable when `entropy_grad`) of the N response tokens, put back at their
    columns of a (B, T) zero tensor. pred_logits (N, V): the predictions of the tokens input_ids[:, 1:][targets],
    in that (row-major) order."""
    logp = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    logp[:, 1:][targets] = logprobs_from_logits(pred_logits, input_ids[:, 1:][targets], temperature)
    if not return_entropy:
        return logp
    entropy = torch.zeros_like(logp)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        entropy[:, 1:][targets] = entropy_from_logits(pred_logits / temperature)
    return logp, entropy


def sequence_logprobs(logp: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """log p_θ(y | x) = Σ_t log p_θ(y_t | x, y_<t) over the response: (B, T) -> (B,)."""
    return (logp * response_mask).sum(-1)


def response_lengths(response_mask: torch.Tensor) -> torch.Tensor:
    """|y| = the number of response tokens in each row: (B, T) -> (B,), the divisor of an average log-prob."""
    return response_mask.sum(-1)
