"""Plumbing shared by the benchmark scripts (not part of the library, never imported by it).

Each benchmark runs every method in a FRESH Python process ("worker"), so that the peak resident memory of a
method (`ru_maxrss` of that process) is its own and not the maximum of everything that ran before it. The
parent writes the job list to a JSON file, runs `python <script> --worker jobs.json results.json`, and reads the
results back. `--quick` puts all jobs into ONE worker (one torch import instead of one per method): the same
code path, but then the peak RSS is cumulative over the jobs and only shows that the plumbing works.

Also here: the flags every benchmark takes, the census of the models a method holds (found with the garbage
collector while it trains), the machine description, markdown tables and figures written to files.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

# ----------------------------------------------------------------------------------------------- processes


def add_run_flags(parser: argparse.ArgumentParser, results: str, quick: str) -> None:
    """The flags every benchmark shares: --out (the folder of results.{json,md,png}), --quick (a smoke test that
    does `quick`), and the hidden --worker with which run_workers starts each fresh process."""
    parser.add_argument("--out", default="benchmarks/results", help=f"folder for {results}.{{json,md,png}}")
    parser.add_argument("--quick", action="store_true", help=f"smoke test: {quick}")
    parser.add_argument("--worker", nargs=2, metavar=("JOBS", "RESULTS"), help=argparse.SUPPRESS)


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


# ----------------------------------------------------------------------------------------------- evaluation


class HeldOutAccuracy:
    """A run's evaluation on arithmetic: greedy exact match on the first `n` held-out problems (all when n is None),
    each evaluation recorded in `evals` with its wall time and its train time since `t0`: the wall time less every
    evaluation so far (`eval_s`), so that evaluation is taken out of train time."""

    def __init__(self, n: int | None, t0: float) -> None:
        from minirlhf.tasks import arithmetic  # imported here: the parent process never needs torch

        self.problems = arithmetic.problems("test")[:n]
        self.t0, self.eval_s, self.evals = t0, 0.0, []

    def __call__(self, model, tokenizer) -> dict[str, float]:
        from minirlhf.tasks import arithmetic

        start = time.perf_counter()
        accuracy = arithmetic.accuracy(model, tokenizer, self.problems)
        end = time.perf_counter()
        self.eval_s += end - start
        self.evals.append({"accuracy": accuracy, "wall_s": end - self.t0, "train_s": end - self.t0 - self.eval_s})
        return {"accuracy": accuracy}


# ----------------------------------------------------------------------------------------------- models


def model_census(exclude: Sequence[Any] = ()) -> list[dict]:
    """The models alive in this process right now (`minirlhf.course.memory.model_census`, found by the garbage
    collector): one dict per top-level `nn.Module` that owns parameters, with its role ("policy", "reference",
    "value head", "reward model"), class, parameter count and bytes. Parameters shared between models are
    counted once. `exclude`: modules the benchmark itself holds (e.g. an evaluation-only copy of p_ref) that the
    method does not need. (The library's "trained" flag is left out: the role already says it, and the JSON
    files keep their fields.)
    """
    from minirlhf.course import memory  # imported here: the parent process never needs torch

    return [{key: m[key] for key in ("role", "class", "params", "bytes")} for m in memory.model_census(exclude=exclude)]


def census_summary(census: list[dict]) -> str:
    """'2 (policy, reference)' and so on."""
    from minirlhf.course import memory

    return memory.census_summary(census)


def census_mb(census: list[dict]) -> float:
    from minirlhf.course import memory

    return memory.census_mb(census)


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


# ----------------------------------------------------------------------------------------------- figures


def pyplot():
    """matplotlib.pyplot drawing into files only (the Agg backend: no display needed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: Path, dpi: int = 120) -> None:
    """Lay the figure out, write it to `path` and free its memory."""
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    pyplot().close(fig)
