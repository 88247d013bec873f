"""The online wing: what REINFORCE/RLOO, PPO and GRPO share. The config (`OnlineConfig`), the run
(`online_run`, an `OnlineRun`: the `Run` with the task, p_θ, p_ref and one "collect" step), and the experience:

    prompts -> sample G completions each (p_θold, KV cache) -> R(x, y) -> log p_ref (when β > 0)

Everything returned is cut to the response columns [P, P + N), so the losses see (B, N) tensors, and gathered
whole: the advantages are computed on the global batch, and each process updates on its own rows of it.
"""

from __future__ import annotations

import dataclasses
import random
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedTokenizerBase

from minirlhf import diagnostics
from minirlhf.checks import check_finite, check_interval
from minirlhf.data import check_prompt_room
from minirlhf.distributed import Runtime
from minirlhf.errors import UserError
from minirlhf.logprobs import response_logprobs
from minirlhf.losses import informative_groups, kl_k1, masked_sum
from minirlhf.models import ValueHead, context_size, disable_dropout, eval_mode, frozen_copy
from minirlhf.precision import autocast, resolve_precision
from minirlhf.sampling import DECODERS, Rollout, sample
from minirlhf.tasks import Task, WeightedReward, call_reward, draw_prompts, reward_name, with_reward
from minirlhf.tasks.registry import absolute_task_options, canonical_task_options, resolve_task, task_options
from minirlhf.tasks.rewards import soft_overlong_punishment
from minirlhf.trainers.config import (
    TrainConfig,
    choice,
    require_accumulation_fits,
    require_choice,
    require_non_negative,
    require_positive,
    with_metavar,
)
from minirlhf.trainers.run import EVAL_PREFIX, Run, begin, held_out_metrics, load_policy, make_optimizer
from minirlhf.trainers.run.schedule import KL_ERROR_CLIP, adaptive_kl_beta

SAMPLING_PRECISIONS = ("same", "bf16", "fp16")
MAX_SAMPLER_LAG = 8  # each step of lag keeps one more copy of the weights, in memory and in every checkpoint


