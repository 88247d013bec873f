"""DPO (Rafailov et al., 2023): preference learning without a reward model and without sampling.

The KL-regularised RLHF objective max E[RM(x, y)] - β KL(p_θ || p_ref) is maximised by
p*(y|x) ∝ p_ref(y|x) exp(RM(x, y) / β), so RM(x, y) = β log p*(y|x)/p_ref(y|x) + β log Z(x). Put that into
Bradley-Terry, P(y_w ≻ y_l) = σ(RM(x, y_w) - RM(x, y_l)): the β log Z(x) terms cancel, and maximum likelihood
on the pairs, with p_θ in place of p*, is

    L_DPO(θ) = -E[ log σ( β log p_θ(y_w|x)/p_ref(y_w|x) - β log p_θ(y_l|x)/p_ref(y_l|x) ) ]
                            \\_______ implicit reward of y_w _______/   \\____ of y_l ____/

Each step: ONE forward of p_θ over the 2B sequences [chosen; rejected], the sequence log-probs
log p(y|x) = Σ_t log p(y_t | x, y_<t) under p_θ and p_ref, then `losses.dpo_loss` (sigmoid = DPO, ipo, hinge).
The rest of the family reuses the loop through `preference_loss`: SimPO and ORPO need no p_ref (only the sampled
evaluation's KL reads it), and KTO, which scores unpaired examples, runs its own loop (`trainers/kto.py`).

p_ref never changes, so its log-probs can be computed once before training (`precompute_ref=True`): one model
in memory instead of two. The logged `logps/chosen` and `logps/rejected` answer the lecture's quiz on "model
collapse": does log p_θ(y_w|x) go up, or does only log p_θ(y_l|x) go down?
"""

from __future__ import annotations

import dataclasses
import math
import random
from dataclasses import dataclass

import torch

from minirlhf.data import PreferenceData, PreferencePair, check_pair_lengths, encode_preference_pairs
from minirlhf.distributed import setup_runtime
from minirlhf.logprobs import packed_response_logprobs, response_lengths, sequence_logprobs
from minirlhf.losses import (
    DPO_LOSS_TYPES,
    check_dpo_options,
    check_label_smoothing,
    dpo_loss,
    orpo_loss,
    pair_accuracy,
    simpo_loss,
)
from minirlhf.models import context_size, disable_dropout, frozen_copy
from minirlhf.tasks.registry import shipped_preference_data
from minirlhf.tasks.sentiment import MAX_NEW_TOKENS
from minirlhf.trainers.common import (
    Run,
    TrainConfig,
    choice,
    held_out_metrics,
    load_policy,
    make_optimizer,
    require,
    require_non_negative,
    require_positive,
    set_seed,
)

REFERENCE_FREE_LOSS_TYPES = ("simpo", "orpo")  # no p_ref in the loss
PREFERENCE_LOSS_TYPES = DPO_LOSS_TYPES + REFERENCE_FREE_LOSS_TYPES + ("kto",)


