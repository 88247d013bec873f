"""A reward model RM_φ(x, y) learned from preference pairs with the Bradley-Terry loss.

Bradley-Terry says a person prefers y_w to y_l with probability σ(RM(x, y_w) - RM(x, y_l)); maximum likelihood
on a dataset of pairs is

    L(φ) = -E_{(x, y_w, y_l) ~ D}[ log σ(RM_φ(x, y_w) - RM_φ(x, y_l)) ]          (losses.bradley_terry_loss)

RM_φ is the pretrained GPT-2 transformer with its LM head replaced by a scalar head: the score of a text is
w·h_last + b, where h_last (d,) is the final hidden state of the LAST real token (the EOS that ends every
completion). With causal attention only that position has read the whole of x and y.

Only differences RM(x, y_w) - RM(x, y_l) are ever trained, so the scale's zero point is arbitrary: a constant
added to every score changes nothing. The head starts at zero, so every pair starts at σ(0) = 50%.

Several reward models score as one through `RewardEnsemble` (mean, worst case, or mean minus the members'
disagreement: `ensemble_reward`), the defence against over-optimising one model's mistakes (Coste et al., 2023).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel, PreTrainedTokenizerBase

from minirlhf.checks import check_choice, check_non_negative
from minirlhf.data import PreferenceData, PreferencePair, encode_preference_pairs, encode_prompt_completion
from minirlhf.logprobs import position_ids_from_mask
from minirlhf.losses import bradley_terry_loss, pair_accuracy
from minirlhf.models import ValueHead, context_size, eval_mode, load_model, load_tokenizer
from minirlhf.trainers.preference import PreferenceConfig, PreferenceRun, preference_start
from minirlhf.trainers.run import held_out_metrics

HEAD_FILE = "reward_head.safetensors"
ENSEMBLE_RULES = ("mean", "min", "mean-std", "mean-var")  # how `ensemble_reward` turns K scores into one


class RewardModel(nn.Module):
    """RM_φ(x, y): a GPT-2 transformer (no LM head) + a scalar head on the last real token.

        scores = reward_model(input_ids, attention_mask)     # (B, T), (B, T) -> (B,)
        reward_model.score(prompts, completions)             # texts -> list of floats (needs a tokenizer)
    """

    def __init__(self, backbone: nn.Module, tokenizer: PreTrainedTokenizerBase | None = None):
        super().__init__()
        self.backbone = backbone  # GPT2Model: (B, T) ids -> (B, T, d) hidden states
        self.head = ValueHead(backbone.config.hidden_size)  # (B, d) -> (B,), zero-initialised
        self.tokenizer = tokenizer  # optional, so that `score` and `sentiment_task` work on texts

    @classmethod
    def from_pretrained_lm(cls, name_or_path: str = "tiny", device: str | torch.device = "auto") -> RewardModel:
        """Start from a causal LM (`load_model` name or folder): keep its transformer, drop its LM head."""
        lm, tokenizer = load_model(name_or_path, device=device)
        return cls(lm.base_model, tokenizer).to(lm.device)  # base_model: GPT2LMHeadModel's GPT2Model `transformer`

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.backbone(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids_from_mask(attention_mask),  # padding-proof positions, as for the policy
            use_cache=False,
        ).last_hidden_state  # (B, T, d)
        T = attention_mask.shape[1]
        last = T - 1 - attention_mask.flip(-1).argmax(-1)  # (B,) column of the last real token (right padding ok)
        h_last = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]  # (B, d)
        return self.head(h_last)  # (B,)

    @torch.no_grad()
    def score(
        self,
        prompts: list[str],
        completions: list[str],
        tokenizer: PreTrainedTokenizerBase | None = None,
        batch_size: int = 256,
        max_length: int | None = None,
    ) -> list[float]:
        """RM(x, y) of each prompt + completion, encoded exactly as in training (completion + EOS)."""
        tokenizer = tokenizer or self.tokenizer
        if tokenizer is None:
            raise ValueError("RewardModel.score needs a tokenizer: pass tokenizer=... or build the model with one")
        device = next(self.parameters()).device
        max_length = max_length or context_size(self)
        scores = []
        with eval_mode(self):
            for i in range(0, len(prompts), batch_size):
                batch = encode_prompt_completion(
                    tokenizer, prompts[i : i + batch_size], completions[i : i + batch_size], max_length=max_length
                )
                scores += self(batch["input_ids"].to(device), batch["attention_mask"].to(device)).tolist()
        return scores

    def save(self, directory: str | Path) -> Path:
        """backbone -> config.json + model.safetensors (save_pretrained), head -> reward_head.safetensors,
        plus the tokenizer when the model carries one."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        self.backbone.save_pretrained(directory, safe_serialization=True)
        save_file({k: v.contiguous() for k, v in self.head.state_dict().items()}, str(directory / HEAD_FILE))
        if self.tokenizer is not None:
            self.tokenizer.save_pretrained(directory)
        return directory

    @classmethod
    def load(cls, directory: str | Path, device: str | torch.device = "cpu") -> RewardModel:
        """The inverse of `save` (safetensors only; no code is executed from the folder)."""
        directory = Path(directory)
        if not (directory / HEAD_FILE).is_file():
            raise FileNotFoundError(f"{directory} has no {HEAD_FILE}: not a folder written by RewardModel.save")
        backbone = AutoModel.from_pretrained(directory, local_files_only=True, use_safetensors=True)
        tokenizer = load_tokenizer(directory) if (directory / "tokenizer_config.json").is_file() else None
        model = cls(backbone, tokenizer)
        model.head.load_state_dict(load_file(str(directory / HEAD_FILE)))
        return model.to(device).eval()


