"""The coin task (lab effect (a)): a guess the environment judges aloud, then a free tail."""

import dataclasses
import itertools
import random

import pytest
import torch
from _checkpoints import Interrupt, stop_after

from minirlhf.lab import length_bias
from minirlhf.models import load_model, load_tokenizer
from minirlhf.sampling import Tool, sample
from minirlhf.tasks import coin
from minirlhf.trainers.grpo import GRPOConfig, train_grpo

# a short coin run that checkpoints: what the resume tests interrupt and resume
RESUMABLE = dict(model="tiny-lab-coin", seed=0, steps=4, prompts_per_step=1, group_size=4, eval_every=0,
                 eval_kl=False, progress=False, device="cpu")
FORMS = [f"{g}]={s}{m}{t * n}" for g, s, m, t, n in itertools.product("HT", "HT", "!?", ".,", (0, 1, 7))]


@pytest.mark.parametrize("completion", FORMS)
def test_the_reward_is_the_coin_whatever_the_verdict_mark_and_tail(completion):
    # the guess and the side decide; the mark and the tail (the policy's to write after the flip) never do
    assert coin.coin_reward([coin.PROMPT], [completion]) == [1.0 if completion[0] == completion[3] else 0.0]
    assert coin.right_guess(completion) is (completion[0] == completion[3])


@pytest.mark.parametrize("completion", ["", "H", "H]", "H]=", "H]=H", "]=H!", "h]=h!", "X]=X!", "HH]=H!", "H=H!",
                                        ".H]=H!", "H]=HT!", "H]=H.", " H]=H!"])
def test_an_answer_without_a_guess_and_its_flip_is_wrong(completion):
    assert coin.coin_reward([coin.PROMPT], [completion]) == [0.0] and coin.right_guess(completion) is None


def test_the_tail_is_what_follows_the_environments_answer():
    assert [coin.tail_length(c) for c in ("H]=H!", "H]=T?,,,", "T]=T!..........")] == [0, 3, 10]


@pytest.mark.parametrize("seed", [0, 1, 12345])
def test_the_environment_flips_from_its_seed_once_per_answer_and_judges_the_guess(seed):
    flips = [coin.coin_tool(seed).run(guess + "]") for guess in "HT"]  # a fresh tool each: both see the first flip
    assert flips[0][1] == flips[1][1] and {flips[0][2], flips[1][2]} == {"!", "?"}
    tool, rng = coin.coin_tool(seed), random.Random(seed)
    answers = [tool.run(random.Random(k).choice("HT") + "]") for k in range(2000)]
    assert [a[1] for a in answers] == [rng.choice("HT") for _ in range(2000)]  # the tool's own stream, in order
    assert all(a[2] == ("!" if random.Random(k).choice("HT") == a[1] else "?") for k, a in enumerate(answers))
    assert 0.45 < sum(a[1] == "H" for a in answers) / 2000 < 0.55
    assert tool.run("H]=T?,,]") is None  # a second call in one answer gets no second flip


def test_sft_demonstrations_tie_the_tail_token_to_the_verdict_and_not_its_length():
    examples = coin.sft_examples(4000, seed=3)
    assert coin.sft_examples(50, seed=3) == examples[:50] != coin.sft_examples(50, seed=4)
    tails = {True: [], False: []}
    for prompt, completion in examples:
        right = coin.right_guess(completion)
        assert prompt == coin.PROMPT and completion[4] == coin.VERDICT[right]
        tail = completion[5:]
        assert set(tail) <= {coin.TAIL[right]}
        tails[right].append(len(tail))
    for lengths in tails.values():  # the same uniform law after a right and after a wrong guess
        assert (min(lengths), max(lengths)) == (0, coin.MAX_TAIL)
        assert abs(sum(lengths) / len(lengths) - coin.MAX_TAIL / 2) < 0.5
    assert 0.45 < len(tails[True]) / len(examples) < 0.55


