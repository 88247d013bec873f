"""What every trainer shares: the config base, seeding, loading the policy, the optimizer step, the metrics
history, and `Run`: the plumbing around a trainer's loop (evaluation, updates, logging,
checkpoints) in one place, so that the loop itself shows only its algorithm."""

from __future__ import annotations

import difflib
import json
import numbers
import os
import random
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

from minirlhf.checks import check_choice, check_interval, check_non_negative, check_positive
from minirlhf.data import Evaluation
from minirlhf.errors import UserError
from minirlhf.models import check_tokenizer, eval_mode, load_model
from minirlhf.precision import PRECISIONS
from minirlhf.tasks.registry import task_identity
from minirlhf.trainers.checkpoint import (
    Checkpointer,
    RandomSource,
    check_fork_target,
    release_run_folder,
    run_folder,
    saved_config,
)
from minirlhf.trainers.guard import check_gradients, check_weights, finite_row
from minirlhf.trainers.manifest import absolute_data_paths, record_files


def spelled(default: Any, metavar: str) -> Any:
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
    max_grad_norm: float = 1.0  # gradient clipping (global norm)
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

    # the fields that say what the run learns from (online methods, SFT): `require_same_task` holds a resume to them
    task_fields: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for name in ("model", "out_dir", "resume", "fork_to"):  # a path of "" would mean the current folder
            value = getattr(self, name)
            if isinstance(value, str) and not value.strip():
                raise UserError(f"{type(self).__name__}.{name} must be a path, got {value!r}")
        if self.fork_to is not None:
            if self.resume is None:
                raise UserError(f"{type(self).__name__}.fork_to={self.fork_to!r} forks a checkpoint: it needs resume")
            if self.out_dir is not None and Path(self.out_dir).resolve() != Path(self.fork_to).resolve():
                raise UserError(f"{type(self).__name__}.fork_to={self.fork_to!r} is where the fork writes; leave "
                                f"out_dir unset (it is {self.out_dir!r})")
            check_fork_target(self.resume, self.fork_to)
            self.out_dir = self.fork_to
        if self.resume is not None and self.out_dir is None:
            self.out_dir = str(run_folder(self.resume))  # a resumed run keeps writing where it wrote before
        if self.out_dir is not None and Path(self.out_dir).exists() and not Path(self.out_dir).is_dir():
            raise UserError(f"{type(self).__name__}.out_dir={self.out_dir!r} is a file, not a folder")
        self.validate()

    def validate(self) -> None:
        """Reject values that cannot work, naming the field. Subclasses add their own checks."""
        require_types(self)
        for f in fields(self):
            if "choices" in f.metadata:
                require_choice(self, f.name, f.metadata["choices"])
        require_positive(self, "steps", "lr", "keep_checkpoints")
        require_non_negative(self, "max_grad_norm", "save_every", "eval_every")
        # numpy's seeds (set_seed): a failure there would name no field
        check_interval(f"{type(self).__name__}.seed", self.seed, 0, 2**32, high_included=False, why="numpy's seeds")
        if self.save_every and self.out_dir is None:
            raise ValueError(f"{type(self).__name__}.save_every={self.save_every} needs an out_dir to write to")

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


def require_same_task(config: TrainConfig) -> None:
    """A resumed run continues on what it learned from: its config.json recorded `config.task_fields`, and a
    resume that names another task, other prompts or other rewards is refused (start a fresh run for those)."""
    if config.resume is None or not config.task_fields:
        return
    saved = saved_config(config.resume)
    if not any(name in saved for name in config.task_fields):  # a run saved before tasks were recorded
        return
    before = task_identity(absolute_data_paths({name: saved.get(name) for name in config.task_fields}))
    now = task_identity(absolute_data_paths({name: getattr(config, name) for name in config.task_fields}))
    changed = [f"{name} {before[name]!r} -> {now[name]!r}" for name in before if before[name] != now[name]]
    if changed:
        raise ValueError(f"--resume {config.resume}: that run learned from another task ({'; '.join(changed)}); a "
                         "resume continues on its own task: drop --task/--prompts/--reward, or start a fresh run")


def config_fields(config_cls: type) -> list[str]:
    return [f.name for f in fields(config_cls)]