@dataclass
class OnlineConfig(TrainConfig):
    prompts_per_step: int = 16  # distinct prompts sampled per step
    group_size: int = 8  # G: completions per prompt
    max_new_tokens: int | None = None  # response budget; None = the task's default
    temperature: float = 1.0  # sampling temperature (the log-probs in the loss use the same one)
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1.0 = off
    # the sampler's precision: "same" = the run's; "bf16" / "fp16" = sampling's forwards in that half precision, as an
    # inference engine runs them, while the loss's log p_θold is recomputed at the run's precision: a sampler μ that
    # is not p_θold (minirlhf.losses.importance; fp16 needs CUDA)
    sampling_precision: str = choice("same", SAMPLING_PRECISIONS)
    # sample each step from the policy as it was this many steps before (asynchronous training: the inference engine
    # runs a step or two behind the trainer; prime-rl trains one step off-policy by default): a sampler μ that is not
    # p_θold, whose log p_θold is recomputed with the current weights; the checkpoints keep the stale weights; 0 = off
    sampler_lag: int = 0
    beta: float = 0.0  # β: weight of the KL(p_θ || p_ref) penalty; 0 = none, p_ref only for eval/kl_ref (eval_kl)
    # KL_target: adapt β after every step so that the batches' KL(p_θ || p_ref) (kl_ref) tends to this many nats
    # per answer (Ziegler et al., 2019: schedule.adaptive_kl_beta; β starts at beta, logged as beta); None = fixed β
    kl_target: float | None = None
    kl_horizon: float = 10000.0  # the adaptive controller's horizon in samples, K_β = batch / horizon (TRL: 10000)
    # completions per optimizer step; None = the whole batch. gradient_accumulation_steps cuts each minibatch
    # into that many micro-batches (the memory of one forward), still one optimizer step per minibatch
    minibatch_size: int | None = None
    debug: bool = False  # live diagnostics every step (minirlhf.diagnostics): "debug/..." metrics and warnings
    decoder: str = "auto"  # sampling's decode steps (sampling.DECODERS): "auto" = CUDA graph on a GPU, else dynamic
    # what the run learns from (config.json keeps it: a resume continues on it, and refuses another): a shipped task
    # (arithmetic; sentiment: VADER is the reward; lab: the lab's task family; calculator: long sums with a calculator
    # to call; reward-models: the sentiment task rewarded by saved reward models, one or an ensemble) or a
    # module:function / path.py:function of yours that returns a Task; None = arithmetic, unless prompts are given
    task: str | None = with_metavar(
        None, "arithmetic|sentiment|lab|calculator|reward-models|module:function|path.py:function")
    # a shipped task's knobs, NAME=VALUE each (the lab's: mix=0.25,0.5,0.25 filler=true max_new_tokens=40
    # tolerance=0, as in minirlhf.tasks.lab.LabConfig; reward-models': models=F1,F2 rule=min lam=1, as in
    # minirlhf.tasks.reward_models.RewardModelsConfig); config.json keeps them, and a resume refuses other ones
    task_option: list[str] | None = with_metavar(None, "NAME=VALUE")
    # your prompts instead of a task: a FILE.jsonl or a dataset name, one object per row with a "prompt"; its other
    # fields reach the reward functions as keyword lists
    prompts: str | None = with_metavar(None, "FILE.jsonl|dataset-name")
    # for prompts: reward functions (prompts, completions, **columns) -> list[float]; several are summed
    reward: list[str] | None = with_metavar(None, "module:function|path.py:function")
    reward_weights: list[float] | None = with_metavar(None, "W")  # one weight per reward: R = Σ_k w_k R_k (None: 1)
    # L_cache: DAPO's soft overlong penalty, 0 to -1 over the last L_cache tokens of the response budget, added to
    # the reward with overlong_weight (logged as reward/overlong); 0 = off
    overlong_cache: int = 0
    overlong_weight: float = 1.0  # weight of the soft overlong penalty in R = Σ_k w_k R_k
    # eval/kl_ref at each evaluation: KL(p_θ || p_ref) from sampled completions. At β = 0 this keeps a frozen copy
    # of the starting model for it (one more set of weights in memory: ~0.5 GB for gpt2 in float32); false = none
    eval_kl: bool = True

    def validate(self) -> None:
        super().validate()
        require_positive(self, "prompts_per_step", "group_size", "temperature", "kl_horizon")
        if self.kl_target is not None:
            require_positive(self, "kl_target")
            if self.beta == 0:
                raise ValueError(f"{type(self).__name__}.kl_target={self.kl_target!r} adapts β, which starts at "
                                 "beta = 0 and would stay there: give beta > 0 too (the start of β)")
            if self.kl_horizon <= KL_ERROR_CLIP * self.batch_size:  # else 1 + K_β·e_t can reach 0 or below
                raise ValueError(f"{type(self).__name__}.kl_horizon={self.kl_horizon!r} must exceed {KL_ERROR_CLIP} x "
                                 f"the batch of {self.batch_size} samples: with K_β = batch / horizon, one step of "
                                 "too little KL would take β to 0 or below")
        elif self.kl_horizon != 10000.0:
            raise ValueError(f"{type(self).__name__}.kl_horizon={self.kl_horizon!r} paces the adaptive KL "
                             "controller, which is off (kl_target = None): give kl_target too, or drop it")
        require_non_negative(self, "beta", "overlong_cache", "top_k", "overlong_weight")
        check_interval(f"{type(self).__name__}.top_p", self.top_p, 0.0, 1.0, low_included=False, why="1 = off")
        check_interval(f"{type(self).__name__}.sampler_lag", self.sampler_lag, 0, MAX_SAMPLER_LAG,
                       why="0 = on-policy; each step of lag keeps one more copy of the weights")
        for k, weight in enumerate(self.reward_weights or []):
            check_finite(f"{type(self).__name__}.reward_weights[{k}]", weight)
        if self.overlong_weight != 1.0 and not self.overlong_cache:
            raise ValueError(f"{type(self).__name__}.overlong_weight={self.overlong_weight!r} weighs the soft overlong "
                             "penalty, which is off (overlong_cache = 0): give overlong_cache too, or drop it")
        require_choice(self, "decoder", DECODERS)
        if self.task_option and self.prompts:
            raise ValueError(f"--task-option {self.task_option[0]!r} sets a knob of a shipped --task (lab); --prompts "
                             "has none")
        task_options(self.task, self.task_option)  # each knob parsed and checked, before anything is loaded
        if self.max_new_tokens is not None:
            require_positive(self, "max_new_tokens")  # 0 is refused, not read as "the task's default" (None)
            if self.overlong_cache > self.max_new_tokens:
                raise ValueError(f"{type(self).__name__}.overlong_cache ({self.overlong_cache}) must be at most "
                                 f"max_new_tokens ({self.max_new_tokens}): it is the end of the response budget")
        if self.minibatch_size is not None:
            require_positive(self, "minibatch_size")
            if self.batch_size % self.minibatch_size:
                raise ValueError(
                    f"{type(self).__name__}.minibatch_size ({self.minibatch_size}) must divide the batch of "
                    f"prompts_per_step x group_size = {self.batch_size} completions"
                )
        require_accumulation_fits(self, self.minibatch_size or self.batch_size,
                                  "minibatch_size" if self.minibatch_size else "prompts_per_step x group_size")

    @property
    def samples_off_policy(self) -> bool:
        """The sampler μ is not p_θold: it filters (top-k, top-p), runs in another precision, or lags behind."""
        return self.top_k > 0 or self.top_p < 1.0 or self.sampling_precision != "same" or self.sampler_lag > 0

    @property
    def batch_size(self) -> int:
        return self.prompts_per_step * self.group_size


