"""Tool use: what may cross the calculator's boundary (any text a model writes), the tokens a tool appends (context
that carries no gradient and leaves every log-prob of the policy's own tokens as the full forward gives it), the
calculator task through GRPO and the command line, and a resume of it, bit-identical."""

from __future__ import annotations

import os
import random
import subprocess
import sys

import pytest
import torch
from _checkpoints import Interrupt, stop_after
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

from minirlhf.logprobs import response_logprobs
from minirlhf.losses import grpo_advantages, grpo_loss
from minirlhf.models import SHIPPED, load_model
from minirlhf.sampling import Tool, policy_token_mask, sample
from minirlhf.tasks import calculator
from minirlhf.trainers.grpo import GRPOConfig, train_grpo
from minirlhf.trainers.run.checkpoint import list_checkpoints

needs_model = pytest.mark.skipif(not (SHIPPED["tiny-calculator"] / "config.json").exists(),
                                 reason="run scripts/build_lab_model.py --variant calculator")
QUIET = dict(seed=0, device="cpu", eval_every=0, progress=False, eval_kl=False)


# ----------------------------------------------------------------------------- the calculator's boundary


@pytest.mark.parametrize("expression", [
    "1+2+3", "1*2", "1-2", "-1+2", "1+-2", " 1+2", "1+2 ", "1 + 2", "+1", "1+", "", "1e3+1", "0x1+1", "1_000+1",
    "١+٢", "１+２", "1234567+1", "__import__('os').system('true')", "1+2\n", "(1+2)", "1+2]", "[1+2",
])
def test_the_calculator_refuses_anything_but_a_sum_of_two_short_ascii_numbers(expression):
    assert calculator.calculate(expression) is None


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_whatever_a_model_writes_the_calculator_appends_nothing_or_one_right_sum(response):
    """Any text before the closing token: the appended text is None or "=" and the sum of the call's two numbers,
    and it is a sum only when the call is exactly two numbers of at most MAX_DIGITS ASCII digits."""
    for text in (response, response + calculator.CALL_END, calculator.CALL_START + response + calculator.CALL_END):
        out = calculator.calculator_run(text)
        if out is None:
            continue
        assert text.endswith(calculator.CALL_END)
        expression = text[text.rfind(calculator.CALL_START) + 1 : -1]
        a, b = expression.split("+")
        assert a.isascii() and b.isascii() and 1 <= len(a) <= 6 and 1 <= len(b) <= 6
        assert out == f"={int(a) + int(b)}"


@given(st.integers(0, 999_999), st.integers(0, 999_999))
def test_the_calculator_adds_what_it_accepts(a, b):
    assert calculator.calculator_run(f"..[{a}+{b}]") == f"={a + b}"
    assert calculator.answer_of(f"[{a}+{b}]={a + b}") == a + b


def test_the_verifier_reads_the_final_answer_only():
    reward = calculator.calculator_reward()
    prompts = ["12345+67890="] * 5
    completions = ["80235", "[12345+67890]=80235", "[12345+67890]=802351", "[12345+67890]", "[80235]"]
    assert reward(prompts, completions) == [1.0, 1.0, 0.0, 0.0, 0.0]


# ----------------------------------------------------------------------------- the tokens a tool appends


def test_tool_tokens_are_context_without_gradient_and_leave_the_policys_logprobs_as_the_full_forward():
    """tiny-lab writes filler "." after its answers; a tool that answers every "." with "=7;" appends its tokens in
    the middle of answers. They are attended but off the response mask, with log-prob 0; every policy token's
    sampling-time log-prob is the one the full-sequence forward gives; a GRPO loss has zero gradient on them."""
    model, tokenizer = load_model("tiny-lab", device="cpu")
    seen = []
    tool = Tool(call_end=".", run=lambda text: seen.append(text) or "=7;")
    rollout = sample(model, tokenizer, ["17+25=", "23+4="], group_size=4, max_new_tokens=16,
                     generator=torch.Generator().manual_seed(0), tool=tool)
    P, tools = rollout.prompt_length, rollout.tool_mask.bool()
    assert tools.sum() >= 12 and seen and all(text.endswith(".") for text in seen)
    assert all("=7;" in c for c, row in zip(rollout.completions, tools, strict=True) if row.any())
    assert not (tools & rollout.response_mask.bool()).any() and rollout.attention_mask[tools].eq(1).all()
    assert rollout.logprobs[tools].eq(0).all() and rollout.sampler_logprobs[tools].eq(0).all()
    for row, ids in enumerate(rollout.input_ids):  # the appended tokens are the tool's text
        fed = ids[tools[row]].tolist()
        assert ("=7;" * len(fed)).startswith(tokenizer.decode(fed))

    logp = response_logprobs(model, rollout.input_ids, rollout.attention_mask, rollout.response_mask,
                             prompt_length=P)
    policy = rollout.response_mask.bool()
    torch.testing.assert_close(logp[policy], rollout.logprobs[policy], atol=1e-5, rtol=0)

    leaf = logp[:, P:].detach().requires_grad_()
    advantages = grpo_advantages(torch.arange(8.0), group_size=4)
    loss, _ = grpo_loss(leaf, leaf.detach(), None, advantages, rollout.response_mask[:, P:], eps=0.2, beta=0.0)
    loss.backward()
    assert leaf.grad[tools[:, P:]].eq(0).all() and leaf.grad[policy[:, P:]].ne(0).any()


def test_a_tool_whose_closing_text_is_not_one_token_is_refused():
    model, tokenizer = load_model("tiny-lab", device="cpu")
    with pytest.raises(ValueError, match=r"tool.call_end='<calc>' must be one token"):
        sample(model, tokenizer, ["1+2="], tool=Tool(call_end="<calc>", run=lambda text: None))


