"""Mixed precision, gradient checkpointing, real GPT-2 sizes, presets, static-cache decoding and the GPU check script.

The CPU tests run everywhere; the `cuda` ones run every trainer on a GPU in bf16 (and SFT in fp16 with loss
scaling), decode through a CUDA graph, compile the model and fuse AdamW, and are skipped without one
(`benchmarks/gpu_session.sh` runs them on a GPU).
"""

import dataclasses
import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from minirlhf.data import load_preference_pairs
from minirlhf.gpt2 import gpt2_tokenizer, random_gpt2
from minirlhf.logprobs import cache_keyword, unwrapped
from minirlhf.models import load_model
from minirlhf.precision import resolve_precision
from minirlhf.presets import PRESETS, preset
from minirlhf.sampling import sample
from minirlhf.tasks import arithmetic
from minirlhf.trainers.dpo import DPOConfig, train_dpo
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.ppo import PPOConfig, train_ppo
from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce
from minirlhf.trainers.reward_model import RewardModelConfig, train_reward_model
from minirlhf.trainers.run import make_optimizer
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
    assert {"t4", "a100", "h100"} <= set(PRESETS)
    for name in PRESETS:
        assert config_cls(**preset(name, method)).model == "gpt2"
    with pytest.raises(ValueError, match="unknown preset"):
        preset("v100", method)


PROMPTS = ["17+25=", "3+4=", "The acting was"]  # prompts of different lengths: left padding is in play


@pytest.mark.parametrize("settings", [{}, {"greedy": True}, {"temperature": 0.7, "top_k": 5, "top_p": 0.9}])
def test_static_cache_decoding_draws_the_dynamic_caches_tokens(settings):
    """The static decode step (the one the CUDA graph records), run eagerly on CPU: the same tokens from the same
    generator as the dynamic cache, and the same log-probs up to float rounding."""
    model, tokenizer = load_model("tiny-sft", device="cpu")
    rollouts = [
        sample(model, tokenizer, PROMPTS, group_size=4, max_new_tokens=12, decoder=decoder,
               generator=torch.Generator().manual_seed(0), **settings)
        for decoder in ("dynamic", "static")
    ]
    assert torch.equal(rollouts[0].input_ids, rollouts[1].input_ids)
    assert torch.equal(rollouts[0].response_mask, rollouts[1].response_mask)
    torch.testing.assert_close(rollouts[1].logprobs, rollouts[0].logprobs, atol=1e-5, rtol=0)


def test_grpo_trains_the_same_with_the_static_decoder():
    """OnlineConfig.decoder reaches the sampler: two GRPO steps sample the same completions and give the same losses
    with the static cache as with the dynamic one."""
    histories = [
        train_grpo(small_task(), GRPOConfig(device="cpu", decoder=decoder, prompts_per_step=4, group_size=4,
                                            **QUICK))[2]
        for decoder in ("dynamic", "static")
    ]
    assert histories[1].column("response_length") == histories[0].column("response_length")
    assert histories[1].column("loss")[1] == pytest.approx(histories[0].column("loss")[1], abs=1e-5)


def test_auto_decoder_is_the_dynamic_cache_off_cuda_and_bad_decoders_are_refused():
    model, tokenizer = load_model("tiny-sft", device="cpu")
    runs = [sample(model, tokenizer, PROMPTS, group_size=2, max_new_tokens=6, decoder=decoder,
                   generator=torch.Generator().manual_seed(1)) for decoder in ("auto", "dynamic")]
    assert torch.equal(runs[0].input_ids, runs[1].input_ids) and torch.equal(runs[0].logprobs, runs[1].logprobs)
    with pytest.raises(ValueError, match="CUDA graph needs the model on a CUDA device"):
        sample(model, tokenizer, PROMPTS, max_new_tokens=4, decoder="graph")
    with pytest.raises(ValueError, match="decoder must be one of"):
        sample(model, tokenizer, PROMPTS, max_new_tokens=4, decoder="fast")
    with pytest.raises(ValueError, match="decoder"):
        GRPOConfig(decoder="fast")
    model.config._attn_implementation = "eager"  # adds the mask to the scores: a boolean mask would be wrong
    with pytest.raises(ValueError, match="needs SDPA attention"):
        sample(model, tokenizer, PROMPTS, max_new_tokens=4, decoder="static")


def test_wrappers_are_seen_through_and_adamw_is_fused_only_on_cuda():
    """torch.compile wraps lazily (nothing compiles until called), so this checks the unwrapping on CPU."""
    model, _ = load_model("tiny", device="cpu")
    compiled = torch.compile(model)
    assert unwrapped(compiled) is model and cache_keyword(compiled) == cache_keyword(model)
    assert not make_optimizer(model.parameters(), 1e-3).param_groups[0]["fused"]


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


@cuda
def test_graph_decoding_matches_the_dynamic_cache_on_cuda():
    """The CUDA graph replays the static step. With the trained tiny model in float32: the same tokens as the
    dynamic cache (its distributions are peaked, so rounding cannot flip a draw). At gpt2 size (random weights,
    nearly flat distributions, where a rounding-level tie could flip a token): the log-probs it reports are those a
    training forward recomputes for its tokens, in float32 and under bf16 autocast. A failed graph recording (which
    falls back to eager steps with a warning) fails the test."""
    from minirlhf.logprobs import response_logprobs
    from minirlhf.precision import autocast

    prompts = ["17+25=", "3+4=", "12+9=", "The acting was"] * 4
    tiny, tokenizer = load_model("tiny-sft", device="cuda")
    torch.manual_seed(0)
    gpt2, gpt2_tok = random_gpt2("gpt2").cuda(), gpt2_tokenizer()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for settings in ({"greedy": True}, {"temperature": 1.0}, {"temperature": 0.7, "top_k": 10, "top_p": 0.9}):
            graph, dynamic = (
                sample(tiny, tokenizer, prompts, group_size=8, max_new_tokens=16, decoder=decoder,
                       generator=torch.Generator().manual_seed(0), **settings)
                for decoder in ("auto", "dynamic")
            )
            assert torch.equal(graph.input_ids, dynamic.input_ids), settings
            torch.testing.assert_close(graph.logprobs, dynamic.logprobs, atol=1e-4, rtol=0)
        for dtype, atol in ((torch.float32, 1e-3), (torch.bfloat16, 0.1)):
            with autocast(torch.device("cuda"), dtype):
                graph = sample(gpt2, gpt2_tok, prompts, group_size=8, max_new_tokens=64,
                               generator=torch.Generator().manual_seed(0))
                logp = response_logprobs(gpt2, graph.input_ids, graph.attention_mask, graph.response_mask)
            assert int(graph.response_mask.sum()) > 0
            torch.testing.assert_close(logp, graph.logprobs, atol=atol, rtol=0)


@cuda
def test_fused_adamw_and_a_compiled_model_train_on_cuda():
    """make_optimizer fuses AdamW on CUDA; with compile=True the training forward runs compiled while p_ref does
    not: at step 0 p_θ = p_ref, so the DPO loss is ln 2 only if the compiled forward computes the same log-probs."""
    model, _ = load_model("tiny", device="cuda")
    assert make_optimizer(model.parameters(), 1e-3).param_groups[0]["fused"]
    pairs = load_preference_pairs("sentiment", "train")[:64]
    config = DPOConfig(device="cuda", precision="bf16", compile=True, batch_size=16, eval_prompts=0, **QUICK)
    _, _, history = train_dpo(pairs, config)
    losses = history.column("loss")[1]
    assert losses[0] == pytest.approx(math.log(2), abs=2e-2) and all(math.isfinite(x) for x in losses)