def online_task(task: Task | None, config: OnlineConfig) -> tuple[Task, OnlineConfig]:
    """The task to learn from and the config that records it: the `task` given (its name and knobs go into
    config.task and config.task_option when the config names none, so that a resume can compare), else the one
    config.task or config.prompts names (`tasks.registry.resolve_task`). A task given under the name the config
    records must have the knobs it records too."""
    if task is None:  # the task's folder knobs recorded absolute, as the command line records them
        config = dataclasses.replace(config, task_option=absolute_task_options(config.task, config.task_option))
        task = resolve_task(config)
    elif config.task is None and config.prompts is None:
        config = dataclasses.replace(config, task=task.name, task_option=list(task.options) or None)
    elif config.task == task.name and canonical_task_options(task.name, config.task_option) != (
            list(task.options) or None):
        raise ValueError(f"the task {task.name!r} given has the knobs {list(task.options)}, the config records "
                         f"task_option={config.task_option!r}: give the task the config's knobs, or start a new run")
    return task, config


class OnlineRun(Run):
    """The run of an online method (`online_run`): the `Run`, and what its loop samples from and trains.

        exp = run.collect()                     # the step's batch, whole (every process's rows)
        for rows in run.minibatches(exp):       # this process's rows of it, shuffled: one optimizer step each
            for micro in run.micro_batches(rows):   # gradient accumulation
                with run.autocast():
                    logp, entropy = policy_logprobs(run.train_model, exp, micro, config.temperature)

    `run.beta` is the step's β: config.beta, or the adaptive controller's (config.kl_target), which `log` moves
    after each step from the batch's kl_ref (`schedule.adaptive_kl_beta`) and keeps in the checkpoints. Under
    config.sampler_lag = L, `collect` samples from `run.sampler`, which holds θ as it was L steps before (the start's
    in the first L steps); `log` keeps the weights of the steps after it (at most L: L + 1 copies of θ in all, in
    memory and in the checkpoints) and moves the sampler one step on once it is L behind.
    """

    def __init__(self, task: Task, config: OnlineConfig, runtime: Runtime, model: nn.Module,
                 tokenizer: PreTrainedTokenizerBase, ref: nn.Module | None, rng: random.Random,
                 generator: torch.Generator, callbacks=(), value_head: bool = False):
        # p_ref for eval/kl_ref: the loss's own, else a frozen copy of the start made for evaluation alone
        eval_ref = ref if ref is not None or not (config.eval_kl and config.eval_every) else frozen_copy(model)
        if config.overlong_cache:
            task = with_overlong_penalty(task, config, tokenizer)
        modules = {"model": model}
        if value_head:  # V(s_t), starts at 0 everywhere
            modules["value_head"] = ValueHead(model.config.hidden_size).to(next(model.parameters()).device)
        params = [p for module in modules.values() for p in module.parameters()]
        optimizer = make_optimizer(params, config.lr)
        trained = {name: runtime.prepare(module) for name, module in modules.items()}  # DDP under several processes
        self.task, self.model, self.tokenizer, self.ref = task, model, tokenizer, ref  # p_θ, p_ref (None: β = 0)
        self.value_head = modules.get("value_head")  # V(s_t) (PPO)
        # what the update runs through: p_θ (and V), DDP-wrapped under several processes
        self.train_model, self.train_value_head = trained["model"], trained.get("value_head")
        self.rng, self.generator = rng, generator  # draw the prompts; the samples and the minibatch order

        def evaluate() -> dict[str, float]:
            kl = {} if eval_ref is None else {f"{EVAL_PREFIX}kl_ref": kl_to_reference(model, eval_ref, tokenizer,
                                                                                      self.task, config, runtime)}
            return held_out_metrics(self.task.evaluate, model, tokenizer) | kl

        frozen = {**task.models, **({"reference model": ref} if ref is not None else {})}
        # every stream the loop draws from, a tool's own (the coin's flips) among them, is kept in the checkpoints
        tool_rng = task.tool.rng if task.tool is not None else None
        streams = {"prompts": rng, "sampling": generator} | ({"tool": tool_rng} if tool_rng is not None else {})
        super().__init__(config, runtime, optimizer, params, streams,
                         evaluate if task.evaluate or eval_ref is not None else None, callbacks, frozen, **modules)
        self.beta = self.loop_state.get("beta", config.beta)  # β_t: the KL coefficient of this step
        # sampler_lag = L: μ samples from `sampler`; `past_weights`: θ at the start of the steps after its weights,
        # oldest first, at most L. A checkpoint keeps [sampler's, *past_weights]: a resume with a smaller L keeps
        # the newest L + 1 of them, and one into sampler_lag = 0 none (no stale copy kept that nothing reads)
        saved = self.loop_state.get("past_weights", [])[-(config.sampler_lag + 1):] if config.sampler_lag else []
        self.sampler = frozen_copy(model) if config.sampler_lag else None
        if saved:
            self.sampler.load_state_dict(saved[0])
        self.past_weights: deque[dict[str, torch.Tensor]] = deque(saved[1:])

    def log(self, step: int, metrics: dict[str, Any], **loop_state: Any) -> None:
        """`Run.log`, with the step's β logged (when there is a KL term) and, under the adaptive controller
        (config.kl_target), β moved for the next step from this batch's KL (`adaptive_kl_beta`: β_{t+1} from β_t
        and KL_t = kl_ref), and kept in the checkpoint's loop state."""
        if self.config.beta > 0:
            metrics = metrics | {"beta": self.beta}
        if self.config.kl_target is not None:
            self.beta = adaptive_kl_beta(self.beta, metrics["kl_ref"], self.config.kl_target,
                                         self.config.batch_size, self.config.kl_horizon)
            loop_state |= {"beta": self.beta}
        if self.sampler is not None:  # the sampler moves one step on once L behind; the next step's θ joins the queue
            if len(self.past_weights) == self.config.sampler_lag:
                self.sampler.load_state_dict(self.past_weights.popleft())
            self.past_weights.append(weights_of(self.model))
            # the sampler's own tensors, not a copy: the checkpoint is written before they change
            loop_state |= {"past_weights": [self.sampler.state_dict(), *self.past_weights]}
        super().log(step, metrics, **loop_state)

    def collect(self) -> Experience:
        """A fresh batch of the step's prompts, sampled (each process its share), scored, with log p_ref, and
        gathered whole. Under config.sampler_lag the samples come from the stale weights (`run.sampler`)."""
        return collect(self.model, self.tokenizer, self.ref, self.task, self.config, self.rng, self.generator,
                       self.runtime, sampler=self.sampler)

    def minibatches(self, exp: Experience) -> list[torch.Tensor]:
        """This step's minibatches of rows of `exp` (`minibatches`): shuffled, this process's rows of the batch."""
        return minibatches(exp.rewards.numel(), self.config.minibatch_size, self.generator, self.runtime)

    def finish(self) -> Path | None:
        """The last evaluation, and the policy saved (with PPO's value head beside it) when there is an out_dir."""
        heads = {"value_head": self.value_head} if self.value_head is not None else {}
        return super().finish(self.model, self.tokenizer, **heads)