def ensemble_reward(scores: torch.Tensor, rule: str = "min", lam: float = 1.0) -> torch.Tensor:
    """One reward from the scores R_k(x, y) of K reward models, (K, B) -> (B,) (Coste et al., 2023, arXiv:2310.02743):

        mean       R = R̄ = (1/K) Σ_k R_k
        min        R = min_k R_k                                worst-case optimisation (WCO)
        mean-var   R = R̄ - λ · (1/K) Σ_k (R_k - R̄)²              uncertainty-weighted optimisation (UWO)
        mean-std   R = R̄ - λ · sqrt((1/K) Σ_k (R_k - R̄)²)        the same penalty, in the reward's own units

    The conservative rules (min, mean-var, mean-std) pay less where the members disagree, which is where a policy
    lands when it exploits one member's mistakes. The members' scales must be comparable (`RewardEnsemble`
    standardises them); with K = 1 every rule is R_1.
    """
    check_choice("rule", rule, ENSEMBLE_RULES)
    check_non_negative("lam", lam)
    if scores.dim() != 2 or scores.shape[0] == 0:
        raise ValueError(f"scores must be (K, B) with K >= 1 reward models, got shape {tuple(scores.shape)}")
    if not scores.is_floating_point():
        raise ValueError(f"scores must hold floats, got dtype {scores.dtype}")
    bad = ~scores.isfinite()
    if bad.any():
        member, answer = (int(i) for i in bad.nonzero()[0])
        raise ValueError(f"scores holds {int(bad.sum())} inf/NaN value(s), first from member {member} on answer "
                         f"{answer} ({scores[member, answer].item()}): no rule can combine it into a reward")
    mean = scores.mean(0)  # (B,) R̄
    variance = ((scores - mean) ** 2).mean(0)  # (B,) (1/K) Σ_k (R_k - R̄)², the population variance
    if rule == "min":
        return scores.min(0).values
    if rule == "mean-var":
        return mean - lam * variance
    if rule == "mean-std":
        return mean - lam * variance.sqrt()
    return mean


class RewardEnsemble(nn.Module):
    """K reward models that score as one, R(x, y) = `ensemble_reward` of their standardised scores; it takes a
    `RewardModel`'s place wherever one is read through `.score` (`sentiment_task(ensemble)`).

        ensemble = RewardEnsemble([rm_1, rm_2, rm_3, rm_4], rule="min").standardise(prompts, completions)
        ensemble.score(prompts, completions)                 # texts -> list of floats
        ensemble.member_scores(prompts, completions)         # (K, B), each member standardised

    Bradley-Terry fixes neither a reward model's zero point nor, across models, its scale, so a minimum over raw
    scores would follow whichever member happens to sit lowest. `standardise` measures each member on reference
    texts (samples of p_ref, such as the texts of its preference pairs) and from then on member k scores
    (RM_k - μ_k) / σ_k, with μ_k and σ_k its mean and standard deviation there (0 and 1 until then).
    """

    def __init__(self, members: list[nn.Module], rule: str = "min", lam: float = 1.0,
                 tokenizer: PreTrainedTokenizerBase | None = None):
        super().__init__()
        if not members:
            raise ValueError("RewardEnsemble needs at least one member, got an empty list")
        check_choice("rule", rule, ENSEMBLE_RULES)
        check_non_negative("lam", lam)
        self.members, self.rule, self.lam = nn.ModuleList(members), rule, lam
        self.tokenizer = tokenizer or getattr(members[0], "tokenizer", None)
        self.register_buffer("offset", torch.zeros(len(members)))  # (K,) μ_k
        self.register_buffer("scale", torch.ones(len(members)))  # (K,) σ_k

    @torch.no_grad()
    def standardise(self, prompts: list[str], completions: list[str]) -> RewardEnsemble:
        """Measure μ_k and σ_k of every member on these reference texts (at least two); returns the ensemble."""
        if len(prompts) < 2:
            raise ValueError(f"standardise needs at least 2 reference texts to measure a spread, got {len(prompts)}")
        raw = self._raw_scores(prompts, completions)  # (K, B)
        self.offset.copy_(raw.mean(1))
        self.scale.copy_(raw.std(1).clamp_min(1e-6))
        return self

    def _raw_scores(self, prompts, completions, tokenizer=None) -> torch.Tensor:
        tokenizer = tokenizer or self.tokenizer
        return torch.tensor([m.score(prompts, completions, tokenizer=tokenizer) for m in self.members])  # (K, B)

    @torch.no_grad()
    def member_scores(self, prompts: list[str], completions: list[str], tokenizer=None) -> torch.Tensor:
        """(K, B): (RM_k(x, y) - μ_k) / σ_k of each member on each prompt + completion."""
        raw = self._raw_scores(prompts, completions, tokenizer)
        return (raw - self.offset.cpu()[:, None]) / self.scale.cpu()[:, None]

    def score(self, prompts: list[str], completions: list[str], tokenizer=None) -> list[float]:
        """R(x, y) of each prompt + completion: the members' standardised scores combined by `self.rule`."""
        return ensemble_reward(self.member_scores(prompts, completions, tokenizer), self.rule, self.lam).tolist()


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
