"""The pass-at-k command (`python -m minirlhf pass-at-k`, minirlhf.tasks.held_out): it prints what the tasks'
Python evaluators give on the same seed, refuses every bad setting with one line and status 2 before any sampling,
and its --help lists its flags."""

from __future__ import annotations

import dataclasses
import json
import random
import re

import pytest

from minirlhf.__main__ import main
from minirlhf.models import load_model, resolve_device
from minirlhf.tasks import arithmetic, lab
from minirlhf.tasks.held_out import PassAtKConfig


def _command(capsys, *args: str) -> dict[str, float]:
    main(["pass-at-k", "--device", "cpu", *args])
    return json.loads(capsys.readouterr().out)


def test_the_command_prints_the_arithmetic_pass_at_k_of_python(capsys, tmp_path):
    """On the same seed: the same held-out problems (drawn by the seed), the same samples, the same values; --out
    holds them too, with the k used."""
    out = tmp_path / "eval" / "pass_at_k.json"
    printed = _command(capsys, "--model", "tiny-sft", "--samples", "4", "--k", "1", "4", "--problems", "6",
                       "--seed", "3", "--out", str(out))
    model, tokenizer = load_model("tiny-sft", device="cpu")
    held_out = random.Random(3).sample(arithmetic.problems("test"), 6)
    assert printed == arithmetic.held_out_pass_at_k(model, tokenizer, n=4, ks=(1, 4), held_out=held_out, seed=3)
    written = json.loads(out.read_text())
    assert written["pass_at_k"] == printed
    assert written["config"]["k"] == [1, 4] and written["config"]["seed"] == 3


def test_the_json_records_the_device_used_not_auto(tmp_path):
    out = tmp_path / "pass_at_k.json"
    main(["pass-at-k", "--samples", "1", "--problems", "1", "--out", str(out)])  # --device auto, the default
    assert json.loads(out.read_text())["config"]["device"] == str(resolve_device("auto")) != "auto"


@pytest.mark.parametrize("args, k", [
    (["--k", "none"], None), (["--k", "None"], None), (["--k", "1", "--k", "4"], [1, 4]),
    (["--k", "4", "--k", "none"], None), (["--k", "none", "--k", "4"], [4])])
def test_k_none_on_the_command_line_is_1_and_the_powers_of_4(args, k, monkeypatch):
    """`--k none` is None, as `none` is for every field that may be None: 1, 4, 16 for the 16 samples."""
    seen = []
    monkeypatch.setattr("minirlhf.tasks.held_out.run_pass_at_k", lambda config: seen.append(config) or {})
    main(["pass-at-k", "--device", "cpu", "--samples", "16", *args])
    assert seen[0].k == k and seen[0].ks == (tuple(k) if k else (1, 4, 16))


def test_the_bounds_of_samples_and_lab_problems_are_taken():
    assert PassAtKConfig(samples=256).ks == (1, 4, 16, 64, 256)
    assert PassAtKConfig(task="lab", problems=830).problems == 830


def test_the_command_prints_the_lab_pass_at_k_of_python_per_kind(capsys):
    printed = _command(capsys, "--model", "tiny-lab", "--task", "lab", "--task-option", "max_new_tokens=8",
                       "--samples", "2", "--k", "1", "2", "--problems", "2", "--seed", "1")
    model, tokenizer = load_model("tiny-lab", device="cpu")
    assert printed == lab.held_out_pass_at_k(model, tokenizer, lab.LabConfig(max_new_tokens=8), n=2, ks=(1, 2),
                                             per_kind=2, seed=1)
    assert list(printed) == [f"pass@{k}/{kind}" for kind in lab.KINDS for k in (1, 2)]


@pytest.mark.parametrize("samples, ks", [(16, (1, 4, 16)), (10, (1, 4)), (1, (1,)), (64, (1, 4, 16, 64))])
def test_without_k_the_command_takes_1_and_the_powers_of_4_up_to_n(samples, ks):
    assert PassAtKConfig(samples=samples).ks == ks