def online_run(
    task: Task | None,
    config: OnlineConfig,
    model: nn.Module | None = None,
    tokenizer: PreTrainedTokenizerBase | None = None,
    callbacks=(),
    value_head: bool = False,
) -> OnlineRun:
    """The run every online trainer starts with, set up in this order (the order the random streams are drawn in):
    the task (`online_task`), the run's start (`run.begin`: a resume held to its data, the processes, the seeds),
    the two random streams, p_θ and p_ref (`setup_policy`), and the `OnlineRun` (a value head when asked, AdamW,
    the modules the update runs through, the held-out evaluation: `held_out_metrics` of task.evaluate, and
    eval/kl_ref: `kl_to_reference`)."""
    task, config = online_task(task, config)
    if task.tool is not None and value_head:  # GAE's chain of V(s_t) would break at every token the tool appended
        raise ValueError(f"task {task.name!r} brings a tool, which PPO does not support (its GAE runs over the "
                         "policy's tokens of a row without gaps); train it with GRPO or REINFORCE")
    if task.tool is not None and response_budget(task, config) < task.max_new_tokens:
        # a budget below the task's cuts a call's answer short: a half-written result would be scored as the policy's
        raise ValueError(f"{type(config).__name__}.max_new_tokens ({config.max_new_tokens}) is below task "
                         f"{task.name!r}'s budget of {task.max_new_tokens} tokens, which a tool call and its result "
                         f"need: raise it, or leave it unset")
    runtime, config = begin(config)
    sampling_autocast(runtime, config.sampling_precision)  # fp16 on CPU refused before a model is loaded
    generator = torch.Generator().manual_seed(config.seed)
    rng = random.Random(config.seed)
    model, tokenizer, ref = setup_policy(config, model, tokenizer, task)  # ref: None when β = 0
    return OnlineRun(task, config, runtime, model, tokenizer, ref, rng, generator, callbacks, value_head)


def response_budget(task: Task, config: OnlineConfig) -> int:
    """The run's response budget: config.max_new_tokens when set, else the task's own."""
    return task.max_new_tokens if config.max_new_tokens is None else config.max_new_tokens


OVERLONG = "overlong"  # the name of the soft overlong penalty's reward term (reward/overlong in the metrics)