@dataclass
class DPOConfig(TrainConfig):
    model: str = "tiny"  # p_θ and p_ref start here; for the sentiment task the base model plays the SFT policy
    pairs: str = "sentiment"  # preference pairs: shipped name, folder of {train,test}.jsonl, .jsonl file or hub name
    steps: int = 100  # 100 x 32 = 1.6 passes over the 2000 shipped pairs
    epochs: float | None = None  # when set, overrides steps: ceil(epochs · n_pairs / batch_size)
    lr: float = 5e-4
    batch_size: int = 32  # pairs per step (2 x batch_size sequences in one forward)
    # β: strength of the implicit KL leash (larger = stay closer to p_ref). Measured on the sentiment task with these
    # defaults: β = 0.5 took held-out sentiment 0.09 -> 0.90 at KL 11 nats; the paper's β = 0.1 reached 0.83 only
    # at KL 24 (lr 5e-4, 50 steps), or 0.79 at KL 15 (lr 1e-4, 200 steps).
    beta: float = 0.5
    # "sigmoid" (DPO), "ipo", "hinge"; "simpo", "orpo" (no p_ref); "kto" (unpaired examples); β serves all but orpo
    loss_type: str = choice("sigmoid", PREFERENCE_LOSS_TYPES)
    label_smoothing: float = 0.0  # assumed fraction of flipped labels (conservative DPO), sigmoid only
    gamma: float = 0.5  # SimPO's target margin γ between the length-normalised rewards
    orpo_lambda: float = 0.1  # ORPO's weight λ of the odds-ratio term on top of the SFT loss
    kto_desirable_weight: float = 1.0  # KTO's λ_D
    kto_undesirable_weight: float = 1.0  # KTO's λ_U
    precompute_ref: bool = False  # compute log p_ref once before training and never hold p_ref in memory
    max_length: int | None = None  # tokens per sequence (completions are cut); None = the model's context size
    eval_every: int = 25
    eval_prompts: int = 100  # held-out openings sampled at each evaluation (0 = no sampling evaluation)
    eval_samples: int = 4  # continuations per held-out opening
    max_new_tokens: int = MAX_NEW_TOKENS  # continuation budget of the sampling evaluation

    def validate(self) -> None:
        super().validate()
        require_positive(self, "batch_size", "eval_samples", "max_new_tokens")
        require_non_negative(self, "eval_prompts")
        require(self, check_label_smoothing, "label_smoothing", "loss_type")
        if self.loss_type in DPO_LOSS_TYPES:
            require(self, check_dpo_options, "beta", "loss_type", "label_smoothing")
        else:  # simpo / orpo / kto: the losses check β themselves
            require_positive(self, "beta")
        require_non_negative(self, "gamma", "orpo_lambda")
        require_positive(self, "kto_desirable_weight", "kto_undesirable_weight")
        if self.precompute_ref and self.loss_type in REFERENCE_FREE_LOSS_TYPES:
            raise ValueError(f"DPOConfig.precompute_ref: loss_type={self.loss_type!r} has no p_ref to precompute")
        if self.epochs is not None:
            require_positive(self, "epochs")
        if self.max_length is not None:
            require_positive(self, "max_length")


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


