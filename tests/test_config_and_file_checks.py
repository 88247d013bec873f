"""Config options and data files as a new user gets them wrong: float fields (no NaN or inf), the sampler's top-p and
top-k, options of a feature that is off, recipes on resume, prompt and pair files (byte-order marks, keys written
twice, white-space-only text), hub datasets in run.json, the notebooks' Colab set-up cell, the seed. Each class has
a generated (property or fuzz) test: bad values are refused before training starts, naming the field and value."""

from __future__ import annotations

import dataclasses
import json
import math
import re
import typing

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minirlhf.tasks import Task, WeightedReward
from minirlhf.trainers.dpo import DPOConfig
from minirlhf.trainers.grpo import RECIPES, GRPOConfig, train_grpo
from minirlhf.trainers.online import OVERLONG, with_overlong_penalty
from minirlhf.trainers.ppo import PPOConfig
from minirlhf.trainers.reinforce import ReinforceConfig
from minirlhf.trainers.reward_model import RewardModelConfig
from minirlhf.trainers.sft import SFTConfig

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
CONFIGS = (GRPOConfig, ReinforceConfig, PPOConfig, DPOConfig, SFTConfig, RewardModelConfig)
TINY = dict(steps=2, prompts_per_step=2, group_size=2, max_new_tokens=4, eval_every=0, progress=False)


def _float_fields(config_cls: type) -> list[tuple[str, bool]]:
    """(name, is a list) of every float field of a config: `float`, `float | None`, `list[float] | None`."""
    hints = typing.get_type_hints(config_cls)
    found = []
    for f in dataclasses.fields(config_cls):
        args = typing.get_args(hints[f.name]) or (hints[f.name],)
        if float in args:
            found.append((f.name, False))
        elif any(typing.get_origin(a) is list and typing.get_args(a) == (float,) for a in args):
            found.append((f.name, True))
    return found


FLOAT_FIELDS = [(cls, name, is_list) for cls in CONFIGS for name, is_list in _float_fields(cls)]


@FUZZ
@given(st.sampled_from(FLOAT_FIELDS), st.sampled_from([math.nan, math.inf, -math.inf]), st.integers(0, 2))
def test_no_float_field_of_any_config_takes_nan_or_inf(field, value, position):
    """Found: top_p, overlong_weight, reward_weights (online) and DPO's beta and rpo_alpha took inf or NaN, and the
    run failed at its first sample or reward, after run.json and metrics.jsonl were written."""
    config_cls, name, is_list = field
    given_value = [1.0] * position + [value] if is_list else value
    extra = {"reward": ["m:f"] * len(given_value), "prompts": "p.jsonl"} if name == "reward_weights" else {}
    with pytest.raises(ValueError, match=rf"{config_cls.__name__}\.{name}"):
        config_cls(**extra, **{name: given_value})


@FUZZ
@given(st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3))
def test_top_p_is_in_0_1_and_top_k_is_not_negative_before_the_first_sample(top_p, top_k):
    valid = 0 < top_p <= 1 and top_k >= 0
    if valid:
        GRPOConfig(top_p=top_p, top_k=top_k)
    else:
        with pytest.raises(ValueError, match=r"GRPOConfig\.top_[pk] must"):
            GRPOConfig(top_p=top_p, top_k=top_k)


@FUZZ
@given(st.integers(1, 9), st.booleans(), st.floats(0, 5), st.integers(0, 3))
def test_an_option_of_a_feature_that_is_off_is_refused_not_ignored(rounds, dynamic, weight, cache):
    """Found: --max-sampling-rounds without --dynamic-sampling, and --overlong-weight without --overlong-cache, were
    silently ignored (as DPO's rpo_alpha and ipo_normalisation already are refused outside their losses)."""
    fields = dict(max_sampling_rounds=rounds, dynamic_sampling=dynamic, overlong_weight=weight, overlong_cache=cache)
    idle = ([] if dynamic or rounds == 4 else ["max_sampling_rounds"]) + ([] if cache or weight == 1.0
                                                                           else ["overlong_weight"])
    if idle:
        with pytest.raises(ValueError, match=rf"GRPOConfig\.({'|'.join(idle)})=.* which is off"):
            GRPOConfig(**fields)
    else:
        GRPOConfig(**fields)


def _reward(name: str):
    def reward(prompts, completions, **columns):
        return [0.0] * len(completions)

    reward.__name__ = name
    return reward


reward_names = st.sampled_from(["exact", "overlong", "length", "format"])


