"""pass@k of a model on a shipped task's held-out problems, named by plain values: what `python -m minirlhf
pass-at-k` runs (its flags are the fields of `PassAtKConfig`), and the same from Python:

    from minirlhf.tasks.held_out import PassAtKConfig, run_pass_at_k
    run_pass_at_k(PassAtKConfig(model="runs/grpo/model", task="arithmetic", k=[1, 4, 16], samples=16))

The model is loaded as every command loads it (`models.load_model`: a shipped name or a folder a run wrote), and the
task's own evaluator samples n answers per problem at temperature 1 and estimates pass@k without bias
(`arithmetic.held_out_pass_at_k`, `lab.held_out_pass_at_k`, `minirlhf.tasks.pass_at_k`): the command prints what
Python gives on the same seed. Every setting is checked when the config is made, before anything is loaded.
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from minirlhf.checks import check_count, check_interval
from minirlhf.errors import UserError
from minirlhf.models import SHIPPED, load_model, resolve_device
from minirlhf.paths import absolute, check_apart, check_writable
from minirlhf.tasks import arithmetic, lab
from minirlhf.tasks.pass_at_k import check_ks
from minirlhf.tasks.registry import MADE_IN_PYTHON, TASKS, task_options

PASS_AT_K_TASKS = ("arithmetic", "lab")  # the shipped tasks with a held-out pass@k
RUN_MODEL_FOLDER = "model"  # where a run writes its final model inside its out_dir (trainers.run.save_run)
SEEDS = 2**32  # a seed lies in [0, SEEDS), as a run's --seed does
# The most answers per problem. Memory grows with n, not with the number of problems: `pass_at_k.count_correct`
# samples 64 prompts at a time, all n answers of each at once, so 64·n rows. Measured on the tiny lab model (CPU, at
# the lab's longest cap, 120 tokens, no row stopping early): about 0.6 MiB per row, so n = 256 needs about 10 GiB,
# well within a 24 GiB machine (about 3.5 GiB at the default cap of 40); a larger model needs more per row.
MAX_SAMPLES = 256


@dataclass(frozen=True)
class PassAtKConfig:
    """One pass@k evaluation, checked when made: a ValueError names the field and its value."""

    # the model evaluated: a shipped short name (tiny-sft, tiny-lab), or a model folder (a run's final model is
    # <out_dir>/model)
    model: str = "tiny-sft"
    # arithmetic: the held-out sums; lab: the lab's held-out problems, pass@k per kind (easy, medium, hard)
    task: str = field(default="arithmetic", metadata={"choices": PASS_AT_K_TASKS})
    # the lab's knobs, NAME=VALUE each, as the trainers take them (filler=true max_new_tokens=40 tolerance=0, as in
    # minirlhf.tasks.lab.LabConfig; mix is refused: every kind is evaluated on its own)
    task_option: list[str] | None = field(default=None, metadata={"metavar": "NAME=VALUE"})
    samples: int = 16  # n: answers sampled per held-out problem, at temperature 1; at most 256 (memory grows with n)
    k: list[int] | None = None  # the k of each pass@k, each in 1..samples; None = 1 and the powers of 4 up to samples
    # held-out problems: arithmetic, N of the 992 drawn by the seed (None = all, in order); lab, N of each kind drawn
    # with replacement by the seed (None = 50), at most 830 (the most that one kind holds out)
    problems: int | None = None
    seed: int = 0  # draws the problems (--problems) and seeds the sampler
    device: str = "auto"  # "auto" = cuda, then mps, then cpu
    # a JSON file to write the config and the pass@k values to, besides printing them; None = print only
    out: str | None = field(default=None, metadata={"metavar": "FILE.json"})

    def __post_init__(self) -> None:
        name = type(self).__name__
        if not isinstance(self.model, str) or not self.model.strip():
            raise UserError(f"{name}.model must be a model name or folder, got {self.model!r}")
        final = Path(self.model).expanduser() / RUN_MODEL_FOLDER
        if (final / "config.json").is_file():
            raise UserError(f"{name}.model={self.model!r} is a run's folder: its final model is "
                            f"{str(Path(self.model) / RUN_MODEL_FOLDER)!r}")
        if not isinstance(self.task, str) or self.task not in PASS_AT_K_TASKS:
            known = isinstance(self.task, str) and (self.task in TASKS or self.task in MADE_IN_PYTHON)
            raise UserError(f"{name}.task={self.task!r} " + ("has no held-out pass@k" if known else "is no shipped "
                            "task") + f"; the tasks with a held-out pass@k: {', '.join(PASS_AT_K_TASKS)}")
        if "mix" in task_options(self.task, self.task_option):  # each knob parsed and checked (arithmetic: none)
            raise UserError(f"{name}.task_option={self.task_option!r} sets mix, which plays no part in pass@k: every "
                            "kind is evaluated on its own (pass@k/<kind>); drop it")
        check_count(f"{name}.samples", self.samples)
        check_interval(f"{name}.samples", self.samples, 1, MAX_SAMPLES, why="the memory of sampling grows with n")
        if self.k is not None and (not isinstance(self.k, list | tuple) or not self.k):
            raise UserError(f"{name}.k must be a list of whole numbers (None: 1 and the powers of 4 up to samples), "
                            f"got {self.k!r}")
        try:
            check_ks(self.ks, self.samples)
        except ValueError as err:
            raise UserError(f"{name}.{err}") from None
        twice = sorted({k for k in self.ks if self.ks.count(k) > 1})
        if twice:
            raise UserError(f"{name}.k={list(self.ks)!r} gives {twice[0]!r} twice: each pass@k once")
        if self.problems is not None:
            check_count(f"{name}.problems", self.problems)
            if self.task == "arithmetic":
                held_out = len(arithmetic.problems("test"))
                check_interval(f"{name}.problems", self.problems, 1, held_out,
                               why=f"the arithmetic task holds {held_out} problems out")
            else:  # drawn with replacement: beyond the largest kind's held-out problems, every kind only repeats
                held_out = max(len(lab.problems(kind, "test")) for kind in lab.KINDS)
                check_interval(f"{name}.problems", self.problems, 1, held_out,
                               why=f"the lab's largest kind holds {held_out} problems out")
        check_count(f"{name}.seed", self.seed, minimum=0)
        check_interval(f"{name}.seed", self.seed, 0, SEEDS, high_included=False, why="as a run's --seed")
        try:
            resolve_device(self.device)
        except (RuntimeError, ValueError) as err:
            raise UserError(f"{name}.device={self.device!r}: {err}") from None
        if self.out is not None:
            if not isinstance(self.out, str) or not self.out.strip():
                raise UserError(f"{name}.out must be a file path, got {self.out!r}")
            if absolute(self.out).is_dir():
                raise UserError(f"{name}.out={self.out!r} is a folder; give a file to write the JSON to")
            read = SHIPPED.get(self.model) or (self.model if Path(self.model).expanduser().exists() else None)
            check_apart({f"{name}.model": read}, {f"{name}.out": self.out})
            check_writable(f"{name}.out", self.out)  # here, not after the sampling

    @property
    def ks(self) -> tuple[int, ...]:
        """The k of each pass@k: `k`, else 1 and the powers of 4 up to n (1, 4, 16 for n = 16)."""
        if self.k is not None:
            return tuple(self.k)
        return tuple(4**i for i in range(self.samples.bit_length()) if 4**i <= self.samples)


def held_out_pass_at_k(model, tokenizer, config: PassAtKConfig) -> dict[str, float]:
    """{"pass@k": value} (arithmetic) or {"pass@k/<kind>": value} (lab) of `model` as `config` asks, by the task's
    own evaluator."""
    if config.task == "lab":
        lab_config = lab.LabConfig(**task_options("lab", config.task_option))
        per_kind = lab.PASS_AT_K_PER_KIND if config.problems is None else config.problems
        return lab.held_out_pass_at_k(model, tokenizer, lab_config, n=config.samples, ks=config.ks,
                                      per_kind=per_kind, seed=config.seed)
    held_out = None if config.problems is None else random.Random(config.seed).sample(
        arithmetic.problems("test"), config.problems)
    return arithmetic.held_out_pass_at_k(model, tokenizer, n=config.samples, ks=config.ks, held_out=held_out,
                                         seed=config.seed)


def run_pass_at_k(config: PassAtKConfig) -> dict[str, float]:
    """Load `config.model`, evaluate its pass@k (`held_out_pass_at_k`), write {"config", "pass_at_k"} as JSON to
    `config.out` when given (the config with the k and the device it used: "cpu" for "auto" on a machine without a
    GPU), and return the pass@k values."""
    try:
        model, tokenizer = load_model(config.model, device=config.device)
    except (OSError, ValueError) as err:  # a missing folder, a folder without a model, an unreachable hub name
        raise UserError(f"{type(config).__name__}.model={config.model!r}: {err}") from None
    metrics = held_out_pass_at_k(model, tokenizer, config)
    if config.out is not None:
        out = absolute(config.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        settings = dataclasses.asdict(config) | {"k": list(config.ks), "device": str(resolve_device(config.device))}
        out.write_text(json.dumps({"config": settings, "pass_at_k": metrics}, indent=1) + "\n", encoding="utf-8")
    return metrics
