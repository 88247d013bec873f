"""GRPO (Shao et al., 2024): PPO's clipped objective with the value function replaced by group statistics.

For each prompt x, sample a group {y_1..y_G} ~ p_θold(·|x), score R_i = R(x, y_i), and set

    Â_i = (R_i - mean(R_1..R_G)) / std(R_1..R_G)                      (the group is the baseline)
    J(θ) = E[ min(r_t Â_i, clip(r_t, 1-ε, 1+ε) Â_i) - β · k3_t ],     r_t = p_θ(y_t|..) / p_θold(y_t|..)

then take `epochs` passes of minibatch gradient steps on L = -J. What came after DeepSeek-R1 is a field away:
clip(r_t, 1-ε, 1+ε_high) (`eps_high`, DAPO), the sequence ratio s_i (`importance_sampling_level`, GSPO), dynamic
sampling and overlong filtering (DAPO) (or, to tell dynamic sampling's two halves apart, `drop_dead_groups`: the
dead groups dropped without refilling), Dr. GRPO's scale="none" + aggregation="constant"; `RECIPES` sets each
paper's fields together; `policy_loss` puts another objective f(r, Â) of the ratio zoo in place of the clip
(dual-clip, CISPO, SAPO, GMPO: minirlhf.losses.ratio_objectives) or controls entropy on the tokens of largest
covariance (Clip-Cov, KL-Cov), and `entropy_coef` adds an entropy bonus (minirlhf.losses.entropy);
`behaviour_correction` weighs each token by the importance weight p_θold/μ of a sampler μ that is not p_θold
(top-k/top-p, `sampling_precision`, stale weights: `sampler_lag`), truncated or masked at `behaviour_cap` (TIS,
MIS: minirlhf.losses.importance).
With the default β = 0 (no KL leash, as in DAPO / Dr. GRPO) the loss needs only p_θ; a frozen p_ref is still kept to
measure eval/kl_ref at evaluation (`eval_kl`, false = only p_θ in memory). With β > 0 (the GRPO paper's 0.04) p_ref
is in the loss (plus the reward model when the reward is a learned one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from minirlhf.checks import check_interval
from minirlhf.diagnostics import zero_std_groups
from minirlhf.distributed import launched_processes
from minirlhf.losses import (
    AGGREGATIONS,
    BEHAVIOUR_CAP,
    BEHAVIOUR_CORRECTIONS,
    CLIP_COV_LB,
    CLIP_COV_UB,
    COV_RATIO,
    COVARIANCE_LOSSES,
    DUAL_CLIP_C,
    GRPO_POLICY_LOSSES,
    GRPO_SCALES,
    IMPORTANCE_SAMPLING_LEVELS,
    KL_COV_COEF,
    SAPO_TAU_NEG,
    SAPO_TAU_POS,
    behaviour_metrics,
    check_behaviour_correction,
    check_covariance_options,
    check_dual_clip_c,
    check_group_size,
    entropy_bonus,
    grpo_advantages,
    grpo_loss,
    informative_groups,
    mask_truncated,
    masked_mean,
)
from minirlhf.tasks import Task
from minirlhf.trainers.config import choice, require, require_non_negative, require_positive
from minirlhf.trainers.online import (
    OnlineConfig,
    collect_informative,
    diagnose,
    experience_metrics,
    online_run,
    policy_logprobs,
    select_groups,
)

# The recipes of the papers since DeepSeek-R1 (`python -m minirlhf grpo --recipe dapo`, or
# GRPOConfig.from_recipe("dapo", ...)): the fields each one sets together. Flags given on the command line win; a
# resumed run keeps its own config.json (which records the fields, not the recipe's name), and a recipe named on
# resume that disagrees with it is refused (`__main__._refuse_other_settings`). None of them sets the
# batch shape: clipping only acts off-policy, so give --epochs > 1 or a --minibatch-size below the batch.
RECIPES: dict[str, dict[str, Any]] = {
    # Shao et al., 2024 (DeepSeekMath): std-normalised group advantages, per-sequence mean, k3 KL with β = 0.04
    "grpo": {"eps": 0.2, "eps_high": None, "beta": 0.04, "scale": "group", "aggregation": "seq-mean",
             "importance_sampling_level": "token"},
    # Yu et al., 2025: clip-higher, dynamic sampling, token-level loss, overlong filtering, no KL
    "dapo": {"eps": 0.2, "eps_high": 0.28, "beta": 0.0, "scale": "group", "aggregation": "token-mean",
             "importance_sampling_level": "token", "dynamic_sampling": True, "mask_truncated_completions": True},
    # Liu et al., 2025 (Dr. GRPO): advantages without the std, the constant normaliser B · T_max, no KL
    "dr-grpo": {"eps": 0.2, "eps_high": None, "beta": 0.0, "scale": "none", "aggregation": "constant",
                "importance_sampling_level": "token"},
    # Zheng et al., 2025 (GSPO, section 5.1): the sequence ratio clipped to [1 - 3e-4, 1 + 4e-4], no KL
    "gspo": {"eps": 3e-4, "eps_high": 4e-4, "beta": 0.0, "scale": "group", "aggregation": "seq-mean",
             "importance_sampling_level": "sequence"},
}


MAX_SAMPLING_ROUNDS = 64  # the bound on dynamic sampling's rounds per step


@dataclass
class GRPOConfig(OnlineConfig):
    steps: int = 300  # enough to learn the arithmetic task (its time and accuracy: benchmarks/README.md)
    eval_every: int = 25
    lr: float = 3e-4
    prompts_per_step: int = 32  # x group_size 8 = 256 completions per step
    eps: float = 0.2  # ε: clip range of the ratio r_t(θ), its lower side 1 - ε
    eps_high: float | None = None  # ε_high: the upper side 1 + ε_high (DAPO's clip-higher: 0.28); None = ε
    # "token": one ratio r_t per token (GRPO); "sequence": s_i = exp(mean_t log r_t), clipped per answer (GSPO)
    importance_sampling_level: str = choice("token", IMPORTANCE_SAMPLING_LEVELS)
    # the objective f(r, Â) put on the ratio (losses.ratio_objectives): "clip" (PPO, GRPO), "dual-clip" (clip, and a
    # floor c·Â for Â < 0), "cispo" (a capped weight on every token's gradient), "sapo" (a soft gate in place of the
    # clip), "gmpo" (the geometric mean of the clipped token ratios, ε and ε_high in log space; token level only);
    # entropy control (losses.entropy, token level only): "clip-cov" (the clip, and the gradient of a random cov_ratio
    # share of the tokens with Cov(log p, Â) in (clip_cov_lb, clip_cov_ub) cut), "kl-cov" (no clip; kl_cov_coef·|log r|
    # on the cov_ratio share of tokens of largest Cov(log p, Â))
    policy_loss: str = choice("clip", GRPO_POLICY_LOSSES)
    dual_clip_c: float = DUAL_CLIP_C  # c of dual-clip: for Â < 0 the objective never goes below c·Â (c > 1)
    sapo_tau_pos: float = SAPO_TAU_POS  # τ_pos of sapo, for Â > 0: the larger, the faster a weight fades as r leaves 1
    sapo_tau_neg: float = SAPO_TAU_NEG  # τ_neg of sapo, for Â ≤ 0
    cov_ratio: float = COV_RATIO  # clip-cov, kl-cov: the share of real tokens acted on, at least one (0 < r ≤ 1)
    clip_cov_lb: float = CLIP_COV_LB  # clip-cov: ω_low, the least covariance of a token whose gradient may be cut
    clip_cov_ub: float = CLIP_COV_UB  # clip-cov: ω_high, the covariance above which a token is left alone
    kl_cov_coef: float = KL_COV_COEF  # kl-cov: β_KL, the weight of |log r_t| on its tokens
    # c_H: L - c_H·H, an entropy bonus on the policy's next-token entropy, aggregated like the loss; 0 = off
    entropy_coef: float = 0.0
    epochs: int = 1  # μ: optimisation passes over each batch of samples (1 = strictly on-policy)
    # how rewards are normalised into advantages: by the std of their group (GRPO), of the batch, or not (Dr. GRPO:
    # scale none + aggregation constant, the dr-grpo recipe)
    scale: str = choice("group", GRPO_SCALES)
    # how token terms are weighted into the loss, see losses.aggregate ("seq-mean" = the GRPO paper)
    aggregation: str = choice("token-mean", AGGREGATIONS)
    # DAPO's dynamic sampling: drop groups whose rewards are all equal and sample more prompts until the step holds
    # prompts_per_step informative groups (one process only)
    dynamic_sampling: bool = False
    # cap on the batches sampled per step with dynamic_sampling (the first included); at the cap the step trains on
    # the informative groups it has (groups_kept < prompts_per_step), and skips its update when there are none
    max_sampling_rounds: int = 4
    # "GRPO-drop": drop the groups whose rewards are all equal from the step's batch without sampling more, so the
    # loss averages over the informative groups only (dynamic sampling without its refill; one process only)
    drop_dead_groups: bool = False
    mask_truncated_completions: bool = False  # DAPO's overlong filtering: answers cut at the budget get no loss
    # three policies: weigh each token's objective by ρ = p_θold/μ of the sampler μ (top-k/top-p filtering,
    # sampling_precision, sampler_lag), capped at behaviour_cap: per token or per answer (ρ_i = Π_t ρ_t), truncated
    # (min(ρ, C), TIS) or masked (0 where ρ > C, MIS; TRL's default is sequence-mask); "none" = no weight
    # (losses.importance)
    behaviour_correction: str = choice("none", BEHAVIOUR_CORRECTIONS)
    behaviour_cap: float = BEHAVIOUR_CAP  # C: the largest importance weight kept (TRL: 3.0)

    @classmethod
    def from_recipe(cls, name: str, **fields: Any) -> GRPOConfig:
        """The config of recipe `name` (RECIPES) with `fields` over it, as on the command line: `--recipe dapo
        --epochs 2` is GRPOConfig.from_recipe("dapo", epochs=2), and a field given wins over the recipe's."""
        if name not in RECIPES:
            raise ValueError(f"unknown recipe {name!r}; the recipes are {', '.join(RECIPES)}")
        return cls(**(RECIPES[name] | fields))

    def validate(self) -> None:
        super().validate()
        require_positive(self, "eps", "epochs", "max_sampling_rounds")
        check_interval("GRPOConfig.max_sampling_rounds", self.max_sampling_rounds, 1, MAX_SAMPLING_ROUNDS,
                       why="each round samples a whole batch; a step whose groups stay dead that long is a task too "
                           "easy or too hard for the model, which more rounds do not fix")
        if self.eps_high is not None:
            require_positive(self, "eps_high")
        require(self, check_group_size, "group_size")
        require(self, check_dual_clip_c, "dual_clip_c")
        require_positive(self, "sapo_tau_pos", "sapo_tau_neg")
        require(self, check_behaviour_correction, "behaviour_correction", "behaviour_cap")
        if self.policy_loss == "gmpo" and self.importance_sampling_level != "token":
            raise ValueError("GRPOConfig.policy_loss='gmpo' is a sequence ratio of its own (the geometric mean of "
                             "the clipped token ratios): give importance_sampling_level='token'")
        if self.behaviour_cap != BEHAVIOUR_CAP and self.behaviour_correction == "none":
            raise ValueError(f"GRPOConfig.behaviour_cap={self.behaviour_cap!r} caps the sampler's importance weight, "
                             "which is off (behaviour_correction = 'none'): give behaviour_correction too, or drop it")
        require(self, check_covariance_options, "cov_ratio", "clip_cov_lb", "clip_cov_ub", "kl_cov_coef")
        require_non_negative(self, "entropy_coef")
        if self.policy_loss in COVARIANCE_LOSSES and self.importance_sampling_level != "token":
            raise ValueError(f"GRPOConfig.policy_loss={self.policy_loss!r} chooses tokens: give "
                             "importance_sampling_level='token'")
        if self.policy_loss == "kl-cov" and self.eps_high is not None:
            raise ValueError(f"GRPOConfig.eps_high={self.eps_high!r} sets the clip, which policy_loss='kl-cov' does "
                             "not have (its KL leash on the high-covariance tokens takes its place): drop it")
        unused = {"dual_clip_c": (DUAL_CLIP_C, ("dual-clip",)), "sapo_tau_pos": (SAPO_TAU_POS, ("sapo",)),
                  "sapo_tau_neg": (SAPO_TAU_NEG, ("sapo",)), "cov_ratio": (COV_RATIO, COVARIANCE_LOSSES),
                  "clip_cov_lb": (CLIP_COV_LB, ("clip-cov",)), "clip_cov_ub": (CLIP_COV_UB, ("clip-cov",)),
                  "kl_cov_coef": (KL_COV_COEF, ("kl-cov",))}
        for name, (default, losses) in unused.items():
            if getattr(self, name) != default and self.policy_loss not in losses:
                named = " or ".join(repr(loss) for loss in losses)
                raise ValueError(f"GRPOConfig.{name}={getattr(self, name)!r} is a setting of policy_loss={named}, "
                                 f"not of {self.policy_loss!r}: give policy_loss={losses[0]!r} too, or drop it")
        if self.max_sampling_rounds != 4 and not self.dynamic_sampling:
            raise ValueError(f"GRPOConfig.max_sampling_rounds={self.max_sampling_rounds!r} caps dynamic sampling, "
                             "which is off: give dynamic_sampling=true too, or drop it")
        if self.drop_dead_groups and self.dynamic_sampling:
            raise ValueError("GRPOConfig.drop_dead_groups=True with dynamic_sampling=True: dynamic sampling already "
                             "drops the dead groups (and refills the step); give one of the two")


