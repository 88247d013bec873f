"""The non-finite guard: training that produces inf or NaN stops at once, says where and why, and writes nothing.

One inf or NaN in a gradient turns every weight it touches into NaN at the next optimizer step, and from then on
the run trains nothing while it still "finishes". The checks here are called at the loop's few choke points:

    optimizer_step   check_gradients(grad_norm, ...)  before the weights are touched
    History.log      finite_row(row)                   metrics.jsonl stays JSON: inf/NaN -> null, flagged
    load_policy      check_start_weights(model, ...)   a model that starts non-finite is named as the cause
    Checkpointer     check_weights(..., "checkpoint")  a non-finite model is never written, nor resumed from
    save_run         check_weights(..., "final model")

Under fp16 with a GradScaler an inf gradient is routine: the scaler skips that update and halves its scale. The
guard only fires there once the scale has fallen below 1, i.e. when even the unscaled gradient is not finite.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

# What usually makes a post-training run go non-finite, in the order to check them.
LIKELY_CAUSES = (
    "likely causes: rewards too large (keep |R| within ~1e3; rescale the reward function), "
    "β too large, or the learning rate (lr) too high"
)
NONFINITE_FLAG = "nonfinite"  # metrics row key: the names of the metrics that were inf/NaN (stored as null)


class NonFiniteError(FloatingPointError):
    """Training produced inf or NaN; nothing non-finite was applied to the weights or written to disk."""


def check_gradients(
    grad_norm: torch.Tensor, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None = None
) -> None:
    """Raise NonFiniteError when the global gradient norm of `optimizer`'s next update is inf or NaN.

    With an fp16 `scaler` (already updated for this step), an overflow is only an error once its scale is below 1:
    above it, the scaler skips the update and retries with a smaller scale."""
    norm = float(grad_norm)
    if math.isfinite(norm):
        return
    if scaler is not None and scaler.get_scale() >= 1.0:
        return
    done = max((int(state["step"]) for state in optimizer.state.values() if "step" in state), default=0)
    where = f"at optimizer update {done + 1}"
    if scaler is not None:
        where += f" (the fp16 loss scale fell to {scaler.get_scale():g}: the gradient overflows even unscaled)"
    raise NonFiniteError(
        f"the gradient norm is {norm} {where}; the update was not applied and the last checkpoint is intact. "
        f"{LIKELY_CAUSES}"
    )


def nonfinite_parameters(modules: dict[str, nn.Module]) -> list[str]:
    """Names (`module/parameter`) of the floating-point tensors that hold an inf or NaN."""
    bad = []
    for module_name, module in modules.items():
        for name, tensor in module.state_dict().items():
            if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
                bad.append(f"{module_name}/{name}")
    return bad


def check_weights(modules: dict[str, nn.Module], what: str, step: int | None = None) -> None:
    """Refuse to write (or resume from) `what` when any weight of `modules` is inf or NaN."""
    bad = nonfinite_parameters(modules)
    if bad:
        at = f" at step {step}" if step is not None else ""
        listing = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise NonFiniteError(f"{what}{at}: weights hold inf or NaN ({listing}); it is not written. {LIKELY_CAUSES}")


def check_start_weights(model: nn.Module, what: str) -> None:
    """Refuse to train from weights that already hold inf or NaN: the run would blame its rewards, β or learning
    rate for what the model brought with it."""
    bad = nonfinite_parameters({"model": model})
    if bad:
        listing = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise NonFiniteError(f"{what}: its weights hold inf or NaN before training starts ({listing}); no reward, β "
                             "or learning rate caused this: load or rebuild a model whose weights are finite")


def finite_row(row: dict[str, Any]) -> dict[str, Any]:
    """The metrics row with every inf/NaN float replaced by None (JSON null), named under NONFINITE_FLAG."""
    bad = [k for k, v in row.items() if isinstance(v, float) and not math.isfinite(v)]
    if not bad:
        return row
    return {k: None if k in bad else v for k, v in row.items()} | {NONFINITE_FLAG: bad}