def with_overlong_penalty(task: Task, config: OnlineConfig, tokenizer: PreTrainedTokenizerBase) -> Task:
    """The task with DAPO's soft overlong punishment (`tasks.rewards.soft_overlong_punishment`) added to its reward
    as the term "overlong", weighted by config.overlong_weight: L_max = the response budget, L_cache =
    config.overlong_cache; the completion's tokens are counted with `tokenizer`."""
    budget = response_budget(task, config)
    if config.overlong_cache > budget:
        raise ValueError(f"{type(config).__name__}.overlong_cache ({config.overlong_cache}) must be at most the "
                         f"response budget ({budget} tokens, task {task.name!r})")
    own = task.reward_fn
    if OVERLONG in ([name for name, _, _ in own.terms] if isinstance(own, WeightedReward) else [reward_name(own)]):
        raise UserError(f"{type(config).__name__}.overlong_cache={config.overlong_cache} adds the reward term "
                        f"{OVERLONG!r} (logged as reward/{OVERLONG}), but task {task.name!r} already has a reward "
                        f"function named {OVERLONG!r}: rename that function, or drop overlong_cache")
    penalty = soft_overlong_punishment(budget, config.overlong_cache, tokenizer)
    return with_reward(task, OVERLONG, config.overlong_weight, penalty)


KL_EVAL_PROMPTS = 32  # prompts of eval/kl_ref (one fixed draw), two completions each


@torch.no_grad()
def kl_to_reference(
    model: nn.Module, ref: nn.Module, tokenizer: PreTrainedTokenizerBase, task: Task, config: OnlineConfig,
    runtime: Runtime,
) -> float:
    """eval/kl_ref: the sequence-level KL(p_θ || p_ref) at evaluation, for every online method and any β,

        KL ≈ (1/n) Σ_i Σ_t [log p_θ(y_i,t | x_i, y_i,<t) - log p_ref(y_i,t | x_i, y_i,<t)],   y_i ~ p_θ(·|x_i)

    (k1 summed per sequence, averaged) over two completions each of one fixed draw of KL_EVAL_PROMPTS prompts of
    the task, sampled as in training (temperature, top-k/top-p, budget). The draw, the samples and a tool's own draws
    (`Tool.reseeded`) come from their own seeded streams: training's random streams are untouched, and every
    evaluation reads the same prompts."""
    prompts, _ = prompt_columns(draw_prompts(task, KL_EVAL_PROMPTS, random.Random(config.seed + 1)))
    tool = task.tool if task.tool is None or task.tool.reseeded is None else task.tool.reseeded(config.seed + 1)
    with eval_mode(model), runtime.autocast():
        rollout = sample(
            model, tokenizer, prompts, group_size=2,
            max_new_tokens=response_budget(task, config),
            temperature=config.temperature, top_k=config.top_k, top_p=config.top_p,
            generator=torch.Generator().manual_seed(config.seed + 1), decoder=config.decoder, tool=tool,
        )
        P = rollout.prompt_length
        ref_logp = response_logprobs(ref, rollout.input_ids, rollout.attention_mask, rollout.response_mask,
                                     config.temperature, prompt_length=P)
    mask = rollout.response_mask[:, P:]
    return masked_sum(kl_k1(rollout.logprobs[:, P:], ref_logp[:, P:]), mask, dim=-1).mean().item()


def setup_policy(
    config: OnlineConfig, model: nn.Module | None, tokenizer: PreTrainedTokenizerBase | None, task: Task | None = None
) -> tuple[nn.Module, PreTrainedTokenizerBase, nn.Module | None]:
    """p_θ (given, or loaded from config.model) with dropout off, its tokenizer, and the frozen p_ref (None when
    β = 0: the reference copy is not even made). Without dropout p_θ = p_θold at the first update: r_t(θ) = 1.
    The `task`'s prompts (when it lists them) are checked to fit the model's context here, before the first step."""
    model, tokenizer = load_policy(config, model, tokenizer)
    if task is not None and task.prompts:
        budget = response_budget(task, config)
        check_prompt_room(tokenizer, [prompt for _, prompt in task.prompts], budget, context_size(model),
                          [where for where, _ in task.prompts])
    disable_dropout(model)
    ref = frozen_copy(model) if config.beta > 0 else None
    return model, tokenizer, ref


