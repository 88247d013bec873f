"""The config base every method extends (`TrainConfig`), the field helpers its subclasses are written with, and
the checks that name a field in their errors (GRPOConfig.eps must be positive)."""

from __future__ import annotations

import difflib
import importlib.util
import numbers
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from minirlhf.checks import check_choice, check_interval, check_non_negative, check_positive
from minirlhf.data import PREFERENCE_DATASETS
from minirlhf.errors import UserError
from minirlhf.paths import absolute, check_apart
from minirlhf.precision import PRECISIONS
from minirlhf.trainers.run.checkpoint import check_fork_target, check_own_folder, find_checkpoint, run_folder
from minirlhf.trainers.run.manifest import FOLDER_FIELDS
from minirlhf.trainers.run.schedule import LR_SCHEDULES

REPORTERS = ("none", "tensorboard")  # where the metrics go besides metrics.jsonl


def with_metavar(default: Any, metavar: str) -> Any:
    """A config field whose `--help` shows the values it takes as `metavar` (e.g. "FILE.jsonl|dataset-name")."""
    return field(default=default, metadata={"metavar": metavar})


def choice(default: str, choices: Sequence[str]) -> Any:
    """A config field that must hold one of `choices`: `TrainConfig.validate` checks it, `--help` lists them."""
    return field(default=default, metadata={"choices": tuple(choices)})


@dataclass
class TrainConfig:
    """Settings every method shares. Each method's config extends this one."""

    model: str = "tiny-sft"  # what p_θ (and p_ref) start from: a shipped short name, a folder or a hub name
    steps: int = 100  # optimisation steps (online methods: one batch of fresh samples per step)
    lr: float = 1e-4  # AdamW learning rate
    # the learning rate over the steps: a linear warmup over warmup_steps, then constant, or a linear or cosine
    # decay towards 0 at the last step (trainers/run/schedule.py); logged as lr
    lr_schedule: str = choice("constant", LR_SCHEDULES)
    warmup_steps: int = 0  # W: the lr rises linearly, lr·1/W, lr·2/W, .., lr, over the first W steps; 0 = none
    max_grad_norm: float = 1.0  # gradient clipping (global norm)
    # k: each optimizer step's batch is cut into k micro-batches, one forward and backward each, their gradients
    # summed with the whole batch's normaliser: the same update as the one large batch in ~1/k of the memory
    gradient_accumulation_steps: int = 1
    seed: int = 0  # seeds python, numpy and torch (sampling included)
    device: str = "auto"  # "auto" = cuda, then mps, then cpu
    # autocast dtype: "auto" = bf16 on a GPU (fp16 where it has no bf16), fp32 elsewhere
    precision: str = choice("auto", PRECISIONS)
    gradient_checkpointing: bool = False  # recompute activations in backward: less memory, ~30% more compute
    compile: bool = False  # torch.compile the model for the training forwards (a GPU; the first steps compile)
    eval_every: int = 10  # held-out evaluation every N steps (and at the first and last step); 0 = never
    out_dir: str | None = None  # where metrics.jsonl and the final model go; None keeps everything in memory
    progress: bool = True  # tqdm progress bar
    save_every: int = 0  # write a checkpoint to <out_dir>/checkpoints/ every N steps; 0 = never
    keep_checkpoints: int = 2  # the newest N checkpoints are kept, older ones deleted
    resume: str | None = None  # continue from a checkpoint folder, or from a run's out_dir (its latest checkpoint)
    overwrite: bool = False  # a fresh run may delete the files an earlier run's run.json lists (else: an error)
    fork_to: str | None = None  # with resume: continue the checkpoint as a new run in this fresh folder (a fork)
    # "tensorboard": the metrics also as TensorBoard events in <out_dir>/tensorboard (needs out_dir and the
    # tensorboard package: pip install tensorboard)
    report_to: str = choice("none", REPORTERS)

    def __post_init__(self) -> None:
        for name in ("model", "out_dir", "resume", "fork_to"):  # a path of "" would mean the current folder
            value = getattr(self, name)
            if isinstance(value, str) and not value.strip():
                raise UserError(f"{type(self).__name__}.{name} must be a path, got {value!r}")
        for name in ("out_dir", "resume", "fork_to"):  # absolute once, here: a reward that changes the working
            value = getattr(self, name)  # folder cannot move a run's writes, and "~/x" is never a folder named "~"
            if value is not None:
                setattr(self, name, str(absolute(value)))
        if self.fork_to is not None:
            if self.resume is None:
                raise UserError(f"{type(self).__name__}.fork_to={self.fork_to!r} forks a checkpoint: it needs resume")
            if self.out_dir is not None and Path(self.out_dir).resolve() != Path(self.fork_to).resolve():
                raise UserError(f"{type(self).__name__}.fork_to={self.fork_to!r} is where the fork writes; leave "
                                f"out_dir unset (it is {self.out_dir!r})")
            check_fork_target(self.resume, self.fork_to)
            self.out_dir = self.fork_to
        elif self.resume is not None:
            check_own_folder(self.resume, self.out_dir)
        if self.resume is not None and self.out_dir is None:
            self.out_dir = str(run_folder(self.resume))  # a resumed run keeps writing where it wrote before
        if self.out_dir is not None and Path(self.out_dir).exists() and not Path(self.out_dir).is_dir():
            raise UserError(f"{type(self).__name__}.out_dir={self.out_dir!r} is a file, not a folder")
        self.validate()
        self.check_reads_apart_from_writes()

    def reads(self) -> dict[str, str | None]:
        """The local places this run reads, by field: the checkpoint it resumes, a model folder, a prompt or pair
        file or folder."""
        places = {"resume": str(find_checkpoint(self.resume)) if self.resume is not None else None}
        for name in ("model", *FOLDER_FIELDS):  # a shipped name or a hub name is no local place
            value = getattr(self, name, None)
            local = isinstance(value, str) and value not in PREFERENCE_DATASETS and Path(value).expanduser().exists()
            places[name] = value if local else None
        return places

    def check_reads_apart_from_writes(self) -> None:
        """No place this run writes or deletes (out_dir, a fork's folder) overlaps a place it reads, under any
        spelling (`paths.check_apart`). A resume in place writes into the run that holds its checkpoint, as it
        should: there the checkpoint is left out (its own run's rules keep it)."""
        reads = self.reads()
        if self.resume is not None and self.fork_to is None:
            reads.pop("resume")
        name = type(self).__name__
        check_apart({f"{name}.{k}": v for k, v in reads.items()},
                    {f"{name}.fork_to" if self.fork_to is not None else f"{name}.out_dir": self.out_dir})

    def validate(self) -> None:
        """Reject values that cannot work, naming the field. Subclasses add their own checks."""
        require_types(self)
        for f in fields(self):
            if "choices" in f.metadata:
                require_choice(self, f.name, f.metadata["choices"])
        require_positive(self, "steps", "lr", "keep_checkpoints", "gradient_accumulation_steps")
        require_non_negative(self, "max_grad_norm", "save_every", "eval_every", "warmup_steps")
        # numpy's seeds (set_seed): a failure there would name no field
        check_interval(f"{type(self).__name__}.seed", self.seed, 0, 2**32, high_included=False, why="numpy's seeds")
        if self.save_every and self.out_dir is None:
            raise ValueError(f"{type(self).__name__}.save_every={self.save_every} needs an out_dir to write to")
        if self.report_to == "tensorboard":
            if self.out_dir is None:
                raise ValueError(f"{type(self).__name__}.report_to='tensorboard' needs an out_dir to write to")
            if importlib.util.find_spec("tensorboard") is None:
                raise UserError(f"{type(self).__name__}.report_to='tensorboard' needs the tensorboard package, which "
                                "is not installed: pip install tensorboard (or pip install minirlhf[tensorboard])")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TrainConfig:
        """The config from a dict (e.g. loaded JSON); an unknown field is an error that suggests the closest name."""
        names = config_fields(cls)
        for key in values:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                raise ValueError(f"{cls.__name__} has no field {key!r}{hint}; its fields: {', '.join(names)}")
        return cls(**values)


