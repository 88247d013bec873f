"""Losses and advantage estimators for post-training, written as plain functions on tensors, one module per chapter
of the course, each in the order of its notebook:

    kl               01        the KL estimators k1, k2, k3
    policy_gradient  02        REINFORCE, its baselines, RLOO, the KL-shaped reward
    ppo              03        the clipped surrogate, the policy and value losses, GAE, per-token rewards
    grpo             04a, 04b  group advantages, the GRPO loss; then the changes since R1 (07): DAPO's filters,
                     07        GSPO's sequence ratio, REINFORCE++
    ratio_objectives           the ratio zoo: the objective f(r, Â) each method puts on r_t(θ) (clip, dual-clip,
                               CISPO, SAPO, GMPO), selected by grpo_loss(policy_loss=...)
    importance                 three policies: the sampler μ's weight p_θold/μ, truncated or masked at a cap
                               (TIS, MIS), selected by grpo_loss(behaviour_correction=...)
    entropy                    entropy control: the entropy bonus, Clip-Cov and KL-Cov (grpo_loss(policy_loss=
                               "clip-cov" | "kl-cov")), which act on the tokens of largest covariance
    preference       05a, 05b  Bradley-Terry, DPO and its options (IPO, hinge, RPO), SimPO, ORPO, KTO
    distillation               the generalized JSD between a student and a teacher over the vocabulary (forward
                               KL, reverse KL and their mixtures), on-policy distillation's loss
    aggregation                the masked reductions every chapter shares (``aggregate``, ``masked_mean``, ...)
    _contract                  the validity rules every loss checks (shapes, masks, inf/NaN, empty batches)

Every public name is imported here, so ``from minirlhf.losses import grpo_loss`` works whatever module holds it.
Nothing in this package knows about models, tokenizers or trainers: every function takes the numbers the lecture
writes down (log-probabilities, rewards, values) and returns the quantity on the slide. Each docstring states the
equation in the lecture's notation and the body computes it term by term.

Notation
--------
p_θ       the policy being trained          logp      log p_θ(y_t | x, y_<t)
p_θold    the policy that sampled the data  old_logp  log p_θold(y_t | x, y_<t)
p_ref     the frozen reference model        ref_logp  log p_ref(y_t | x, y_<t)
μ         the sampler, when not p_θold      behaviour_logp  log μ(y_t | x, y_<t)
r_t(θ)    p_θ / p_θold, the probability ratio of token t
Â         advantage, ε clip range, β KL coefficient, G group size, V(s_t) value

Shapes, masks, empty and non-finite inputs: see ``minirlhf.losses._contract``.

Per-token terms and their aggregation
-------------------------------------
Every token-level objective comes as two functions: ``*_per_token_loss`` returns its (B, T) term, 0 on padding,
and ``*_loss`` is ``aggregate(per_token, mask, aggregation)`` of it (REINFORCE, PPO's clip and value losses, GRPO).
A loss written per token elsewhere can be compared with ours term by term, then through the same reduction, whose
``divisor`` can be any constant the caller chooses. The sequence-level losses (Bradley-Terry, the DPO family, KTO)
return one loss per pair or example.

Sign conventions
----------------
* ``*_loss`` functions return something to MINIMISE (the negated objective, for losses built
  from an objective). Those that also return ``stats`` give a dict of python floats for logging.
* ``clipped_surrogate`` returns the PPO objective, something to MAXIMISE, elementwise.
* ``*_advantages`` and ``gae`` return advantages; ``kl_k*`` return per-token KL estimates.
* Advantages passed into a loss are treated as constants (detached): the gradient flows only
  through the policy's log-probabilities.
"""