@dataclass
class Experience:
    """One batch of on-policy samples, response columns only, whole: every (B, N) and (B,) tensor holds the rows of
    every process (B = the global batch), aligned. Only the rollout is this process's own share of it: the rows
    first_row .. first_row + b of the batch, which its policy re-reads in the update."""

    rollout: Rollout  # this process's share of the sampled batch, full width (b, P + N)
    mask: torch.Tensor  # (B, N) response tokens (EOS included)
    old_logp: torch.Tensor  # (B, N) log p_θold(y_t | x, y_<t), from sampling (or recomputed: sampling_precision)
    ref_logp: torch.Tensor | None  # (B, N) log p_ref(y_t | x, y_<t); None when β = 0
    rewards: torch.Tensor  # (B,) R(x, y)
    ended_with_eos: torch.Tensor  # (B,) bool: the answer ended before the response budget
    reward_parts: dict[str, torch.Tensor] = dataclasses.field(default_factory=dict)  # (B,) R_k of a WeightedReward
    first_row: int = 0  # where the rollout's rows start in the batch
    # (B, N) log μ(y_t | x, y_<t): the sampler's own log-probs (top-k/top-p filtered, in the sampling precision)
    behaviour_logp: torch.Tensor | None = None

    @property
    def prompt_length(self) -> int:
        return self.rollout.prompt_length

    @property
    def share(self) -> torch.Tensor:
        """The rows of the batch this process sampled (all of them on one process)."""
        return torch.arange(self.first_row, self.first_row + self.rollout.input_ids.shape[0])

    def response(self, full: torch.Tensor) -> torch.Tensor:
        """Cut a (b, P + N) per-token tensor to its (b, N) response columns."""
        return full[:, self.prompt_length :]

    def sampled(self, rows: torch.Tensor) -> torch.Tensor:
        """Rows of the batch (this process's own) as rows of its rollout."""
        return rows - self.first_row


@torch.no_grad()
def collect(
    policy: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    ref: nn.Module | None,
    task: Task,
    config: OnlineConfig,
    rng: random.Random,
    generator: torch.Generator,
    runtime: Runtime | None = None,
    sampler: nn.Module | None = None,
) -> Experience:
    """Sample and score this process's share of the step's prompts (all of them on a single process; groups stay
    whole), then gather the batch whole (`Runtime.gather`). Sampling runs under the autocast of
    config.sampling_precision (the runtime's when "same"; else log p_θold is recomputed under the runtime's), p_ref
    under the runtime's. `sampler`: the model that samples when it is not `policy` (stale weights: log p_θold is
    then recomputed with `policy`)."""
    runtime = runtime or Runtime(precision="fp32")
    prompts, columns = prompt_columns(runtime.shard(draw_prompts(task, config.prompts_per_step, rng)))
    with sampling_autocast(runtime, config.sampling_precision):
        rollout = sample(
            sampler or policy, tokenizer, prompts, group_size=config.group_size,
            max_new_tokens=response_budget(task, config),
            temperature=config.temperature, top_k=config.top_k, top_p=config.top_p, generator=generator,
            batch_rows=runtime.sampling_rows(len(prompts) * config.group_size), decoder=config.decoder,
            tool=task.tool,
        )
    device = rollout.input_ids.device
    columns = {name: [v for v in values for _ in range(config.group_size)] for name, values in columns.items()}
    if isinstance(task.reward_fn, WeightedReward):  # R = Σ_k w_k R_k, each R_k kept for the logs
        reward_parts = task.reward_fn.parts(rollout.prompts, rollout.completions, **columns)
        rewards = task.reward_fn.total(reward_parts).to(device)
    else:
        reward_parts = {}
        rewards = call_reward(task.reward_fn, rollout.prompts, rollout.completions, **columns).to(device)
    P = rollout.prompt_length
    old_logp = rollout.logprobs
    if config.sampling_precision != "same" or sampler is not None:  # log p_θold of p_θold, not of the sampler
        with runtime.autocast():
            old_logp = response_logprobs(policy, rollout.input_ids, rollout.attention_mask, rollout.response_mask,
                                         config.temperature, prompt_length=P)
    ref_logp = None
    if ref is not None:
        with runtime.autocast():
            ref_logp = response_logprobs(
                ref, rollout.input_ids, rollout.attention_mask, rollout.response_mask, config.temperature,
                prompt_length=P,  # the G rows of a group share one forward of their prompt
            )[:, P:]
    whole = runtime.gather  # the global batch from every process's rows (= the rows themselves on one process)
    return Experience(
        rollout=rollout,
        mask=whole(rollout.response_mask[:, P:]),
        old_logp=whole(old_logp[:, P:]),
        ref_logp=whole(ref_logp) if ref_logp is not None else None,
        rewards=whole(rewards),
        ended_with_eos=whole(rollout.ended_with_eos.to(device).long()).bool(),  # (a bool tensor is not gathered)
        reward_parts={name: whole(part.to(device)) for name, part in reward_parts.items()},
        first_row=runtime.local_rows(runtime.world_size * rollout.input_ids.shape[0]).start,
        behaviour_logp=whole(rollout.sampler_logprobs[:, P:]),
    )


def sampling_autocast(runtime: Runtime, sampling_precision: str):
    """The autocast sampling runs under: the run's own (`runtime.autocast()`), or "bf16" / "fp16"'s."""
    if sampling_precision == "same":
        return runtime.autocast()
    try:
        return autocast(runtime.device, resolve_precision(sampling_precision, runtime.device))
    except ValueError as err:  # fp16 off CUDA: resolve_precision's advice ('fp32') is no sampling_precision
        raise ValueError(f"sampling_precision={sampling_precision!r} cannot run on {runtime.device} ({err}); "
                         "give 'same' or 'bf16'") from None


