"""GPU check: a few steps of each method at real GPT-2 size, with tokens/s, peak memory and the fraction of the GPU's
bf16 peak. Runs the "t4" presets (minirlhf.presets) on a randomly initialised `gpt2` (124M parameters, the real
50257-token tokenizer; no hub needed), so the peak memory printed is what each preset needs.

    python benchmarks/gpu_check.py                       # on a GPU machine: six methods, ~1-2 min on an H100/H200
    python benchmarks/gpu_check.py --tiny                # the shipped tiny model, small batches: a CPU smoke test
    python benchmarks/gpu_check.py --out results/gpu_check.json
    python benchmarks/gpu_check.py --vs-trl --out results/gpu_vs_trl.json   # minirlhf against TRL, with targets
    python benchmarks/gpu_check.py --notebooks           # every course notebook in full mode, headless: seconds each

How it is measured. Each method runs `steps` optimisation steps through its unmodified trainer; the first `warmup`
steps (CUDA kernels compiled, allocator warmed up, step 0 evaluation) are not timed. A step is timed from the end of
the previous step's metrics row to the end of its own (`.item()` calls synchronise the GPU), so sampling, reference
passes, tokenisation and the optimizer are all in it. Tokens are counted where they enter the model (`_flops.py`: a
global hook on the position embedding): "trained" tokens go through a forward with autograd on, "forward-only" ones
through sampling and reference/old-policy passes; padding counts, since the GPU computes it. Model FLOPs per token
(`_flops.model_flops`): 2·N + 4·L·d·k forward, 3x that trained, with N the matmul weights including the LM head
(124M for gpt2) and k the keys the token attends; the fraction of the bf16 peak is the MFU.

`--vs-trl` runs minirlhf against TRL 1.16 on the same GPU, model and data instead (`_gpu_vs_trl.py`): GRPOTrainer
without vLLM and DPOTrainer, at the shapes of the GPU targets, and prints each target as PASS or FAIL.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import statistics
import time
from pathlib import Path

import torch
from _flops import FlopCounter, difference, model_flops

from minirlhf.data import load_preference_pairs
from minirlhf.presets import preset
from minirlhf.tasks import arithmetic
from minirlhf.trainers.dpo import DPOConfig, train_dpo
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.ppo import PPOConfig, train_ppo
from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce
from minirlhf.trainers.reward_model import RewardModelConfig, train_reward_model
from minirlhf.trainers.sft import SFTConfig, train_sft

# Dense bf16 tensor-core peak from the vendors' datasheets (SXM parts; fp16 for the T4 and V100, which have no bf16)
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "L4": 121e12, "A10": 125e12,
                   "T4": 65e12, "V100": 125e12}
NOTEBOOK_DIR = Path(__file__).resolve().parents[1] / "notebooks"  # --notebooks
ONLINE_TINY = {"prompts_per_step": 2, "group_size": 2, "minibatch_size": 4, "max_new_tokens": 4}
TINY = {  # --tiny: small enough for two busy CPU cores in the test suite
    "sft": {"batch_size": 4}, "reward-model": {"batch_size": 4, "max_length": 64},
    "dpo": {"batch_size": 4, "max_length": 64}, "grpo": ONLINE_TINY, "rloo": ONLINE_TINY,
    "ppo": {**ONLINE_TINY, "group_size": 1, "minibatch_size": 2},
}


def run_method(method: str, model_name: str, steps: int, tiny: bool, precision: str):
    """Train `method` for `steps` steps; returns (history, trained model, per-step times and token counts)."""
    overrides = {**preset("t4", method), "model": model_name, "steps": steps, "eval_every": 10**6,
                 "progress": False, "precision": precision, **(TINY.get(method, {}) if tiny else {})}
    pairs = load_preference_pairs("sentiment", "train")[:512]
    held_out = arithmetic.problems("test")[:64]
    task = dataclasses.replace(
        arithmetic.task(), evaluate=lambda m, t: {"accuracy": arithmetic.accuracy(m, t, held_out)}
    )
    marks = []  # (time, FlopCounter totals) at each logged training step

    def mark(history):
        if "loss" in history[-1]:
            marks.append((time.perf_counter(), counter.totals()))

    counter = FlopCounter(vocab=946 if tiny else 50257, n_positions=64 if tiny else 1024)
    try:
        if method == "sft":  # SFT on the chosen review continuations: longer sequences than arithmetic
            config = SFTConfig(**overrides)
            model, _, history = train_sft([(p.prompt, p.chosen) for p in pairs], config, callbacks=[mark])
        elif method == "reward-model":
            model, _, history = train_reward_model(pairs, RewardModelConfig(**overrides), callbacks=[mark])
        elif method == "dpo":
            model, _, history = train_dpo(pairs, DPOConfig(eval_prompts=0, **overrides), callbacks=[mark])
        elif method == "grpo":
            model, _, history = train_grpo(task, GRPOConfig(**overrides), callbacks=[mark])
        elif method == "rloo":
            model, _, history = train_reinforce(task, ReinforceConfig(baseline="rloo", **overrides), callbacks=[mark])
        else:
            model, _, history = train_ppo(task, PPOConfig(**overrides), callbacks=[mark])
    finally:
        counter.close()
    return history, model, marks


def measure(method: str, model_name: str, steps: int, warmup: int, tiny: bool, precision: str) -> dict:
    device_is_cuda = torch.cuda.is_available()
    if device_is_cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    history, model, marks = run_method(method, model_name, steps, tiny, precision)
    timed = [(t1 - t0, difference(c1, c0)) for (t0, c0), (t1, c1) in zip(marks[warmup:], marks[warmup + 1 :])]
    seconds = sum(t for t, _ in timed)
    counts = difference(marks[-1][1], marks[warmup][1])
    flops = model_flops(counts, model.config, lm_head=method != "reward-model")
    result = {
        "method": method, "steps_timed": len(timed), "step_ms_median": 1000 * statistics.median(t for t, _ in timed),
        "trained_tokens_per_s": counts["trained_tokens"] / seconds,
        "all_tokens_per_s": (counts["trained_tokens"] + counts["forward_tokens"]) / seconds,
        "model_tflops_per_s": flops / seconds / 1e12, "final_loss": history.last("loss"),
    }
    if device_is_cuda:
        result["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        name = torch.cuda.get_device_name()
        peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)
        if peak is not None:
            result["fraction_of_bf16_peak"] = result["model_tflops_per_s"] * 1e12 / peak
    del model, history
    gc.collect()
    return result


def notebook_times(quick: bool, out: str | None) -> None:
    """Each course notebook top to bottom in a fresh kernel (minirlhf.course.headless), with its seconds."""
    from minirlhf.course.headless import execute_notebook

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    mode = "quick" if quick else "full"
    print(f"device: {device}, torch {torch.__version__}, notebooks in {mode} mode")
    print("| notebook | seconds | slowest cell |\n|---|---|---|")
    results = []
    for path in sorted(NOTEBOOK_DIR.glob("*.ipynb")):
        start = time.perf_counter()
        _, seconds = execute_notebook(path, quick=quick, timeout_per_cell=900)
        total = time.perf_counter() - start
        slowest = max(range(len(seconds)), key=seconds.__getitem__)
        results.append({"notebook": path.name, "seconds": total, "slowest_cell": slowest,
                        "slowest_cell_seconds": seconds[slowest]})
        print(f"| {path.name} | {total:.1f} | #{slowest} {seconds[slowest]:.1f} s |", flush=True)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        Path(out).write_text(json.dumps({"device": device, "torch": torch.__version__, "mode": mode,
                                         "notebooks": results}, indent=1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="random:gpt2", help="any load_model name (default: random:gpt2)")
    parser.add_argument("--methods", default="sft,dpo,grpo,reward-model,rloo,ppo")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--warmup", type=int, default=3, help="first steps not timed")
    parser.add_argument("--precision", default="auto", help="auto (bf16 on a GPU), bf16, fp16 or fp32")
    parser.add_argument("--tiny", action="store_true", help="shipped tiny model and small batches (CPU smoke test)")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--vs-trl", action="store_true", help="minirlhf against TRL 1.16 (GRPO, DPO) with targets")
    parser.add_argument("--notebooks", action="store_true",
                        help="instead: run notebooks/*.ipynb headless in full mode (--tiny: quick mode), print times")
    args = parser.parse_args()
    if args.notebooks:
        return notebook_times(quick=args.tiny, out=args.out)
    if args.vs_trl:
        from _gpu_vs_trl import side_by_side

        name = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)
        return side_by_side(args.model, args.steps, args.warmup, args.tiny, args.precision, args.out, peak)
    model_name = "tiny" if args.tiny else args.model
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    print(f"device: {device}, torch {torch.__version__}, model {model_name}, precision {args.precision}")
    print("| method | step ms (median) | trained tokens/s | all tokens/s | model TFLOP/s | of bf16 peak "
          "| peak memory |\n|---|---|---|---|---|---|---|")
    results = []
    for method in args.methods.split(","):
        r = measure(method, model_name, args.steps, args.warmup, args.tiny, args.precision)
        results.append(r)
        frac = f"{r['fraction_of_bf16_peak']:.1%}" if "fraction_of_bf16_peak" in r else "-"
        memory = f"{r['peak_memory_gib']:.2f} GiB" if "peak_memory_gib" in r else "-"
        print(f"| {method} | {r['step_ms_median']:.0f} | {r['trained_tokens_per_s']:,.0f} | "
              f"{r['all_tokens_per_s']:,.0f} | {r['model_tflops_per_s']:.1f} | {frac} | {memory} |", flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        summary = {"device": device, "torch": torch.__version__, "model": model_name, "args": vars(args),
                   "results": results}
        Path(args.out).write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