def set_seed(seed: int) -> torch.Generator:
    """Seed python, numpy and torch; return a torch generator for sampling."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


class History(list):
    """The metrics of a run: a list of dicts {"step": int, metric: float, ...}, one per logged step.

    Notebooks plot it live (pass `callbacks`); with a `path`, each row is also appended to a JSONL file as soon
    as it is logged, so a run that dies keeps every metric written so far. `rows` are the metrics of a resumed
    run up to its checkpoint: the file is rewritten to hold exactly those (rows logged after the checkpoint by
    the interrupted run are dropped, so none appears twice).
    """

    def __init__(
        self,
        path: str | Path | None = None,
        callbacks: Sequence[Callable[[History], None]] = (),
        rows: Sequence[dict[str, Any]] = (),
    ):
        super().__init__(rows)
        self.path = Path(path) if path is not None else None
        self.callbacks = list(callbacks)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text("".join(json.dumps(row) + "\n" for row in rows))
            os.replace(tmp, self.path)  # never a half-written metrics file

    def log(self, step: int, **metrics: float) -> dict[str, Any]:
        row = finite_row({"step": step, **{k: _plain(v) for k, v in metrics.items()}})  # inf/NaN -> None, flagged
        self.append(row)
        if self.path is not None:
            with self.path.open("a") as f:
                f.write(json.dumps(row, allow_nan=False) + "\n")
        for callback in self.callbacks:
            callback(self)
        return row

    def column(self, key: str) -> tuple[list[int], list[float]]:
        """(steps, values) of one metric, skipping rows that do not have it (e.g. evaluations)."""
        rows = [r for r in self if key in r]
        return [r["step"] for r in rows], [r[key] for r in rows]

    def last(self, key: str, default: float | None = None) -> float | None:
        _, values = self.column(key)
        return values[-1] if values else default


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def load_policy(config: TrainConfig, model: nn.Module | None = None, tokenizer=None) -> tuple[nn.Module, Any]:
    """The model to train and its tokenizer: the ones given, or `config.model` loaded; checked to fit each other."""
    if model is None:
        model, tokenizer = load_model(config.model, device=config.device)
    check_tokenizer(model, tokenizer)
    return model, tokenizer


def make_optimizer(parameters: Iterable[nn.Parameter], lr: float) -> torch.optim.Optimizer:
    parameters = list(parameters)
    fused = all(p.is_cuda for p in parameters)  # on CUDA one kernel updates every tensor, not a loop of small ones
    return torch.optim.AdamW(parameters, lr=lr, weight_decay=0.0, fused=fused or None)


def optimizer_step(
    optimizer: torch.optim.Optimizer,
    parameters: Iterable[nn.Parameter],
    max_grad_norm: float,
    scaler: torch.amp.GradScaler | None = None,
):
    """Clip the global gradient norm, step, clear the gradients. Returns the norm before clipping (a tensor).

    With an fp16 `scaler` (`Runtime.scaler`), the gradients are unscaled first, so that clipping sees the true
    norm, and the step is skipped when a gradient overflowed (the scaler then lowers its scale). A non-finite norm
    that no scaler will fix raises `guard.NonFiniteError` before the weights are touched."""
    if scaler is not None:
        scaler.unscale_(optimizer)
    grad_norm = torch.nn.utils.clip_grad_norm_(parameters, max_grad_norm)
    if scaler is None:
        check_gradients(grad_norm, optimizer)
        optimizer.step()
    else:
        scaler.step(optimizer)
        scaler.update()
        check_gradients(grad_norm, optimizer, scaler)
    optimizer.zero_grad(set_to_none=True)
    return grad_norm


EVAL_PREFIX = "eval/"  # held-out metrics are logged as eval/<name>, beside the training metrics of the same name


def held_out_metrics(evaluate: Evaluation | None, model: nn.Module, tokenizer, **settings: Any) -> dict:
    """`evaluate(model, tokenizer, **settings)` in eval mode, keys prefixed "eval/"; the model's mode is restored
    after. Every trainer's held-out evaluation goes through here (one shape, `data.Evaluation`)."""
    if evaluate is None:
        return {}
    with eval_mode(model):
        return {f"{EVAL_PREFIX}{k}": v for k, v in evaluate(model, tokenizer, **settings).items()}


def progress(iterable, enabled: bool, desc: str):
    if not enabled:
        return iterable
    from tqdm.auto import tqdm

    return tqdm(iterable, desc=desc, dynamic_ncols=True)