def select_groups(exp: Experience, groups: torch.Tensor, group_size: int) -> Experience:
    """The rows of the chosen groups (a bool (B / G,) or index tensor), in order: every group stays whole. One
    process only (dynamic sampling, drop_dead_groups): the rollout holds every row."""
    rows = torch.arange(exp.rewards.numel(), device=exp.rewards.device).view(-1, group_size)[groups].reshape(-1)
    r = exp.rollout
    keep = rows.tolist()
    rollout = dataclasses.replace(
        r, prompts=[r.prompts[i] for i in keep], completions=[r.completions[i] for i in keep],
        input_ids=r.input_ids[rows], attention_mask=r.attention_mask[rows], response_mask=r.response_mask[rows],
        logprobs=r.logprobs[rows], ended_with_eos=r.ended_with_eos[rows],
        sampler_logprobs=None if r.sampler_logprobs is None else r.sampler_logprobs[rows],
    )
    return Experience(rollout, exp.mask[rows], exp.old_logp[rows],
                      None if exp.ref_logp is None else exp.ref_logp[rows], exp.rewards[rows],
                      exp.ended_with_eos[rows],
                      {name: part[rows.to(part.device)] for name, part in exp.reward_parts.items()},
                      behaviour_logp=None if exp.behaviour_logp is None else exp.behaviour_logp[rows])


def concat_experiences(batches: list[Experience], pad_id: int) -> Experience:
    """One Experience from several batches: prompts left-padded to the widest P, responses right-padded to the
    widest N (padding is masked everywhere, so every row's log-probs are unchanged)."""
    P = max(b.prompt_length for b in batches)
    N = max(b.mask.shape[1] for b in batches)

    def full(b: Experience, name: str, value: float = 0) -> torch.Tensor:  # (B, P + N) columns
        return F.pad(getattr(b.rollout, name), (P - b.prompt_length, N - b.mask.shape[1]), value=value)

    def response(t: torch.Tensor) -> torch.Tensor:  # (B, N) columns
        return F.pad(t, (0, N - t.shape[1]))

    rollout = Rollout(
        prompts=[p for b in batches for p in b.rollout.prompts],
        completions=[c for b in batches for c in b.rollout.completions],
        input_ids=torch.cat([full(b, "input_ids", pad_id) for b in batches]),
        attention_mask=torch.cat([full(b, "attention_mask") for b in batches]),
        response_mask=torch.cat([full(b, "response_mask") for b in batches]),
        logprobs=torch.cat([full(b, "logprobs") for b in batches]),
        prompt_length=P,
        ended_with_eos=torch.cat([b.rollout.ended_with_eos for b in batches]),
        sampler_logprobs=None if batches[0].rollout.sampler_logprobs is None else torch.cat(
            [full(b, "sampler_logprobs") for b in batches]),
    )
    ref_logp = None if batches[0].ref_logp is None else torch.cat([response(b.ref_logp) for b in batches])
    behaviour_logp = None if batches[0].behaviour_logp is None else torch.cat(
        [response(b.behaviour_logp) for b in batches])
    return Experience(rollout, torch.cat([response(b.mask) for b in batches]),
                      torch.cat([response(b.old_logp) for b in batches]), ref_logp,
                      torch.cat([b.rewards for b in batches]), torch.cat([b.ended_with_eos for b in batches]),
                      {name: torch.cat([b.reward_parts[name] for b in batches]) for name in batches[0].reward_parts},
                      behaviour_logp=behaviour_logp)


def collect_informative(run: OnlineRun, max_rounds: int) -> tuple[Experience, Experience | None, dict[str, float]]:
    """DAPO's dynamic sampling (Yu et al., 2025): sample batches of prompts_per_step prompts, drop the groups
    whose G rewards are all equal (`losses.informative_groups`: Â = 0, no gradient), until the step holds
    prompts_per_step informative groups or `max_rounds` batches were sampled. At the cap the step trains on the
    informative groups it has, fewer than prompts_per_step, and with none it has nothing to train on (None).

    Returns the first batch (the plain on-policy sample, for the step's reward metrics), the informative groups
    (the first prompts_per_step of them, or None) and `groups_sampled`, `groups_kept`, `sampling_rounds`.
    One process only: the rounds a step needs depend on its samples (see GRPOConfig.dynamic_sampling)."""
    G, wanted = run.config.group_size, run.config.prompts_per_step
    first, kept, n_kept, rounds = None, [], 0, 0
    while n_kept < wanted and rounds < max_rounds:
        exp = run.collect()
        rounds += 1
        if first is None:
            first = exp
        informative = informative_groups(exp.rewards, G)
        if informative.any():
            kept.append(select_groups(exp, informative, G))
            n_kept += int(informative.sum())
    counts = {"groups_sampled": float(rounds * wanted), "groups_kept": float(min(n_kept, wanted)),
              "sampling_rounds": float(rounds)}
    if not kept:
        return first, None, counts
    pad_id = run.tokenizer.pad_token_id if run.tokenizer.pad_token_id is not None else run.tokenizer.eos_token_id
    batch = concat_experiences(kept, pad_id)
    return first, select_groups(batch, torch.arange(min(n_kept, wanted)), G), counts


