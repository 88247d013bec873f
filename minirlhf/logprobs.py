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
"""

from __future__ import annotations

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn


def position_ids_from_mask(attention_mask: torch.Tensor) -> torch.Tensor:
    """(B, T) positions 0, 1, 2, ... counted over real tokens; padding gets position 0 (it is never attended)."""
    return (attention_mask.long().cumsum(-1) - 1).clamp(min=0)


def autocast_context(device: torch.device, dtype: torch.dtype | None):
    """bf16/fp16 autocast on CUDA when a low-precision dtype is asked for; a no-op otherwise."""
    if device.type == "cuda" and dtype in (torch.bfloat16, torch.float16):
        return torch.autocast("cuda", dtype=dtype)
    return nullcontext()


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
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """log p_θ(y_t | x, y_<t) for every response token, (B, T), zero off the response.

    With `return_entropy`, also the entropy of p_θ(· | x, y_<t) at each response token (B, T), zero elsewhere.
    """
    _check_batch(input_ids, attention_mask, response_mask)
    logits, _ = forward_logits(model, input_ids, attention_mask)  # (B, T, V)
    return logprobs_on_response(logits, input_ids, response_mask, temperature, return_entropy)


def logprobs_on_response(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    response_mask: torch.Tensor,
    temperature: float = 1.0,
    return_entropy: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """Turn full-sequence logits (B, T, V) into per-token response log-probs (B, T) (see `response_logprobs`).

    The logits at column t-1 predict the token at column t, so we score input_ids[:, 1:] with logits[:, :-1]
    and put the result back at column t.
    """
    mask = response_mask[:, 1:].bool()  # (B, T-1) which predictions we need
    logp = torch.zeros(input_ids.shape, dtype=torch.float32, device=input_ids.device)
    pred_logits = logits[:, :-1][mask]  # (N, V) only the N response positions: no work on prompts or pads
    logp[:, 1:][mask] = logprobs_from_logits(pred_logits, input_ids[:, 1:][mask], temperature)
    if not return_entropy:
        return logp
    entropy = torch.zeros_like(logp)
    with torch.no_grad():
        entropy[:, 1:][mask] = entropy_from_logits(pred_logits / temperature)
    return logp, entropy


def sequence_logprobs(logp: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """log p_θ(y | x) = Σ_t log p_θ(y_t | x, y_<t) over the response: (B, T) -> (B,)."""
    return (logp * response_mask).sum(-1)
