"""KTO (Ethayarajh et al., 2024): learn from unpaired thumbs-up / thumbs-down examples instead of pairs.

Each example (x, y) is a gain or a loss measured against a reference point z_ref, the policy's current drift:

    r_θ(x, y) = log p_θ(y|x) - log p_ref(y|x)
    z_ref     = max(0, mean_j [ log p_θ(y'_j|x_j) - log p_ref(y'_j|x_j) ])    detached; y'_j written for another x
    L         = λ_y - λ_D σ(β (r_θ - z_ref))     y desirable
                λ_y - λ_U σ(β (z_ref - r_θ))     y undesirable

Here the examples come from the shipped pairs, split by `data.unpaired_examples`: y_w desirable, y_l undesirable,
shuffled one by one so that a batch rarely holds both halves of a pair. A step takes 2B examples (as many
sequences as a DPO step of B pairs) and 2B mismatched ones for z_ref. Each example's mismatched completion is
drawn once, before training, from an example with a different prompt (a pair's two halves share their prompt, so
its partner would not do). `python -m minirlhf kto` comes here (and its older spelling `dpo --loss-type kto`);
held-out evaluation is the DPO trainer's, on pairs.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

import torch

from minirlhf.data import (
    PreferenceData,
    PreferencePair,
    UnpairedExample,
    encode_prompt_completion,
    unpaired_examples,
)
from minirlhf.errors import UserError
from minirlhf.logprobs import packed_response_logprobs, sequence_logprobs
from minirlhf.losses import kto_loss
from minirlhf.trainers.config import require_positive
from minirlhf.trainers.preference import (
    KTO_ALIAS,
    DPOConfig,
    ImplicitRewardConfig,
    implicit_reward_run,
    policy_loader,
    preference_start,
    settle_reference,
)


@dataclass
class KTOConfig(ImplicitRewardConfig):
    desirable_weight: float = 1.0  # λ_D: the weight of the thumbs-up examples' loss
    undesirable_weight: float = 1.0  # λ_U: the weight of the thumbs-down examples' loss

    def validate(self) -> None:
        super().validate()
        require_positive(self, "desirable_weight", "undesirable_weight")


def kto_config(config: KTOConfig | DPOConfig) -> KTOConfig:
    """The KTOConfig of `config`; a DPOConfig with loss_type="kto" (the older spelling) gives its shared fields
    (`ImplicitRewardConfig`'s), with λ_D = λ_U = 1."""
    if isinstance(config, KTOConfig):
        return config
    if not isinstance(config, DPOConfig) or config.loss_type != KTO_ALIAS:
        raise ValueError(f"train_kto needs a KTOConfig (or DPOConfig(loss_type='kto')), got {config!r:.120}")
    shared = {f.name: getattr(config, f.name) for f in dataclasses.fields(ImplicitRewardConfig)}
    return KTOConfig(**shared)


def check_prompts(data: PreferenceData, config: KTOConfig) -> None:
    """z_ref scores each example against a completion of another prompt: pairs that all share one prompt are
    refused before anything is loaded."""
    prompts = {pair.prompt for pair in data.train}
    if len(prompts) < 2:
        source = config.pairs if isinstance(config.pairs, str) else "the pairs given"
        raise UserError(f"{source}: all {len(data.train)} training pairs share the prompt "
                        f"{next(iter(prompts), '')!r:.60}; KTO needs examples of at least two different prompts to "
                        f"estimate z_ref")


def mismatched_partners(examples: list[UnpairedExample], rng: random.Random) -> list[int]:
    """For each example j, the index of another example whose prompt differs: y' of the pair (x_j, y'), which
    z_ref scores. The examples are laid on a random cycle and each takes the next one along it whose prompt
    differs from its own."""
    order = rng.sample(range(len(examples)), len(examples))
    partners = [0] * len(examples)
    for position, j in enumerate(order):
        for step in range(1, len(order)):
            k = order[(position + step) % len(order)]
            if examples[k].prompt != examples[j].prompt:
                partners[j] = k
                break
        else:
            raise ValueError("KTO needs examples of at least two different prompts to estimate z_ref")
    return partners


def example_logps(model, tokenizer, prompts: list[str], completions: list[str], max_length: int | None, device):
    """log p(y|x) = Σ_t log p(y_t | x, y_<t) of each (prompt, completion), (n,), from one packed forward."""
    encoded = {k: v.to(device) for k, v in encode_prompt_completion(tokenizer, prompts, completions,
                                                                    max_length=max_length).items()}
    logp = packed_response_logprobs(model, **encoded)  # (n, T) log-probs of the completion tokens (EOS incl.)
    return sequence_logprobs(logp, encoded["response_mask"])  # (n,)


def train_kto(
    data: PreferenceData | list[PreferencePair] | str | None = None,
    config: KTOConfig | DPOConfig | None = None,
    model=None,
    tokenizer=None,
    callbacks=(),
):
    """Train p_θ with KTO on the pairs split into unpaired examples. Arguments and return as `train_dpo`.

    Logged every step: loss, rewards/desirable and rewards/undesirable (mean β r_θ of each class in the batch;
    NaN when the (global) batch holds none of the class), kl (z_ref), logps/desirable, logps/undesirable, grad_norm;
    every `eval_every` steps the same held-out evaluation as DPO."""
    # The preamble the preference trainers share (`preference.preference_start`): the pairs, the run's start
    # (processes, seeds), p_θ without dropout, the context size and the length check, epochs -> steps (every batch
    # of 2 x batch_size examples); then p_ref (`settle_reference`) and the run. `run.batch` draws this process's
    # share of a batch, and `run.backward(loss, over=...)` weighs the loss by that share.
    start = preference_start(data, kto_config(config or KTOConfig()), policy_loader(model, tokenizer),
                             rows_per_pair=2, check=check_prompts)
    config, tokenizer, max_length = start.config, start.tokenizer, start.max_length
    examples = unpaired_examples(start.data.train)  # 2N: [y_w of pair 0 (desirable), y_l of pair 0, ...]
    partners = mismatched_partners(examples, start.rng)  # example j's z_ref term scores (x_j, y of partners[j])
    prompts = [e.prompt for e in examples]
    completions = [e.completion for e in examples]
    mismatched = [examples[k].completion for k in partners]
    desirable_all = torch.tensor([e.desirable for e in examples])
    device = next(start.model.parameters()).device

    # p_ref: log-probs of every example and its mismatched pair, computed now, or a frozen copy in memory.
    def all_example_logps(p_ref) -> tuple[torch.Tensor, torch.Tensor]:  # (2N,) each
        return tuple(torch.cat([example_logps(p_ref, tokenizer, prompts[i : i + 256], texts[i : i + 256], max_length,
                                              device) for i in range(0, len(examples), 256)])
                     for texts in (completions, mismatched))

    ref, ref_logps = settle_reference(start, all_example_logps)
    run = implicit_reward_run(start, ref, callbacks)  # held-out p_ref, evaluation, AdamW, checkpoints
    for step in run.steps("kto"):
        metrics = run.evaluate(step)
        rows = run.batch(len(examples), 2 * config.batch_size)  # this process's share, a fresh shuffle every epoch
        x = [prompts[i] for i in rows]
        y = [completions[i] for i in rows]
        y_mismatched = [mismatched[i] for i in rows]
        desirable = desirable_all[rows].to(device)  # (2B,) bool

        with run.autocast():
            # 1. log p_θ(y'|x) of the mismatched pairs, without autograd (z_ref is detached), for the whole batch
            with torch.no_grad():
                kl_logp = example_logps(run.model, tokenizer, x, y_mismatched, max_length, device)  # (2B,)
            # 2. log p_ref of both: looked up, or forwards of the frozen copy
            if config.precompute_ref:
                ref_logp, ref_kl_logp = (r[rows].clone().to(device) for r in ref_logps)
            else:
                with torch.inference_mode():
                    ref_logp = example_logps(ref, tokenizer, x, y, max_length, device).clone()
                    ref_kl_logp = example_logps(ref, tokenizer, x, y_mismatched, max_length, device).clone()
        mismatched_logps = run.gather(kl_logp, ref_kl_logp)  # z_ref over the global batch, whatever the micro-batch
        pieces = []  # β r_θ and log p_θ(y|x) of each micro-batch, for the logs
        for micro in run.micro_batches(torch.arange(len(rows))):  # gradient accumulation: forward/backward each
            with run.autocast():
                # 3. log p_θ(y|x) with autograd                                                           (b,)
                logp = example_logps(run.train_model, tokenizer, [x[i] for i in micro], [y[i] for i in micro],
                                     max_length, device)
            # 4. λ_y - v(x, y), v = λ_D σ(β (r_θ - z_ref)) or λ_U σ(β (z_ref - r_θ)); z_ref over the global batch
            losses, rewards, z_ref = kto_loss(logp, ref_logp[micro], desirable[micro], *mismatched_logps,
                                              config.beta, config.desirable_weight, config.undesirable_weight)
            run.backward(losses.mean(), over=len(micro), of=len(rows))  # a mean over this process's examples
            pieces.append((rewards, logp.detach()))
        loss, grad_norm = run.step()
        rewards, logp = (torch.cat(column) for column in zip(*pieces))  # (2B,) each
        # the class means below over the global batch: a process's share may hold few or none of a class
        rewards, logp, desirable = run.gather(rewards, logp, desirable.long())
        desirable = desirable.bool()

        metrics |= {
            "loss": float(loss),
            "rewards/desirable": rewards[desirable].mean().item(),  # β r_θ(x, y) of the thumbs-up examples
            "rewards/undesirable": rewards[~desirable].mean().item(),
            "kl": z_ref.item(),  # z_ref: the batch's estimate of KL(p_θ || p_ref), clipped at 0
            "logps/desirable": logp[desirable].mean().item(),
            "logps/undesirable": logp[~desirable].mean().item(),
            "grad_norm": grad_norm.item(),
        }
        run.log(step, metrics)

    run.finish()  # the final policy, after the last update
    return run.model, run.tokenizer, run.history