@FUZZ
@given(st.lists(reward_names, min_size=1, max_size=3, unique=True))
def test_a_reward_named_like_the_overlong_penalty_is_refused_naming_both(tiny, names):
    """Found: `--reward f.py:overlong --overlong-cache 2` ended with "reward function names must be unique, got
    ['overlong', 'overlong']", naming neither flag."""
    fns = [_reward(name) for name in names]
    reward = fns[0] if len(fns) == 1 else WeightedReward([(name, 1.0, fn) for name, fn in zip(names, fns)])
    task = Task("t", lambda n, rng: ["1+1="] * n, reward, max_new_tokens=8)
    config = GRPOConfig(overlong_cache=2, max_new_tokens=8)
    if OVERLONG in names:
        with pytest.raises(ValueError, match=r"GRPOConfig\.overlong_cache=2 adds the reward term 'overlong'.*task 't' "
                                             r"already has a reward function named 'overlong'"):
            with_overlong_penalty(task, config, tiny[1])
    else:
        terms = with_overlong_penalty(task, config, tiny[1]).reward_fn.terms
        assert [name for name, _, _ in terms] == [*names, OVERLONG]


# ----------------------------------------------------------------------------- a recipe or preset on resume


@pytest.fixture(scope="module")
def dapo_run(tmp_path_factory):
    """A tiny run started with the dapo recipe, one checkpoint per step."""
    out = tmp_path_factory.mktemp("dapo") / "run"
    train_grpo(None, GRPOConfig(**RECIPES["dapo"], **{**TINY, "steps": 1}, save_every=1, out_dir=str(out)))
    return out


RECIPE_FIELDS = sorted({name for fields in RECIPES.values() for name in fields})


@FUZZ
@given(st.sampled_from(sorted(RECIPES)),
       st.dictionaries(st.sampled_from(RECIPE_FIELDS), st.sampled_from(sorted(RECIPES)), max_size=3))
def test_a_recipe_never_changes_a_resumed_run_silently(monkeypatch, dapo_run, recipe, flags):
    """Found: `--resume DIR --recipe gspo` on a dapo run was silently ignored (the run went on as dapo). Now a recipe
    that disagrees with the resumed run's config.json is refused, naming the fields; flags given still win."""
    from minirlhf import __main__ as cli
    from minirlhf.errors import UserError
    from minirlhf.trainers import grpo

    flags = {name: RECIPES[source].get(name, GRPOConfig.__dataclass_fields__[name].default)
             for name, source in flags.items()}
    argv = ["grpo", "--resume", str(dapo_run), "--steps", "2", "--recipe", recipe]
    for name, value in flags.items():
        argv += [f"--{name.replace('_', '-')}", str(value).lower() if value is None or isinstance(value, bool)
                 else str(value)]
    seen = []
    monkeypatch.setattr(grpo, "train_grpo", lambda data, config: seen.append(config) or (None, None, [{"step": 0}]))
    run = RECIPES["dapo"] | flags  # what the resumed run holds once the flags given changed it
    differ = [name for name, value in RECIPES[recipe].items() if name not in flags and run.get(name) != value]
    if differ:
        with pytest.raises(UserError, match=rf"--recipe {recipe} with --resume .*the run's config.json holds "
                                            rf"{differ[0]}="):
            cli._main(argv)
    else:
        cli._main(argv)
        assert {name: getattr(seen[0], name) for name in run} == run


# ----------------------------------------------------------------------------- prompt and pair files

ROWS = {"prompts": {"prompt": "1+1=", "answer": "2"}, "pairs": {"prompt": "a", "chosen": "b", "rejected": "c"}}
white = st.text(alphabet=" \t\r\u00a0\u2003\u3000\x0b\x0c", min_size=1, max_size=4)


def _load(kind: str, path):
    from minirlhf.data import load_preference_pairs
    from minirlhf.tasks.custom import load_prompt_rows

    return load_prompt_rows(path) if kind == "prompts" else load_preference_pairs(path)


def _line(items: list[tuple[str, object]]) -> str:
    """A JSON object written key by key (so that a key may appear twice)."""
    return "{" + ", ".join(f"{json.dumps(key)}: {json.dumps(value)}" for key, value in items) + "}"


@FUZZ
@given(st.sampled_from(sorted(ROWS)), st.integers(1, 4), st.integers(0, 4))
def test_a_byte_order_mark_is_accepted_at_the_file_start_and_named_elsewhere(tmp_path, kind, n_rows, mark_line):
    """Found: a file saved "UTF-8 with BOM" (Notepad, Excel) was refused at line 1. A mark at the start is now read
    past, as most tools do; one inside the file (two files concatenated) is still an error naming its line."""
    lines = [json.dumps(ROWS[kind]) for _ in range(n_rows)]
    plain = _load(kind, _write(tmp_path, "plain.jsonl", "\n".join(lines)))
    mark_line = min(mark_line, n_rows - 1)
    lines[mark_line] = "\ufeff" + lines[mark_line]
    marked = _write(tmp_path, "marked.jsonl", "\n".join(lines))
    if mark_line == 0:
        assert _load(kind, marked) == plain
    else:
        with pytest.raises(ValueError, match=rf"marked\.jsonl, line {mark_line + 1}: invalid JSON \(Unexpected UTF-8"):
            _load(kind, marked)


