"""The preference wing: what DPO, KTO and the reward model share.

The configs (`PreferenceConfig`: the pairs, the batch, epochs and the maximum length; `ImplicitRewardConfig`: β,
the reference p_ref and the sampling evaluation of the policies DPO and KTO train; `DPOConfig`), pair encoding
and the pairs' log-probs from one packed forward, the preference loss dispatch (`preference_loss`), the held-out
evaluation, and the run: `preference_start` (the pairs, with the sampling evaluation and budget a shipped set
brings; the run's start; the model; the context size and the length check; epochs -> steps), p_ref settled
(`settle_reference`: precomputed log-probs or a frozen copy), then the `PreferenceRun` (`implicit_reward_run` for
DPO and KTO): the `Run` with the data, the model and the shuffled batches (`run.batch`).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from minirlhf.data import PreferenceData, PreferencePair, check_pair_lengths, encode_preference_pairs
from minirlhf.distributed import Runtime
from minirlhf.logprobs import packed_response_logprobs, response_lengths, sequence_logprobs
from minirlhf.losses import (
    DPO_LOSS_TYPES,
    IPO_NORMALISATIONS,
    check_dpo_options,
    check_label_smoothing,
    dpo_loss,
    orpo_loss,
    pair_accuracy,
    simpo_loss,
)
from minirlhf.models import context_size, disable_dropout, frozen_copy
from minirlhf.tasks.registry import shipped_preference_data
from minirlhf.trainers.config import (
    TrainConfig,
    choice,
    require,
    require_accumulation_fits,
    require_non_negative,
    require_positive,
)
from minirlhf.trainers.run import Run, begin, held_out_metrics, load_policy, make_optimizer

REFERENCE_FREE_LOSS_TYPES = ("simpo", "orpo")  # no p_ref in the loss
KTO_ALIAS = "kto"  # DPOConfig.loss_type="kto" (`dpo --loss-type kto`): the KTO trainer, with KTOConfig's weights
PREFERENCE_LOSS_TYPES = DPO_LOSS_TYPES + REFERENCE_FREE_LOSS_TYPES + (KTO_ALIAS,)


@dataclass
class PreferenceConfig(TrainConfig):
    """What every method that learns from preference pairs shares (DPO, KTO, the reward model)."""

    model: str = "tiny"  # where training starts; for the sentiment pairs the base model plays the SFT policy
    pairs: str = "sentiment"  # preference pairs: shipped name, folder of {train,test}.jsonl, .jsonl file or hub name
    steps: int = 100  # 100 x 32 = 1.6 passes over the 2000 shipped pairs
    epochs: float | None = None  # when set, overrides steps: ceil(epochs · n_pairs / batch_size)
    # pairs per step (2 x batch_size sequences in one forward; in gradient_accumulation_steps forwards of
    # batch_size / gradient_accumulation_steps pairs each)
    batch_size: int = 32
    max_length: int | None = None  # tokens per sequence (completions are cut); None = the model's context size
    eval_every: int = 25

    def validate(self) -> None:
        super().validate()
        require_positive(self, "batch_size")
        require_accumulation_fits(self, self.batch_size, "batch_size")
        if self.epochs is not None:
            require_positive(self, "epochs")
        if self.max_length is not None:
            require_positive(self, "max_length")


@dataclass
class ImplicitRewardConfig(PreferenceConfig):
    """What DPO and KTO share: a policy p_θ whose implicit reward β log p_θ/p_ref learns the preferences, its
    reference p_ref, and the sampling evaluation of a pair set that brings one."""

    lr: float = 5e-4
    # β: strength of the implicit KL leash (larger = stay closer to p_ref). Measured on the sentiment task with these
    # defaults: β = 0.5 took held-out sentiment 0.09 -> 0.90 at KL 11 nats; the paper's β = 0.1 reached 0.83 only
    # at KL 24 (lr 5e-4, 50 steps), or 0.79 at KL 15 (lr 1e-4, 200 steps).
    beta: float = 0.5
    precompute_ref: bool = False  # compute log p_ref once before training and never hold p_ref in memory
    eval_prompts: int = 100  # held-out openings sampled at each evaluation (0 = no sampling evaluation)
    eval_samples: int = 4  # continuations per held-out opening
    max_new_tokens: int | None = None  # continuation budget of the sampling evaluation; None = the pair set's own

    def validate(self) -> None:
        super().validate()
        require_positive(self, "beta", "eval_samples")  # β finite: the losses' own checks let inf through
        require_non_negative(self, "eval_prompts")
        if self.max_new_tokens is not None:
            require_positive(self, "max_new_tokens")


@dataclass
class DPOConfig(ImplicitRewardConfig):
    # "sigmoid" (DPO), "ipo", "hinge"; "simpo", "orpo" (no p_ref); "kto": the KTO trainer (`python -m minirlhf kto`)
    loss_type: str = choice("sigmoid", PREFERENCE_LOSS_TYPES)
    label_smoothing: float = 0.0  # assumed fraction of flipped labels (conservative DPO), sigmoid only
    # IPO's log-ratios: "sum" over the answer's tokens (the paper's), or "mean" per token (TRL's loss_type="ipo")
    ipo_normalisation: str = choice("sum", IPO_NORMALISATIONS)
    # α: adds α x the chosen answers' NLL per token to sigmoid/ipo/hinge (RPO; keeps log p_θ(y_w|x) from falling)
    rpo_alpha: float = 0.0
    gamma: float = 0.5  # SimPO's target margin γ between the length-normalised rewards
    orpo_lambda: float = 0.1  # ORPO's weight λ of the odds-ratio term on top of the SFT loss

    def validate(self) -> None:
        super().validate()
        require(self, check_label_smoothing, "label_smoothing", "loss_type")
        if self.loss_type in DPO_LOSS_TYPES:
            require(self, check_dpo_options, "beta", "loss_type", "label_smoothing", "ipo_normalisation", "rpo_alpha")
        else:  # simpo / orpo / kto: the losses check β themselves
            for name, off in (("ipo_normalisation", "sum"), ("rpo_alpha", 0.0)):
                if getattr(self, name) != off:
                    raise ValueError(f"DPOConfig.{name}: {getattr(self, name)!r} applies to loss_type "
                                     f"{'|'.join(DPO_LOSS_TYPES)} only, not {self.loss_type!r}")
        require_non_negative(self, "gamma", "orpo_lambda", "rpo_alpha")
        if self.precompute_ref and self.loss_type in REFERENCE_FREE_LOSS_TYPES:
            raise ValueError(f"DPOConfig.precompute_ref: loss_type={self.loss_type!r} has no p_ref to precompute")


def encode_pairs(tokenizer, pairs: list[PreferencePair], max_length: int | None, device) -> dict[str, torch.Tensor]:
    """The 2B sequences [chosen; rejected] of B pairs as one batch on `device` (`data.encode_preference_pairs`):
    encoded once per step, read by both p_θ and p_ref."""
    return {k: v.to(device) for k, v in encode_preference_pairs(tokenizer, pairs, max_length).items()}


def pair_logps(model, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """log p(y_w|x) and log p(y_l|x), each (B,), from ONE forward over the 2B sequences of `encode_pairs`.

    The forward runs on the 2B sequences packed into rows without padding (`packed_response_logprobs`): the same
    log-probs as the padded batch, on ~45 % fewer positions."""
    logp = packed_response_logprobs(model, **batch)  # (2B, T) log p(y_t | x, y_<t) on completion tokens (EOS incl.)
    seq = sequence_logprobs(logp, batch["response_mask"])  # (2B,) Σ_t
    B = len(seq) // 2
    return seq[:B], seq[B:]


def pair_rows(encoded: dict[str, torch.Tensor], pairs: torch.Tensor) -> dict[str, torch.Tensor]:
    """The 2b sequences [chosen; rejected] of the b pairs at positions `pairs` (a micro-batch) out of the 2B of
    `encode_pairs`, in the same layout."""
    B = len(encoded["input_ids"]) // 2
    rows = torch.cat([pairs, B + pairs]).to(encoded["input_ids"].device)
    return {k: v[rows] for k, v in encoded.items()}


def pair_lengths(response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """|y_w| and |y_l|, each (B,), from the (2B, T) response mask of `encode_pairs` (after truncation)."""
    lengths = response_lengths(response_mask)  # (2B,)
    B = len(lengths) // 2
    return lengths[:B], lengths[B:]


def preference_loss(
    config: ImplicitRewardConfig, chosen, rejected, ref_chosen, ref_rejected, chosen_lengths, rejected_lengths,
    all_chosen_lengths: torch.Tensor | None = None,
):
    """The pairwise loss `config.loss_type` names, from (B,) sequence log-probs and token counts (`all_chosen_lengths`:
    |y_w| of the whole batch when these B pairs are one process's share, for RPO's NLL per chosen token of the
    batch, `losses.dpo_loss`). Returns per-pair losses (B,) and the method's own rewards of y_w and y_l, (B,) each,
    detached:
        sigmoid/ipo/hinge   β log p_θ(y|x)/p_ref(y|x)      (`losses.dpo_loss`)
        simpo               (β/|y|) log p_θ(y|x)           (`losses.simpo_loss`; ref_* unused, may be None)
        orpo                log odds_θ(y|x)                (`losses.orpo_loss`; ref_* unused, may be None)
    KTO scores unpaired examples instead: see `trainers/kto.py`."""
    if config.loss_type == "simpo":
        return simpo_loss(chosen, rejected, chosen_lengths, rejected_lengths, config.beta, config.gamma)
    if config.loss_type == "orpo":
        return orpo_loss(chosen, rejected, chosen_lengths, rejected_lengths, config.orpo_lambda)
    return dpo_loss(chosen, rejected, ref_chosen, ref_rejected, config.beta, config.loss_type, config.label_smoothing,
                    chosen_lengths=chosen_lengths, rejected_lengths=rejected_lengths,
                    ipo_normalisation=config.ipo_normalisation, rpo_alpha=config.rpo_alpha,
                    all_chosen_lengths=all_chosen_lengths)


@torch.inference_mode()
def all_pair_logps(model, tokenizer, pairs: list[PreferencePair], max_length: int | None, batch_size: int = 256):
    """log p(y_w|x), log p(y_l|x) of every pair, (N,) each, without autograd: the precomputed p_ref, and the
    held-out evaluation of p_θ."""
    device = next(model.parameters()).device
    chosen, rejected = [], []
    for i in range(0, len(pairs), batch_size):
        c, r = pair_logps(model, encode_pairs(tokenizer, pairs[i : i + batch_size], max_length, device))
        chosen.append(c)
        rejected.append(r)
    return torch.cat(chosen), torch.cat(rejected)


def evaluate_preferences(
    model, tokenizer, ref, data: PreferenceData, test_ref, config: ImplicitRewardConfig, max_length
) -> dict:
    """eval/... metrics of p_θ (`held_out_metrics`): `evaluate_implicit_rewards` on the held-out pairs (if any) and,
    when the data has a sampling evaluation (the shipped "sentiment" pairs: VADER), its metrics on continuations
    sampled for held-out prompts, with KL(p_θ || p_ref) on them (when `ref` is in memory)."""

    metrics = {}
    if data.test:
        metrics |= held_out_metrics(evaluate_implicit_rewards, model, tokenizer, pairs=data.test,
                                    ref_chosen=test_ref[0], ref_rejected=test_ref[1], config=config,
                                    max_length=max_length)
    if data.evaluate is not None and config.eval_prompts:
        budget = {} if config.max_new_tokens is None else {"max_new_tokens": config.max_new_tokens}  # else its own
        metrics |= held_out_metrics(data.evaluate, model, tokenizer, ref_model=ref, n_prompts=config.eval_prompts,
                                    samples_per_prompt=config.eval_samples, seed=config.seed, **budget)
    return metrics


@torch.no_grad()
def evaluate_implicit_rewards(
    model, tokenizer, pairs, ref_chosen, ref_rejected, config: ImplicitRewardConfig, max_length=None
):
    """The method's reward (`preference_loss`) on held-out pairs: accuracy (chosen > rejected, a tie counts 1/2),
    margin, loss, and the mean sequence log-probs under p_θ. `ref_*` are log p_ref of the same pairs, (N,) each
    (None for simpo/orpo). KTO, whose loss needs unpaired examples, is scored with DPO's implicit reward
    β log p_θ/p_ref, the reward it learns too, and reports no held-out loss."""
    chosen, rejected = all_pair_logps(model, tokenizer, pairs, max_length)  # the same batched no-grad pass
    lengths = pair_lengths(encode_preference_pairs(tokenizer, pairs, max_length)["response_mask"].to(chosen.device))
    kto = not isinstance(config, DPOConfig)
    scored = DPOConfig(beta=config.beta) if kto else config  # KTO: DPO's sigmoid loss and implicit reward
    losses, r_chosen, r_rejected = preference_loss(scored, chosen, rejected, ref_chosen, ref_rejected, *lengths)
    return {
        **({} if kto else {"loss": losses.mean().item()}),
        "rewards/accuracy": pair_accuracy(r_chosen, r_rejected),  # a tie counts 1/2
        "rewards/margin": (r_chosen - r_rejected).mean().item(),
        "logps/chosen": chosen.mean().item(),
        "logps/rejected": rejected.mean().item(),
    }


@dataclass
class PreferenceStart:
    """What a preference run starts from (`preference_start`), before p_ref is settled and the run begins."""

    data: PreferenceData
    config: PreferenceConfig  # as the processes adjusted it
    runtime: Runtime
    model: nn.Module  # what is trained (p_θ, or the reward model), in eval mode until the loop starts
    tokenizer: Any
    rng: random.Random  # shuffles the training order
    max_length: int  # tokens per sequence: config.max_length, else the model's context size
    steps: int  # config.steps, or ceil(epochs · n_pairs / batch_size)


def preference_start(
    data: PreferenceData | list[PreferencePair] | str | None, config: PreferenceConfig,
    load: Callable[[PreferenceConfig], tuple[nn.Module, Any]], rows_per_pair: int = 1,
    check: Callable[[PreferenceData, PreferenceConfig], None] | None = None,
) -> PreferenceStart:
    """The preamble the preference trainers share: the pairs (`config.pairs` when `data` is None; a shipped set
    brings its sampling evaluation), the run's start (`run.begin`: a resume held to its data, the processes, the
    seeds), the model (`load(config)`), the context size, every pair checked against it (long completions are cut,
    with a warning), and epochs -> steps, every batch checked to share out equally over the processes
    (`rows_per_pair`: KTO draws its 2N examples, 2 x batch_size at a time). `check(data, config)`: what a method
    needs of the pairs, raised before anything is loaded or written."""
    data = shipped_preference_data(config.pairs if data is None else data)
    if check is not None:
        check(data, config)
    runtime, config = begin(config)
    rng = random.Random(config.seed)
    model, tokenizer = load(config)
    max_length = config.max_length or context_size(model)
    check_pair_lengths(tokenizer, list(data.train) + list(data.test or []), max_length)
    steps = config.steps if config.epochs is None else math.ceil(config.epochs * len(data.train) / config.batch_size)
    runtime.check_epoch(rows_per_pair * len(data.train), rows_per_pair * config.batch_size, steps,
                        f"{type(config).__name__}.batch_size" + (f" (x {rows_per_pair})" if rows_per_pair > 1 else ""))
    model.eval()
    return PreferenceStart(data, config, runtime, model, tokenizer, rng, max_length, steps)


def policy_loader(model: nn.Module | None, tokenizer) -> Callable[[PreferenceConfig], tuple[nn.Module, Any]]:
    """p_θ for DPO and KTO: the model given, or config.model, with dropout off (p_θ and p_ref must give identical
    log-probs for identical weights)."""
    def load(config: PreferenceConfig) -> tuple[nn.Module, Any]:
        policy, policy_tokenizer = load_policy(config, model, tokenizer)
        disable_dropout(policy)
        return policy, policy_tokenizer

    return load


def settle_reference(start: PreferenceStart, precompute: Callable[[nn.Module], Any], copy: bool = True):
    """p_ref, settled before the first update, as (frozen copy or None, precomputed log-probs or None). p_ref never
    changes: with config.precompute_ref, `precompute(p_θ)` scores every training example now, while p_θ is still
    p_ref (in the run's precision, without autograd), and no copy is kept (one model in memory instead of two);
    otherwise a frozen copy scores each batch, made when `copy` (the loss or the sampled evaluation reads it)."""
    if start.config.precompute_ref:
        with torch.inference_mode(), start.runtime.autocast():
            return None, precompute(start.model)
    return (frozen_copy(start.model) if copy else None), None


class PreferenceRun(Run):
    """The run of a preference method: the `Run`, with the data, the model (and what its update runs through) and
    the shuffled batches of the epoch (`batch`; the order left is kept in checkpoints)."""

    def __init__(self, start: PreferenceStart, evaluate: Callable[[], dict[str, float]] | None, callbacks=(),
                 folder: str = "model", frozen: dict[str, nn.Module] | None = None):
        self.data, self.model, self.tokenizer = start.data, start.model, start.tokenizer
        self.rng, self.max_length, self.total_steps, self.folder = start.rng, start.max_length, start.steps, folder
        optimizer = make_optimizer(start.model.parameters(), start.config.lr)
        self.train_model = start.runtime.prepare(start.model)  # DDP-wrapped under several processes
        super().__init__(start.config, start.runtime, optimizer, start.model.parameters(), {"order": start.rng},
                         evaluate, callbacks, frozen, model=start.model)
        self.order: list[int] = self.loop_state.get("order", [])  # rows of this epoch not yet used
        self.model.train()

    def steps(self, desc: str, total: int | None = None):
        return super().steps(desc, total or self.total_steps)

    def batch(self, n: int, size: int) -> list[int]:
        """This process's share (all of it on one process) of the next `size` of the n rows, from this epoch's
        shuffled order (a fresh shuffle once it is used up)."""
        rows, self.order = next_rows(self.order, size, n, self.rng, self.runtime)
        return rows

    def log(self, step: int, metrics: dict[str, Any], **loop_state: Any) -> None:
        super().log(step, metrics, order=self.order, **loop_state)

    def finish(self) -> Path | None:
        """The final evaluation and the saved model (`Run.finish`); the model is left in eval mode."""
        self.model.eval()
        return super().finish(self.model, self.tokenizer, self.total_steps, self.folder)


def next_rows(
    order: list[int], size: int, n: int, rng: random.Random, runtime: Runtime
) -> tuple[list[int], list[int]]:
    """This process's share (`Runtime.shard`; all of it on one process) of the next `size` indices of this epoch's
    shuffled order of range(n) (a fresh shuffle once it is used up), and what is left of the order (kept in
    checkpoints, so that a resumed run draws the same batches). `Runtime.check_epoch` checks the sizes first."""
    order = order or rng.sample(range(n), n)
    return runtime.shard([order.pop() for _ in range(min(size, len(order)))]), order


def implicit_reward_run(start: PreferenceStart, ref: nn.Module | None, callbacks=()) -> PreferenceRun:
    """The run of DPO or KTO once p_ref is settled (`ref`: the frozen copy, or None): log p_ref of the held-out
    pairs (scored once: p_ref is fixed), the held-out evaluation (`evaluate_preferences`), the `PreferenceRun`."""
    test_ref = (None, None)
    if start.data.test and start.config.eval_every and getattr(start.config, "loss_type", None) \
            not in REFERENCE_FREE_LOSS_TYPES:
        test_ref = all_pair_logps(start.model, start.tokenizer, start.data.test, start.max_length)

    def evaluate() -> dict[str, float]:
        return evaluate_preferences(start.model, start.tokenizer, ref, start.data, test_ref, start.config,
                                    start.max_length)

    return PreferenceRun(start, evaluate, callbacks, frozen={"reference model": ref} if ref is not None else None)