def test_the_coin_model_writes_the_format_and_the_environments_tokens_are_off_the_loss_mask():
    model, tokenizer = load_model("tiny-lab-coin", device="cpu")
    rollout = sample(model, tokenizer, [coin.PROMPT], group_size=64, max_new_tokens=coin.MAX_NEW_TOKENS,
                     generator=torch.Generator().manual_seed(0), tool=coin.coin_tool(0))
    verdicts = [coin.right_guess(c) for c in rollout.completions]
    assert sum(v is None for v in verdicts) <= 6  # nearly every answer is a guess and its flip
    assert 0.3 < sum(v is True for v in verdicts) / 64 < 0.7
    assert (rollout.tool_mask.sum(-1) == 3).float().mean() > 0.9  # "=H!": three tokens, the environment's
    assert not (rollout.tool_mask.bool() & rollout.response_mask.bool()).any()
    for completion, right in zip(rollout.completions, verdicts, strict=True):
        if right is not None:  # the model learned which token follows which verdict
            assert set(completion[5:]) <= {coin.TAIL[right]}, completion


def test_the_length_bias_effect_runs_on_the_coin_model_and_reads_both_arms():
    settings = length_bias.settings(quick=True)
    assert settings["model"] == "tiny-lab-coin" and set(settings["arms"]) == {"seq-mean", "constant"}
    arms = length_bias.run_seed(0, settings)
    for arm in ("seq-mean", "constant"):
        assert len(arms[arm]["wrong_length"]) == settings["grpo"]["steps"]
        assert all(v is None or v >= 5 for v in arms[arm]["wrong_length"] + arms[arm]["right_length"])
    assert arms["gap"] == arms["seq-mean"]["final_wrong_length"] - arms["constant"]["final_wrong_length"]


@pytest.mark.parametrize("response", ["HH]", "Th]", "TH]", "H.]", "]", " H]", "h]"])
def test_a_first_call_without_a_guess_alone_is_flipped_and_judged_wrong(response):
    # judged by its first character, "HH]" got "=H!" on an answer whose reward is 0
    answers = [coin.coin_tool(seed).run(response) for seed in range(8)]
    assert {a[:2] for a in answers} == {"=H", "=T"} and {a[2] for a in answers} == {"?"}
    assert all(coin.coin_reward([coin.PROMPT], [response + a]) == [0.0] for a in answers)


@pytest.mark.parametrize("response", ["=H]", "H=]", "H]=H!.]", "H]=T?,,]"])
def test_a_call_after_the_flip_or_after_the_policys_own_mark_is_refused(response):
    assert all(coin.coin_tool(seed).run(response) is None for seed in range(8))


@pytest.mark.parametrize("seed", [None, -1, 1.5, "0", True])
def test_a_seed_that_is_not_an_int_of_at_least_0_is_refused_before_any_flip(seed):
    with pytest.raises(ValueError, match=f"seed must be an integer >= 0 .*got {seed!r}"):
        coin.task(seed=seed)
    for refused in (lambda: coin.coin_metrics(None, None, seed=seed), lambda: coin.sft_examples(10, seed=seed)):
        with pytest.raises(ValueError, match="seed must be"):
            refused()


@pytest.mark.parametrize("n", [0, -3, 2.0])
def test_an_evaluation_or_sft_set_of_no_answers_is_refused_naming_n(n):
    for refused in (lambda: coin.coin_metrics(None, None, n=n), lambda: coin.sft_examples(n)):
        with pytest.raises(ValueError, match=rf"n must be an integer >= 1, got {n!r}"):
            refused()


def test_the_kl_evaluation_flips_its_own_coins_and_leaves_trainings_flips_alone():
    # eval/kl_ref samples with the task's tool; drawing from the training tool's stream changed every training flip
    seen = {}
    for eval_kl in (False, True):
        task, seen[eval_kl] = coin.task(0), []

        def reward(prompts, completions, log=seen[eval_kl], **columns):
            log.append(list(completions))
            return coin.coin_reward(prompts, completions)

        config = GRPOConfig(model="tiny-lab-coin", seed=0, steps=2, prompts_per_step=1, group_size=8, eval_every=1,
                            eval_kl=eval_kl, progress=False, device="cpu")
        train_grpo(dataclasses.replace(task, reward_fn=reward, evaluate=None), config)
    assert len(seen[True]) == 2 and seen[True] == seen[False]


