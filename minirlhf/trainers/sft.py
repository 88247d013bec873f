"""Supervised fine-tuning: the step that turns a base model into the reference policy p_ref.

    L_SFT(θ) = -E_{(x, y) ~ D} [ (1/|y|) Σ_t log p_θ(y_t | x, y_<t) ]

Only completion tokens (and their EOS) are scored: the prompt is context, not something to imitate.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from minirlhf.data import SFTData, check_example_lengths, encode_prompt_completion
from minirlhf.logprobs import response_logprobs
from minirlhf.losses import masked_mean
from minirlhf.models import context_size
from minirlhf.tasks.registry import resolve_sft_data
from minirlhf.trainers.config import TrainConfig, require_accumulation_fits, require_positive, with_metavar
from minirlhf.trainers.run import Run, begin, held_out_metrics, load_policy, make_optimizer


@dataclass
class SFTConfig(TrainConfig):
    model: str = "tiny"  # SFT starts from the base model
    steps: int = 400  # deliberately short: held-out accuracy ~0.5, room for RL (see scripts/build_sft_model.py)
    lr: float = 2e-3
    batch_size: int = 64  # (prompt, completion) pairs per step
    # what the run learns from (config.json keeps it: a resume continues on it, and refuses another): a shipped name
    # (arithmetic) or a module:function / path.py:function of yours that returns an SFTData; None = arithmetic
    task: str | None = with_metavar(None, "arithmetic|module:function|path.py:function")
    # your demonstrations instead: a FILE.jsonl or a dataset name, one object per row with "prompt" and "completion"
    prompts: str | None = with_metavar(None, "FILE.jsonl|dataset-name")

    def validate(self) -> None:
        super().validate()
        require_positive(self, "batch_size")
        require_accumulation_fits(self, self.batch_size, "batch_size")


def train_sft(
    data: SFTData | Sequence[tuple[str, str]] | None = None,
    config: SFTConfig | None = None,
    model=None,
    tokenizer=None,
    callbacks=(),
):
    """Fine-tune on (prompt, completion) pairs: `SFTData` (with its held-out evaluation, e.g.
    `arithmetic.sft_data()`), a plain list of pairs (no evaluation), or None: what config.task / config.prompts
    name (`tasks.registry.resolve_sft_data`). Returns (model, tokenizer, history)."""
    config = config or SFTConfig()
    if data is None:
        data = resolve_sft_data(config)
    data = data if isinstance(data, SFTData) else SFTData(list(data))
    if len(data.examples) == 0:
        raise ValueError("SFTData.examples is empty: SFT needs at least one (prompt, completion) pair")
    runtime, config = begin(config)  # a resume held to its data, the processes, the seeds (dropout stays on in SFT)
    model, tokenizer = load_policy(config, model, tokenizer)
    check_example_lengths(tokenizer, data.examples, context_size(model), data.sources)  # all of them, before step 0
    device = next(model.parameters()).device
    rng = random.Random(config.seed)
    evaluate = (lambda: held_out_metrics(data.evaluate, model, tokenizer)) if data.evaluate else None
    run = Run(config, runtime, make_optimizer(model.parameters(), config.lr), model.parameters(), {"examples": rng},
              evaluate, callbacks, model=model)
    train_model = run.prepare(model)  # what the update runs through: DDP-wrapped under several processes
    model.train()
    for step in run.steps("sft"):
        metrics = run.evaluate(step)
        pairs = run.local([rng.choice(data.examples) for _ in range(config.batch_size)])  # this process's share
        prompts, completions = zip(*pairs)
        batch = {k: v.to(device) for k, v in encode_prompt_completion(tokenizer, prompts, completions).items()}
        for micro in run.micro_batches(torch.arange(len(pairs))):  # gradient accumulation: a forward/backward each
            piece = {k: v[micro] for k, v in batch.items()}
            with run.autocast():
                logp = response_logprobs(train_model, **piece)  # (b, T) log p_θ(y_t | x, y_<t) on completion tokens
            # L_SFT = -(1/|y|) Σ_t log p_θ(y_t | x, y_<t), the token mean over the (global) batch: the micro-batch's
            # token mean, weighted by its share of the batch's tokens
            run.backward(-masked_mean(logp, piece["response_mask"]), over=piece["response_mask"],
                         of=batch["response_mask"])
        loss, grad_norm = run.step()
        run.log(step, metrics | {"loss": float(loss), "grad_norm": grad_norm.item()})
    model.eval()
    run.finish(model, tokenizer)  # the final model
    return model, tokenizer, run.history