def save_run(model, tokenizer, config: TrainConfig, history: History) -> Path | None:
    """Write the final model (safetensors) and config to config.out_dir; metrics are already in metrics.jsonl.
    A model with inf/NaN weights is refused (`guard.NonFiniteError`). The run's hold on out_dir ends here."""
    if config.out_dir is None:
        return None
    check_weights({"model": model}, "the final model")
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    record_files(out, "model", "config.json")
    model.save_pretrained(out / "model", safe_serialization=True)
    tokenizer.save_pretrained(out / "model")
    (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
    release_run_folder(out)
    return out


def make_history(
    config: TrainConfig, callbacks: Sequence[Callable[[History], None]] = (), rows: Sequence[dict] = ()
) -> History:
    path = Path(config.out_dir) / "metrics.jsonl" if config.out_dir else None
    record_files(config.out_dir, "metrics.jsonl")
    return History(path, callbacks, rows)


class Run:
    """The plumbing of one training run, so that a trainer's loop reads as its algorithm:

        run = Run(config, runtime, optimizer, params, {"prompts": rng}, evaluate, callbacks, model=model)
        for step in run.steps("grpo"):
            metrics = run.evaluate(step)                       # held-out metrics when due, else {}
            ...                                                # the method's math
            loss, grad_norm = run.update(loss, over=mask[rows])  # weighed by this process's share
            run.add(loss=loss, grad_norm=grad_norm)            # per update: logged as the mean over the step's updates
            run.log(step, metrics)                             # + the loop's own state as keywords, e.g. ema=ema
        run.finish(model, tokenizer)                           # the last evaluation and the saved model

    It starts fresh or resumes from `config.resume` (`run.start`, `run.loop_state`), evaluates through
    `evaluate() -> dict` (keys already prefixed "eval/"; None or `eval_every = 0`: never), steps the optimizer
    through `optimizer_step`, averages metrics over the processes, writes them to `run.history` and saves
    checkpoints. `modules` are the trained modules a checkpoint holds (e.g. model=..., value_head=...).
    """

    def __init__(
        self,
        config: TrainConfig,
        runtime: Any,
        optimizer: torch.optim.Optimizer,
        params: Sequence[nn.Parameter],
        rngs: dict[str, RandomSource],
        evaluate: Callable[[], dict[str, float]] | None = None,
        callbacks: Sequence[Callable[[History], None]] = (),
        **modules: nn.Module,
    ):
        self.config, self.runtime, self.optimizer, self.params = config, runtime, optimizer, list(params)
        self._evaluate = evaluate if config.eval_every else None
        self.checkpointer = Checkpointer(config, optimizer, rngs, runtime.scaler, **modules)
        self.start, logged, self.loop_state = self.checkpointer.resume()  # step 0, no rows, no state when fresh
        self.history = make_history(config, callbacks, logged)
        self._sums: dict[str, float] = {}  # metric -> sum over this step's updates
        self._counts: dict[str, int] = {}  # metric -> how many updates logged it

    def steps(self, desc: str, total: int | None = None):
        """The steps still to run (all of them, unless resumed), with a progress bar when config.progress.

        A loop left by an exception (a reward that raised, Ctrl-C in a notebook) closes this generator, and the run
        lets go of its out_dir then: a run that died inside a live process does not lock its folder."""
        try:
            yield from progress(range(self.start, total or self.config.steps), self.config.progress, desc)
        except GeneratorExit:
            self.release()
            raise

    def release(self) -> None:
        """End the run's hold on its out_dir (`checkpoint.hold_run_folder`); metrics and checkpoints stay."""
        if self.config.out_dir is not None:
            release_run_folder(self.config.out_dir)

    def evaluate(self, step: int | None = None) -> dict[str, float]:
        """The held-out metrics when evaluation is due at `step` (every eval_every steps; always when step is None)."""
        if self._evaluate is None or (step is not None and step % self.config.eval_every):
            return {}
        return self._evaluate()

    def update(self, loss: torch.Tensor, over: torch.Tensor | int, aggregation: str = "token-mean"):
        """One optimisation step on `loss`: share -> backward -> unscale -> clip -> step (`optimizer_step`).

        `over` is what the loss aggregates on this process: the (b, T) mask of its tokens (how they count:
        `aggregation`, as in `losses.aggregate`), or its number of rows (a mean over pairs or examples). Under
        several processes the loss is weighted by this process's share of the global batch (`Runtime.share`), so
        that DDP's average of the gradients is the gradient of the loss over the global batch; on one process the
        weight is 1 and nothing changes. Returns the weighted loss and the gradient norm before clipping."""
        loss = loss * self.runtime.share(over, aggregation)
        self.runtime.backward(loss)
        return loss, optimizer_step(self.optimizer, self.params, self.config.max_grad_norm, self.runtime.scaler)

    def add(self, **metrics: float | torch.Tensor) -> None:
        """Metrics of one update; the next `log` writes their mean over the step's updates (one rule for all)."""
        for key, value in metrics.items():
            self._sums[key] = self._sums.get(key, 0.0) + _plain(value)
            self._counts[key] = self._counts.get(key, 0) + 1

    def log(self, step: int, metrics: dict[str, Any], **loop_state: Any) -> None:
        """Write the step's metrics (and the means of `add`), averaged over the processes; save a checkpoint when
        one is due, with the loop's own state (restored into `loop_state` on resume)."""
        means = {key: total / self._counts[key] for key, total in self._sums.items()}
        self._sums, self._counts = {}, {}
        self.history.log(step, **self.runtime.reduce(metrics | means))
        self.checkpointer.save_if_due(step + 1, self.history, **loop_state)

    def finish(self, model: nn.Module | None = None, tokenizer=None, steps: int | None = None) -> Path | None:
        """Log the held-out metrics of the final model (when there is an evaluation) after the last step (`steps`,
        default config.steps), and save `model` and `tokenizer` with `save_run` (when given)."""
        try:
            if self._evaluate is not None:
                self.history.log(steps or self.config.steps, **self.evaluate())
            return save_run(model, tokenizer, self.config, self.history) if model is not None else None
        except BaseException:
            self.release()
            raise