def prompt_columns(drawn: list[str] | list[dict[str, Any]]) -> tuple[list[str], dict[str, list[Any]]]:
    """The prompt strings of a task's draw, and the other columns of its rows as lists (prompt rows), else none."""
    if not drawn or isinstance(drawn[0], str):
        return list(drawn), {}
    names = [name for name in drawn[0] if name != "prompt"]
    return [row["prompt"] for row in drawn], {name: [row[name] for row in drawn] for name in names}


def policy_logprobs(policy: nn.Module, exp: Experience, rows: torch.Tensor, temperature: float,
                    entropy_grad: bool = False):
    """log p_θ and entropy on the response columns of the selected rows (this process's rows of the batch): two
    (b, N) tensors. Rows of the same prompt share one forward of it (and its gradient flows back through that one
    pass). The entropy is a measurement, unless `entropy_grad` (an entropy bonus in the loss)."""
    r, rows = exp.rollout, exp.sampled(rows)
    logp, entropy = response_logprobs(
        policy, r.input_ids[rows], r.attention_mask[rows], r.response_mask[rows],
        temperature=temperature, return_entropy=True, prompt_length=r.prompt_length, entropy_grad=entropy_grad,
    )
    return exp.response(logp), exp.response(entropy)


def minibatches(
    batch_size: int, minibatch_size: int | None, generator: torch.Generator, runtime: Runtime | None = None
):
    """Shuffled row indices of the batch, `minibatch_size` at a time (the whole batch when None).

    Under several processes both sizes are global: every process draws the same permutation of the global batch
    and takes its own rows in that order, minibatch_size / processes at a time."""
    order = torch.randperm(batch_size, generator=generator)
    step = minibatch_size or batch_size
    if runtime is not None and runtime.world_size > 1:
        rows = runtime.local_rows(batch_size)
        order = order[(order >= rows.start) & (order < rows.stop)]
        step //= runtime.world_size
    return [order[i : i + step] for i in range(0, len(order), step)]


def experience_metrics(exp: Experience) -> dict[str, float]:
    """What every online method logs about its fresh samples: means and the std of the rewards over the batch."""
    lengths = exp.mask.sum(-1).float()
    metrics = {
        "reward": exp.rewards.mean().item(),
        "reward_std": exp.rewards.std().item() if exp.rewards.numel() > 1 else 0.0,
        "response_length": lengths.mean().item(),
        "eos_rate": exp.ended_with_eos.float().mean().item(),
    }
    metrics |= {f"reward/{name}": part.mean().item() for name, part in exp.reward_parts.items()}  # each R_k
    if exp.ref_logp is not None:
        # sequence-level KL(p_θ || p_ref) estimated from the samples: E_y[Σ_t log p_θ/p_ref]  (k1 summed)
        metrics["kl_ref"] = masked_sum(kl_k1(exp.old_logp, exp.ref_logp), exp.mask, dim=-1).mean().item()
    return metrics


@torch.no_grad()
def diagnose(
    policy: nn.Module, exp: Experience, config: OnlineConfig, group_advantages: torch.Tensor | None = None
) -> dict[str, float]:
    """The live diagnostics of a fresh batch (see `minirlhf.diagnostics`), run before its first update with the
    policy in the mode the update uses (on this process's rows). `group_advantages` (B,): advantages that must
    average 0 per group."""
    rows = exp.share
    logp, _ = policy_logprobs(policy, exp, rows, config.temperature)
    metrics = diagnostics.check_logprobs(logp, exp.old_logp[rows], exp.mask[rows])
    metrics |= diagnostics.check_groups(exp.rewards, group_advantages, config.group_size)
    metrics |= diagnostics.check_endings(exp.ended_with_eos)
    if exp.ref_logp is not None:
        metrics |= diagnostics.check_kl_sign(exp.old_logp[rows], exp.ref_logp[rows], exp.mask[rows])
    return metrics


def weights_of(model: nn.Module) -> dict[str, torch.Tensor]:
    """A copy of `model`'s weights as they are now (its state dict, detached and cloned). Tied weights (GPT-2's
    embedding and LM head: two names, one tensor) stay one tensor, cloned once: one copy of the model, no more."""
    copies: dict[tuple[int, torch.Size], torch.Tensor] = {}  # (storage address, shape) -> its clone
    weights = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tensor.shape)
        if key not in copies:
            copies[key] = tensor.detach().clone()
        weights[name] = copies[key]
    return weights
