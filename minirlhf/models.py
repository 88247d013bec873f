"""Loading models: the shipped tiny GPT-2, any local `save_pretrained` folder, or a hub name.

    load_model("tiny")         -> the project's own tiny GPT-2 + byte-level BPE tokenizer, shipped in the package
    load_model("tiny-sft")     -> the same model after SFT on the tasks (the reference policy p_ref)
    load_model("tiny-lab")     -> the tiny GPT-2 with 128 positions after SFT on the lab task (minirlhf.tasks.lab)
    load_model("tiny-lab-chain") -> tiny-lab after SFT on the chain problems (minirlhf.tasks.lab_chain)
    load_model("tiny-lab-coin") -> tiny-lab taught the coin task, a guess the environment judges (lab effect (a))
    load_model("tiny-calculator") -> tiny-lab taught long sums, with or without a calculator call (tasks.calculator)
    load_model("path/to/dir")  -> any folder written by `save_pretrained`
    load_model("gpt2")         -> the real GPT-2 from the Hugging Face hub (Colab); fails fast offline

Also: the device picker, a frozen copy for p_ref, and the scalar value head that PPO puts on the policy.
"""

from __future__ import annotations

import copy
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlparse

import torch
from torch import nn
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.activations import ACT2FN, NewGELUActivation

from minirlhf.gpt2 import RANDOM_PREFIX, gpt2_tokenizer, random_gpt2


def _shipped_dir() -> Path:
    """Where the shipped models and pairs lie: `minirlhf/shipped/` in an installed wheel or sdist (setup.py maps the
    top-level data/ folder there), data/ beside the package in a checkout (editable install or PYTHONPATH)."""
    package = Path(__file__).resolve().parent
    installed = package / "shipped"
    return installed if installed.is_dir() else package.parent / "data"


DATA_DIR = _shipped_dir()
SHIPPED = {
    "tiny": DATA_DIR / "tiny-gpt2",
    "tiny-sft": DATA_DIR / "tiny-gpt2-sft",
    "tiny-lab": DATA_DIR / "tiny-gpt2-lab",  # the lab task's SFT model, 128 positions (minirlhf.tasks.lab)
    "tiny-lab-chain": DATA_DIR / "tiny-gpt2-lab-chain",  # tiny-lab after SFT on the chain problems (tasks.lab_chain)
    "tiny-lab-coin": DATA_DIR / "tiny-gpt2-lab-coin",  # tiny-lab after SFT on the coin task (lab effect (a))
    "tiny-calculator": DATA_DIR / "tiny-gpt2-calculator",  # tiny-lab after SFT on long sums, calls or none (tool use)
}


def resolve_device(device: str | torch.device = "auto") -> torch.device:
    """'auto' picks cuda, then mps, then cpu; an explicit device that is not available is an error."""
    if str(device) == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={str(device)!r} was requested but this machine has no CUDA; use 'auto' or 'cpu'")
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise ValueError(f"device={str(device)!r} was requested but MPS is not available; use 'auto' or 'cpu'")
    return device


def _resolve_source(name_or_path: str | os.PathLike) -> tuple[str, bool]:
    """(where to load from, is it local). Local folders and shipped short names need no network."""
    name = str(name_or_path)
    if name in SHIPPED:
        path = SHIPPED[name]
        if not (path / "config.json").exists():
            raise FileNotFoundError(
                f"the shipped model {name!r} is missing at {path}; rebuild it with `python scripts/build_tiny_model.py`"
            )
        return str(path), True
    folder = Path(name).expanduser()  # "~/runs/a/model" as the shell leaves it in --model=~/runs/a/model
    if folder.exists():
        if not (folder / "config.json").exists():
            raise FileNotFoundError(f"{name} exists but has no config.json: not a `save_pretrained` model folder")
        return str(folder), True
    if name.startswith((".", "/", "~")) or name.count("/") > 1:  # a path, not a hub name like "org/model"
        raise FileNotFoundError(f"model folder {name!r} does not exist (known short names: {sorted(SHIPPED)})")
    return name, False


