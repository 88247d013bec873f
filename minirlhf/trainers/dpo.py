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
evaluation's KL reads it); KTO, which scores unpaired examples, runs its own loop (`trainers/kto.py`).

p_ref never changes, so its log-probs can be computed once before training (`precompute_ref=True`): one model
in memory instead of two. The logged `logps/chosen` and `logps/rejected` answer the lecture's quiz on "model
collapse": does log p_θ(y_w|x) go up, or does only log p_θ(y_l|x) go down?
"""

from __future__ import annotations

import torch

from minirlhf.data import PreferenceData, PreferencePair
from minirlhf.trainers.preference import (
    KTO_ALIAS,
    REFERENCE_FREE_LOSS_TYPES,
    DPOConfig,
    all_pair_logps,
    encode_pairs,
    implicit_reward_run,
    pair_accuracy,
    pair_lengths,
    pair_logps,
    pair_rows,
    policy_loader,
    preference_loss,
    preference_start,
    settle_reference,
)


def train_dpo(
    data: PreferenceData | list[PreferencePair] | str | None = None,
    config: DPOConfig | None = None,
    model=None,
    tokenizer=None,
    callbacks=(),
):
    """Train p_θ with DPO (or the `config.loss_type` of the family) on preference pairs.
    Returns (model, tokenizer, history). KTO learns from unpaired examples: `trainers.kto.train_kto`.

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
    # The preamble the preference trainers share (`preference.preference_start`): the pairs, the run's start
    # (processes, seeds), p_θ without dropout, the context size and the length check, epochs -> steps; then p_ref
    # (`settle_reference`) and the run. `run.batch` draws this process's share of a batch, and
    # `run.backward(loss, over=...)` weighs the loss by that share.
    config = config or DPOConfig()
    if config.loss_type == KTO_ALIAS:
        raise ValueError("train_dpo: loss_type='kto' learns from unpaired examples: use trainers.kto.train_kto")
    start = preference_start(data, config, policy_loader(model, tokenizer))
    config, data, max_length = start.config, start.data, start.max_length
    # p_ref: log-probs for every pair, computed now by the untouched model, or a frozen copy in memory. SimPO and
    # ORPO have no p_ref in their loss: the copy is kept only for the KL of the sampled evaluation.
    reference_free = config.loss_type in REFERENCE_FREE_LOSS_TYPES
    ref, ref_logps = settle_reference(start, lambda p_ref: all_pair_logps(p_ref, start.tokenizer, data.train,
                                                                          max_length),
                                      copy=bool(config.eval_prompts) or not reference_free)  # (N,), (N,)
    run = implicit_reward_run(start, ref, callbacks)  # held-out p_ref, evaluation, AdamW, checkpoints
    device = next(run.model.parameters()).device
    for step in run.steps("dpo"):
        metrics = run.evaluate(step)
        rows = run.batch(len(data.train), config.batch_size)  # this process's share, a fresh shuffle every epoch
        encoded = encode_pairs(run.tokenizer, [data.train[i] for i in rows], max_length, device)  # (2B, T)
        chosen_lengths, rejected_lengths = pair_lengths(encoded["response_mask"])  # |y_w|, |y_l|  (B,) each
        all_chosen_lengths = run.gather(chosen_lengths)  # RPO's NLL: per chosen token of the global batch
        pieces = []  # what each micro-batch logs: log p_θ(y_w|x), log p_θ(y_l|x) and the method's rewards
        for micro in run.micro_batches(torch.arange(len(rows))):  # gradient accumulation: forward/backward each
            with run.autocast():
                # 1. log p_θ(y_w|x), log p_θ(y_l|x): one forward over [chosen; rejected]          (b,), (b,)
                chosen, rejected = pair_logps(run.train_model, pair_rows(encoded, micro))
                # 2. log p_ref of the same sequences: none (SimPO, ORPO), looked up, or one forward of the frozen copy
                if reference_free:
                    ref_chosen = ref_rejected = None
                elif config.precompute_ref:
                    ref_chosen, ref_rejected = (r[torch.as_tensor(rows)[micro]].clone() for r in ref_logps)
                else:
                    with torch.inference_mode():
                        ref_chosen, ref_rejected = (r.clone() for r in pair_logps(ref, pair_rows(encoded, micro)))
            # 3. -log σ(β [log p_θ/p_ref (y_w) - log p_θ/p_ref (y_l)])  (or IPO, hinge, SimPO, ORPO: `preference_loss`)
            losses, r_chosen, r_rejected = preference_loss(
                config, chosen, rejected, ref_chosen, ref_rejected, chosen_lengths[micro], rejected_lengths[micro],
                all_chosen_lengths=all_chosen_lengths,
            )
            run.backward(losses.mean(), over=len(micro), of=len(rows))  # a mean over this process's pairs
            pieces.append((chosen.detach(), rejected.detach(), r_chosen, r_rejected))
        loss, grad_norm = run.step()
        chosen, rejected, r_chosen, r_rejected = (torch.cat(column) for column in zip(*pieces))  # (B,) each
        metrics |= {
            "loss": float(loss),
            "rewards/accuracy": pair_accuracy(r_chosen, r_rejected),  # a tie counts 1/2
            "rewards/margin": (r_chosen - r_rejected).mean().item(),
            "rewards/chosen": r_chosen.mean().item(),  # β log p_θ(y_w)/p_ref(y_w) (SimPO, ORPO: their own)
            "rewards/rejected": r_rejected.mean().item(),  # β log p_θ(y_l)/p_ref(y_l)
            "logps/chosen": chosen.mean().item(),  # log p_θ(y_w|x): up, or only y_l down?
            "logps/rejected": rejected.mean().item(),
            "grad_norm": grad_norm.item(),
        }
        run.log(step, metrics)

    run.finish()  # the final policy, after the last update
    return run.model, run.tokenizer, run.history