from minirlhf.losses._contract import check_group_size
from minirlhf.losses.aggregation import AGGREGATIONS, aggregate, masked_mean, masked_sum, masked_whiten
from minirlhf.losses.distillation import check_jsd_beta, generalized_jsd_loss, generalized_jsd_per_token_loss
from minirlhf.losses.entropy import (
    CLIP_COV_LB,
    CLIP_COV_UB,
    COV_RATIO,
    COVARIANCE_LOSSES,
    KL_COV_COEF,
    check_covariance_options,
    clip_cov_candidates,
    clip_cov_loss,
    clip_cov_per_token_loss,
    clip_cov_selection,
    covariance_share,
    entropy_bonus,
    kl_cov_loss,
    kl_cov_per_token_loss,
    kl_cov_selection,
    token_covariance,
    tokens_acted_on,
)
from minirlhf.losses.grpo import (
    CONSTANT_GROUP_STD,
    GRPO_POLICY_LOSSES,
    GRPO_SCALES,
    IMPORTANCE_SAMPLING_LEVELS,
    STD_FLOOR,
    grpo_advantages,
    grpo_loss,
    grpo_per_token_loss,
    informative_groups,
    mask_truncated,
    reinforce_plus_plus_advantages,
    sequence_ratio,
)
from minirlhf.losses.importance import (
    BEHAVIOUR_CAP,
    BEHAVIOUR_CORRECTIONS,
    behaviour_log_ratio,
    behaviour_metrics,
    behaviour_weight,
    check_behaviour_correction,
)
from minirlhf.losses.kl import KL_K3_LINEAR_ABOVE, KL_K3_LINEAR_ABOVE_FP16, kl_k1, kl_k2, kl_k3
from minirlhf.losses.policy_gradient import (
    check_ema_decay,
    ema_baseline,
    kl_shaped_rewards,
    reinforce_loss,
    reinforce_per_token_loss,
    rloo_advantages,
)
from minirlhf.losses.ppo import (
    check_gae,
    clipped_surrogate,
    explained_variance,
    gae,
    ppo_clip_loss,
    ppo_clip_per_token_loss,
    token_rewards,
    value_loss,
    value_per_token_loss,
)
from minirlhf.losses.preference import (
    DPO_LOSS_TYPES,
    IPO_NORMALISATIONS,
    bradley_terry_loss,
    bradley_terry_per_pair_loss,
    check_dpo_options,
    check_label_smoothing,
    dpo_loss,
    kto_loss,
    orpo_loss,
    pair_accuracy,
    simpo_loss,
)
from minirlhf.losses.ratio_objectives import (
    DUAL_CLIP_C,
    POLICY_LOSSES,
    SAPO_TAU_NEG,
    SAPO_TAU_POS,
    check_dual_clip_c,
    cispo_surrogate,
    dual_clip_surrogate,
    gmpo_log_ratio,
    gmpo_ratio,
    ratio_function_grid,
    ratio_objective,
    sapo_surrogate,
)

__all__ = [
    "AGGREGATIONS", "BEHAVIOUR_CAP", "BEHAVIOUR_CORRECTIONS", "CLIP_COV_LB", "CLIP_COV_UB", "CONSTANT_GROUP_STD",
    "COVARIANCE_LOSSES", "COV_RATIO", "DPO_LOSS_TYPES", "DUAL_CLIP_C", "GRPO_POLICY_LOSSES", "GRPO_SCALES",
    "IMPORTANCE_SAMPLING_LEVELS", "IPO_NORMALISATIONS", "KL_COV_COEF", "KL_K3_LINEAR_ABOVE",
    "KL_K3_LINEAR_ABOVE_FP16", "POLICY_LOSSES", "SAPO_TAU_NEG", "SAPO_TAU_POS", "STD_FLOOR", "aggregate",
    "behaviour_log_ratio", "behaviour_metrics", "behaviour_weight", "bradley_terry_loss",
    "bradley_terry_per_pair_loss", "check_behaviour_correction", "check_covariance_options", "check_dpo_options",
    "check_dual_clip_c", "check_ema_decay", "check_gae", "check_group_size", "check_label_smoothing",
    "cispo_surrogate", "clip_cov_candidates", "clip_cov_loss", "clip_cov_per_token_loss", "clip_cov_selection",
    "clipped_surrogate", "covariance_share", "dpo_loss", "dual_clip_surrogate", "ema_baseline", "entropy_bonus",
    "explained_variance", "gae", "gmpo_log_ratio", "gmpo_ratio", "grpo_advantages", "grpo_loss",
    "grpo_per_token_loss", "informative_groups", "kl_cov_loss", "kl_cov_per_token_loss", "kl_cov_selection", "kl_k1",
    "kl_k2", "kl_k3", "kl_shaped_rewards", "kto_loss", "mask_truncated", "masked_mean", "masked_sum", "masked_whiten",
    "orpo_loss", "pair_accuracy", "ppo_clip_loss", "ppo_clip_per_token_loss", "ratio_function_grid",
    "ratio_objective", "reinforce_loss", "reinforce_per_token_loss", "reinforce_plus_plus_advantages",
    "rloo_advantages", "sapo_surrogate", "sequence_ratio", "simpo_loss", "token_covariance", "token_rewards",
    "tokens_acted_on", "value_loss", "value_per_token_loss",
    "check_jsd_beta", "generalized_jsd_loss", "generalized_jsd_per_token_loss",  # distillation
]
