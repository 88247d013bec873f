"""Mixed precision, gradient checkpointing, real GPT-2 sizes, presets and the GPU check script.

The CPU tests run everywhere; the `cuda` ones run every trainer on a GPU in bf16 (and SFT in fp16 with loss
scaling) and are skipped without one.
"""

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from minirlhf.data import load_preference_pairs
from minirlhf.gpt2 import gpt2_tokenizer, random_gpt2
from minirlhf.precision import resolve_precision
from minirlhf.presets import PRESETS, preset
from minirlhf.sampling import sample
from minirlhf.tasks import arithmetic
from minirlhf.trainers.dpo import DPOConfig, train_dpo
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.ppo import PPOConfig, train_ppo
from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce
from minirlhf.trainers.reward_model import RewardModelConfig, train_reward_model
from minirlhf.trainers.sft import SFTConfig, train_sft

ROOT = Path(__file__).resolve().parent.parent
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
QUICK = dict(steps=2, eval_every=1000, progress=False)


def small_task():
    held_out = arithmetic.problems("test")[:16]
    evaluate = lambda m, t: {"accuracy": arithmetic.accuracy(m, t, held_out)}  # noqa: E731
    return dataclasses.replace(arithmetic.task(), evaluate=evaluate)


def test_precision_auto_is_float32_off_gpu_and_fp16_needs_cuda():
    assert resolve_precision("auto", torch.device("cpu")) == torch.float32
    assert resolve_precision("bf16", torch.device("cpu")) == torch.bfloat16
    with pytest.raises(ValueError, match="needs a CUDA device"):
        resolve_precision("fp16", torch.device("cpu"))
    with pytest.raises(ValueError, match="precision"):
        SFTConfig(precision="fp8")


def test_offline_gpt2_tokenizer_is_the_real_one():
    tokenizer = gpt2_tokenizer()
    assert len(tokenizer) == 50257 and tokenizer.eos_token_id == 50256 == tokenizer.pad_token_id
    assert tokenizer("Hello world")["input_ids"] == [15496, 995]  # GPT-2's ids
    assert tokenizer.decode([464, 2068, 7586, 21831]) == "The quick brown fox"


def test_a_small_random_gpt2_samples_with_the_real_vocabulary():
    torch.manual_seed(0)
    model, tokenizer = random_gpt2("gpt2", n_layer=1, n_head=2, n_embd=32), gpt2_tokenizer()
    rollout = sample(model, tokenizer, ["17+25=", "The acting was"], group_size=2, max_new_tokens=4)
    assert rollout.input_ids.shape[0] == 4 and int(rollout.input_ids.max()) < 50257


def test_bf16_autocast_on_cpu_and_gradient_checkpointing_train():
    """The autocast path runs (on CPU in bf16) with float32 losses; checkpointing changes memory, not the maths."""
    examples = arithmetic.sft_examples()[:32]
    _, _, bf16 = train_sft(examples, SFTConfig(device="cpu", precision="bf16", batch_size=8, **QUICK))
    assert all(math.isfinite(row["loss"]) for row in bf16 if "loss" in row)
    losses = []
    for checkpointing in (False, True):
        config = SFTConfig(device="cpu", gradient_checkpointing=checkpointing, batch_size=8, **QUICK)
        losses.append(train_sft(examples, config)[2].column("loss")[1])
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)


@pytest.mark.parametrize("method", ["sft", "reward-model", "dpo", "reinforce", "rloo", "grpo", "ppo"])
def test_every_preset_is_a_valid_config(method):
    config_cls = {"sft": SFTConfig, "reward-model": RewardModelConfig, "dpo": DPOConfig, "reinforce": ReinforceConfig,
                  "rloo": ReinforceConfig, "grpo": GRPOConfig, "ppo": PPOConfig}[method]
    for name in PRESETS:
        assert config_cls(**preset(name, method)).model == "gpt2"
    with pytest.raises(ValueError, match="unknown preset"):
        preset("a100", method)


