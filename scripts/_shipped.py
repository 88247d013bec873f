"""What every script that builds a shipped model does last: write the model and its tokenizer into one folder."""

from __future__ import annotations

import time
from pathlib import Path


def write_model(model, tokenizer, out: Path, started: float) -> None:
    """Save `model` (safetensors) and `tokenizer` into `out`, and say how long the build took since `started`."""
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    print(f"wrote {out} in {time.time() - started:.0f}s")