BAD = {  # flags -> the one line the command prints (after "python -m minirlhf pass-at-k: error: ")
    "k-above-n": (["--samples", "4", "--k", "1", "8"], "PassAtKConfig.k must lie in [1, 4] (pass@k is estimated "
                  "from the n = 4 samples of each problem), got 8"),
    "k-zero": (["--k", "0"], "PassAtKConfig.k must be an integer >= 1, got 0"),
    "k-negative": (["--k", "-2"], "PassAtKConfig.k must be an integer >= 1, got -2"),
    "k-twice": (["--k", "1", "4", "--k", "4"], "PassAtKConfig.k=[1, 4, 4] gives 4 twice: each pass@k once"),
    "k-not-a-number": (["--k", "two"], "argument --k: invalid int value: 'two'"),
    "k-none-among-values": (["--k", "1", "none"], "argument --k: none (None) stands alone, not among values"),
    "samples-zero": (["--samples", "0"], "PassAtKConfig.samples must be an integer >= 1, got 0"),
    "samples-beyond-memory": (["--samples", "257"], "PassAtKConfig.samples must lie in [1, 256] (the memory of "
                              "sampling grows with n), got 257"),
    "samples-huge": (["--samples", str(10**9)], "PassAtKConfig.samples must lie in [1, 256] (the memory of sampling "
                     "grows with n), got 1000000000"),
    "unknown-task": (["--task", "algebra"], "PassAtKConfig.task='algebra' is no shipped task; the tasks with a "
                     "held-out pass@k: arithmetic, lab"),
    "task-without-pass-at-k": (["--task", "sentiment"], "PassAtKConfig.task='sentiment' has no held-out pass@k; the "
                               "tasks with a held-out pass@k: arithmetic, lab"),
    "option-of-a-task-without-knobs": (["--task-option", "max_new_tokens=8"], "--task-option 'max_new_tokens=8': "
                                       "task 'arithmetic' takes no options (the tasks that take them: lab, "
                                       "calculator, reward-models)"),
    "unknown-lab-knob": (["--task", "lab", "--task-option", "cap=8"], "--task-option 'cap=8' must be NAME=VALUE, "
                         "NAME one of the lab task's knobs: mix, filler, max_new_tokens, tolerance"),
    "mix-of-the-lab": (["--task", "lab", "--task-option", "mix=1,0,0"], "PassAtKConfig.task_option=['mix=1,0,0'] "
                       "sets mix, which plays no part in pass@k: every kind is evaluated on its own (pass@k/<kind>); "
                       "drop it"),
    "problems-zero": (["--problems", "0"], "PassAtKConfig.problems must be an integer >= 1, got 0"),
    "problems-beyond-the-held-out-sums": (["--problems", "993"], "PassAtKConfig.problems must lie in [1, 992] (the "
                                          "arithmetic task holds 992 problems out), got 993"),
    "problems-beyond-the-lab's-held-out-problems": (["--task", "lab", "--problems", "831"], "PassAtKConfig.problems "
                                                    "must lie in [1, 830] (the lab's largest kind holds 830 problems "
                                                    "out), got 831"),
    "seed-negative": (["--seed", "-1"], "PassAtKConfig.seed must be an integer >= 0, got -1"),
    "seed-too-large": (["--seed", str(2**32)], "PassAtKConfig.seed must lie in [0, 4294967296) (as a run's --seed), "
                       "got 4294967296"),
    "out-a-folder": (["--out", "{tmp}"], "PassAtKConfig.out='{tmp}' is a folder; give a file to write the JSON to"),
    "out-inside-a-file": (["--out", "{tmp}/run/config.json/eval/pass_at_k.json"], "PassAtKConfig.out="
                          "'{tmp}/run/config.json/eval/pass_at_k.json' lies inside the file {tmp}/run/config.json: "
                          "give a path in a folder"),
    "missing-model-folder": (["--model", "{tmp}/runs/none"], "PassAtKConfig.model='{tmp}/runs/none': model folder "
                             "'{tmp}/runs/none' does not exist (known short names: ['tiny', 'tiny-calculator', "
                             "'tiny-lab', 'tiny-lab-chain', 'tiny-lab-coin', 'tiny-sft'])"),
    "run-folder-for-its-model": (["--model", "{tmp}/run"], "PassAtKConfig.model='{tmp}/run' is a run's folder: its "
                                 "final model is '{tmp}/run/model'"),
}


