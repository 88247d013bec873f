"""A reward model RM_φ(x, y) learned from preference pairs with the Bradley-Terry loss.

Bradley-Terry says a person prefers y_w to y_l with probability σ(RM(x, y_w) - RM(x, y_l)); maximum likelihood
on a dataset of pairs is

    L(φ) = -E_{(x, y_w, y_l) ~ D}[ log σ(RM_φ(x, y_w) - RM_φ(x, y_l)) ]          (losses.bradley_terry_loss)

The model itself, RM_φ (`RewardModel`: a GPT-2 transformer and a scalar head, its `save` and `load`), and the
ensembles of several (`RewardEnsemble`, `ensemble_reward`) live with the task that rewards by them,
`minirlhf.tasks.reward_models`, and are re-exported here: this module trains one. Only differences
RM(x, y_w) - RM(x, y_l) are ever trained, so the scale's zero point is arbitrary; the head starts at zero, so every
pair starts at σ(0) = 50%.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedTokenizerBase

from minirlhf.data import PreferenceData, PreferencePair, encode_preference_pairs
from minirlhf.losses import bradley_terry_loss, pair_accuracy
from minirlhf.models import context_size, eval_mode
from minirlhf.tasks.reward_models import (  # noqa: F401 - re-exported: where the reward model has always been read
    ENSEMBLE_RULES,
    HEAD_FILE,
    RewardEnsemble,
    RewardModel,
    ensemble_reward,
)
from minirlhf.trainers.preference import PreferenceConfig, PreferenceRun, preference_start
from minirlhf.trainers.run import held_out_metrics


@dataclass
class RewardModelConfig(PreferenceConfig):
    # model: the backbone; for the sentiment pairs the base model (the SFT-policy analogue)
    steps: int = 150  # 150 x 32 = 2.4 passes over the 2000 shipped pairs
    lr: float = 1e-3


def pair_scores(
    reward_model: RewardModel, tokenizer, pairs: list[PreferencePair], max_length: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """RM(x, y_w) and RM(x, y_l), each (B,), from ONE forward over the 2B concatenated sequences."""
    device = next(reward_model.parameters()).device
    batch = encode_preference_pairs(tokenizer, pairs, max_length=max_length or context_size(reward_model))
    scores = reward_model(batch["input_ids"].to(device), batch["attention_mask"].to(device))  # (2B,)
    return scores[: len(pairs)], scores[len(pairs) :]


@torch.no_grad()
def evaluate_pairs(
    reward_model: RewardModel, tokenizer, pairs: list[PreferencePair], batch_size: int = 256, max_length=None
) -> dict[str, float]:
    """Held-out pair accuracy (see `pair_accuracy`), Bradley-Terry loss and mean margin RM(y_w) - RM(y_l)."""
    chosen, rejected = [], []
    with eval_mode(reward_model):
        for i in range(0, len(pairs), batch_size):
            c, r = pair_scores(reward_model, tokenizer, pairs[i : i + batch_size], max_length)
            chosen.append(c)
            rejected.append(r)
    chosen, rejected = torch.cat(chosen), torch.cat(rejected)
    return {
        "accuracy": pair_accuracy(chosen, rejected),
        "loss": bradley_terry_loss(chosen, rejected).item(),
        "margin": (chosen - rejected).mean().item(),
    }


def train_reward_model(
    data: PreferenceData | list[PreferencePair] | str | None = None,
    config: RewardModelConfig | None = None,
    model: RewardModel | None = None,
    tokenizer=None,
    callbacks=(),
):
    """Fit RM_φ to preference pairs with the Bradley-Terry loss. Returns (reward_model, tokenizer, history).

    `data`: `PreferenceData`, a list of pairs, or a source for `data.preference_data` (its train split, and its
    test split as the held-out set); None means `config.pairs`. `model`: a `RewardModel` to start from instead of
    `config.model` with a fresh head; `tokenizer` defaults to the one it carries.
    The history logs, per step, loss / accuracy / margin on the batch and, every `eval_every` steps (and before the
    first and after the last update), `eval/accuracy` etc. on the held-out pairs. With `config.out_dir`, the model
    is saved there with `RewardModel.save` (folder `reward_model/`).
    """
    # The preamble the preference trainers share (`preference.preference_start`): the pairs, the run's start
    # (processes, seeds), the reward model (dropout on), the context size and the length check, epochs -> steps.
    # `run.batch` draws this process's share of a batch, and `run.backward(loss, over=...)` weighs the loss by it.
    def load(config: RewardModelConfig) -> tuple[RewardModel, PreTrainedTokenizerBase]:
        reward_model = model or RewardModel.from_pretrained_lm(config.model, device=config.device)
        return reward_model, tokenizer or reward_model.tokenizer

    start = preference_start(data, config or RewardModelConfig(), load)
    config, data, max_length = start.config, start.data, start.max_length

    def evaluate() -> dict[str, float]:
        return held_out_metrics(evaluate_pairs, start.model, start.tokenizer, pairs=data.test, max_length=max_length)

    run = PreferenceRun(start, evaluate if data.test else None, callbacks, folder="reward_model")
    for step in run.steps("reward model"):
        metrics = run.evaluate(step)
        batch = [data.train[i] for i in run.batch(len(data.train), config.batch_size)]  # this process's share
        scores = []  # RM(x, y_w), RM(x, y_l) of each micro-batch, for the logs
        for micro in run.micro_batches(batch):  # gradient accumulation: one forward and backward each
            with run.autocast():
                chosen, rejected = pair_scores(run.train_model, run.tokenizer, micro, max_length)  # (b,), (b,) fp32
            loss = bradley_terry_loss(chosen, rejected)  # -mean log σ(RM(y_w) - RM(y_l))
            run.backward(loss, over=len(micro), of=len(batch))  # a mean over this process's pairs
            scores.append((chosen.detach(), rejected.detach()))
        loss, grad_norm = run.step()
        chosen, rejected = (torch.cat(column) for column in zip(*scores))  # (B,) each
        metrics |= {
            "loss": float(loss),
            "accuracy": pair_accuracy(chosen, rejected),
            "margin": (chosen - rejected).mean().item(),
            "grad_norm": grad_norm.item(),
        }
        run.log(step, metrics)
    run.finish()  # the held-out metrics of the final model, saved as a RewardModel (folder reward_model/)
    return run.model, run.tokenizer, run.history
