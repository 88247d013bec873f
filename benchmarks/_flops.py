"""Model FLOPs of training and sampling, counted from the tokens every forward pass reads, for tokens/s and MFU.

    counter = FlopCounter(vocab=50257, n_positions=1024)   # global hooks: every GPT-2 forward, any library
    ...                                       # train; read `counter.totals()` at each step end
    flops = model_flops(totals, model.config)

Per token that a forward reads, with N the matmul weights of the blocks (12·d² per layer) plus the LM head (V·d):

    forward  2·N + 4·L·d·k          k = the positions it attends: its own position id + 1 (causal)
    trained  3x the forward         (forward + backward, which costs twice the forward)

The first term is the usual 2 FLOPs per weight; the second is QKᵀ and attention-times-V, 2·d·k each per layer (the
PaLM appendix's attention term, counting only the keys a token can see). The LM head is counted at every token, as
MFU counts it, also where a library skips it (minirlhf runs the head only at response positions): work a library
avoids shows up as speed. A reward model has a scalar head instead: pass `lm_head=False`. Padding tokens count as
tokens (the GPU computes them) at position 0.

How it counts: global forward pre-hooks on the token embedding (an nn.Embedding of `vocab` rows: the batch's shape)
and the position embedding (`n_positions` rows) read the position ids of every forward, so left padding, packed
rows (positions restart at 0) and KV-cache decode steps (one token at position p attending p + 1 keys) are all
counted right. transformers' own positions for a call without position ids are one (1, T) row for the whole batch:
it is expanded to the batch's (B, T), and counts left padding as positions (TRL's training forwards). The sums
live on the device and grow by tensor ops, with no host sync, so the hooks also count inside a CUDA graph:
recorded once, they add at every replay.
"""

from __future__ import annotations

import torch
from torch import nn


class FlopCounter:
    """Tokens read and positions attended by every forward pass, with and without autograd (see the module doc)."""

    def __init__(self, vocab: int, n_positions: int):
        self.vocab, self.n_positions, self.batch_shape = vocab, n_positions, None
        self.sums: torch.Tensor | None = None  # (4,) trained tokens, trained keys, forward-only tokens, their keys
        self.handle = nn.modules.module.register_module_forward_pre_hook(self._hook)

    def _hook(self, module: nn.Module, args) -> None:
        if not (isinstance(module, nn.Embedding) and args):
            return
        if module.num_embeddings == self.vocab:  # the token ids come first: (B, T)
            self.batch_shape = args[0].shape
            return
        if module.num_embeddings != self.n_positions:
            return
        positions = args[0].expand(self.batch_shape)  # (B, T) position ids
        if self.sums is None:
            self.sums = torch.zeros(4, dtype=torch.int64, device=positions.device)
        i = 0 if torch.is_grad_enabled() else 2
        self.sums[i].add_(positions.numel())
        self.sums[i + 1].add_(positions.sum() + positions.numel())

    def totals(self) -> dict[str, int]:
        """The counts so far (a host sync)."""
        values = self.sums.tolist() if self.sums is not None else [0, 0, 0, 0]
        return dict(zip(("trained_tokens", "trained_keys", "forward_tokens", "forward_keys"), values))

    def close(self) -> None:
        self.handle.remove()


def model_flops(totals: dict[str, int], config, lm_head: bool = True) -> float:
    """The FLOPs of `totals` (a difference of two `FlopCounter.totals()`) for a GPT-2 `config`."""
    d, layers = config.n_embd, config.n_layer
    inner = config.n_inner or 4 * d
    n = layers * (3 * d * d + d * d + 2 * d * inner) + (config.vocab_size * d if lm_head else 0)

    def forward(tokens: int, keys: int) -> float:
        return 2.0 * n * tokens + 4.0 * layers * d * keys

    return 3 * forward(totals["trained_tokens"], totals["trained_keys"]) + forward(
        totals["forward_tokens"], totals["forward_keys"]
    )


def difference(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after}