def load_tokenizer(name_or_path: str | os.PathLike, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    """The tokenizer of `load_model`, alone. Guarantees a pad token distinct from EOS where one is defined."""
    if str(name_or_path).startswith(RANDOM_PREFIX):
        return gpt2_tokenizer()
    source, local = _resolve_source(name_or_path)
    tokenizer = _from_pretrained(AutoTokenizer, source, local, trust_remote_code)
    if len(tokenizer.get_vocab()) <= len(set(tokenizer.all_special_tokens)):  # what transformers makes of no files
        raise FileNotFoundError(f"{name_or_path} has no tokenizer files: a tokenizer of special tokens only "
                                f"({sorted(tokenizer.get_vocab())}); save one beside the model "
                                f"(tokenizer.save_pretrained)")
    if tokenizer.pad_token is None:
        # Real GPT-2 ships no pad token. Re-using EOS as pad is safe here because every mask in minirlhf is
        # built from lengths, never from `ids != pad_token_id`, so a real EOS is never masked out.
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"  # prompts are left-padded so that all responses start at one column
    return tokenizer


def load_model(
    name_or_path: str | os.PathLike = "tiny",
    device: str | torch.device = "auto",
    dtype: torch.dtype | None = None,
    trust_remote_code: bool = False,
    allow_pickle: bool = False,
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """Load (model, tokenizer) by short name ('tiny', 'tiny-sft'), local folder or hub name, or 'random:<size>'
    (e.g. 'random:gpt2', see `minirlhf.gpt2`): a GPT-2 of that size with random weights and the real tokenizer.

    Hub names are tried only when the name is not a local folder; offline this fails fast with a clear error
    instead of hanging on the network. Weights are read from safetensors, for every source (a pickled
    `pytorch_model.bin` could run code when loaded); `allow_pickle=True` lets a model that has only such a file load
    (safetensors still win where both exist). `trust_remote_code` stays off unless asked for.
    """
    tokenizer = load_tokenizer(name_or_path, trust_remote_code=trust_remote_code)
    if str(name_or_path).startswith(RANDOM_PREFIX):
        model = random_gpt2(str(name_or_path).removeprefix(RANDOM_PREFIX)).to(dtype or torch.float32)
    else:
        source, local = _resolve_source(name_or_path)
        model = _from_pretrained(
            AutoModelForCausalLM, source, local, trust_remote_code, dtype=dtype or torch.float32,
            use_safetensors=None if allow_pickle else True,  # None: safetensors if present, else the pickle
        )
    check_tokenizer(model, tokenizer, name=str(name_or_path))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    use_fused_gelu(model)
    return model.to(resolve_device(device)), tokenizer


def check_tokenizer(model: nn.Module, tokenizer: PreTrainedTokenizerBase | None, name: str = "the model") -> None:
    """A tokenizer the trainers can use with this model: present, with EOS and pad tokens, and no token id the
    model has no embedding for. Each failure is a ValueError that says what to do."""
    if tokenizer is None:
        raise ValueError(f"{name} came without its tokenizer: pass both model and tokenizer, or neither")
    if tokenizer.eos_token_id is None:
        raise ValueError("the tokenizer has no EOS token: completions could never end; set tokenizer.eos_token")
    if tokenizer.pad_token_id is None:
        raise ValueError(
            "the tokenizer has no pad token: set tokenizer.pad_token = tokenizer.eos_token (masks come from lengths, "
            "so a real EOS is never masked), or load it with minirlhf.load_tokenizer, which does that"
        )
    embeddings = model.get_input_embeddings().num_embeddings
    if embeddings < len(tokenizer):
        raise ValueError(
            f"{name} has {embeddings} token embeddings but its tokenizer has {len(tokenizer)} tokens: they were not "
            f"made for each other (load both from the same folder, or resize the embeddings after adding tokens)"
        )


def use_fused_gelu(model: nn.Module) -> nn.Module:
    """Run GPT-2's activation `gelu_new`, 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), as ONE kernel.

    transformers writes `gelu_new` as six elementwise tensor ops (each a pass over the (B, T, 4d) activations,
    each saved for backward); `gelu_pytorch_tanh` is the same formula in a single fused PyTorch kernel,
    F.gelu(x, approximate="tanh"). Same function; only float rounding differs (~1e-7 per activation). Measured
    on the shipped models: token log-probs of real text move by < 1e-5 (less than either version's own float32
    error against a float64 forward), greedy completions are unchanged, and a training step on CPU gets ~1.15x
    faster. The config is updated too, so a saved model reloads with the fused kernel.
    """
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is NewGELUActivation:
                setattr(module, name, ACT2FN["gelu_pytorch_tanh"])
    if getattr(model.config, "activation_function", None) == "gelu_new":
        model.config.activation_function = "gelu_pytorch_tanh"
    return model


_PICKLE_HINT = " as safetensors (a cached pickle, pytorch_model.bin, is loaded only with allow_pickle=True)"


def _from_pretrained(cls, source: str, local: bool, trust_remote_code: bool, **kwargs):
    if local:
        return cls.from_pretrained(source, local_files_only=True, trust_remote_code=trust_remote_code, **kwargs)
    try:  # a hub name already in the local Hugging Face cache needs no network
        return cls.from_pretrained(source, local_files_only=True, trust_remote_code=trust_remote_code, **kwargs)
    except OSError:
        pass
    require_hub(f"{source!r}", f"and the model is not in the local cache"
                f"{_PICKLE_HINT if kwargs.get('use_safetensors') else ''}. Use a local `save_pretrained` folder or "
                f"a shipped model: {sorted(SHIPPED)}")
    return cls.from_pretrained(source, trust_remote_code=trust_remote_code, **kwargs)


def hub_endpoint() -> str:
    """The Hugging Face hub this machine would download from: HF_ENDPOINT, else huggingface.co."""
    return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def require_hub(what: str, instead: str) -> None:
    """Fail in seconds, instead of a minute of retries inside huggingface_hub, when `what` must come from the hub
    and the hub is not reachable (or HF_HUB_OFFLINE is on): a ConnectionError naming the hub, then `instead` (what
    else is missing, and what to use)."""
    endpoint = hub_endpoint()
    if not hub_reachable(endpoint):
        raise ConnectionError(f"cannot load {what}: the Hugging Face hub ({endpoint}) is not reachable from this "
                              f"machine {instead}")


def hub_reachable(endpoint: str | None = None, timeout: float = 3.0) -> bool:
    """Can we open a TCP connection to the hub (`endpoint`, default `hub_endpoint()`)? A quick probe, not a guarantee
    that downloads work. Never with HF_HUB_OFFLINE on (1, true, yes or on, as huggingface_hub reads it; 0 or unset is
    off): offline mode forbids the downloads that the probe would announce."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on"):
        return False
    url = urlparse(endpoint or hub_endpoint())
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname, port), timeout=timeout):
            return True
    except OSError:
        return False


def frozen_copy(model: nn.Module) -> nn.Module:
    """A copy of `model` in eval mode with gradients off: p_ref, or p_θold when one is needed."""
    ref = copy.deepcopy(model).eval()
    ref.requires_grad_(False)
    return ref


def disable_dropout(model: nn.Module) -> nn.Module:
    """Set every dropout probability to 0. RL and DPO compare log-probs of the same tokens under p_θ, p_θold and
    p_ref: with dropout on, the first importance ratio r_t(θ) would not be 1 and the KL would be noise."""
    for module in model.modules():
        if isinstance(module, nn.Dropout):
            module.p = 0.0
    return model


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


class ValueHead(nn.Module):
    """V(s_t): one linear layer from the policy's last hidden state to a scalar per token.

    The lecture's "policy model with a scalar head": PPO's critic shares the transformer with p_θ, so the
    extra memory is one d_model-vector.
    """

    def __init__(self, hidden_size: int):
        super().__init__()
        self.summary = nn.Linear(hidden_size, 1)
        nn.init.zeros_(self.summary.weight)
        nn.init.zeros_(self.summary.bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:  # (B, T, d) -> (B, T)
        with torch.autocast(hidden_states.device.type, enabled=False):  # values/rewards in float32, also under bf16
            return self.summary(hidden_states.float()).squeeze(-1)


def context_size(model: nn.Module) -> int | None:
    """The most positions a model reads: its config's `n_positions` (GPT-2) or `max_position_embeddings` (most
    others); a reward model's is its backbone's. None when the config names neither."""
    config = getattr(model, "config", None) or getattr(getattr(model, "backbone", None), "config", None)
    return getattr(config, "n_positions", None) or getattr(config, "max_position_embeddings", None)


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """`model` in eval mode (dropout off) inside the block; its own mode, training or not, is restored after."""
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)
