"""Plumbing shared by the benchmark scripts (not part of the library, never imported by it).

Each benchmark runs every method in a FRESH Python process ("worker"), so that the peak resident memory of a
method (`ru_maxrss` of that process) is its own and not the maximum of everything that ran before it. The
parent writes the job list to a JSON file, runs `python <script> --worker jobs.json results.json`, and reads the
results back. `--quick` puts all jobs into ONE worker (one torch import instead of one per method): the same
code path, but then the peak RSS is cumulative over the jobs and only shows that the plumbing works.

Also here: the census of the models a method holds (found with the garbage collector while it trains), the
machine description, and markdown tables.
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# ----------------------------------------------------------------------------------------------- processes


def peak_rss_mb() -> float:
    """Peak resident set size of THIS process so far, in MiB (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def run_workers(script: str, jobs: list[dict], one_process: bool) -> list[dict]:
    """Run each job in its own fresh process (or all of them in one when `one_process`); return their results.

    The child's stdout/stderr go straight to ours (progress bars); a failing job stops the benchmark.
    """
    batches = [jobs] if one_process else [[job] for job in jobs]
    results: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="minirlhf-bench-") as tmp:
        for i, batch in enumerate(batches):
            job_file, result_file = Path(tmp) / f"jobs{i}.json", Path(tmp) / f"results{i}.json"
            job_file.write_text(json.dumps(batch))
            names = ", ".join(job["name"] for job in batch)
            print(f"\n=== {names}: fresh process", flush=True)
            started = time.perf_counter()
            proc = subprocess.run([sys.executable, script, "--worker", str(job_file), str(result_file)])
            if proc.returncode != 0:
                raise SystemExit(f"benchmark worker for {names} failed with exit code {proc.returncode}")
            batch_results = json.loads(result_file.read_text())
            for result in batch_results:
                result["process_seconds"] = time.perf_counter() - started  # incl. the interpreter + torch start
                result["shared_process"] = one_process
            results += batch_results
    return results


def worker_main(job_file: str, result_file: str, run_job: Callable[[dict], dict]) -> None:
    """The child side of `run_workers`: run the jobs in order, write one result dict per job."""
    import torch
    import transformers  # noqa: F401  (imported before the floor is read)

    floor = peak_rss_mb()  # the interpreter with torch and transformers imported, before any model exists
    results = []
    for job in json.loads(Path(job_file).read_text()):
        load_before = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        result = run_job(job)
        result |= {
            "load_average_1min": [load_before, os.getloadavg()[0] if hasattr(os, "getloadavg") else None],
            "name": job["name"],
            "peak_rss_mb": peak_rss_mb(),
            "import_rss_mb": floor,
            "torch_threads": torch.get_num_threads(),
        }
        results.append(result)
        Path(result_file).write_text(json.dumps(results, indent=1))


# ----------------------------------------------------------------------------------------------- models


def model_census(exclude: Sequence[Any] = ()) -> list[dict]:
    """The models alive in this process right now, found by the garbage collector: one dict per top-level
    `nn.Module` that owns parameters (a module that is the child of another one is part of that one), with
    its role, class, parameter count and bytes. Parameters shared between models are counted once.

    Roles: a language model with trainable weights is the "policy", one with every weight frozen a
    "reference"; `ValueHead` is PPO's "value head"; `RewardModel` is the "reward model". `exclude`: modules
    the benchmark itself holds (e.g. an evaluation-only copy of p_ref) that the method does not need.
    """
    from torch import nn

    gc.collect()
    with warnings.catch_warnings():  # isinstance() on some deprecated torch objects warns
        warnings.simplefilter("ignore")
        modules = [obj for obj in gc.get_objects() if isinstance(obj, nn.Module)]
    children = {id(child) for module in modules for child in module.children()}
    skip = {id(module) for module in exclude}
    seen_params: set[int] = set()
    census = []
    for module in modules:
        if id(module) in children or id(module) in skip:
            continue
        params = [p for p in module.parameters() if id(p) not in seen_params]
        if not params:
            continue
        seen_params.update(id(p) for p in params)
        name = type(module).__name__
        if name == "ValueHead":
            role = "value head"
        elif name == "RewardModel":
            role = "reward model"
        elif hasattr(module, "generate"):
            role = "policy" if any(p.requires_grad for p in params) else "reference"
        else:
            role = name
        census.append({
            "role": role,
            "class": name,
            "params": sum(p.numel() for p in params),
            "bytes": sum(p.numel() * p.element_size() for p in params),
        })
    order = ["policy", "reference", "value head", "reward model"]
    census.sort(key=lambda m: order.index(m["role"]) if m["role"] in order else len(order))
    return census


def census_summary(census: list[dict]) -> str:
    """'2 (policy, reference)' and so on."""
    return f"{len(census)} ({', '.join(m['role'] for m in census)})" if census else "0"


def census_mb(census: list[dict]) -> float:
    return sum(m["bytes"] for m in census) / 2**20


# ----------------------------------------------------------------------------------------------- reporting


def machine_info() -> dict:
    """What ran the benchmark. Versions are read from the installed metadata (no torch import needed)."""
    from importlib.metadata import version

    return {
        "date": _dt.date.today().isoformat(),
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": version("torch"),
        "transformers": version("transformers"),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
        "load_average_1min_at_start": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def fmt(value: float | None, digits: int = 3) -> str:
    if value is None:
        return "n/a"
    text = f"{value:.{digits}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text  # no "-0.00"