@FUZZ
@given(st.sampled_from(sorted(ROWS)), st.integers(0, 2), st.data())
def test_a_key_written_twice_in_a_row_is_refused_naming_file_line_and_key(tmp_path, kind, line, data):
    """Found: {"prompt": "1+1=", "prompt": "2+2="} trained on the last value silently (json keeps the last)."""
    items = list(ROWS[kind].items())
    key = data.draw(st.sampled_from([k for k, _ in items] + ["extra"]), label="key")
    at = data.draw(st.integers(0, len(items)), label="at")
    doubled = items[:at] + [(key, data.draw(st.text(alphabet="xyz", min_size=1, max_size=3)))] + items[at:]
    if key == "extra":  # the first occurrence must be there too
        doubled.insert(0, ("extra", "1"))
    lines = [_line(items)] * line + [_line(doubled)] + [_line(items)]
    with pytest.raises(ValueError, match=rf"rows\.jsonl, line {line + 1}: key '{key}' appears twice in one object"):
        _load(kind, _write(tmp_path, "rows.jsonl", "\n".join(lines)))


@FUZZ
@given(st.sampled_from(["prompts", "sft", "pairs"]), st.integers(0, 2), white, st.data())
def test_a_text_field_of_white_space_only_is_refused_naming_file_line_and_field(tmp_path, kind, line, blank, data):
    """Found: a prompts file row {"prompt": "  "} was accepted (pairs already refused one)."""
    from minirlhf.tasks.custom import load_prompt_rows

    row = {**ROWS["prompts"], "completion": "2"} if kind == "sft" else ROWS[kind]
    field = data.draw(st.sampled_from({"prompts": ["prompt"], "sft": ["prompt", "completion"],
                                       "pairs": ["prompt", "chosen", "rejected"]}[kind]), label="field")
    lines = [json.dumps(row)] * line + [json.dumps({**row, field: blank})]
    path = _write(tmp_path, "rows.jsonl", "\n".join(lines))
    with pytest.raises(ValueError, match=rf"rows\.jsonl, line {line + 1}: field '{field}'"):
        load_prompt_rows(path, required=("prompt", "completion")) if kind == "sft" else _load(kind, path)


def _write(folder, name: str, text: str):
    path = folder / name
    path.write_bytes(text.encode("utf-8"))
    return path


hub_names = st.from_regex(r"[a-z][a-z0-9-]{0,8}/[a-z][a-z0-9_.-]{0,8}", fullmatch=True)


@FUZZ
@given(st.sampled_from(["prompts", "pairs"]), hub_names | st.sampled_from(["local.jsonl", "local-folder", "sentiment"]))
def test_a_hub_dataset_is_recorded_in_run_json_as_checked_by_name_only(tmp_path, field, source):
    """Found: `--prompts owner/name` (a hub dataset) left run.json without a word on its content: no fingerprint, and
    nothing saying that a resume cannot check it. Now run.json's `by_name_only` names it and says what is unchecked;
    a local file or folder keeps its sha256 fingerprint, and a shipped name is neither."""
    from minirlhf.trainers.run.manifest import new_manifest

    (tmp_path / "local.jsonl").write_text(json.dumps(ROWS["pairs"]) + "\n")
    (tmp_path / "local-folder").mkdir(exist_ok=True)
    value = str(tmp_path / source) if source.startswith("local") else source
    manifest = new_manifest({field: value}, "GRPOConfig")
    is_hub = "/" in source and not source.startswith("local")
    assert manifest["data"] == {field: value}
    if is_hub:
        assert manifest["by_name_only"] == {field: f"hub dataset {value!r}: recorded by name only; its rows are not "
                                                   "fingerprinted, so a change on the hub since the run started is not "
                                                   "detected"}
    else:
        assert manifest["by_name_only"] == {}
    assert (field in manifest["fingerprints"]) == source.startswith("local")  # a local folder is fingerprinted too


# ----------------------------------------------------------------------------- the notebooks' Colab set-up cell


