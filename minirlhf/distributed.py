"""Where a trainer runs: its device, its precision and, under `accelerate launch`, its share of a data-parallel job.

    runtime, config = setup_runtime(config)      # first line of every trainer
    train_model = runtime.prepare(model)         # DDP-wrapped under several processes; else the model itself
    with runtime.autocast():                     # bf16/fp16 forward passes (minirlhf.precision)
        logp = response_logprobs(train_model, ...)
    runtime.backward(loss)                       # loss.backward(), scaled for fp16
    history.log(step, **runtime.reduce(metrics)) # metrics averaged over processes, + peak GPU memory

One process runs everything unless the script is started by `accelerate launch --num_processes N` (one process
per GPU; on CPU, add `--multi_gpu` and they talk over gloo). Then it is data parallel:

- Every process holds the whole model, starts from the same seed and draws the SAME global batch (prompts,
  pairs, examples) with the same random numbers, and works on its own contiguous, equal share of it (batch sizes
  that do not divide by N are refused before the first step, `setup_runtime`, `check_epoch`). GRPO/RLOO groups
  stay whole: prompts are shared out, not completions. Sampling draws the noise of the whole batch and keeps its
  own rows, so each process samples exactly the completions a single process would (`sampling.sample`).
- Batch statistics (group-normalised advantages, whitening, KTO's z_ref) are computed on the gathered batch.
- DDP averages the gradients. Every loss is multiplied by `share` (`Run.update` does it, told what the loss
  aggregates: a token mask and how it counts, or a number of rows), so that the average of the processes' losses
  is the loss over the global batch: N processes take the same optimisation steps as one process with the same
  global batch (up to float rounding). Two things are the same in distribution only, not step for step:
  minibatches (`minibatch_size`: each process takes its own rows in the order of the one global permutation,
  `online.minibatches`, so a minibatch holds other rows than one process's would) and dropout (on in SFT and the
  reward model: every process draws its rows' masks from the same seeded generator, not one process's masks).
- Logged metrics are averaged over the processes (`reduce`). With equal shares of rows (the door insists on them)
  a mean over rows is the global one exactly (a mean over some of the rows, such as KTO's class means, and what
  is no mean, reward_std, advantage_std and PPO's explained_variance, are taken on the gathered batch); a token
  mean logged as a metric (entropy, clip fractions, k3 KL) is the mean of the processes' token means: close to
  the global token mean, not equal to it.
- Every process evaluates (the same model on the same held-out set); only the main process writes metrics and
  checkpoints.

`accelerate` is needed only for several processes: `pip install "minirlhf[dist]"`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, TypeVar

import torch
from torch import nn

from minirlhf.checks import check_choice
from minirlhf.errors import UserError
from minirlhf.losses import AGGREGATIONS
from minirlhf.models import resolve_device
from minirlhf.precision import autocast, enable_gradient_checkpointing, grad_scaler, memory_metrics, resolve_precision

Config = TypeVar("Config")


def launched_processes() -> int:
    """How many processes `accelerate launch` (or torchrun) started for this job; 1 for a plain `python`."""
    return _process_env()[1]


def is_main_process() -> bool:
    """Whether this is the process that reports and writes (rank 0; a plain `python` run is always it)."""
    return _process_env()[0] == 0


def _process_env() -> tuple[int, int]:
    """(RANK, WORLD_SIZE) as the launcher set them ((0, 1) when unset), refused unless 0 <= RANK < WORLD_SIZE."""
    values = {name: os.environ.get(name, default) for name, default in (("RANK", "0"), ("WORLD_SIZE", "1"))}
    for name, value in values.items():
        if not (value.isascii() and value.isdigit()):
            raise UserError(f"environment variable {name}={value!r}: expected a whole number (accelerate launch and "
                            "torchrun set it; unset it for one process)")
    rank, world_size = int(values["RANK"]), int(values["WORLD_SIZE"])
    if not rank < world_size:
        raise UserError(f"environment variables RANK={rank} and WORLD_SIZE={world_size}: RANK must be below "
                        "WORLD_SIZE, which must be at least 1")
    return rank, world_size


class Runtime:
    """Device, precision and process group of one training run (see the module docstring)."""

    def __init__(
        self, device: str = "auto", precision: str = "auto", gradient_checkpointing: bool = False,
        compile: bool = False,
    ):
        self.accelerator = _accelerator(device) if launched_processes() > 1 else None
        self.device = self.accelerator.device if self.accelerator else resolve_device(device)
        self.dtype = resolve_precision(precision, self.device)  # the autocast dtype
        self.scaler = grad_scaler(self.device, self.dtype)  # fp16 only
        self.gradient_checkpointing = gradient_checkpointing
        self.compile = compile

    @property
    def rank(self) -> int:
        return self.accelerator.process_index if self.accelerator else 0

    @property
    def world_size(self) -> int:
        return self.accelerator.num_processes if self.accelerator else 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def prepare(self, model: nn.Module) -> nn.Module:
        """The module to run the training forward passes through: gradient checkpointing switched on when asked
        (on its transformer; a module without one, such as PPO's value head, has nothing to recompute), and, under
        several processes, wrapped in DistributedDataParallel (which averages gradients in backward); with
        `compile`, that module compiled by torch.compile (sampling keeps the uncompiled one, whose decode steps
        have their own CUDA graph). Sample, evaluate and save with the unwrapped `model`: it is the same
        parameters."""
        # the transformer: the model itself, or a reward model's backbone
        transformer = next((m for m in model.modules() if getattr(m, "supports_gradient_checkpointing", False)), None)
        if self.gradient_checkpointing and transformer is not None:
            enable_gradient_checkpointing(transformer)
        module = self.accelerator.prepare_model(model) if self.accelerator else model
        return torch.compile(module) if self.compile else module

    def autocast(self) -> AbstractContextManager:
        return autocast(self.device, self.dtype)

    def backward(self, loss: torch.Tensor) -> None:
        """loss.backward(); with fp16, of the scaled loss (`optimizer_step` unscales before clipping)."""
        (self.scaler.scale(loss) if self.scaler is not None else loss).backward()

    # --- sharing out the global batch ---------------------------------------------------------------------

    def local_rows(self, n: int) -> slice:
        """This process's contiguous share of n rows (shares differ by at most one row)."""
        if n < self.world_size:
            raise ValueError(f"a batch of {n} cannot be shared out over {self.world_size} processes")
        return slice(self.rank * n // self.world_size, (self.rank + 1) * n // self.world_size)

    def shard(self, items: Sequence) -> list:
        return list(items[self.local_rows(len(items))])

    def check_epoch(self, n: int, size: int, steps: int, field: str) -> None:
        """Refuse, before the first step, a batch the run would draw that cannot be shared out in equal parts:
        `steps` batches of `size` of n rows, where every batch holds all n when n < size and each epoch ends with
        the n mod size left over. (Equal parts keep every logged mean, not only the loss, the global batch's.)"""
        full, last = divmod(n, size)
        drawn = {size} if full else {n}
        drawn |= {last} if full and last and steps > full else set()
        unequal = sorted(b for b in drawn if b % self.world_size)
        if unequal:
            batch = unequal[0]
            raise ValueError(f"{field}={size} over {n} rows draws a batch of {batch}"
                             f"{' (the last of each epoch)' if full and batch == last else ''}, which cannot be shared "
                             f"out equally over {self.world_size} processes: choose a batch size that the processes "
                             f"divide, and that divides {n} or leaves a multiple of {self.world_size} for the last "
                             "batch")

    def local(self, x: torch.Tensor) -> torch.Tensor:
        """This process's rows of a tensor over the global batch (the inverse of `gather`)."""
        return x[self.local_rows(x.shape[0])]

    def gather(self, x: torch.Tensor) -> torch.Tensor:
        """The global batch from every process's rows (equal shares), concatenated in process order."""
        return self.accelerator.gather(x.contiguous()) if self.accelerator else x

    def share(self, over: torch.Tensor | int, aggregation: str = "token-mean",
              of: torch.Tensor | int | None = None) -> torch.Tensor | float:
        """The weight on this process's loss that makes the summed (gradient accumulation) and DDP-averaged gradients
        the gradient of the one loss over the step's global batch. `over` is what the loss aggregates here: the
        (b, T) mask of its tokens, or its number of rows (pairs, examples); `aggregation` (`losses.aggregate`) says
        what a mask counts:

            "token-mean"                          Σ x / n, n = Σ mask (real tokens)
            "seq-mean", "seq-sum", "constant"     a mean over n = b rows (constant: Σ x / (b · T), T the
                                                  generation budget, the same on every process)

        `of` is this process's whole batch of the optimizer step when `over` is one micro-batch of it (gradient
        accumulation; None: `over` is the whole). With n the micro-batch's count and n_q the whole batch's count on
        process q of N,

            share = N · n / Σ_q n_q          (n / n_1 on one process: 1 without accumulation)

        The micro-batch's own normaliser is undone, the large batch's put in its place: k micro-batches of a
        token mean sum to the token mean of the batch, not to the mean of k token means."""
        check_choice("aggregation", aggregation, AGGREGATIONS)
        if self.accelerator is None and of is None:
            return 1.0
        count = _count(over, aggregation)
        total = count if of is None else _count(of, aggregation)
        if self.accelerator is None:
            return count / max(total, 1.0)
        total = torch.as_tensor(total, dtype=torch.float32, device=self.device)
        return self.world_size * count / self.accelerator.reduce(total, "sum").clamp_min(1)

    def sampling_rows(self, n: int) -> tuple[int, int] | None:
        """(first row, global rows) of this process's n sampled completions in the global batch, for `sample`;
        None on a single process."""
        if self.accelerator is None:
            return None
        return self.rank * n, self.world_size * n

    def reduce(self, metrics: dict[str, Any]) -> dict[str, Any]:
        """Every metric averaged over the processes (all log the same keys), plus this process's peak GPU memory."""
        if self.accelerator is not None and metrics:
            keys = sorted(metrics)
            values = torch.tensor([float(metrics[k]) for k in keys], dtype=torch.float64, device=self.device)
            metrics = dict(zip(keys, self.accelerator.reduce(values, "mean").tolist()))
        return metrics | memory_metrics(self.device)


def _count(over: torch.Tensor | int, aggregation: str) -> float:
    """What a loss aggregates over (`Runtime.share`): an int is a number of rows; a mask counts its real tokens
    (token-mean) or its rows."""
    if isinstance(over, int):
        return float(over)
    return float(over.sum()) if aggregation == "token-mean" else float(over.shape[0])


def setup_runtime(config: Config) -> tuple[Runtime, Config]:
    """The trainer's Runtime from its config (`device`, `precision`, `gradient_checkpointing`), and the config each
    process runs with: under several processes, this process's own device, and no `out_dir` nor progress bar
    except on the main process (only it writes)."""
    runtime = Runtime(config.device, config.precision, config.gradient_checkpointing, config.compile)
    for name in ("prompts_per_step", "minibatch_size", "batch_size"):  # every process gets whole, equal shares
        value = getattr(config, name, None)
        if value and value % runtime.world_size:
            raise ValueError(f"{type(config).__name__}.{name}={value} must be divisible by the {runtime.world_size} "
                             "processes: each takes an equal share of every batch")
    if runtime.world_size > 1:
        config = dataclasses.replace(config, device=str(runtime.device))
        if not runtime.is_main:
            config.out_dir = None  # set after `replace`, whose __post_init__ would restore it from `resume`
            config.progress = False  # one progress bar, the main process's
    return runtime, config


def _accelerator(device: str):
    try:
        from accelerate import Accelerator
    except ImportError as err:
        raise ImportError(
            f"{launched_processes()} processes were launched, and multi-process training needs Hugging Face "
            "Accelerate: pip install 'minirlhf[dist]'  (or: pip install accelerate==1.15.0)"
        ) from err
    return Accelerator(cpu=str(device) == "cpu" or not torch.cuda.is_available(), mixed_precision="no")
