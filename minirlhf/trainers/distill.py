"""On-policy distillation (Agarwal et al., 2023, "GKD"; TRL's DistillationTrainer): the student p_θ samples, a frozen
teacher p_T scores every token of those samples with its whole next-token distribution, and the student moves
towards it:

    y ~ p_θ(·|x)                                              the student's own answers (on-policy)
    L(θ) = mean over the real tokens t of y of  JSD_β( p_θ(·|x, y_<t), p_T(·|x, y_<t) )
           β = 0: forward KL(p_T || p_θ)   β = 1: reverse KL(p_θ || p_T)   in between: the mixture (losses.distillation)

The ladder of the course: SFT is the forward KL on the teacher's (or a human's) samples; on-policy distillation the
same comparison on the student's own samples, where its mistakes are; RL keeps only a 0/1 verdict on a whole answer.
Per token and per vocabulary entry, distillation says more per sample than a reward does. The task's reward is
measured and logged (reward, eval/...), never trained on. The teacher must share the student's tokenizer.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from minirlhf.logprobs import forward_logits
from minirlhf.losses import (
    AGGREGATIONS,
    check_jsd_beta,
    generalized_jsd_loss,
    generalized_jsd_per_token_loss,
    masked_mean,
)
from minirlhf.models import SHIPPED, disable_dropout, load_model, load_tokenizer
from minirlhf.tasks import Task
from minirlhf.trainers.config import choice, with_metavar
from minirlhf.trainers.online import Experience, OnlineConfig, experience_metrics, online_run, online_task
from minirlhf.trainers.run.guard import check_start_weights

TEACHER = "teacher model"  # the teacher's name among the run's frozen models (its weights' digest in run.json)


@dataclass
class DistillConfig(OnlineConfig):
    # what the student starts from (the shipped arithmetic SFT model); it must share the teacher's tokenizer
    model: str = "tiny-sft"
    # p_T, frozen: a shipped short name, a model folder or a hub name (the lab's SFT model, which solves the lab's
    # easy sums ~0.9 of the time where tiny-sft does ~0.2); run.json records its weights' fingerprint
    teacher: str = with_metavar("tiny-lab", "tiny|tiny-sft|tiny-lab|FOLDER|hub-name")
    # β of the generalized JSD (TRL's beta): 0 = forward KL(p_T || p_θ), 1 = reverse KL(p_θ || p_T), 0.5 = JSD
    jsd_beta: float = 1.0
    # how the token terms are weighted into the loss, see losses.aggregate (TRL's DistillationTrainer: token-mean)
    aggregation: str = choice("token-mean", AGGREGATIONS)
    # the lab (its teacher, tiny-lab, solves its easy and medium sums far more often than tiny-sft does)
    task: str | None = with_metavar("lab", "arithmetic|sentiment|lab|module:function|path.py:function")
    steps: int = 40
    lr: float = 1e-3
    prompts_per_step: int = 32
    # answers per prompt: each one is scored at every token by the teacher, so no group is needed (GRPO's
    # baseline); 1 = the most distinct prompts per sample
    group_size: int = 1
    eval_every: int = 10

    def validate(self) -> None:
        super().validate()
        check_jsd_beta(self.jsd_beta, "DistillConfig.jsd_beta")
        if self.beta != 0:
            raise ValueError(f"DistillConfig.beta={self.beta!r} is the RL trainers' KL penalty to p_ref; "
                             "distillation has none: its divergence is set by jsd_beta (0 = forward KL, 1 = reverse)")
        if self.overlong_cache:
            raise ValueError(f"DistillConfig.overlong_cache={self.overlong_cache!r} shapes a reward, which "
                             "distillation only logs: drop it")
        check_teacher_name(self.teacher)


def check_teacher_name(teacher: str) -> None:
    """A teacher that can be loaded: a shipped name, a model folder (with its config.json) or a hub name; a path
    that leads nowhere is refused before anything is loaded."""
    if teacher in SHIPPED or teacher.startswith("random:"):
        return
    path = Path(teacher).expanduser()
    if path.exists() and not (path / "config.json").is_file():
        raise ValueError(f"DistillConfig.teacher={teacher!r} is no model folder (no config.json in it)")
    if not path.exists() and (teacher.startswith((".", "/", "~")) or teacher.count("/") > 1 or not teacher.strip()):
        raise ValueError(f"DistillConfig.teacher={teacher!r}: no such model folder, and no shipped model (the "
                         f"shipped ones: {', '.join(SHIPPED)})")


def load_teacher(config: DistillConfig, tokenizer) -> nn.Module:
    """p_T: config.teacher loaded, in eval mode without dropout, frozen; it must read the student's tokens."""
    teacher, teacher_tokenizer = load_model(config.teacher, device=config.device)
    check_start_weights(teacher, f"teacher {config.teacher!r}")
    if teacher_tokenizer.get_vocab() != tokenizer.get_vocab():
        raise ValueError(f"DistillConfig.teacher={config.teacher!r} has another tokenizer than the student "
                         f"{config.model!r} ({len(teacher_tokenizer)} vs {len(tokenizer)} tokens): distillation "
                         "compares next-token distributions over one vocabulary")
    disable_dropout(teacher)
    return teacher.eval().requires_grad_(False)


