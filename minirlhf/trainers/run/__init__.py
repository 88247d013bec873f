"""The run: the plumbing around a trainer's loop, in one object, so that the loop itself shows only its algorithm.

    run = Run(config, runtime, optimizer, params, {"prompts": rng}, evaluate, callbacks, model=model)
    for step in run.steps("grpo"):                            # sets the step's learning rate (lr_schedule)
        metrics = run.evaluate(step)                          # held-out metrics when due, else {}
        for micro in run.micro_batches(rows):                 # gradient_accumulation_steps pieces of the batch
            with run.autocast():                              # the run's precision
                ...                                           # the method's math
            run.backward(loss, over=mask[micro], of=mask[rows])  # weighed by its share of the step's batch
        loss, grad_norm = run.step()                          # one optimizer step on the summed gradients
        run.add(loss=loss, grad_norm=grad_norm)               # per update: logged as the mean over the step's updates
        run.log(step, metrics)                                # + the loop's own state as keywords, e.g. ema=ema
    run.finish(model, tokenizer)                              # the last evaluation and the saved model

Its parts stay parts: the processes (`minirlhf.distributed.Runtime`: device, precision, the share of each
process), the metrics (`history`), the checkpoints (`checkpoint`), what a run folder is (`manifest`, which also
holds what a run learns from: `manifest.DATA_FIELDS`, `manifest.data_identity`) and the non-finite guard (`guard`).
No algorithm lives here; the wings (trainers/online.py, trainers/preference.py) build their runs on this one.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import torch
from safetensors.torch import save_file
from torch import nn
from transformers import PreTrainedModel

from minirlhf.data import Evaluation
from minirlhf.distributed import Runtime, setup_runtime
from minirlhf.models import check_tokenizer, eval_mode, load_model
from minirlhf.trainers.run import manifest
from minirlhf.trainers.run.checkpoint import (
    Checkpointer,
    RandomSource,
    recorded_data,
    release_run_folder,
    writing,
)
from minirlhf.trainers.run.guard import check_gradients, check_start_weights, check_weights
from minirlhf.trainers.run.history import History, make_history, plain
from minirlhf.trainers.run.manifest import record_files
from minirlhf.trainers.run.schedule import scheduled_lr

Config = TypeVar("Config")


def begin(config: Config) -> tuple[Runtime, Config]:
    """The first lines of every run, before anything is loaded or written: a resume is held to what its run learned
    from (`manifest.check_same_data`, the one place that check is made), then the processes (device, precision,
    this process's share: `distributed.setup_runtime`), and the seeds (`set_seed`)."""
    if config.resume is not None:
        manifest.check_same_data(recorded_data(config.resume), config.to_dict(), f"--resume {config.resume}")
    runtime, config = setup_runtime(config)
    set_seed(config.seed)
    return runtime, config


def set_seed(seed: int) -> torch.Generator:
    """Seed python, numpy and torch; return a torch generator for sampling."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


def load_policy(config: Any, model: nn.Module | None = None, tokenizer=None) -> tuple[nn.Module, Any]:
    """The model to train and its tokenizer: the ones given, or `config.model` loaded; checked to fit each other."""
    given = model is not None
    if model is None:
        model, tokenizer = load_model(config.model, device=config.device)
    check_tokenizer(model, tokenizer)
    check_start_weights(model, "the model given to the trainer" if given else f"model {config.model!r}")
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



def save_run(model, tokenizer, config: Any, history: History, folder: str = "model",
             **modules: nn.Module) -> Path | None:
    """Write the final model and config to config.out_dir; metrics are already in metrics.jsonl. `model` goes into
    `folder`: a transformers model with save_pretrained (and `tokenizer` beside it), any other model by its own
    `save(folder)` (the reward model's). Each of `modules` (PPO's value head) becomes <name>.safetensors. A model
    with inf/NaN weights is refused (`guard.NonFiniteError`). The run's hold on out_dir ends here."""
    if config.out_dir is None:
        return None
    check_weights({"model": model, **modules}, "the final model")
    out = Path(config.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    record_files(out, folder, "config.json", *(f"{name}.safetensors" for name in modules))
    with writing(out / folder):  # a full disk is named as one, with the folder
        if isinstance(model, PreTrainedModel):
            model.save_pretrained(out / folder, safe_serialization=True)
            tokenizer.save_pretrained(out / folder)
        else:
            model.save(out / folder)
        for name, module in modules.items():
            save_file(module.state_dict(), str(out / f"{name}.safetensors"))
        (out / "config.json").write_text(json.dumps(config.to_dict(), indent=2))
    release_run_folder(out)
    return out


class Run:
    """The plumbing of one training run (see the module docstring). It starts fresh or resumes from `config.resume`
    (`run.start`, `run.loop_state`), evaluates through `evaluate() -> dict` (keys already prefixed "eval/"; None or
    `eval_every = 0`: never), runs the forward passes in the run's precision (`autocast`), steps the optimizer
    through `optimizer_step`, averages metrics over the processes, writes them to `run.history` and saves
    checkpoints. `modules` are the trained modules a checkpoint holds (e.g. model=..., value_head=...).

    Under several processes each one holds a share of every batch: `gather` puts the shares together into the
    global batch (for a statistic of the whole batch), `local` cuts this process's rows out of it again, and
    `backward` weighs the loss by the share. On one process all three change nothing.

    Gradient accumulation (config.gradient_accumulation_steps = k): the loop cuts each optimizer step's batch into
    k micro-batches (`micro_batches`), runs `backward` on each, with the whole batch's normaliser (`of`), and
    `step`s once: the same update as the one large batch, with the activations of one micro-batch in memory.
    The learning rate of each step follows config.lr_schedule (`schedule.scheduled_lr`) and is logged as lr.
    """

    def __init__(
        self,
        config: Any,
        runtime: Runtime,
        optimizer: torch.optim.Optimizer,
        params: Sequence[nn.Parameter],
        rngs: dict[str, RandomSource],
        evaluate: Callable[[], dict[str, float]] | None = None,
        callbacks: Sequence[Callable[[History], None]] = (),
        frozen: dict[str, nn.Module] | None = None,
        **modules: nn.Module,
    ):
        self.config, self.runtime, self.optimizer, self.params = config, runtime, optimizer, list(params)
        self._evaluate = evaluate if config.eval_every else None
        # `modules` are trained and checkpointed; `frozen` ones (p_ref, a reward model) are only fingerprinted
        self.checkpointer = Checkpointer(config, optimizer, rngs, runtime.scaler, frozen, **modules)
        self.start, logged, self.loop_state = self.checkpointer.resume()  # step 0, no rows, no state when fresh
        self.history = make_history(config, callbacks, logged, self.start)
        self.lr = config.lr  # this step's learning rate (`steps` sets it by the schedule)
        self._step_loss: torch.Tensor | float = 0.0  # Σ of the weighted micro-batch losses of this step
        self._sums: dict[str, float] = {}  # metric -> sum over this step's updates
        self._counts: dict[str, int] = {}  # metric -> how many updates logged it

    def steps(self, desc: str, total: int | None = None):
        """The steps still to run (all of them, unless resumed), with a progress bar when config.progress.

        A loop left by an exception (a reward that raised, Ctrl-C in a notebook) closes this generator, and the run
        lets go of its out_dir then: a run that died inside a live process does not lock its folder."""
        total = total or self.config.steps
        try:
            for step in progress(range(self.start, total), self.config.progress, desc):
                self.lr = scheduled_lr(step, total, self.config.lr, self.config.lr_schedule, self.config.warmup_steps)
                for group in self.optimizer.param_groups:
                    group["lr"] = self.lr
                yield step
        except GeneratorExit:
            self.release()
            raise

    def release(self) -> None:
        """End the run's hold on its out_dir (`checkpoint.hold_run_folder`); metrics and checkpoints stay."""
        if self.config.out_dir is not None:
            release_run_folder(self.config.out_dir)

    def autocast(self) -> AbstractContextManager:
        """The run's precision for forward passes (bf16/fp16 autocast on a GPU, nothing in fp32)."""
        return self.runtime.autocast()

    def gather(self, *tensors: torch.Tensor) -> Any:
        """The global batch of each tensor from every process's rows (process order); the tensors as they are on
        one process. One tensor gives one tensor, several a tuple."""
        whole = tuple(self.runtime.gather(x) for x in tensors)
        return whole[0] if len(whole) == 1 else whole

    def local(self, x: torch.Tensor | Sequence) -> torch.Tensor | list:
        """This process's rows of a tensor or a list over the global batch (the inverse of `gather`)."""
        return self.runtime.local(x) if isinstance(x, torch.Tensor) else self.runtime.shard(x)

    def prepare(self, module: nn.Module) -> nn.Module:
        """What the update runs `module` through: DDP-wrapped under several processes (`Runtime.prepare`)."""
        return self.runtime.prepare(module)

    def evaluate(self, step: int | None = None) -> dict[str, float]:
        """The held-out metrics when evaluation is due at `step` (every eval_every steps; always when step is None)."""
        if self._evaluate is None or (step is not None and step % self.config.eval_every):
            return {}
        return self._evaluate()

    def micro_batches(self, rows: torch.Tensor | Sequence) -> list:
        """`rows` (the rows of one optimizer step: a tensor of indices or a list) cut into
        config.gradient_accumulation_steps consecutive micro-batches, empty ones left out (`[rows]` when k = 1)."""
        k = self.config.gradient_accumulation_steps
        pieces = [rows[len(rows) * i // k : len(rows) * (i + 1) // k] for i in range(k)]
        return [piece for piece in pieces if len(piece)]

    def backward(self, loss: torch.Tensor, over: torch.Tensor | int, aggregation: str = "token-mean",
                 of: torch.Tensor | int | None = None) -> None:
        """Backward of one micro-batch's loss, its gradients added to those of the step's earlier micro-batches.

        `over` is what the loss aggregates on this process: the (b, T) mask of its tokens (how they count:
        `aggregation`, as in `losses.aggregate`), or its number of rows (a mean over pairs or examples); `of` is the
        same for this process's whole batch of the step (None: `over` is the whole, no accumulation). The loss is
        weighted by its share of the step's global batch (`Runtime.share`): its count over the whole batch's, over
        every process. So the summed gradients of the k micro-batches, averaged over the processes by DDP, are the
        gradient of the one loss over the global batch; on one process without accumulation the weight is 1.
        `step` returns the sum of the weighted losses: the loss of the whole batch."""
        loss = loss * self.runtime.share(over, aggregation, of)
        self.runtime.backward(loss)
        self._step_loss = self._step_loss + loss.detach()

    def step(self) -> tuple[torch.Tensor | float, torch.Tensor]:
        """One optimizer step on the gradients `backward` summed: unscale -> clip -> step (`optimizer_step`).
        Returns the step's loss (the sum of its weighted micro-batch losses: the loss of the whole batch) and the
        gradient norm before clipping."""
        loss, self._step_loss = self._step_loss, 0.0
        return loss, optimizer_step(self.optimizer, self.params, self.config.max_grad_norm, self.runtime.scaler)

    def add(self, **metrics: float | torch.Tensor) -> None:
        """Metrics of one update; the next `log` writes their mean over the step's updates (one rule for all)."""
        for key, value in metrics.items():
            self._sums[key] = self._sums.get(key, 0.0) + plain(value)
            self._counts[key] = self._counts.get(key, 0) + 1

    def log(self, step: int, metrics: dict[str, Any], **loop_state: Any) -> None:
        """Write the step's metrics (and the means of `add`), averaged over the processes; save a checkpoint when
        one is due, with the loop's own state (restored into `loop_state` on resume)."""
        means = {key: total / self._counts[key] for key, total in self._sums.items()}
        self._sums, self._counts = {}, {}
        self.history.log(step, **self.runtime.reduce(metrics | means), lr=self.lr)
        self.checkpointer.save_if_due(step + 1, self.history, **loop_state)

    def finish(self, model: nn.Module | None = None, tokenizer=None, steps: int | None = None, folder: str = "model",
               **modules: nn.Module) -> Path | None:
        """Log the held-out metrics of the final model (when there is an evaluation) after the last step (`steps`,
        default config.steps), and save `model` into `folder` with `tokenizer`, and `modules` beside it
        (`save_run`), when a model is given."""
        try:
            final = self.evaluate() if self._evaluate is not None else {}
            if final:  # a run without a held-out evaluation adds no empty row
                self.history.log(steps or self.config.steps, **final)
            if model is None:
                return None
            return save_run(model, tokenizer, self.config, self.history, folder, **modules)
        except BaseException:
            self.release()
            raise
