"""Settings sized for real GPT-2 on one GPU: `python -m minirlhf grpo --preset t4` (flags given after it win).

"t4" fits the free Colab GPU (NVIDIA T4: 16 GB, fp16 tensor cores, no bf16, so precision "auto" picks fp16 with
loss scaling there) with the 124M-parameter `gpt2` from the hub. The batch shapes are what sets the memory; the
peak each preset measured is in the README ("GPU and Colab"). The learning rates are common starting points for
a model of this size, not tuned values.
"""

from __future__ import annotations

from typing import Any

GPT2_LENGTHS = {"max_new_tokens": 64}  # room for a general task; the arithmetic task itself needs 5 tokens

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
}


def preset(name: str, method: str) -> dict[str, Any]:
    """The config fields of preset `name` for `method` ("sft", "reward-model", "dpo", "reinforce"/"rloo", "grpo",
    "ppo"), to pass as keywords to that method's config class."""
    if name not in PRESETS:
        raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
    method = "reinforce" if method == "rloo" else method
    if method not in PRESETS[name]:
        raise ValueError(f"preset {name!r} has no settings for {method!r}; it has {sorted(PRESETS[name])}")
    return dict(PRESETS[name][method])
