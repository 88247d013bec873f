"""minirlhf against TRL 1.16 on one GPU: GRPO and DPO (and SFT's MFU) at the shapes of the GPU targets.

Run as `python benchmarks/gpu_check.py --vs-trl [--out FILE]`; `--tiny` runs the same code on the shipped tiny model
with small shapes (a CPU smoke test: its figures and PASS/FAIL lines mean nothing).

Same model (gpt2's shapes with random weights, saved to a folder that both libraries load, so TRL builds its p_ref
from the same weights), same data, same precision (autocast bf16 over float32 weights in both), one optimizer step
per batch in both:
- GRPO: 16 arithmetic prompts x G = 8 completions of up to 64 new tokens (random weights rarely say EOS, so ~64),
  β = 0.04, ε = 0.2, one update on the whole batch (minirlhf minibatch_size=None, TRL per_device_train_batch_size
  = 128 and num_iterations = 1), temperature 1. minirlhf runs twice: with its default decoder (static cache + CUDA
  graph on a GPU) and with decoder="dynamic", the sampler as it was before, for an in-run "before/after".
  TRL samples with transformers' generate() (no vLLM).
- DPO: 64 pairs of ~256 tokens (48 prompt words, 208 words per completion, cut at max_length 256), β = 0.1, live
  p_ref in both; minirlhf also with compile=True.
- SFT (minirlhf only, for the MFU target): 64 prompt + chosen completions of the same pairs.

Timing and FLOPs as in gpu_check.py: step end to step end after `warmup` steps, the GPU synchronised at each step
end; model FLOPs from `_flops.FlopCounter` (attention and the LM head included), MFU = FLOP/s / bf16 peak.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from _flops import FlopCounter, difference, model_flops

from minirlhf.data import PreferencePair
from minirlhf.gpt2 import gpt2_tokenizer, random_gpt2
from minirlhf.models import SHIPPED, frozen_copy, load_model
from minirlhf.tasks import arithmetic
from minirlhf.trainers.dpo import DPOConfig, train_dpo
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.sft import SFTConfig, train_sft

SHAPES = {
    "gpt2": {"prompts_per_step": 16, "group_size": 8, "max_new_tokens": 64, "pairs": 64, "max_length": 256,
             "prompt_words": 48, "completion_words": 208},
    "tiny": {"prompts_per_step": 2, "group_size": 2, "max_new_tokens": 4, "pairs": 4, "max_length": 48,
             "prompt_words": 8, "completion_words": 30},
}
GRPO_MS_BEFORE = 1250  # before the GPU work: gpt2 GRPO step at these shapes on an H200 (torch 2.11, transformers 5.17)
WORDS = ("the a movie film was is great terrible acting plot story and but with very not really it this that of to "
         "good bad long short music scenes actor ending funny boring").split()


def long_pairs(n: int, prompt_words: int, completion_words: int, seed: int = 0) -> list[PreferencePair]:
    """n preference pairs of random common words: ~1 token per word, so ~prompt_words + completion_words tokens."""
    rng = random.Random(seed)

    def text(words: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(words))

    return [PreferencePair(text(prompt_words), " " + text(completion_words), " " + text(completion_words))
            for _ in range(n)]


class StepMarks:
    """(time, FlopCounter totals) at every step end, with the GPU synchronised first."""

    def __init__(self, counter: FlopCounter):
        self.counter, self.rows = counter, []

    def __call__(self) -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        self.rows.append((time.perf_counter(), self.counter.totals()))

    def summary(self, warmup: int, config, peak: float | None, lm_head: bool = True) -> dict:
        rows = self.rows[warmup:]
        seconds = [t1 - t0 for (t0, _), (t1, _) in zip(rows, rows[1:])]
        counts = difference(rows[-1][1], rows[0][1])
        flops = model_flops(counts, config, lm_head) / sum(seconds)
        out = {"steps_timed": len(seconds), "step_ms_median": 1000 * statistics.median(seconds),
               "trained_tokens_per_s": counts["trained_tokens"] / sum(seconds),
               "all_tokens_per_s": (counts["trained_tokens"] + counts["forward_tokens"]) / sum(seconds),
               "model_tflops_per_s": flops / 1e12}
        if peak:
            out["mfu"] = flops / peak
        if torch.cuda.is_available():
            out["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
        return out


def trl_marker(marks: StepMarks):
    from transformers import TrainerCallback

    class Mark(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            marks()

    return Mark()


def minirlhf_marker(marks: StepMarks) -> Callable:
    return lambda history: marks() if "loss" in history[-1] else None


def trl_common_args(steps: int, lr: float, on_gpu: bool, tmp: str) -> dict:
    """TrainingArguments shared by TRL's GRPO and DPO runs: bf16 autocast on a GPU, constant lr, AdamW, no saving."""
    return dict(output_dir=tmp, max_steps=steps, learning_rate=lr, lr_scheduler_type="constant", warmup_steps=0,
                optim="adamw_torch_fused" if on_gpu else "adamw_torch", weight_decay=0.0, max_grad_norm=1.0,
                bf16=on_gpu, use_cpu=not on_gpu, report_to="none", save_strategy="no", logging_steps=10**6,
                disable_tqdm=True, seed=0, dataloader_num_workers=0, disable_dropout=True,
                gradient_checkpointing=False)