def response_logits(model: nn.Module, exp: Experience, rows: torch.Tensor) -> torch.Tensor:
    """The logits that predict each response token of the selected rows: (b, N, V), the columns P-1 .. P+N-2 of
    one forward over prompt and response (the logits at a column predict the token after it)."""
    r, local = exp.rollout, exp.sampled(rows)
    logits, _ = forward_logits(model, r.input_ids[local], r.attention_mask[local])  # (b, P + N, V)
    return logits[:, r.prompt_length - 1 : -1]


def train_distill(task: Task | None = None, config: DistillConfig | None = None, model=None, tokenizer=None,
                  callbacks=()):
    """Distil the teacher (config.teacher) into p_θ on the prompts of `task`. Returns (model, tokenizer, history)."""
    config = config or DistillConfig()
    task, config = online_task(task, config)
    # the teacher, checked against the student's tokenizer, before the run starts
    teacher = load_teacher(config, tokenizer if model is not None else load_tokenizer(config.model))
    # the teacher is one of the task's frozen models: run.json fingerprints it, and a resume with another is refused
    task = dataclasses.replace(task, models={**task.models, TEACHER: teacher})
    run = online_run(task, config, model, tokenizer, callbacks)
    config = run.config
    teacher.to(next(run.model.parameters()).device)

    for step in run.steps("distill"):
        metrics = run.evaluate(step)
        # 1. the student samples G answers per prompt (their reward is logged, not trained on)
        exp = run.collect()
        metrics |= experience_metrics(exp) | {"samples": float((step + 1) * config.batch_size)}
        run.model.train()
        for rows in run.minibatches(exp):  # one optimizer step each
            for micro in run.micro_batches(rows):  # gradient accumulation: one forward and backward each
                mask = exp.mask[micro]  # (b, N) the student's response tokens
                # 2. the teacher's next-token distributions at every one of them (no gradient)
                with torch.no_grad(), run.autocast():
                    teacher_logits = response_logits(teacher, exp, micro)  # (b, N, V)
                with run.autocast():
                    logits = response_logits(run.train_model, exp, micro)  # (b, N, V)
                # 3. L = aggregate_t JSD_β(p_θ, p_T)
                loss = generalized_jsd_loss(logits, teacher_logits, mask, config.jsd_beta, config.temperature,
                                            config.aggregation)
                run.backward(loss, over=mask, of=exp.mask[rows], aggregation=config.aggregation)
                with torch.no_grad():  # the two KLs per token, whichever β trains
                    reverse, forward = (generalized_jsd_per_token_loss(logits, teacher_logits, mask, end,
                                                                       config.temperature) for end in (1.0, 0.0))
                    run.add(kl_reverse=masked_mean(reverse, mask), kl_forward=masked_mean(forward, mask))
            loss, grad_norm = run.step()
            run.add(loss=loss, grad_norm=grad_norm)
        run.model.eval()
        run.log(step, metrics)

    run.finish()
    return run.model, run.tokenizer, run.history
