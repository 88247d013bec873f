"""Settings sized for real GPT-2 on one GPU: `python -m minirlhf grpo --preset t4` (flags given after it win).

"t4" fits the free Colab GPU (NVIDIA T4: 16 GB, fp16 tensor cores, no bf16, so precision "auto" picks fp16 with
loss scaling there) with the 124M-parameter `gpt2` from the hub. The batch shapes are what sets the memory; the
peak each preset measured is in the README ("GPU and Colab"). The learning rates are common starting points for
a model of this size, not tuned values.

"a100" (40 GB, bf16) and "h100" (80 GB, bf16; also an H200) give the chip enough work per kernel: the shapes of
the GPU targets (DPO 64 pairs x 256 tokens, GRPO 128 completions x 64 new tokens) and beyond. They are sized
by an estimate, not yet by a measurement: about 0.5 MB of activations per trained gpt2 token (Korthikanti et
al.'s 34·d bytes per token and layer of 16-bit activations is 0.31 MB over 12 layers; under autocast the residual
stream and layer norms stay float32, which adds to it; SDPA keeps no T x T score matrix), plus ~2 GB of float32
weights, gradients and AdamW state. So h100's DPO step trains 2 x 64 x 256 = 32k tokens (~16 GB), a100's half of
that; GRPO's training minibatches hold 128 (h100) or 64 (a100) completions of ~140 tokens. The peaks measured by
`benchmarks/gpu_session.sh` are what to trust once recorded.
"""

from __future__ import annotations

from typing import Any

GPT2_LENGTHS = {"max_new_tokens": 64}  # room for a general task; the arithmetic task itself needs 5 tokens
LONG_LENGTHS = {"max_new_tokens": 128}  # the larger GPUs: longer responses, as a reasoning task would want

PRESETS: dict[str, dict[str, dict[str, Any]]] = {
    "t4": {
        "sft": {"model": "gpt2", "batch_size": 32, "lr": 5e-5},
        "reward-model": {"model": "gpt2", "batch_size": 16, "max_length": 256, "lr": 1e-5},
        "dpo": {"model": "gpt2", "batch_size": 16, "max_length": 256, "lr": 5e-6, "beta": 0.1},
        "reinforce": {"model": "gpt2", "prompts_per_step": 16, "group_size": 8, "minibatch_size": 32, "lr": 1e-5,
                      **GPT2_LENGTHS},
        "grpo": {"model": "gpt2", "prompts_per_step": 16, "group_size": 8, "minibatch_size": 32, "lr": 1e-5,
                 "beta": 0.04, **GPT2_LENGTHS},
        "ppo": {"model": "gpt2", "prompts_per_step": 64, "group_size": 1, "minibatch_size": 16, "lr": 1e-5,
                **GPT2_LENGTHS},
    },
    "a100": {
        "sft": {"model": "gpt2", "batch_size": 64, "lr": 5e-5},
        "reward-model": {"model": "gpt2", "batch_size": 32, "max_length": 256, "lr": 1e-5},
        "dpo": {"model": "gpt2", "batch_size": 32, "max_length": 256, "lr": 5e-6, "beta": 0.1},
        "reinforce": {"model": "gpt2", "prompts_per_step": 16, "group_size": 8, "minibatch_size": 64, "lr": 1e-5,
                      **LONG_LENGTHS},
        "grpo": {"model": "gpt2", "prompts_per_step": 16, "group_size": 8, "minibatch_size": 64, "lr": 1e-5,
                 "beta": 0.04, **LONG_LENGTHS},
        "ppo": {"model": "gpt2", "prompts_per_step": 128, "group_size": 1, "minibatch_size": 32, "lr": 1e-5,
                **LONG_LENGTHS},
    },
    "h100": {
        "sft": {"model": "gpt2", "batch_size": 128, "lr": 5e-5},
        "reward-model": {"model": "gpt2", "batch_size": 64, "max_length": 256, "lr": 1e-5},
        "dpo": {"model": "gpt2", "batch_size": 64, "max_length": 256, "lr": 5e-6, "beta": 0.1},
        "reinforce": {"model": "gpt2", "prompts_per_step": 32, "group_size": 8, "minibatch_size": 128, "lr": 1e-5,
                      **LONG_LENGTHS},
        "grpo": {"model": "gpt2", "prompts_per_step": 32, "group_size": 8, "minibatch_size": 128, "lr": 1e-5,
                 "beta": 0.04, **LONG_LENGTHS},
        "ppo": {"model": "gpt2", "prompts_per_step": 256, "group_size": 1, "minibatch_size": 64, "lr": 1e-5,
                **LONG_LENGTHS},
    },
}


def preset(name: str, method: str) -> dict[str, Any]:
    """The config fields of preset `name` for `method` ("sft", "reward-model", "dpo"/"kto", "reinforce"/"rloo",
    "grpo", "ppo"), to pass as keywords to that method's config class."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    method = {"rloo": "reinforce", "kto": "dpo"}.get(method, method)  # the same shapes
    if method not in PRESETS[name]:
        raise ValueError(f"preset {name!r} has no settings for {method!r}; it has {sorted(PRESETS[name])}")
    return dict(PRESETS[name][method])
