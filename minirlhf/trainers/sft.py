"""Supervised fine-tuning: the step that turns a base model into the reference policy p_ref.

    L_SFT(θ) = -E_{(x, y) ~ D} [ (1/|y|) Σ_t log p_θ(y_t | x, y_<t) ]

Only completion tokens (and their EOS) are scored: the prompt is context, not something to imitate.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from minirlhf.data import encode_prompt_completion
from minirlhf.distributed import setup_runtime
from minirlhf.logprobs import response_logprobs
from minirlhf.losses import masked_mean
from minirlhf.trainers.checkpoint import Checkpointer
from minirlhf.trainers.common import (
    TrainConfig,
    held_out_metrics,
    load_policy,
    make_history,
    make_optimizer,
    optimizer_step,
    progress,
    require_positive,
    save_run,
    set_seed,
)


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
    runtime, config = setup_runtime(config)  # device, precision, this process's share (minirlhf.distributed)
    set_seed(config.seed)  # the global torch generator drives dropout (left on in SFT)
    model, tokenizer = load_policy(config, model, tokenizer)
    device = next(model.parameters()).device
    optimizer = make_optimizer(model.parameters(), config.lr)
    train_model = runtime.prepare(model)  # what the update runs through: DDP-wrapped under several processes
    rng = random.Random(config.seed)
    checkpointer = Checkpointer(config, optimizer, {"examples": rng}, runtime.scaler, model=model)
    start, logged, _ = checkpointer.resume()  # step 0 and no rows, unless config.resume
    history = make_history(config, callbacks, logged)
    model.train()
    for step in progress(range(start, config.steps), config.progress, "sft"):
        metrics = held_out_metrics(evaluate, model, tokenizer) if step % config.eval_every == 0 else {}
        pairs = runtime.shard([rng.choice(examples) for _ in range(config.batch_size)])  # this process's share
        prompts, completions = zip(*pairs)
        batch = {k: v.to(device) for k, v in encode_prompt_completion(tokenizer, prompts, completions).items()}
        with runtime.autocast():
            logp = response_logprobs(train_model, **batch)  # (B, T) log p_θ(y_t | x, y_<t) on completion tokens
        loss = -masked_mean(logp, batch["response_mask"])  # token-mean negative log-likelihood
        loss = loss * runtime.share(batch["response_mask"].sum())  # its part of the global batch's token mean
        runtime.backward(loss)
        grad_norm = optimizer_step(optimizer, model.parameters(), config.max_grad_norm, runtime.scaler)
        history.log(step, **runtime.reduce({"loss": loss.item(), "grad_norm": grad_norm.item()}), **metrics)
        checkpointer.save_if_due(step + 1, history)
    history.log(config.steps, **held_out_metrics(evaluate, model, tokenizer))  # the final model
    model.eval()
    save_run(model, tokenizer, config, history)
    return model, tokenizer, history