def test_a_length_read_from_the_text_is_the_count_of_sampled_tokens():
    # SeenCompletions re-tokenises each completion: every character of the format must be one token of its own
    tokenizer = load_tokenizer("tiny-lab-coin")
    for completion in FORMS:
        assert len(tokenizer(completion, add_special_tokens=False)["input_ids"]) == len(completion), completion


def test_the_evaluation_repeats_from_its_seed_and_reads_its_own_answers():
    model, tokenizer = load_model("tiny-lab-coin", device="cpu")
    metrics = coin.coin_metrics(model, tokenizer, n=64, seed=3)
    assert coin.coin_metrics(model, tokenizer, n=64, seed=3) == metrics != coin.coin_metrics(model, tokenizer, n=64)
    rollout = sample(model, tokenizer, [coin.PROMPT], group_size=64, max_new_tokens=coin.MAX_NEW_TOKENS,
                     generator=torch.Generator().manual_seed(3), tool=coin.coin_tool(3))
    verdicts = [coin.right_guess(c) for c in rollout.completions]
    assert metrics["accuracy"] == sum(v is True for v in verdicts) / 64
    for name, right in (("right", True), ("wrong", False)):
        tails = [coin.tail_length(c) for c, v in zip(rollout.completions, verdicts, strict=True) if v is right]
        assert metrics[f"tail/{name}"] == pytest.approx(sum(tails) / len(tails))


@pytest.mark.parametrize("save_every, stop", [(2, 2), (1, 1), (1, 3)])  # stop: the history's step it is killed at
def test_a_resumed_coin_run_continues_the_environments_flips_bit_identically(save_every, stop, tmp_path):
    # the flips come from the tool's own stream: a resume that restarted it would replay the first steps' coins
    def run(callbacks=(), **fields):
        config = GRPOConfig(**RESUMABLE, save_every=save_every, **fields)
        model, _, history = train_grpo(coin.task(0), config, callbacks=callbacks)  # a fresh environment, as a new
        return history, model.state_dict()                                           # process would make

    expected, weights = run(out_dir=str(tmp_path / "full"))
    with pytest.raises(Interrupt):
        run([stop_after(stop)], out_dir=str(tmp_path / "resumed"))
    history, resumed = run(resume=str(tmp_path / "resumed"))
    assert history == expected and all(torch.equal(resumed[k], weights[k]) for k in weights)


@pytest.mark.parametrize("saved_with, resumed_with", [("stream", "none"), ("none", "stream")])
def test_a_resume_whose_tool_gained_or_lost_its_stream_is_refused_before_a_step(saved_with, resumed_with, tmp_path):
    def task(kind):  # "none": the same coin tool, its stream not declared (as before tools declared one)
        made = coin.task(0)
        return made if kind == "stream" else dataclasses.replace(made, tool=dataclasses.replace(made.tool, rng=None))

    config = dict(RESUMABLE, save_every=1)
    with pytest.raises(Interrupt):
        train_grpo(task(saved_with), GRPOConfig(**config, out_dir=str(tmp_path)), callbacks=[stop_after(1)])
    steps = []
    expected = {"none": r"keeps no state for \['tool'\], which this run draws from",
                "stream": r"keeps \['tool'\], which this run does not draw from"}[saved_with]
    with pytest.raises(ValueError, match=rf"step-\d+: .*trainer_state\.pt, field 'rng'.*{expected}"):
        train_grpo(task(resumed_with), GRPOConfig(**config, resume=str(tmp_path)), callbacks=[steps.append])
    assert steps == []  # refused before any step


@pytest.mark.parametrize("stream", [random.SystemRandom(0), torch.Generator(), 0, "seed", object()])
def test_a_tool_stream_a_checkpoint_cannot_keep_is_refused_when_the_tool_is_made(stream):
    with pytest.raises(TypeError, match=rf"Tool\.rng must be a random\.Random .*got {type(stream).__name__}"):
        Tool(call_end="]", run=lambda response: None, rng=stream)


def test_a_tool_stream_of_a_random_subclass_is_kept():
    class Seeded(random.Random):
        pass

    assert Tool(call_end="]", run=lambda response: None, rng=Seeded(3)).rng.random() == random.Random(3).random()
