"""A task of the user's own from the command line: prompts JSONL + reward functions, named module:function."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from minirlhf.__main__ import main
from minirlhf.tasks.custom import load_object, load_prompt_rows, weighted_reward

ROOT = Path(__file__).resolve().parents[1]

REWARDS = '''
import json


def exact(prompts, completions, answer, **columns):
    with open("seen.jsonl", "a") as f:  # what reached the reward function, for the test to check
        f.write(json.dumps({"prompts": prompts, "answer": answer, "completions": completions}) + "\\n")
    return [1.0 if c.strip() == a else 0.0 for c, a in zip(completions, answer)]


def short(prompts, completions, **columns):
    return [-len(c) / 10 for c in completions]


def arithmetic_task():
    from minirlhf.tasks import arithmetic

    return arithmetic.task()


NOT_A_FUNCTION = 3
'''
PROMPTS = [{"prompt": "2+2=", "answer": "4"}, {"prompt": "10+5=", "answer": "15"}, {"prompt": "7+8=", "answer": "15"}]


@pytest.fixture
def user_files(tmp_path, monkeypatch):
    (tmp_path / "my_rewards.py").write_text(REWARDS)
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps(row) + "\n" for row in PROMPTS))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_own_prompts_and_weighted_rewards_train_from_the_cli_end_to_end(user_files):
    command = [sys.executable, "-m", "minirlhf", "grpo", "--prompts", "prompts.jsonl",
               "--reward", "my_rewards.py:exact", "--reward", "my_rewards.py:short", "--reward-weights", "1", "0.5",
               "--model", "tiny-sft", "--steps", "2", "--prompts-per-step", "2", "--group-size", "2",
               "--max-new-tokens", "5", "--device", "cpu", "--progress", "false",
               "--eval-kl", "false"]  # no evaluation at all: the last row printed is the last step's
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(command, cwd=user_files, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    last = json.loads(done.stdout[done.stdout.index("{"):])
    assert last["step"] == 1 and {"reward", "loss", "zero_std_groups", "reward/exact", "reward/short"} <= set(last)
    calls = [json.loads(line) for line in (user_files / "seen.jsonl").read_text().splitlines()]
    assert len(calls) == 2  # one batch per step
    answer_of = {row["prompt"]: row["answer"] for row in PROMPTS}
    for call in calls:  # the "answer" column reached the reward function, one value per completion, aligned
        assert len(call["prompts"]) == len(call["answer"]) == len(call["completions"]) == 4
        assert call["answer"] == [answer_of[p] for p in call["prompts"]]
    last_batch = calls[-1]
    exact = [1.0 if c.strip() == a else 0.0 for c, a in zip(last_batch["completions"], last_batch["answer"])]
    expected = sum(e - 0.5 * len(c) / 10 for e, c in zip(exact, last_batch["completions"])) / 4
    assert last["reward"] == pytest.approx(expected, abs=1e-6)  # R = 1·exact + 0.5·short, on the last batch


def test_a_task_function_of_the_user_trains_from_the_cli(user_files, capsys):
    main(["grpo", "--task", "my_rewards.py:arithmetic_task", "--model", "tiny-sft", "--steps", "1",
          "--prompts-per-step", "2", "--group-size", "2", "--eval-every", "0", "--device", "cpu",
          "--progress", "false"])
    assert '"reward"' in capsys.readouterr().out


def test_weighted_reward_is_the_weighted_sum():
    def one(prompts, completions, **_):
        return [1.0] * len(completions)

    def length(prompts, completions, **_):
        return [float(len(c)) for c in completions]

    reward = weighted_reward([one, length], [2.0, -0.5])
    assert reward(["a", "b"], ["xy", "xyzw"]) == [2.0 - 1.0, 2.0 - 2.0]
    assert weighted_reward([one]) is one
    with pytest.raises(ValueError, match="3 reward weights were given for 2 reward functions"):
        weighted_reward([one, length], [1.0, 2.0, 3.0])


@pytest.mark.parametrize("spec, message", [
    ("my_rewardz.py:exact", r"reward function 'my_rewardz.py:exact': there is no file my_rewardz.py"),
    ("my_rewards.py:exakt", r"my_rewards.py has no 'exakt' \(did you mean 'exact'\?\); it defines: arithmetic_task, "
                            r"exact, short"),
    ("no_such_module:exact", r"no module named 'no_such_module' can be imported"),
    ("my_rewards.py:NOT_A_FUNCTION", r"/my_rewards.py:NOT_A_FUNCTION' is a int, not a function"),
    ("exact", r"must be written module:name or path/to/file.py:name"),
])
def test_a_misspelled_reward_function_is_a_clear_error(user_files, capsys, spec, message):
    with pytest.raises(SystemExit) as exit_info:
        main(["grpo", "--prompts", "prompts.jsonl", "--reward", spec, "--steps", "1"])
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


def test_task_and_prompt_mistakes_are_clear_errors(user_files, capsys):
    cases = [
        (["--prompts", "prompts.jsonl"], "--prompts needs at least one --reward"),
        (["--reward", "my_rewards.py:exact"], "--reward and --reward-weights go with --prompts"),
        (["--task", "my_rewards.py:short"], "/my_rewards.py:short' must be callable without arguments"),
        (["--task", "my_rewards.py:exact", "--prompts", "prompts.jsonl"], "either --task or --prompts"),
        (["--prompts", "missing.jsonl", "--reward", "my_rewards.py:exact"], "prompt file 'missing.jsonl' does not"),
    ]
    for flags, message in cases:
        with pytest.raises(SystemExit):
            main(["grpo", *flags, "--steps", "1"])
        assert message in capsys.readouterr().err, flags


def test_a_bad_prompt_row_names_its_file_and_line(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text('{"prompt": "1+1="}\n\n{"question": "2+2="}\n')
    with pytest.raises(ValueError, match=r"p\.jsonl, line 3: field 'prompt' must be a non-empty string, got None"):
        load_prompt_rows(path)
    path.write_text('{"prompt": "1+1="\n')
    with pytest.raises(ValueError, match=r"p\.jsonl, line 1: invalid JSON"):
        load_prompt_rows(path)


def test_load_object_reads_modules_and_files(user_files):
    assert load_object("minirlhf.tasks.arithmetic:correctness_reward").__name__ == "correctness_reward"
    assert load_object("my_rewards.py:short")([""], ["abcd"]) == [-0.4]


def test_help_shows_each_flags_meaning_and_allowed_values(capsys):
    with pytest.raises(SystemExit):
        main(["grpo", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "--scale group|batch|none how rewards are normalised into advantages" in text
    assert "--aggregation seq-sum|seq-mean|token-mean|constant how token terms are weighted" in text
    assert "--eval-every INT held-out evaluation every N steps (and at the first and last step); 0 = never" in text
    assert "--task arithmetic|sentiment|lab|calculator|reward-models|module:function|path.py:function" in text
    with pytest.raises(SystemExit):
        main(["reinforce", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert '--baseline none|ema|rloo|reinforce++|reinforce++-baseline b in Â = R - b: "none" (b = 0)' in text
    assert "--ema-decay FLOAT for baseline=\"ema\"" in text