def run_grpo(library: str, model_dir: str, shape: dict, steps: int, marks: StepMarks, precision: str,
             decoder: str = "auto") -> float:
    """One GRPO run; returns the mean completion length."""
    on_gpu = torch.cuda.is_available()
    B = shape["prompts_per_step"] * shape["group_size"]
    if library == "minirlhf":
        task = dataclasses.replace(arithmetic.task(), evaluate=lambda model, tokenizer: {})
        config = GRPOConfig(model=model_dir, steps=steps, prompts_per_step=shape["prompts_per_step"],
                            group_size=shape["group_size"], max_new_tokens=shape["max_new_tokens"], beta=0.04,
                            lr=1e-5, minibatch_size=None, aggregation="seq-mean", eval_every=10**6, progress=False,
                            precision=precision, decoder=decoder)
        _, _, history = train_grpo(task, config, callbacks=[minirlhf_marker(marks)])
        lengths = history.column("response_length")[1]
        return sum(lengths) / len(lengths)
    from datasets import Dataset
    from trl import GRPOConfig as TRLGRPOConfig
    from trl import GRPOTrainer

    model, tokenizer = load_model(model_dir)
    prompts = arithmetic.train_prompts(steps * shape["prompts_per_step"] * 2, random.Random(0))
    lengths = []
    with tempfile.TemporaryDirectory() as tmp:
        args = TRLGRPOConfig(per_device_train_batch_size=B, num_generations=shape["group_size"],
                             max_completion_length=shape["max_new_tokens"], temperature=1.0, top_p=1.0, top_k=0,
                             beta=0.04, epsilon=0.2, loss_type="grpo", scale_rewards="group", num_iterations=1,
                             use_bias_correction_kl=False, mask_truncated_completions=False, log_completions=False,
                             **trl_common_args(steps, 1e-5, on_gpu, tmp))
        trainer = GRPOTrainer(model=model, reward_funcs=arithmetic.correctness_reward, args=args,
                              train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer,
                              callbacks=[trl_marker(marks)])
        trainer.add_callback(length_reader(trainer, lengths))
        trainer.train()
    return sum(lengths) / max(1, len(lengths))