@pytest.mark.parametrize("k, message", [
    ([], "PassAtKConfig.k must be a list of whole numbers (None: 1 and the powers of 4 up to samples), got []"),
    (4, "PassAtKConfig.k must be a list of whole numbers (None: 1 and the powers of 4 up to samples), got 4"),
    ([1.5], "PassAtKConfig.k must be an integer >= 1, got 1.5"), ((2, 2), "PassAtKConfig.k=[2, 2] gives 2 twice")])
def test_a_bad_k_from_python_is_refused_by_name(k, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        PassAtKConfig(k=k)


def test_a_task_that_is_no_name_from_python_is_refused_by_name():
    with pytest.raises(ValueError, match=re.escape("PassAtKConfig.task=['lab'] is no shipped task")):
        PassAtKConfig(task=["lab"])


@pytest.mark.parametrize("name", BAD)
def test_a_bad_setting_is_refused_by_name_before_any_sampling(name, capsys, monkeypatch, tmp_path):
    """Each refused with one line naming the flag (its config field) and the value, status 2; the model is not even
    loaded, except for the missing model folder, which loading finds."""
    args, message = BAD[name]
    args = [arg.format(tmp=tmp_path) for arg in args]
    (tmp_path / "run" / "model").mkdir(parents=True)  # a run's out_dir: config.json beside its final model/
    (tmp_path / "run" / "config.json").write_text('{"steps": 1}')
    (tmp_path / "run" / "model" / "config.json").write_text("{}")
    for module in (arithmetic, lab):
        monkeypatch.setattr(module, "count_correct", lambda *a, **k: pytest.fail("sampled despite a bad setting"))
    if name != "missing-model-folder":
        monkeypatch.setattr("minirlhf.tasks.held_out.load_model", lambda *a, **k: pytest.fail("a model was loaded"))
    with pytest.raises(SystemExit) as exit_:
        main(["pass-at-k", "--device", "cpu", *args])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"python -m minirlhf pass-at-k: error: {message.format(tmp=tmp_path)}")


@pytest.mark.parametrize("existing", [False, True], ids=["new-file", "existing-file"])
def test_an_out_this_process_may_not_write_is_refused_when_the_config_is_made(existing, monkeypatch, tmp_path):
    """A read-only --out (or one in a read-only folder) is found before the model is loaded, not after the
    sampling. os.access stands in for the file modes, which root ignores."""
    out = tmp_path / "pass_at_k.json"
    if existing:
        out.write_text("{}")
    monkeypatch.setattr("minirlhf.paths.os.access", lambda path, mode: False)
    why = f"is read-only ({out})" if existing else f"cannot be written: this process may not write in {tmp_path}"
    with pytest.raises(ValueError, match=re.escape(f"PassAtKConfig.out={str(out)!r} {why}")):
        PassAtKConfig(out=str(out))


def test_help_lists_every_flag_with_its_default(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["pass-at-k", "--help"])
    assert exit_.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for f in dataclasses.fields(PassAtKConfig):
        assert f"--{f.name.replace('_', '-')} " in shown
        assert f"(default: {f.default!r})" in shown
    main(["--help"])
    assert "pass-at-k" in capsys.readouterr().out.split("commands:")[1]
