"""Learned reward models as a task's reward: RM_φ(x, y), ensembles of several, and the task that RL runs against them.

RM_φ (`RewardModel`) is the pretrained GPT-2 transformer with its LM head replaced by a scalar head: the score of a
text is w·h_last + b, where h_last (d,) is the final hidden state of the LAST real token (the EOS that ends every
completion). With causal attention only that position has read the whole of x and y. It is trained with the
Bradley-Terry loss by `minirlhf.trainers.reward_model` (`python -m minirlhf reward-model --out-dir runs/rm`), which
re-exports what is here; it lives on the tasks' floor because a task's reward reads it.

Several reward models score as one through `RewardEnsemble` (mean, worst case, or mean minus the members'
disagreement: `ensemble_reward`), the defence against over-optimising one model's mistakes (Coste et al., 2023).

The shipped task `reward-models` (`task`, knobs in `RewardModelsConfig`) is the sentiment task rewarded by saved
reward models, each standardised on p_ref's texts (`reference_texts`):

    python -m minirlhf grpo --task reward-models --task-option models=runs/rm1,runs/rm2,runs/rm3 rule=min
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn
from transformers import AutoModel, PreTrainedTokenizerBase

from minirlhf.checks import check_choice, check_non_negative
from minirlhf.data import encode_prompt_completion, load_preference_pairs
from minirlhf.logprobs import position_ids_from_mask
from minirlhf.models import ValueHead, context_size, eval_mode, load_model, load_tokenizer
from minirlhf.tasks import Task
from minirlhf.tasks.sentiment import sentiment_task

HEAD_FILE = "reward_head.safetensors"
ENSEMBLE_RULES = ("mean", "min", "mean-std", "mean-var")  # how `ensemble_reward` turns K scores into one
MIN_SPREAD = 1e-6  # a member's least standard deviation on the reference texts (`RewardEnsemble.standardise`)


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
    def standardise(self, prompts: list[str], completions: list[str],
                    names: list[str] | None = None) -> RewardEnsemble:
        """Measure μ_k and σ_k of every member on these reference texts (at least two); returns the ensemble. A
        member that scores them all alike (σ_k < MIN_SPREAD: an untrained, zero head) is refused, named by `names`
        (its folder, say) or its index: standardised it would pay every answer 0."""
        if len(prompts) < 2:
            raise ValueError(f"standardise needs at least 2 reference texts to measure a spread, got {len(prompts)}")
        raw = self._raw_scores(prompts, completions)  # (K, B)
        spread = raw.std(1)  # (K,)
        flat = (spread < MIN_SPREAD).nonzero().flatten().tolist()  # members that score every text alike
        if flat:
            k = flat[0]
            raise ValueError(f"reward model {names[k] if names else k} scores all {len(prompts)} reference texts "
                             f"alike (standard deviation {spread[k].item():.3g}): it tells no answer from another "
                             "(an untrained head?), so it can neither be standardised nor reward anything")
        self.offset.copy_(raw.mean(1))
        self.scale.copy_(spread)
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


# --------------------------------------------------------------------------------------------------
# The task: the sentiment openings, rewarded by saved reward models standardised on p_ref's texts.
# --------------------------------------------------------------------------------------------------

REWARD_MODELS_TASK = "reward-models"
REFERENCE_PAIRS = 128  # of the shipped sentiment test pairs: the texts each member's scale is read on
# what `RewardModel.save` writes and `load` (and the task's scoring) reads: the backbone's config and weights (whole
# or sharded), the head, the tokenizer (the members read the policy's texts with it)
SAVED_FILES = {"config": ("config.json",), "weights": ("model.safetensors", "model.safetensors.index.json"),
               "head": (HEAD_FILE,), "tokenizer": ("tokenizer_config.json",)}
RUN_FOLDER = "reward_model"  # where a reward-model run (`--out-dir F`) saves its model: F/reward_model


def reference_texts(n: int = REFERENCE_PAIRS) -> tuple[list[str], list[str]]:
    """p_ref's texts, on which a member's zero point and scale are read (`RewardEnsemble.standardise`): the first
    `n` shipped sentiment test pairs, each prompt twice, with its chosen and then its rejected continuation.
    Returns (prompts, completions), 2n of each."""
    pairs = load_preference_pairs("sentiment", "test")[:n]
    return [p.prompt for p in pairs] * 2, [p.chosen for p in pairs] + [p.rejected for p in pairs]


def saved_model_folder(folder: str) -> Path:
    """The absolute folder of a saved `RewardModel`: `folder` itself, or its reward_model/ when `folder` is a
    reward-model run's out_dir. A ValueError names the folder and the file it lacks."""
    path = Path(folder).expanduser().resolve()
    if not path.is_dir():
        raise ValueError(f"{folder!r} is no folder (a RewardModel.save folder, or a reward-model run's --out-dir)")
    if not (path / HEAD_FILE).is_file() and (path / RUN_FOLDER / HEAD_FILE).is_file():
        path = path / RUN_FOLDER
    for what, names in SAVED_FILES.items():
        if not any((path / name).is_file() for name in names):
            raise ValueError(f"{folder!r} holds no saved reward model: its {what} ({' or '.join(names)}) is missing "
                             f"in {path} (python -m minirlhf reward-model --out-dir F writes one, in F/{RUN_FOLDER})")
    return path