@pytest.mark.slow
def test_gpu_check_script_runs_tiny_on_cpu(tmp_path):
    out = tmp_path / "gpu_check.json"
    result = subprocess.run(
        [sys.executable, "benchmarks/gpu_check.py", "--tiny", "--steps", "3", "--warmup", "1",
         "--methods", "sft,dpo,grpo", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "| grpo |" in result.stdout
    import json

    rows = json.loads(out.read_text())["results"]
    assert [r["method"] for r in rows] == ["sft", "dpo", "grpo"]
    assert all(r["steps_timed"] == 1 and r["trained_tokens_per_s"] > 0 for r in rows)


# ----------------------------------------------------------------------------- on a GPU


@cuda
def test_every_trainer_runs_on_cuda_in_bf16_with_peak_memory_logged():
    task, pairs = small_task(), load_preference_pairs("sentiment", "train")[:32]
    common = dict(device="cuda", precision="bf16", **QUICK)
    online = dict(prompts_per_step=4, group_size=4, **common)
    runs = {
        "sft": lambda: train_sft(arithmetic.sft_examples()[:64], SFTConfig(batch_size=8, **common)),
        "reward-model": lambda: train_reward_model(pairs, RewardModelConfig(batch_size=8, **common)),
        "dpo": lambda: train_dpo(pairs, DPOConfig(batch_size=8, eval_prompts=4, eval_samples=2, **common)),
        "rloo": lambda: train_reinforce(task, ReinforceConfig(beta=0.04, **online)),
        "grpo": lambda: train_grpo(task, GRPOConfig(beta=0.04, **online)),
        "ppo": lambda: train_ppo(task, PPOConfig(**{**online, "group_size": 1, "minibatch_size": 2})),
    }
    for name, run in runs.items():
        model, _, history = run()
        assert next(model.parameters()).device.type == "cuda", name
        rows = [row for row in history if "loss" in row]
        assert rows and all(math.isfinite(row["loss"]) and row["memory/peak_gib"] > 0 for row in rows), name


@cuda
def test_fp16_with_loss_scaling_and_checkpointing_on_cuda():
    config = SFTConfig(device="cuda", precision="fp16", gradient_checkpointing=True, batch_size=8, **QUICK)
    _, _, history = train_sft(arithmetic.sft_examples()[:64], config)
    assert all(math.isfinite(loss) for loss in history.column("loss")[1])


@cuda
def test_bf16_sampling_logprobs_match_the_recomputed_ones_on_cuda():
    """Sampling under bf16 autocast reports float32 log-probs that a bf16 forward reproduces closely."""
    from minirlhf.logprobs import response_logprobs
    from minirlhf.models import load_model
    from minirlhf.precision import autocast

    model, tokenizer = load_model("tiny-sft", device="cuda")
    with autocast(torch.device("cuda"), torch.bfloat16):
        rollout = sample(model, tokenizer, ["17+25=", "3+4="], group_size=4, max_new_tokens=5,
                         generator=torch.Generator().manual_seed(0))
        logp = response_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.response_mask)
    assert rollout.logprobs.dtype == torch.float32
    torch.testing.assert_close(logp, rollout.logprobs, atol=0.1, rtol=0)


@cuda
def test_packed_and_response_only_forward_match_the_padded_one_on_cuda():
    """DPO's packed forward relies on transformers reading restarting position ids as separate sequences, and the
    response-only LM head on `logits_to_keep`: both must hold with the CUDA attention kernels too."""
    from minirlhf.data import encode_preference_pairs
    from minirlhf.logprobs import forward_logits, logprobs_on_response, packed_response_logprobs, response_logprobs
    from minirlhf.models import load_model

    model, tokenizer = load_model("tiny", device="cuda")
    pairs = load_preference_pairs("sentiment")[:24]
    batch = {k: v.cuda() for k, v in encode_preference_pairs(tokenizer, pairs).items()}
    with torch.no_grad():
        logits, _ = forward_logits(model, batch["input_ids"], batch["attention_mask"])  # (B, T, V): every position
        full = logprobs_on_response(logits, batch["input_ids"], batch["response_mask"])
        torch.testing.assert_close(response_logprobs(model, **batch), full, atol=1e-4, rtol=0)
        torch.testing.assert_close(packed_response_logprobs(model, **batch), full, atol=1e-4, rtol=0)


@cuda
def test_a_shared_prompt_pass_matches_one_pass_per_row_on_cuda():
    """The sampler's and `response_logprobs(prompt_length=P)`'s shared prompt pass index the KV cache by row
    (`DynamicCache.reorder_cache`) and read it with the CUDA attention kernels: the same log-probs and gradients as
    one forward per row."""
    from minirlhf.logprobs import response_logprobs
    from minirlhf.models import load_model

    model, tokenizer = load_model("tiny", device="cuda")
    rollout = sample(model, tokenizer, ["17+25=", "The acting was", "I"], group_size=4, max_new_tokens=6,
                     generator=torch.Generator().manual_seed(0))
    batch = (rollout.input_ids, rollout.attention_mask, rollout.response_mask)
    one_pass = response_logprobs(model, *batch)
    shared = response_logprobs(model, *batch, prompt_length=rollout.prompt_length)
    torch.testing.assert_close(shared, one_pass, atol=1e-4, rtol=0)
    torch.testing.assert_close(shared, rollout.logprobs, atol=1e-4, rtol=0)
    grads = torch.autograd.grad(one_pass.sum(), list(model.parameters()))
    shared_grads = torch.autograd.grad(shared.sum(), list(model.parameters()))
    for a, b in zip(shared_grads, grads):
        torch.testing.assert_close(a, b, atol=1e-3, rtol=1e-3)