def train_grpo(task: Task | None = None, config: GRPOConfig | None = None, model=None, tokenizer=None, callbacks=()):
    """Train p_θ with GRPO on `task`. Returns (model, tokenizer, history)."""
    # The set-up CleanRL writes at the top of each script lives in one place, `online.online_run`: the task
    # (config.task when none is given), device and processes, seeds, p_θ and p_ref, AdamW, the held-out evaluation
    # and the checkpoints. `run.collect()` samples a batch (gathered whole: the advantages see every row), and
    # `run.minibatches(exp)` hands this process its own rows of it.
    config = config or GRPOConfig()
    if config.dynamic_sampling and launched_processes() > 1:  # refused before anything is loaded or written
        raise ValueError(f"GRPOConfig.dynamic_sampling runs on one process only ({launched_processes()} were "
                         "started): the sampling rounds a step needs depend on its samples, and processes would "
                         "disagree")
    if config.drop_dead_groups and launched_processes() > 1:
        raise ValueError(f"GRPOConfig.drop_dead_groups runs on one process only ({launched_processes()} were "
                         "started): the groups a step keeps depend on its samples, and need not share out evenly")
    run = online_run(task, config, model, tokenizer, callbacks)
    config = run.config

    for step in run.steps("grpo"):
        metrics = run.evaluate(step)
        # 1. sample a group of G completions per prompt from p_θold and score them
        if config.dynamic_sampling:  # keep only groups whose rewards differ, sampling more prompts to fill the step
            first, exp, counts = collect_informative(run, config.max_sampling_rounds)
            metrics |= counts
        else:
            first = exp = run.collect()
            if config.drop_dead_groups:  # GRPO-drop: the batch without its all-equal groups, nothing sampled again
                informative = informative_groups(exp.rewards, config.group_size)
                exp = select_groups(exp, informative, config.group_size) if informative.any() else None
                metrics["groups_kept"] = float(informative.sum())
        metrics |= experience_metrics(first) | {"zero_std_groups": zero_std_groups(first.rewards, config.group_size)}
        if config.samples_off_policy or config.behaviour_correction != "none":  # μ against p_θold, and the weight
            metrics |= behaviour_metrics(first.old_logp, first.behaviour_logp, first.mask,
                                         config.behaviour_correction, config.behaviour_cap)
        if exp is None:  # no informative group (dynamic sampling at its cap, or dropping): nothing to learn from
            run.log(step, metrics)
            continue
        # DAPO's overlong filtering: a truncated answer's tokens leave the loss
        mask = mask_truncated(exp.mask, exp.ended_with_eos) if config.mask_truncated_completions else exp.mask
        # 2. group-normalised advantages Â_i, one per completion (B,)
        advantages = grpo_advantages(exp.rewards, config.group_size, scale=config.scale)

        # 3. μ epochs of minibatch steps on the clipped objective with β·k3 KL (β: fixed, or adapted to kl_target)
        run.model.train()
        if config.debug:
            metrics |= diagnose(run.model, exp, config, group_advantages=advantages)
        for _ in range(config.epochs):
            for rows in run.minibatches(exp):  # one optimizer step each
                for micro in run.micro_batches(rows):  # gradient accumulation: one forward and backward each
                    with run.autocast():
                        logp, entropy = policy_logprobs(run.train_model, exp, micro, config.temperature,
                                                        entropy_grad=config.entropy_coef > 0)  # (b, N) each
                    ref_logp = exp.ref_logp[micro] if exp.ref_logp is not None else None
                    loss, stats = grpo_loss(
                        logp, exp.old_logp[micro], ref_logp, advantages[micro], mask[micro],
                        eps=config.eps, beta=run.beta, aggregation=config.aggregation, eps_high=config.eps_high,
                        importance_sampling_level=config.importance_sampling_level, policy_loss=config.policy_loss,
                        dual_clip_c=config.dual_clip_c, tau_pos=config.sapo_tau_pos, tau_neg=config.sapo_tau_neg,
                        behaviour_logp=exp.behaviour_logp[micro], behaviour_correction=config.behaviour_correction,
                        behaviour_cap=config.behaviour_cap,
                        cov_ratio=config.cov_ratio, clip_cov_lb=config.clip_cov_lb, clip_cov_ub=config.clip_cov_ub,
                        kl_cov_coef=config.kl_cov_coef,  # Clip-Cov draws from torch's global generator (checkpointed)
                    )
                    if config.entropy_coef > 0:  # L - c_H·H, on the loss's own normaliser
                        loss = loss + entropy_bonus(entropy, mask[micro], config.entropy_coef, config.aggregation)
                    # normalised as the whole minibatch: its tokens (token-mean) or its rows, not the micro-batch's
                    run.backward(loss, over=mask[micro], of=mask[rows], aggregation=config.aggregation)
                    acted = {name: value for name, value in stats.items() if name.startswith(("clip_frac", "cov_frac"))}
                    run.add(**acted, ratio_max=stats["ratio_max"], kl=stats.get("kl", 0.0),
                            entropy=masked_mean(entropy.detach(), exp.mask[micro]))
                loss, grad_norm = run.step()
                run.add(loss=loss, grad_norm=grad_norm)
        run.model.eval()
        run.log(step, metrics)

    run.finish()  # the policy after the last update
    return run.model, run.tokenizer, run.history