@dataclass(frozen=True)
class RewardModelsConfig:
    """The task's knobs, checked when made (a ValueError names the knob and its value). `models` is kept as
    absolute folders, so that a run resumed from another working directory reads the same models."""

    # the reward models' folders (RewardModel.save's, or reward-model runs' --out-dir): one = that model alone (its
    # score standardised), several = their ensemble; comma-separated on the command line
    models: tuple[str, ...] = ()
    rule: str = "min"  # how the members' standardised scores make one reward: mean, min (WCO), mean-std, mean-var (UWO)
    lam: float = 1.0  # λ, the weight of the members' spread in mean-std and mean-var

    FOLDER_KNOBS = ("models",)  # the knobs that name folders: recorded with absolute paths (`absolute_task_options`)

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            object.__setattr__(self, field.name, self.checked_knob(field.name, getattr(self, field.name)))

    @classmethod
    def checked_knob(cls, name: str, value):
        """One knob's value, checked on its own (and `models` made absolute); a ValueError names it."""
        if name == "models":
            if isinstance(value, str | Path) or not value:
                raise ValueError(f"{cls.__name__}.models={value!r}: give at least one reward model folder, as a "
                                 "tuple of folders (--task-option models=FOLDER[,FOLDER...])")
            if any(not str(folder).strip() for folder in value):  # Path("") would be the working directory
                raise ValueError(f"{cls.__name__}.models={value!r} holds an empty folder name (a comma too many?)")
            folders = tuple(str(saved_model_folder(str(folder))) for folder in value)
            twice = [folder for folder in dict.fromkeys(folders) if folders.count(folder) > 1]
            if twice:
                raise ValueError(f"{cls.__name__}.models={value!r} names {twice[0]} more than once: a member counted "
                                 "twice is not a second opinion")
            comma = next((folder for folder in folders if "," in folder), None)
            if comma:  # `options` writes the folders comma-separated: a resume would read two folders, or none
                raise ValueError(f"{cls.__name__}.models: {comma!r} has a comma in its path, which the recorded "
                                 "--task-option models=F1,F2 cannot spell; rename or link it")
            _check_one_tokenizer(cls.__name__, folders)
            return folders
        if name == "rule":
            check_choice(f"{cls.__name__}.rule", value, ENSEMBLE_RULES)
        elif name == "lam":
            check_non_negative(f"{cls.__name__}.lam", value, why="the weight of the members' spread")
        return value

    def options(self) -> tuple[str, ...]:
        """The knobs moved from their defaults, as NAME=VALUE strings (`--task-option`) that rebuild this config."""
        moved = [f for f in dataclasses.fields(self) if getattr(self, f.name) != f.default]
        return tuple(f"{f.name}={','.join(v) if isinstance(v := getattr(self, f.name), tuple) else v}" for f in moved)


def _check_one_tokenizer(owner: str, folders: tuple[str, ...]) -> None:
    """Every member reads the first one's tokens: `RewardEnsemble` tokenizes each text once, with its first member's
    tokenizer, so a member trained on another vocabulary would score tokens it never learned. A ValueError names
    the folder whose tokenizer differs (vocabulary or EOS)."""
    first = load_tokenizer(folders[0])
    for folder in folders[1:]:
        tokenizer = load_tokenizer(folder)
        if tokenizer.get_vocab() != first.get_vocab() or tokenizer.eos_token != first.eos_token:
            raise ValueError(f"{owner}.models: {folder!r} has another tokenizer than {folders[0]!r} (its vocabulary "
                             "or EOS differs): the ensemble reads every text with its first member's tokens")


def task(config: RewardModelsConfig | None = None, **knobs) -> Task:
    """The sentiment task rewarded by the saved reward models of `config` (or its knobs as keywords:
    ``task(models=("runs/rm1", "runs/rm2"), rule="mean")``): their `RewardEnsemble`, each member standardised on
    p_ref's texts (`reference_texts`), as `sentiment_task`'s reward; the held-out evaluation is VADER's, as for any
    learned reward. The models are read on the CPU."""
    if config is not None and knobs:
        raise ValueError("give either a RewardModelsConfig or knobs as keywords, not both")
    config = config or RewardModelsConfig(**knobs)
    members = [RewardModel.load(folder) for folder in config.models]
    ensemble = RewardEnsemble(members, rule=config.rule, lam=config.lam)
    ensemble.standardise(*reference_texts(), names=list(config.models))
    return dataclasses.replace(sentiment_task(ensemble), name=REWARD_MODELS_TASK, options=config.options())