def test_a_tool_closed_by_eos_or_answering_with_no_string_is_refused():
    model, tokenizer = load_model("tiny-lab", device="cpu")
    with pytest.raises(ValueError, match=r"tool.call_end='<\|endoftext\|>' is the EOS token"):
        sample(model, tokenizer, ["1+2="], tool=Tool(call_end=tokenizer.eos_token, run=lambda text: "=3"))
    with pytest.raises(TypeError, match=r"tool.run returned 7 \(int\): it returns the text to append, a str"):
        sample(model, tokenizer, ["17+25="], group_size=4, max_new_tokens=16,  # tiny-lab writes "." after answers
               generator=torch.Generator().manual_seed(0), tool=Tool(call_end=".", run=lambda text: 7))


def test_the_policy_token_mask_refuses_lengths_that_are_not_one_per_row():
    tool = torch.zeros(2, 6, dtype=torch.bool)
    tool[0, 1] = True
    assert policy_token_mask(torch.tensor([3, 5]), tool).sum() == 7
    with pytest.raises(ValueError, match=r"lengths must be \(B,\) and from_tool \(B, N\), got shapes \(2, 1\) and "):
        policy_token_mask(torch.tensor([[3], [5]]), tool)  # would broadcast to (2, 2, 6)


# ----------------------------------------------------------------------------- the task, in training


@needs_model
def test_the_calculator_model_calls_sometimes_and_its_calls_pay():
    model, tokenizer = load_model("tiny-calculator", device="cpu")
    with_tool = calculator.calculator_metrics(model, tokenizer, tool=True, n=64)
    without = calculator.calculator_metrics(model, tokenizer, tool=False, n=64)
    assert 0.2 <= with_tool["calls"] <= 0.8 and with_tool["calls"] == without["calls"]  # the same samples
    assert with_tool["accuracy"] >= without["accuracy"] + 0.1, (with_tool, without)



@needs_model
def test_grpo_with_the_calculator_resumes_bit_identically(tmp_path):
    settings_ = dict(QUIET, model="tiny-calculator", prompts_per_step=2, group_size=4, save_every=2, steps=4,
                     task="calculator")

    def run(callbacks=(), **fields):
        return train_grpo(None, GRPOConfig(**settings_, **fields), callbacks=callbacks)[2]

    expected = run(out_dir=str(tmp_path / "full"))
    with pytest.raises(Interrupt):
        run([stop_after(2)], out_dir=str(tmp_path / "resumed"))
    resumed = run(resume=str(tmp_path / "resumed"))
    assert resumed == expected
    a, b = (load_file(list_checkpoints(tmp_path / name)[-1] / "model.safetensors") for name in ("full", "resumed"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@needs_model
def test_the_command_line_trains_without_the_calculator_and_bad_knobs_and_ppo_are_refused(tmp_path):
    from minirlhf.trainers.ppo import PPOConfig, train_ppo

    out = tmp_path / "plain"
    plain = subprocess.run(
        [sys.executable, "-m", "minirlhf", "grpo", "--model", "tiny-calculator", "--task", "calculator",
         "--task-option", "tool=false", "--steps", "1", "--prompts-per-step", "2", "--group-size", "2",
         "--eval-every", "0", "--progress", "false", "--device", "cpu", "--out-dir", str(out)],
        env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=300)
    assert plain.returncode == 0, plain.stderr
    assert '"tool=false"' in (out / "config.json").read_text()
    with pytest.raises(ValueError, match=r"--task-option 'tool=maybe'"):
        GRPOConfig(**QUIET, task="calculator", task_option=["tool=maybe"])
    with pytest.raises(ValueError, match="PPO does not support"):
        train_ppo(None, PPOConfig(**QUIET, model="tiny-calculator", task="calculator", steps=1))


@needs_model
@pytest.mark.parametrize("budget", [1, 16, calculator.MAX_NEW_TOKENS - 1])
def test_a_budget_that_would_cut_a_calls_answer_short_is_refused_before_training(budget):
    with pytest.raises(ValueError, match=rf"GRPOConfig\.max_new_tokens \({budget}\) is below task 'calculator'"):
        train_grpo(None, GRPOConfig(**QUIET, model="tiny-calculator", task="calculator", steps=1,
                                    max_new_tokens=budget))


def test_train_and_test_sums_are_apart_and_long():
    rng = random.Random(0)
    train, test = set(calculator.draw_prompts("train", 500, rng)), set(calculator.draw_prompts("test", 200, rng))
    assert train.isdisjoint(test)
    assert all(min(map(len, p[:-1].split("+"))) >= 4 for p in train | test)


@pytest.mark.parametrize("arms, error, message", [
    ({"tools": {"tool": True}, "plain": {"tool": False}}, ValueError,
     r"arms=\['tools', 'plain'\]: the criterion compares the arms 'tool' and 'plain'"),
    ({"tool": {"tool": "yes"}, "plain": {"tool": False}}, ValueError, r"CalculatorConfig.tool='yes' must be true or"),
    ({"tool": {"tools": True}, "plain": {"tool": False}}, TypeError, r"unexpected keyword argument 'tools'"),
])
def test_the_lab_refuses_tool_use_arms_it_cannot_judge_before_any_sampling(arms, error, message, monkeypatch):
    from minirlhf.lab import run_seed, settings_of

    def no_sampling(*args, **kwargs):
        raise AssertionError("the held-out problems were sampled before the arms were checked")

    monkeypatch.setattr(calculator, "calculator_metrics", no_sampling)
    with pytest.raises(error, match=message):
        run_seed("7", 0, settings_of("7", quick=True) | {"arms": arms}, verbose=False)
