"""Fast decoding on a GPU: a static KV cache, and the one-token decode step replayed as a CUDA graph.

Why. After the prompt pass, `sampling.sample` runs one forward per new token for all B rows. At GPT-2 size each
of those forwards launches a few hundred small kernels from Python (12 blocks x layer norms, matmuls, attention,
activations, plus the LM head), each microseconds of GPU work: the step waits on the launches, not on the
arithmetic. A CUDA graph records the kernels of one step once and then replays them all with a single launch.

What a graph needs: every tensor the step reads or writes has a fixed address and shape. So here

    KV cache        transformers' StaticCache: (B, heads, P + N, head_dim) per layer, allocated once and written in
                    place at column `cumulative_length`, a device tensor the step itself increments
    attention mask  (B, 1, 1, P + N) booleans: the prompt's mask, then column P + t switched on before step t
    token, position (B, 1) buffers, copied into before each replay
    logits          (B, V) float32, the graph's output buffer, overwritten by the next replay

Choosing the token (temperature, top-k/top-p, the noise drawn from the generator) stays outside the graph, in
`sample`, which is the same code for both decoders: the same generator gives the same draws. Only the positions
that exist are attended (masked columns hold zeros), so a static step computes what the dynamic cache's step
computes, up to the order of float additions.

    decoder = StaticDecoder(model, cache, attention_mask, position_ids, max_new_tokens, graph=True)
    logits = decoder.step(next_token)      # (B,) -> (B, V) for the token after it

`graph=False` runs the same static step eagerly (any device): what the CPU tests compare with the dynamic cache.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from transformers import Cache, StaticCache

from minirlhf.logprobs import cache_keyword


def supports_static_decoding(model: nn.Module) -> bool:
    """The static step passes a ready (B, 1, 1, K) boolean mask, which transformers hands to the attention kernel
    as is: right for SDPA (GPT-2's default), not for the eager kernel, which adds the mask to the scores."""
    return getattr(model.config, "_attn_implementation", None) == "sdpa"


class StaticDecoder:
    """One-token decode steps over a static KV cache, eagerly or (`graph=True`, CUDA) replayed as a CUDA graph.

    Built right after the prompt pass from its cache (B rows, P columns), the (B, P) prompt mask and the (B, 1)
    position of the last prompt token; it has room for `max_new_tokens` more columns.
    """

    def __init__(
        self, model: nn.Module, prompt_cache: Cache, attention_mask: torch.Tensor, position_ids: torch.Tensor,
        max_new_tokens: int, graph: bool = False,
    ):
        if graph and attention_mask.device.type != "cuda":
            raise ValueError(f"a CUDA graph needs the model on a CUDA device, not {attention_mask.device}")
        if not supports_static_decoding(model):
            raise ValueError(
                f"static decoding needs SDPA attention; this model uses {model.config._attn_implementation!r}"
            )
        B, P = attention_mask.shape
        self.model, self.keyword, self.P, self.t = model, cache_keyword(model), P, 0
        self.cache = StaticCache(config=model.config, max_cache_len=P + max_new_tokens)
        for i, layer in enumerate(prompt_cache.layers):  # the prompt's keys/values into columns [0, P)
            self.cache.update(layer.keys, layer.values, i)
        self.mask = torch.zeros((B, 1, 1, P + max_new_tokens), dtype=torch.bool, device=attention_mask.device)
        self.mask[:, 0, 0, :P] = attention_mask.bool()
        self.tokens = torch.zeros((B, 1), dtype=torch.long, device=attention_mask.device)  # (B, 1)
        self.positions = position_ids.clone()  # (B, 1): the last prompt position, +1 per step
        self.use_graph, self.graph, self.logits = graph, None, None

    def _forward(self) -> torch.Tensor:
        out = self.model(
            input_ids=self.tokens, attention_mask=self.mask, position_ids=self.positions, use_cache=True,
            **{self.keyword: self.cache},
        )
        return out.logits[:, -1].float()  # (B, V)

    @torch.no_grad()
    def step(self, next_token: torch.Tensor) -> torch.Tensor:
        """Feed the token just chosen for every row, (B,); return the logits for the next one, (B, V). The returned
        tensor is overwritten by the next call when a graph is replayed: use it before stepping again."""
        self.tokens.copy_(next_token[:, None])
        self.positions += 1
        self.mask[:, 0, 0, self.P + self.t] = True  # the new token's column: attended from now on
        self.t += 1
        if not self.use_graph:
            return self._forward()
        if self.graph is None:
            return self._first_step_then_record()
        self.graph.replay()
        return self.logits

    def _first_step_then_record(self) -> torch.Tensor:
        """Run the first step for real on a side stream (it warms up cuBLAS and the allocator, as recording needs),
        then record the step once more as a graph. Recording runs no kernel, so the cache is not written twice; the
        recorded increment of `cumulative_length` moves the write column on at every replay."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            logits = self._forward()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        try:
            # autocast's cache of low-precision weight copies must stay off while recording: a cached copy would be
            # freed when autocast exits, and the graph would go on reading its memory
            dtype = torch.get_autocast_dtype("cuda")
            with torch.autocast("cuda", dtype=dtype, enabled=torch.is_autocast_enabled("cuda"), cache_enabled=False):
                with torch.cuda.graph(graph):
                    self.logits = self._forward()
        except RuntimeError as err:  # e.g. an op that synchronises with the host inside the step
            warnings.warn(f"recording the decode step as a CUDA graph failed ({err}); decoding without a graph",
                          stacklevel=3)
            self.use_graph = False
            return logits
        self.graph = graph
        return logits
