"""What a training run holds in memory: a census of its models and optimisers, found by the garbage collector.

The lecture counts "models in memory" per method (PPO 4, GRPO 2, DPO 2). Rather than trust a docstring, this
module asks Python which `torch.nn.Module`s are alive while a trainer runs:

    from minirlhf.course import memory
    census, (model, tokenizer, history) = memory.census_during(
        lambda callbacks: train_grpo(task, config, callbacks=callbacks))
    census.summary()     # '2 (policy, reference)'
    census.table()       # markdown: role, class, parameters, MiB, trained?

A "model" is a top-level module that owns parameters (a transformer block is part of its model, not a model).
Roles: a language model (it has `.generate`) that is trained is the "policy", a frozen one the "reference";
`ValueHead` is PPO's "value head" and `RewardModel` the "reward model" (matched by class name, so this module
does not import the trainers). Parameters shared between models are counted once; tied weights (GPT-2's
embedding = output layer) are counted once by `Module.parameters()` itself.

Used by notebooks 03b, 04b, 06a and by benchmarks/_bench.py.
"""

from __future__ import annotations

import gc
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

KINDS = (nn.Module, torch.optim.Optimizer)
ROLE_ORDER = ("policy", "reference", "value head", "reward model")
MiB = 2**20


def alive(collect: bool = True) -> dict[int, Any]:
    """Every module and optimiser alive right now, by id. `collect`: run the garbage collector first, so that
    only objects that are still reachable are counted."""
    if collect:
        gc.collect()
    with warnings.catch_warnings():  # touching some deprecated torch objects warns
        warnings.simplefilter("ignore")
        return {id(obj): obj for obj in gc.get_objects() if issubclass(type(obj), KINDS)}


def top_level(modules: Iterable[nn.Module]) -> list[nn.Module]:
    """The models among `modules`: those with parameters that are not a child of another module in the list."""
    modules = list(modules)
    children = {id(child) for module in modules for child in module.children()}
    return [m for m in modules if id(m) not in children and next(m.parameters(), None) is not None]