def require_types(config: Any) -> None:
    """Every field holds a value of its declared type: an int field rejects 1.5 and True, a float field takes 3."""
    hints = typing.get_type_hints(type(config))
    for f in fields(config):
        value, declared = getattr(config, f.name), hints[f.name]
        allowed = typing.get_args(declared) if typing.get_origin(declared) in (typing.Union, types.UnionType) \
            else (declared,)
        if not any(_is_a(value, t) for t in allowed):
            expected = " or ".join("None" if t is type(None) else str(t) if typing.get_args(t) else t.__name__
                                   for t in allowed)
            raise ValueError(f"{type(config).__name__}.{f.name} must be {expected}, got {value!r}")


def _is_a(value: Any, declared: type) -> bool:
    if typing.get_origin(declared) is list:  # list[str], list[float]: a list of such values
        return isinstance(value, list) and all(_is_a(item, typing.get_args(declared)[0]) for item in value)
    if declared is type(None):
        return value is None
    if isinstance(value, bool) or declared is bool:  # bool is an int in python, but not a number of steps
        return isinstance(value, bool) and declared is bool
    if declared is int:
        return isinstance(value, numbers.Integral)
    if declared is float:
        return isinstance(value, numbers.Real)
    return isinstance(value, declared)


def require(config: Any, check: Callable[..., None], *names: str) -> None:
    """Run a rule of `minirlhf.losses` over several fields together (e.g. `check_gae`); its error names the config
    class."""
    try:
        check(*(getattr(config, name) for name in names))
    except ValueError as err:
        raise ValueError(f"{type(config).__name__}.{err}") from None


# The checks of `minirlhf.checks` (the one family, shared with the losses) on a config's fields, each named as
# GRPOConfig.eps in its error.


def require_positive(config: Any, *names: str) -> None:
    for name in names:
        check_positive(f"{type(config).__name__}.{name}", getattr(config, name))


def require_non_negative(config: Any, *names: str) -> None:
    for name in names:
        check_non_negative(f"{type(config).__name__}.{name}", getattr(config, name))


def require_choice(config: Any, name: str, choices: Sequence[str]) -> None:
    check_choice(f"{type(config).__name__}.{name}", getattr(config, name), choices)


def config_fields(config_cls: type) -> list[str]:
    return [f.name for f in fields(config_cls)]


def require_accumulation_fits(config: Any, batch: int, what: str) -> None:
    """gradient_accumulation_steps divides `batch`, the rows of one optimizer step (`what` says which field sets
    it): the micro-batches are equal."""
    k = config.gradient_accumulation_steps
    if batch % k:
        raise ValueError(f"{type(config).__name__}.gradient_accumulation_steps ({k}) must divide {what} "
                         f"({batch}): each optimizer step's batch is cut into {k} equal micro-batches")
