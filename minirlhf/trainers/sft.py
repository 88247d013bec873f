"""Supervised fine-tuning: the step that turns a base model into the reference policy p_ref.

    L_SFT(θ) = -E_{(x, y) ~ D} [ (1/|y|) Σ_t log p_θ(y_t | x, y_<t) ]

Only completion tokens (and their EOS) are scored: the prompt is context, not something to imitate.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from minirlhf.data import encode_prompt_completion
from minirlhf.logprobs import response_logprobs
from minirlhf.losses import masked_mean
from minirlhf.models import load_model
from minirlhf.trainers.common import TrainConfig, make_history, progress, require_positive, save_run, set_seed


@dataclass
class SFTConfig(TrainConfig):
    model: str = "tiny"  # SFT starts from the base model
    steps: int = 400  # deliberately short: held-out accuracy ~0.5, room for RL (see scripts/build_sft_model.py)
    lr: float = 2e-3
    batch_size: int = 64  # (prompt, completion) pairs per step

    def validate(self) -> None:
        super().validate()
        require_positive(self, "batch_size")


def train_sft(
    examples: list[tuple[str, str]],
    config: SFTConfig | None = None,
    evaluate=None,
    model=None,
    tokenizer=None,
    callbacks=(),
):
    """Fine-tune on (prompt, completion) pairs. Returns (model, tokenizer, history).

    `evaluate(model, tokenizer) -> dict` runs every `eval_every` steps (e.g. held-out accuracy).
    """
    config = config or SFTConfig()
    if len(examples) == 0:
        raise ValueError("examples is empty: SFT needs at least one (prompt, completion) pair")
    set_seed(config.seed)
    if model is None:
        model, tokenizer = load_model(config.model, device=config.device)
    device = next(model.parameters()).device
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    history = make_history(config, callbacks)
    rng = random.Random(config.seed)
    model.train()
    for step in progress(range(config.steps), config.progress, "sft"):
        metrics = _evaluate(evaluate, model, tokenizer) if step % config.eval_every == 0 else {}
        prompts, completions = zip(*(rng.choice(examples) for _ in range(config.batch_size)))
        batch = {k: v.to(device) for k, v in encode_prompt_completion(tokenizer, prompts, completions).items()}
        logp = response_logprobs(model, **batch)  # (B, T) log p_θ(y_t | x, y_<t) on completion tokens
        loss = -masked_mean(logp, batch["response_mask"])  # token-mean negative log-likelihood
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        history.log(step, loss=loss.item(), grad_norm=grad_norm.item(), **metrics)
    history.log(config.steps, **_evaluate(evaluate, model, tokenizer))  # the final model
    model.eval()
    save_run(model, tokenizer, config, history)
    return model, tokenizer, history


def _evaluate(evaluate, model, tokenizer) -> dict[str, float]:
    if evaluate is None:
        return {}
    model.eval()
    metrics = {f"eval/{k}": v for k, v in evaluate(model, tokenizer).items()}
    model.train()
    return metrics
