"""What every trainer shares: the config base, seeding, the metrics history, and checked reward calls."""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

RewardFn = Callable[..., Sequence[float]]  # reward_fn(prompts, completions, **columns) -> one float each


@dataclass
class TrainConfig:
    """Settings every method shares. Each method's config extends this one."""

    model: str = "tiny-sft"  # what p_θ (and p_ref) start from: a shipped short name, a folder or a hub name
    steps: int = 100  # optimisation steps (online methods: one batch of fresh samples per step)
    lr: float = 1e-4  # AdamW learning rate
    max_grad_norm: float = 1.0  # gradient clipping (global norm)
    seed: int = 0  # seeds python, numpy and torch (sampling included)
    device: str = "auto"  # "auto" = cuda, then mps, then cpu
    eval_every: int = 10  # held-out evaluation every N steps (and at the first and last step)
    out_dir: str | None = None  # where metrics.jsonl and the final model go; None keeps everything in memory
    progress: bool = True  # tqdm progress bar

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Reject values that cannot work, naming the field. Subclasses add their own checks."""
        require_positive(self, "steps", "lr", "eval_every")
        require_non_negative(self, "max_grad_norm")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def require_positive(config: Any, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise ValueError(f"{type(config).__name__}.{name} must be > 0, got {value!r}")


def require_non_negative(config: Any, *names: str) -> None:
    for name in names:
        value = getattr(config, name)
        if not (isinstance(value, int | float) and math.isfinite(value) and value >= 0):
            raise ValueError(f"{type(config).__name__}.{name} must be >= 0, got {value!r}")


def require_choice(config: Any, name: str, choices: Sequence[str]) -> None:
    value = getattr(config, name)
    if value not in choices:
        raise ValueError(f"{type(config).__name__}.{name} must be one of {list(choices)}, got {value!r}")


def config_fields(config_cls: type) -> list[str]:
    return [f.name for f in fields(config_cls)]


def set_seed(seed: int) -> torch.Generator:
    """Seed python, numpy and torch; return a torch generator for sampling."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


class History(list):
    """The metrics of a run: a list of dicts {"step": int, metric: float, ...}, one per logged step.

    Notebooks plot it live (pass `callbacks`); with a `path`, each row is also appended to a JSONL file as soon
    as it is logged, so a run that dies keeps every metric written so far.
    """

    def __init__(self, path: str | Path | None = None, callbacks: Sequence[Callable[[History], None]] = ()):
        super().__init__()
        self.path = Path(path) if path is not None else None
        self.callbacks = list(callbacks)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("")

    def log(self, step: int, **metrics: float) -> dict[str, Any]:
        row = {"step": step, **{k: _plain(v) for k, v in metrics.items()}}
        self.append(row)
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")
        for callback in self.callbacks:
            callback(self)
        return row

    def column(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of one metric, skipping rows that do not have it (e.g. evaluations)."""
        rows = [r for r in self if key in r]
        return [r["step"] for r in rows], [r[key] for r in rows]

    def last(self, key: str, default: float | None = None) -> float | None:
        _, values = self.column(key)
        return values[-1] if values else default


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def call_reward(reward_fn: RewardFn, prompts: list[str], completions: list[str], **columns: Any) -> torch.Tensor:
    """R(x, y) for a batch, checked: one finite float per completion, or a ValueError naming the function."""
    name = getattr(reward_fn, "__name__", type(reward_fn).__name__)
    rewards = reward_fn(prompts, completions, **columns)
    if rewards is None:
        raise ValueError(f"reward function {name} returned None instead of a list of {len(completions)} floats")
    rewards = list(rewards.tolist() if isinstance(rewards, torch.Tensor | np.ndarray) else rewards)
    if len(rewards) != len(completions):
        raise ValueError(f"reward function {name} returned {len(rewards)} rewards for {len(completions)} completions")
    for i, r in enumerate(rewards):
        if r is None or not isinstance(r, int | float) or not math.isfinite(r):
            raise ValueError(
                f"reward function {name} returned {r!r} for completion {i} ({completions[i]!r}); "
                "every reward must be a finite number"
            )
    return torch.tensor(rewards, dtype=torch.float32)


def progress(iterable, enabled: bool, desc: str):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, dynamic_ncols=True)


def save_run(model, tokenizer, config: TrainConfig, history: History) -> Path | None:
    """Write the final model (safetensors) and config to config.out_dir; metrics are already in metrics.jsonl."""
    if config.out_dir is None:
        return None
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out / "model", safe_serialization=True)
    tokenizer.save_pretrained(out / "model")
    (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
    return out


def make_history(config: TrainConfig, callbacks: Sequence[Callable[[History], None]] = ()) -> History:
    path = Path(config.out_dir) / "metrics.jsonl" if config.out_dir else None
    return History(path, callbacks)
