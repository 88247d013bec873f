"""Mixed precision and memory: what a trainer needs to run fast on a GPU and stay exact where it matters.

    dtype = resolve_precision("auto", device)    # cuda: bf16 (fp16 where the GPU has no bf16), else float32
    with autocast(device, dtype):                # matmuls in bf16/fp16, weights and optimizer state in float32
        loss = ...                               # log-softmax and losses stay float32 (see minirlhf.logprobs)
    scaler = grad_scaler(device, dtype)          # fp16 only: scale the loss so small gradients do not underflow

The weights stay float32 ("master weights") and autocast runs each matmul in the low-precision dtype: the
standard recipe, halving activation memory and using the tensor cores, while AdamW's updates stay exact.
bf16 has float32's exponent range, so it needs no loss scaling; fp16 (e.g. a T4, which has no bf16) does.
"""

from __future__ import annotations

from contextlib import AbstractContextManager, nullcontext

import torch
from torch import nn

from minirlhf.checks import check_choice

PRECISIONS = ("auto", "fp32", "bf16", "fp16")
_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def resolve_precision(precision: str, device: torch.device) -> torch.dtype:
    """The compute dtype of autocast: 'auto' is bf16 on a CUDA GPU that supports it, fp16 on one that does not
    (T4, V100), float32 elsewhere. bf16 also runs on CPU (slowly: for tests); fp16 needs CUDA."""
    check_choice("precision", precision, PRECISIONS)
    if precision == "auto":
        if device.type != "cuda":
            return torch.float32
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if precision == "fp16" and device.type != "cuda":
        raise ValueError(f"precision='fp16' needs a CUDA device, got {device}; use 'bf16' or 'fp32'")
    return _DTYPES[precision]


def autocast(device: torch.device, dtype: torch.dtype) -> AbstractContextManager:
    """Run the forward passes inside in `dtype` (bf16/fp16); a no-op for float32."""
    if dtype == torch.float32:
        return nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def grad_scaler(device: torch.device, dtype: torch.dtype) -> torch.amp.GradScaler | None:
    """A loss scaler for fp16 (its 5-bit exponent underflows on small gradients); None for bf16 and float32."""
    return torch.amp.GradScaler(device.type) if dtype == torch.float16 else None


def enable_gradient_checkpointing(model: nn.Module) -> nn.Module:
    """Recompute each block's activations in the backward pass instead of storing them: roughly 30% more
    compute for activation memory that no longer grows with the number of layers. Active in train mode only,
    so sampling (eval mode, KV cache) is unaffected."""
    if hasattr(model, "activation_checkpointing_enable"):  # the name since transformers 5.24
        model.activation_checkpointing_enable({"use_reentrant": False})
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    return model


def memory_metrics(device: torch.device) -> dict[str, float]:
    """Peak GPU memory allocated by tensors since the start (GiB), for the metrics; {} off CUDA."""
    if device.type != "cuda":
        return {}
    return {"memory/peak_gib": torch.cuda.max_memory_allocated(device) / 2**30}