def _colab_install_part() -> str:
    """The setup cell of the notebooks (as scripts/sync_notebooks.py writes it), up to its imports of torch and
    minirlhf: the part that runs on Colab before minirlhf is installed."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("sync_notebooks", Path(__file__).parent.parent / "scripts"
                                                  / "sync_notebooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.setup_cell(module.repository_url()).split("\nimport torch")[0]


good_urls = (st.from_regex(r"https://github\.com/[a-z0-9-]{1,8}/[a-z0-9_.-]{1,8}(@[a-z0-9.]{1,5})?", fullmatch=True)
             | st.from_regex(r"file:///[a-z0-9_/]{1,12}", fullmatch=True)
             | st.from_regex(r"ssh://git@[a-z]{1,6}\.com/[a-z]{1,6}/[a-z]{1,6}\.git", fullmatch=True))
bad_urls = (st.just("")
            | good_urls.map(lambda url: url.split("://", 1)[1])  # no scheme: "github.com/owner/name"
            | good_urls.map(lambda url: "git+" + url)  # pip's own prefix, which the cell adds
            | st.tuples(good_urls, st.sampled_from([" ", "\t", "\n"]), st.booleans()).map(
                lambda t: t[1] + t[0] if t[2] else t[0] + t[1])  # a space pasted before or after
            | st.from_regex(r"git@github\.com:[a-z]{1,6}/[a-z]{1,6}\.git", fullmatch=True)  # scp-like: pip refuses it
            | st.from_regex(r"(ftp|www|c):/?/?[a-z]{1,8}", fullmatch=True))


@FUZZ
@given(st.one_of(good_urls.map(lambda url: (url, True)), bad_urls.map(lambda url: (url, False))))
def test_the_setup_cell_refuses_a_repository_address_pip_cannot_take_naming_the_variable(monkeypatch, case):
    """Found: MINIRLHF_REPO_URL was handed to pip unchecked: an empty or mistyped value gave pip's own error about
    "git+..." after a long wait. Now the cell refuses it first, naming the variable and its value."""
    import subprocess
    import sys
    import types

    url, good = case
    colab = types.ModuleType("google.colab")
    colab.output = types.SimpleNamespace(enable_custom_widget_manager=lambda: None)
    monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    monkeypatch.setenv("MINIRLHF_REPO_URL", url)
    installs = []
    monkeypatch.setattr(subprocess, "run", lambda argv, **kw: installs.append(argv) or
                        subprocess.CompletedProcess(argv, 0, "", ""))
    if good:
        exec(_colab_install_part(), {})
        assert installs[0][-1] == f"minirlhf[course] @ git+{url}"
    else:
        with pytest.raises(ValueError, match=r"environment variable MINIRLHF_REPO_URL=.* is not a git repository's") \
                as refused:
            exec(_colab_install_part(), {})
        assert repr(url) in str(refused.value) and not installs


@FUZZ
@given(st.sampled_from(CONFIGS), st.integers(-2**70, 2**70))
def test_a_seed_numpy_cannot_take_is_refused_naming_the_field(config_cls, seed):
    """Found: `--seed -1` (or >= 2**32) ended with numpy's "Seed must be between 0 and 2**32 - 1", naming no field."""
    import numpy as np

    if 0 <= seed < 2**32:
        np.random.RandomState(seed)  # the values a config takes are the values numpy takes
        config_cls(seed=seed)
    else:
        refused = rf"{config_cls.__name__}\.seed must lie in \[0, {2**32}\) \(numpy's seeds\), got {seed}"
        with pytest.raises(ValueError, match=refused):
            config_cls(seed=seed)


@FUZZ
@given(st.sampled_from(sorted(RECIPES)) | st.text(max_size=6),
       st.dictionaries(st.sampled_from(RECIPE_FIELDS), st.sampled_from(sorted(RECIPES)), max_size=3))
def test_the_python_api_takes_a_recipe_as_the_command_line_does(monkeypatch, name, flags):
    """Found: the Python API had only `GRPOConfig(**RECIPES["dapo"], eps=0.1)`: a TypeError for a field the recipe
    sets, a bare KeyError for an unknown name. GRPOConfig.from_recipe gives the command line's config."""
    from minirlhf import __main__ as cli
    from minirlhf.trainers import grpo

    fields = {field: RECIPES[source].get(field, GRPOConfig.__dataclass_fields__[field].default)
              for field, source in flags.items()}
    if name not in RECIPES:
        with pytest.raises(ValueError, match=re.escape(f"unknown recipe {name!r}")):
            GRPOConfig.from_recipe(name, **fields)
        return
    argv = ["grpo", "--recipe", name]
    for field, value in fields.items():
        argv += [f"--{field.replace('_', '-')}", str(value).lower() if value is None or isinstance(value, bool)
                 else str(value)]
    seen = []
    monkeypatch.setattr(grpo, "train_grpo", lambda data, config: seen.append(config) or (None, None, [{"step": 0}]))
    cli._main(argv)
    assert GRPOConfig.from_recipe(name, **fields) == seen[0]