def _tensor_bytes(tensors: Iterable[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def optimizer_state_bytes(optimizers: Iterable[torch.optim.Optimizer]) -> int:
    """Bytes of the optimisers' state tensors (AdamW: two moments per trained parameter, plus a step count)."""
    return _tensor_bytes(t for o in optimizers for state in o.state.values() for t in state.values()
                         if torch.is_tensor(t))


def gradient_bytes(models: Iterable[nn.Module]) -> int:
    """Bytes of the .grad tensors the models hold right now (None after `zero_grad(set_to_none=True)`)."""
    return _tensor_bytes(p.grad for m in models for p in m.parameters() if p.grad is not None)


def role_of(module: nn.Module, trained: bool) -> str:
    name = type(module).__name__
    if name == "ValueHead":
        return "value head"
    if name == "RewardModel":
        return "reward model"
    if hasattr(module, "generate"):
        return "policy" if trained else "reference"
    return name


def model_census(modules: Iterable[nn.Module] | None = None,
                 optimizers: Iterable[torch.optim.Optimizer] | None = None,
                 exclude: Sequence[nn.Module] = ()) -> list[dict]:
    """One dict per model: {"role", "class", "params", "bytes", "trained"}, in the order policy, reference,
    value head, reward model, others.

    modules: the models to describe; None = every top-level module alive in this process.
    optimizers: when given, a model is "trained" if one of them updates any of its parameters; otherwise if any
    of its parameters requires a gradient. exclude: modules to leave out (e.g. a benchmark's own copy of p_ref).
    """
    if modules is None:
        modules = top_level(obj for obj in alive().values() if isinstance(obj, nn.Module))
    updated = None
    if optimizers is not None:
        updated = {id(p) for o in optimizers for group in o.param_groups for p in group["params"]}
    skip = {id(m) for m in exclude}
    seen: set[int] = set()
    census = []
    for module in modules:
        if id(module) in skip:
            continue
        params = [p for p in module.parameters() if id(p) not in seen]
        if not params:
            continue
        seen.update(id(p) for p in params)
        trained = any(id(p) in updated for p in params) if updated is not None else any(
            p.requires_grad for p in params)
        census.append({"role": role_of(module, trained), "class": type(module).__name__,
                       "params": sum(p.numel() for p in params), "bytes": _tensor_bytes(params),
                       "trained": trained})
    census.sort(key=lambda m: ROLE_ORDER.index(m["role"]) if m["role"] in ROLE_ORDER else len(ROLE_ORDER))
    return census


def census_summary(models: Sequence[dict]) -> str:
    """'2 (policy, reference)' and so on."""
    return f"{len(models)} ({', '.join(m['role'] for m in models)})" if models else "0"


def census_mb(models: Sequence[dict]) -> float:
    """Weights of the census in MiB."""
    return sum(m["bytes"] for m in models) / MiB


@dataclass
class Census:
    """The models a run holds, the bytes of its optimiser state and of the gradients it holds."""

    models: list[dict]
    optimizer_bytes: int = 0
    gradient_bytes: int = 0
    optimizers: int = 0  # how many optimisers were found

    def __len__(self) -> int:
        return len(self.models)

    @property
    def roles(self) -> list[str]:
        return [m["role"] for m in self.models]

    @property
    def n_trained(self) -> int:
        return sum(m["trained"] for m in self.models)

    @property
    def weight_bytes(self) -> int:
        return sum(m["bytes"] for m in self.models)

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.optimizer_bytes + self.gradient_bytes

    def summary(self) -> str:
        return census_summary(self.models)

    def listing(self) -> str:
        """'GPT2LMHeadModel policy (trained), GPT2LMHeadModel reference (frozen)'."""
        return ", ".join(f"{m['class']} {m['role']} ({'trained' if m['trained'] else 'frozen'})"
                         for m in self.models)

    def rows(self) -> list[tuple[str, int, int]]:
        """(what, parameters, bytes): one row per model, then the gradients and the optimiser state."""
        rows = [(f"{m['role']} ({m['class']}, {'trained' if m['trained'] else 'frozen'})", m["params"], m["bytes"])
                for m in self.models]
        rows += [("gradients", 0, self.gradient_bytes), ("optimiser state", 0, self.optimizer_bytes)]
        return rows

    def table(self) -> str:
        """A markdown table of `rows()` with a total."""
        lines = ["| in memory | parameters | bytes | MiB |", "|---|---:|---:|---:|"]
        for what, params, nbytes in self.rows():
            lines.append(f"| {what} | {params:,} | {nbytes:,} | {nbytes / MiB:.2f} |")
        lines.append(f"| **total** | | {self.total_bytes:,} | {self.total_bytes / MiB:.2f} |")
        return "\n".join(lines)

    def _repr_markdown_(self) -> str:
        return self.table()


def measure(modules: Iterable[nn.Module] | None = None, optimizers: Sequence[torch.optim.Optimizer] | None = None,
            exclude: Sequence[nn.Module] = ()) -> Census:
    """A `Census` of the given models (None: every model alive), their gradients and the optimisers' state.
    optimizers=None: "trained" falls back to requires_grad (see `model_census`)."""
    if modules is None:
        modules = top_level(obj for obj in alive().values() if isinstance(obj, nn.Module))
    skip = {id(m) for m in exclude}
    models = [m for m in modules if id(m) not in skip]
    found = list(optimizers) if optimizers is not None else []
    return Census(models=model_census(models, optimizers), optimizer_bytes=optimizer_state_bytes(found),
                  gradient_bytes=gradient_bytes(models), optimizers=len(found))


def census_during(run: Callable[[list], Any]) -> tuple[Census, Any]:
    """Call `run(callbacks)` and, at the first logged step (the trainers call every callback with the history
    after each logged step, when all their models exist), take a census of the models and optimisers created
    since the call began. Returns (census, whatever run returned).

    `run` receives a list of callbacks to pass on, e.g. `lambda cb: train_grpo(task, config, callbacks=cb)`.
    Models that existed before the call (a reward model built outside it, say) are not counted.
    """
    before = alive(collect=False)  # held until the end, so that no id of an old object can be reused
    seen: dict[str, Census] = {}

    def spy(_history) -> None:
        if seen:
            return
        now = alive()
        modules = [obj for obj in now.values() if isinstance(obj, nn.Module)]
        new_models = [m for m in top_level(modules) if id(m) not in before]
        new_optimizers = [o for key, o in now.items() if key not in before and isinstance(o, torch.optim.Optimizer)]
        seen["census"] = measure(new_models, new_optimizers)

    result = run([spy])
    if not seen:
        raise RuntimeError("the run never called its callbacks: no census was taken (did it log any step?)")
    return seen["census"], result


def census_table(censuses: Mapping[str, Census]) -> str:
    """A markdown table with one row per named run: its models, how many are trained, weights and optimiser
    state in MiB."""
    lines = ["| run | models in memory (measured) | trained | weights (MiB) | optimiser state (MiB) |",
             "|---|---|---|---|---|"]
    for name, census in censuses.items():
        lines.append(f"| {name} | {len(census)}: {census.listing()} | {census.n_trained} | "
                     f"{census.weight_bytes / MiB:.2f} | {census.optimizer_bytes / MiB:.2f} |")
    return "\n".join(lines)