def pair_lengths(response_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """|y_w| and |y_l|, each (B,), from the (2B, T) response mask of `encode_pairs` (after truncation)."""
    lengths = response_lengths(response_mask)  # (2B,)
    B = len(lengths) // 2
    return lengths[:B], lengths[B:]


def preference_loss(config: DPOConfig, chosen, rejected, ref_chosen, ref_rejected, chosen_lengths, rejected_lengths):
    """The pairwise loss `config.loss_type` names, from (B,) sequence log-probs and token counts. Returns per-pair
    losses (B,) and the method's own rewards of y_w and y_l, (B,) each, detached:
        sigmoid/ipo/hinge   β log p_θ(y|x)/p_ref(y|x)      (`losses.dpo_loss`)
        simpo               (β/|y|) log p_θ(y|x)           (`losses.simpo_loss`; ref_* unused, may be None)
        orpo                log odds_θ(y|x)                (`losses.orpo_loss`; ref_* unused, may be None)
    KTO scores unpaired examples instead: see `trainers/kto.py`."""
    if config.loss_type == "simpo":
        return simpo_loss(chosen, rejected, chosen_lengths, rejected_lengths, config.beta, config.gamma)
    if config.loss_type == "orpo":
        return orpo_loss(chosen, rejected, chosen_lengths, rejected_lengths, config.orpo_lambda)
    if config.loss_type == "kto":
        raise ValueError("preference_loss: loss_type='kto' scores unpaired examples (minirlhf.trainers.kto)")
    return dpo_loss(chosen, rejected, ref_chosen, ref_rejected, config.beta, config.loss_type, config.label_smoothing)


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


def evaluate_preferences(model, tokenizer, ref, data: PreferenceData, test_ref, config: DPOConfig, max_length) -> dict:
    """eval/... metrics of p_θ (`held_out_metrics`): `evaluate_implicit_rewards` on the held-out pairs (if any) and,
    when the data has a sampling evaluation (the shipped "sentiment" pairs: VADER), its metrics on continuations
    sampled for held-out prompts, with KL(p_θ || p_ref) on them (when `ref` is in memory)."""

    def evaluate(model, tokenizer) -> dict[str, float]:
        metrics = {}
        if data.test:
            metrics |= evaluate_implicit_rewards(model, tokenizer, data.test, *test_ref, config, max_length)
        if data.evaluate is not None and config.eval_prompts:
            metrics |= data.evaluate(
                model, tokenizer, ref_model=ref, n_prompts=config.eval_prompts,
                samples_per_prompt=config.eval_samples, seed=config.seed, max_new_tokens=config.max_new_tokens,
            )
        return metrics

    return held_out_metrics(evaluate, model, tokenizer)


@torch.no_grad()
def evaluate_implicit_rewards(model, tokenizer, pairs, ref_chosen, ref_rejected, config: DPOConfig, max_length=None):
    """The method's reward (`preference_loss`) on held-out pairs: accuracy (chosen > rejected, a tie counts 1/2),
    margin, loss, and the mean sequence log-probs under p_θ. `ref_*` are log p_ref of the same pairs, (N,) each
    (None for simpo/orpo). KTO, whose loss needs unpaired examples, is scored with DPO's implicit reward
    β log p_θ/p_ref, the reward it learns too, and reports no held-out loss."""
    chosen, rejected = all_pair_logps(model, tokenizer, pairs, max_length)  # the same batched no-grad pass
    lengths = pair_lengths(encode_preference_pairs(tokenizer, pairs, max_length)["response_mask"].to(chosen.device))
    kto = config.loss_type == "kto"
    scored = dataclasses.replace(config, loss_type="sigmoid", label_smoothing=0.0) if kto else config
    losses, r_chosen, r_rejected = preference_loss(scored, chosen, rejected, ref_chosen, ref_rejected, *lengths)
    return {
        **({} if kto else {"loss": losses.mean().item()}),
        "rewards/accuracy": pair_accuracy(r_chosen, r_rejected),  # a tie counts 1/2
        "rewards/margin": (r_chosen - r_rejected).mean().item(),
        "logps/chosen": chosen.mean().item(),
        "logps/rejected": rejected.mean().item(),
    }


def train_dpo(
    data: PreferenceData | list[PreferencePair] | str | None = None,
    config: DPOConfig | None = None,
    model=None,
    tokenizer=None,
    callbacks=(),
):
    """Train p_θ with DPO (or the `config.loss_type` of the family) on preference pairs.
    Returns (model, tokenizer, history). `loss_type="kto"` is `trainers.kto.train_kto`'s (unpaired examples).

        model, tokenizer, history = train_dpo("sentiment", DPOConfig(steps=100))

    `data`: `PreferenceData`, a list of pairs, or a source for `data.preference_data` (its train split, and its
    test split as the held-out set); None means `config.pairs`.
    `model`/`tokenizer`: start from this policy instead of loading `config.model`; p_ref is a frozen copy of it.

    Logged every step: loss, rewards/{accuracy, margin, chosen, rejected} (implicit rewards β log p_θ/p_ref on
    the batch), logps/{chosen, rejected} (sequence log-probs under p_θ), grad_norm. Every `eval_every` steps, and
    after the last one: eval/... implicit-reward metrics on the held-out pairs and, when the data has a sampling
    evaluation (the shipped "sentiment" pairs: eval/sentiment, VADER, the ground truth), its metrics on
    continuations sampled for held-out prompts, with eval/kl = KL(p_θ || p_ref) on those samples (not with
    `precompute_ref`, where p_ref is no longer in memory).
    """
    config = config or DPOConfig()
    if config.loss_type == "kto":
        raise ValueError("train_dpo: loss_type='kto' learns from unpaired examples: use trainers.kto.train_kto")
    data = shipped_preference_data(config.pairs if data is None else data)
    runtime, config = setup_runtime(config)  # device, precision, this process's share (minirlhf.distributed)
    set_seed(config.seed)
    rng = random.Random(config.seed)
    model, tokenizer = load_policy(config, model, tokenizer)
    disable_dropout(model)  # p_θ and p_ref must give identical log-probs for identical weights
    max_length = config.max_length or context_size(model)  # None = the context size
    check_pair_lengths(tokenizer, list(data.train) + list(data.test or []), max_length)  # long completions are cut
    steps = config.steps if config.epochs is None else math.ceil(config.epochs * len(data.train) / config.batch_size)

    # p_ref: either log-probs for every pair, computed now by the untouched model, or a frozen copy in memory.
    # SimPO and ORPO have no p_ref in their loss: the copy is kept only for the KL of the sampled evaluation.
    model.eval()
    reference_free = config.loss_type in REFERENCE_FREE_LOSS_TYPES
    if config.precompute_ref:
        ref = None
        with runtime.autocast():  # the precision the live p_ref would have
            ref_chosen_all, ref_rejected_all = all_pair_logps(model, tokenizer, data.train, max_length)  # (N,)
    else:
        ref = frozen_copy(model) if config.eval_prompts or not reference_free else None
    test_ref = (None, None)
    if data.test and config.eval_every and not reference_free:
        test_ref = all_pair_logps(model, tokenizer, data.test, max_length)  # p_ref is fixed: score them once

    def evaluate() -> dict[str, float]:
        return evaluate_preferences(model, tokenizer, ref, data, test_ref, config, max_length)

    optimizer = make_optimizer(model.parameters(), config.lr)
    train_model = runtime.prepare(model)  # what the update runs through: DDP-wrapped under several processes
    run = Run(config, runtime, optimizer, model.parameters(), {"order": rng}, evaluate, callbacks, model=model)
    order: list[int] = run.loop_state.get("order", [])  # pairs of this epoch not yet used
    device = next(model.parameters()).device
    model.train()
    for step in run.steps("dpo", steps):
        metrics = run.evaluate(step)
        order = order or rng.sample(range(len(data.train)), len(data.train))  # a fresh shuffle every epoch
        rows = [order.pop() for _ in range(min(config.batch_size, len(order)))]
        rows = runtime.shard(rows)  # this process's share of the global batch (all of it on one process)
        encoded = encode_pairs(tokenizer, [data.train[i] for i in rows], max_length, device)  # (2B, T): [y_w; y_l]

        with runtime.autocast():
            # 1. log p_θ(y_w|x), log p_θ(y_l|x): one forward over [chosen; rejected]          (B,), (B,)
            chosen, rejected = pair_logps(train_model, encoded)
            # 2. log p_ref of the same sequences: none (SimPO, ORPO), looked up, or one forward of the frozen copy
            if reference_free:
                ref_chosen = ref_rejected = None
            elif config.precompute_ref:
                ref_chosen, ref_rejected = ref_chosen_all[rows].clone(), ref_rejected_all[rows].clone()
            else:
                with torch.inference_mode():
                    ref_chosen, ref_rejected = (r.clone() for r in pair_logps(ref, encoded))
        # 3. -log σ(β [log p_θ/p_ref (y_w) - log p_θ/p_ref (y_l)])  (or IPO, hinge, SimPO, ORPO: `preference_loss`)
        losses, r_chosen, r_rejected = preference_loss(
            config, chosen, rejected, ref_chosen, ref_rejected, *pair_lengths(encoded["response_mask"])
        )
        loss, grad_norm = run.update(losses.mean(), share_of=len(rows))  # its part of the global batch's mean
        metrics |= {
            "loss": loss.item(),
            "rewards/accuracy": pair_accuracy(r_chosen, r_rejected),  # a tie counts 1/2
            "rewards/margin": (r_chosen - r_rejected).mean().item(),
            "rewards/chosen": r_chosen.mean().item(),  # β log p_θ(y_w)/p_ref(y_w) (SimPO, ORPO: their own)
            "rewards/rejected": r_rejected.mean().item(),  # β log p_θ(y_l)/p_ref(y_l)
            "logps/chosen": chosen.mean().item(),  # log p_θ(y_w|x): up, or only y_l down?
            "logps/rejected": rejected.mean().item(),
            "grad_norm": grad_norm.item(),
        }
        run.log(step, metrics, order=order)

    run.finish(model, tokenizer, steps)  # the final policy, after the last update
    model.eval()
    return model, tokenizer, run.history
