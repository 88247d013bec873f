"""The command line: `python -m minirlhf <command> [--flags]`, each flag a field of that method's config.

    python -m minirlhf demo                   # the showcase: GRPO on arithmetic + DPO on sentiment
    python -m minirlhf sample --model tiny --prompt "17+25=" --prompt "The acting was"
    python -m minirlhf pass-at-k --model runs/grpo/model --k 1 4 16   # pass@k of a model on the held-out sums
    python -m minirlhf grpo --steps 60 --beta 0.0 --out-dir runs/grpo
    python -m minirlhf rloo --steps 60
    python -m minirlhf ppo --steps 60
    python -m minirlhf distill --teacher tiny-lab --jsd-beta 1   # on-policy distillation (reverse KL) on the lab
    python -m minirlhf grpo --task sentiment  # VADER as the reward; --task module:function for a Task of yours
    python -m minirlhf grpo --prompts my_prompts.jsonl --reward my_rewards.py:exact   # your prompts and reward
    python -m minirlhf reward-model --out-dir runs/rm
    python -m minirlhf dpo --beta 0.5 --loss-type ipo --pairs my_pairs.jsonl
    python -m minirlhf kto --beta 0.5         # unpaired thumbs-up / thumbs-down (also: dpo --loss-type kto)
    python -m minirlhf grpo --recipe dapo --epochs 2  # a paper's recipe (grpo, dapo, dr-grpo, gspo); flags win
    python -m minirlhf grpo --preset t4 --steps 100   # real GPT-2 sizes for a Colab T4 (minirlhf.presets)
    accelerate launch --num_processes 2 -m minirlhf dpo --preset t4   # data parallel over 2 GPUs
    python -m minirlhf <command> --help       # every flag: its meaning, allowed values and default

A mistake in a flag, a file, a checkpoint or a reward function prints one line, `python -m minirlhf <command>:
error: ...`, and exits with status 2; `--traceback` (or MINIRLHF_TRACEBACK=1) prints the full traceback instead.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import traceback
from collections.abc import Callable

from minirlhf.cli import add_config_arguments, config_from_args, given_fields
from minirlhf.errors import TRACEBACK_ENV, UserError, env_flag, is_user_error
from minirlhf.presets import PRESETS, preset

# command -> (module of minirlhf.trainers, config class, train function, what the command learns from); imported when
# the command runs, so that `--help` stays fast. Online methods and SFT read config.task / config.prompts (--task,
# --prompts, --reward: fields of their config); the reward model, DPO and KTO read --pairs.
TRAINERS = {
    "sft": ("sft", "SFTConfig", "train_sft", "resolve_sft_data"),
    "reinforce": ("reinforce", "ReinforceConfig", "train_reinforce", "resolve_task"),
    "rloo": ("reinforce", "ReinforceConfig", "train_reinforce", "resolve_task"),  # REINFORCE, baseline="rloo"
    "grpo": ("grpo", "GRPOConfig", "train_grpo", "resolve_task"),
    "ppo": ("ppo", "PPOConfig", "train_ppo", "resolve_task"),
    "distill": ("distill", "DistillConfig", "train_distill", "resolve_task"),  # on-policy distillation from a teacher
    "reward-model": ("reward_model", "RewardModelConfig", "train_reward_model", None),
    "dpo": ("dpo", "DPOConfig", "train_dpo", None),  # dpo --loss-type kto: the kto command (`_older_spelling`)
    "kto": ("kto", "KTOConfig", "train_kto", None),
}


def _trainer(command: str) -> tuple[type, Callable, Callable | None]:
    """(config class, train(data, config) -> (model, tokenizer, history), data(config) or None) of a command."""
    from minirlhf.tasks import registry

    module, config_name, train_name, data_name = TRAINERS[command]
    config_cls = getattr(importlib.import_module(f"minirlhf.trainers.{module}"), config_name)
    train = getattr(importlib.import_module(f"minirlhf.trainers.{module}"), train_name)
    return config_cls, train, getattr(registry, data_name) if data_name else None


def _older_spelling(command: str, rest: list[str]) -> tuple[str, list[str]]:
    """`dpo --loss-type kto ...` is the kto command's older spelling: the kto command, with every one of its flags
    (--desirable-weight too), and its runs recorded as KTO runs. The last --loss-type given decides, as in argparse."""
    if command != "dpo":
        return command, rest
    given = [(i, 2) if arg == "--loss-type" else (i, 1) for i, arg in enumerate(rest)
             if arg == "--loss-type" or arg.startswith("--loss-type=")]
    if not given:
        return command, rest
    last, width = given[-1]
    value = rest[last + 1] if width == 2 and last + 1 < len(rest) else rest[last].partition("=")[2]
    if value != "kto":
        return command, rest
    dropped = {i + k for i, w in given for k in range(w)}
    return "kto", [arg for i, arg in enumerate(rest) if i not in dropped]


def _sample(argv: list[str]) -> None:
    import torch

    from minirlhf.models import load_model
    from minirlhf.sampling import sample

    parser = argparse.ArgumentParser(prog="python -m minirlhf sample", description="Sample and show log-probs.")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--prompt", action="append", help="repeat for several prompts")
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=20)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    prompts = args.prompt or ["17+25=", "40+38=", "The acting was", "I watched this film and"]
    model, tokenizer = load_model(args.model)
    rollout = sample(model, tokenizer, prompts, group_size=args.group_size, max_new_tokens=args.max_new_tokens,
                     temperature=args.temperature, generator=torch.Generator().manual_seed(args.seed))
    P = rollout.prompt_length
    for i, (prompt, completion) in enumerate(zip(rollout.prompts, rollout.completions)):
        n = int(rollout.response_mask[i].sum())
        ids = rollout.input_ids[i, P : P + n].tolist()
        logps = rollout.logprobs[i, P : P + n].tolist()
        tokens = " ".join(f"{tokenizer.decode([t])!r}:{lp:.2f}" for t, lp in zip(ids, logps))
        print(f"{prompt!r} -> {completion!r}   log p(y|x) = {sum(logps):.2f}\n    {tokens}")


def _pass_at_k(argv: list[str]) -> None:
    from minirlhf.tasks.held_out import PassAtKConfig, run_pass_at_k

    parser = argparse.ArgumentParser(prog="python -m minirlhf pass-at-k", allow_abbrev=False, description=(
        "pass@k on a task's held-out problems: n answers sampled per problem at temperature 1, pass@k estimated "
        "without bias (Chen et al. 2021); prints it as JSON."))
    add_config_arguments(parser, PassAtKConfig)
    config = PassAtKConfig(**vars(parser.parse_args(argv)))  # every flag checked before the model is loaded
    print(json.dumps(run_pass_at_k(config), indent=1))


def _demo(argv: list[str]) -> None:
    from minirlhf.demo import run_demo

    parser = argparse.ArgumentParser(prog="python -m minirlhf demo", description="GRPO + DPO showcase.")
    parser.add_argument("--out", default="outputs/demo", help="folder for summary.md/json and the metrics")
    parser.add_argument("--quick", action="store_true", help="a few steps of each, to check that it runs")
    args = parser.parse_args(argv)
    run_demo(args.out, quick=args.quick)


def _recipes(command: str) -> dict[str, dict] | None:
    """The `--recipe` choices of a command (trainers.grpo.RECIPES for grpo), else None."""
    if command != "grpo":
        return None
    from minirlhf.trainers.grpo import RECIPES

    return RECIPES


def _spelled(fields: dict) -> str:
    """{"eps_high": 0.28, "dynamic_sampling": True} -> "--eps-high 0.28 --dynamic-sampling true"."""
    shown = {name: str(value).lower() if value is None or isinstance(value, bool) else value
             for name, value in fields.items()}
    return " ".join(f"--{name.replace('_', '-')} {value}" for name, value in shown.items())


def _refuse_other_settings(config, defaults: dict, given: set[str], named: str) -> None:
    """A resumed run keeps the settings of its config.json (a flag given by name still changes its field): a
    --preset/--recipe that would set other values is refused, naming them, rather than silently ignored."""
    differ = {name: value for name, value in defaults.items() if name not in given and getattr(config, name) != value}
    if differ:
        raise UserError(f"{named} with --resume {config.resume}: the run's config.json holds "
                        + ", ".join(f"{name}={getattr(config, name)!r}" for name in differ) + f" where {named} sets "
                        + ", ".join(f"{name}={value!r}" for name, value in differ.items()) + "; a resumed run keeps "
                        f"its own settings: drop {named}, or give those flags to change them")


TOOLS = {"demo": _demo, "sample": _sample, "pass-at-k": _pass_at_k}


def main(argv: list[str] | None = None) -> None:
    """The command line. A user error (`errors.is_user_error`) ends it with one line on stderr and status 2; with
    `--traceback` or MINIRLHF_TRACEBACK=1 it is raised as it is."""
    argv = list(sys.argv[1:] if argv is None else argv)
    show_traceback = "--traceback" in argv
    argv = [arg for arg in argv if arg != "--traceback"]
    try:
        show_traceback = env_flag(TRACEBACK_ENV) or show_traceback
        _main(argv)
    except Exception as error:
        if show_traceback or not is_user_error(error):
            raise
        traceback.clear_frames(error.__traceback__)  # the failed run's model and tensors are freed now
        message = " ".join(str(error).split())  # one line, whatever the message holds
        command = argv[0] if argv and not argv[0].startswith("-") else ""
        print(f"python -m minirlhf {command}: error: {message}", file=sys.stderr)
        raise SystemExit(2) from None


def _main(argv: list[str]) -> None:
    commands = [*TOOLS, *TRAINERS]
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        print(__doc__)
        print("commands:", ", ".join(commands))
        if argv and argv[0] not in ("-h", "--help"):
            raise SystemExit(f"unknown command {argv[0]!r}")
        return
    command, rest = argv[0], argv[1:]
    if command in TOOLS:
        return TOOLS[command](rest)
    command, rest = _older_spelling(command, rest)
    config_cls = _trainer(command)[0]
    parser = argparse.ArgumentParser(prog=f"python -m minirlhf {command}", allow_abbrev=False)
    add_config_arguments(parser, config_cls)
    parser.add_argument("--preset", choices=sorted(PRESETS), help="GPU-sized settings (minirlhf.presets); flags win")
    recipes = _recipes(command)
    if recipes:
        parser.add_argument("--recipe", choices=sorted(recipes), help="a paper's settings, set together (over a "
                            "--preset's; flags win): " + "; ".join(f"{name}: {_spelled(fields)}"
                                                                   for name, fields in recipes.items()))
    if command == "rloo":
        parser.set_defaults(baseline="rloo")
    args = parser.parse_args(rest)
    # a preset's values, then a recipe's, become the defaults, and the flags given are parsed again over them
    defaults = (preset(args.preset, command) if args.preset else {}) | (recipes[args.recipe] if recipes and
                                                                           args.recipe else {})
    if defaults:
        parser.set_defaults(**defaults)
        args = parser.parse_args(rest)
    given = given_fields(parser, rest)
    config = config_from_args(config_cls, args, given)
    if config.resume is not None and defaults:
        named = " ".join(f"--{name} {value}" for name, value in (("preset", args.preset),
                                                                   ("recipe", getattr(args, "recipe", None))) if value)
        _refuse_other_settings(config, defaults, given, named)
    _, train, resolve_data = _trainer(command)
    data = resolve_data(config) if resolve_data else None  # what train(None, config) would build, checked here
    history = train(data, config)[2]
    from minirlhf.distributed import is_main_process

    if is_main_process():  # under `accelerate launch`, one process reports
        print(json.dumps({k: v for k, v in history[-1].items()}, indent=1))


if __name__ == "__main__":
    main()