def length_reader(trainer, lengths: list):
    """A TrainerCallback that keeps TRL's mean completion length of each step (its metrics are cleared at a log)."""
    from transformers import TrainerCallback

    class Reader(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            lengths.append(trainer._metrics["train"]["completions/mean_length"][-1])

    return Reader()


def run_dpo(library: str, model_dir: str, shape: dict, steps: int, marks: StepMarks, precision: str,
            compile: bool = False) -> None:
    on_gpu = torch.cuda.is_available()
    pairs = long_pairs(steps * shape["pairs"], shape["prompt_words"], shape["completion_words"])
    if library == "minirlhf":
        config = DPOConfig(model=model_dir, steps=steps, batch_size=shape["pairs"], max_length=shape["max_length"],
                           beta=0.1, lr=5e-6, eval_every=10**6, eval_prompts=0, progress=False, precision=precision,
                           compile=compile)
        train_dpo(pairs, config, callbacks=[minirlhf_marker(marks)])
        return
    from trl import DPOConfig as TRLDPOConfig
    from trl import DPOTrainer
    from trl_dpo import pairs_dataset

    model, tokenizer = load_model(model_dir)
    with tempfile.TemporaryDirectory() as tmp:
        args = TRLDPOConfig(per_device_train_batch_size=shape["pairs"], beta=0.1, loss_type=["sigmoid"],
                            max_length=shape["max_length"], truncation_mode="keep_start",
                            precompute_ref_log_probs=False, **trl_common_args(steps, 5e-6, on_gpu, tmp))
        DPOTrainer(model=model, ref_model=frozen_copy(model), args=args, train_dataset=pairs_dataset(pairs),
                   processing_class=tokenizer, callbacks=[trl_marker(marks)]).train()


def run_sft(model_dir: str, shape: dict, steps: int, marks: StepMarks, precision: str) -> None:
    pairs = long_pairs(steps * shape["pairs"], shape["prompt_words"], shape["completion_words"])
    config = SFTConfig(model=model_dir, steps=steps, batch_size=shape["pairs"], eval_every=10**6, progress=False,
                       precision=precision)
    train_sft([(p.prompt, p.chosen) for p in pairs], config, callbacks=[minirlhf_marker(marks)])


def model_folder(tiny: bool, model_name: str, tmp: str) -> str:
    """A folder both libraries load: the shipped tiny model, or a `random:<size>` model saved once (TRL loads its
    p_ref from the policy's folder, so a folder is what gives both the same weights)."""
    if tiny:
        return str(SHIPPED["tiny"])
    if not model_name.startswith("random:"):
        return model_name
    torch.manual_seed(0)
    random_gpt2(model_name.removeprefix("random:")).save_pretrained(tmp)
    gpt2_tokenizer().save_pretrained(tmp)
    return tmp


def side_by_side(model_name: str, steps: int, warmup: int, tiny: bool, precision: str, out: str | None,
                 peak: float | None) -> None:
    shape = SHAPES["tiny" if tiny else "gpt2"]
    runs = {  # name -> (function, its keyword arguments)
        "grpo minirlhf": (run_grpo, {"library": "minirlhf"}),
        "grpo minirlhf decoder=dynamic": (run_grpo, {"library": "minirlhf", "decoder": "dynamic"}),
        "grpo trl": (run_grpo, {"library": "trl"}),
        "dpo minirlhf": (run_dpo, {"library": "minirlhf"}),
        "dpo minirlhf compile": (run_dpo, {"library": "minirlhf", "compile": True}),
        "dpo trl": (run_dpo, {"library": "trl"}),
        "sft minirlhf": (run_sft, {}),
    }
    results = {}
    print("| run | step ms (median) | trained tokens/s | all tokens/s | model TFLOP/s | MFU | peak memory |\n"
          "|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = model_folder(tiny, model_name, tmp)
        config = load_model(model_dir, device="cpu")[0].config
        for name, (run, kwargs) in runs.items():
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
                torch.cuda.reset_peak_memory_stats()
            counter = FlopCounter(config.vocab_size, config.n_positions)
            marks = StepMarks(counter)
            try:
                extra = run(model_dir=model_dir, shape=shape, steps=steps, marks=marks, precision=precision, **kwargs)
            finally:
                counter.close()
            r = marks.summary(warmup, config, peak)
            if extra is not None:
                r["completion_length_mean"] = extra
            results[name] = r
            mfu = f"{r['mfu']:.1%}" if "mfu" in r else "-"
            memory = f"{r['peak_memory_gib']:.1f} GiB" if "peak_memory_gib" in r else "-"
            print(f"| {name} | {r['step_ms_median']:.0f} | {r['trained_tokens_per_s']:,.0f} | "
                  f"{r['all_tokens_per_s']:,.0f} | {r['model_tflops_per_s']:.2f} | {mfu} | {memory} |", flush=True)
            gc.collect()
    targets = check_targets(results, tiny or peak is None)
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
        Path(out).write_text(json.dumps({"device": device, "torch": torch.__version__, "model": model_name,
                                         "shape": shape, "steps": steps, "warmup": warmup, "results": results,
                                         "targets": targets}, indent=1))


def check_targets(results: dict[str, dict], smoke: bool) -> list[dict]:
    """Issue 19's targets, each printed as a PASS/FAIL line (on an H100/H200-class GPU at gpt2 size)."""
    grpo, before, trl = (results[k]["step_ms_median"] for k in ("grpo minirlhf", "grpo minirlhf decoder=dynamic",
                                                                "grpo trl"))
    mfu = {k: results[k].get("mfu", 0.0) for k in ("dpo minirlhf", "dpo minirlhf compile", "sft minirlhf")}
    targets = [
        ("GRPO step at least 5x faster than before (<= 1250/5 ms)", grpo <= GRPO_MS_BEFORE / 5, f"{grpo:.0f} ms"),
        ("GRPO at least 2x TRL's speed", trl / grpo >= 2, f"{trl / grpo:.2f}x (TRL {trl:.0f} ms)"),
        ("DPO at 64 pairs x 256 tokens >= 25% of bf16 peak", max(mfu["dpo minirlhf"], mfu["dpo minirlhf compile"])
         >= 0.25, f"{mfu['dpo minirlhf']:.1%}, compiled {mfu['dpo minirlhf compile']:.1%}"),
        ("SFT at 64 x 256 tokens >= 25% of bf16 peak", mfu["sft minirlhf"] >= 0.25, f"{mfu['sft minirlhf']:.1%}"),
    ]
    note = " (smoke run: not a measurement)" if smoke else ""
    print(f"\nin-run speed-up of the GRPO step over the dynamic-cache sampler: {before / grpo:.2f}x")
    for text, passed, value in targets:
        print(f"{'PASS' if passed else 'FAIL'}  {text}: {value}{note}")
    return [{"target": text, "passed": bool(passed), "value": value, "smoke": smoke} for text, passed, value in targets]
