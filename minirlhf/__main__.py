"""The command line: `python -m minirlhf <command> [--flags]`, each flag a field of that method's config.

    python -m minirlhf demo                   # the showcase: GRPO on arithmetic + DPO on sentiment
    python -m minirlhf sample --model tiny --prompt "17+25=" --prompt "The acting was"
    python -m minirlhf grpo --steps 60 --beta 0.0 --out-dir runs/grpo
    python -m minirlhf rloo --steps 60
    python -m minirlhf ppo --steps 60
    python -m minirlhf grpo --task sentiment  # VADER as the reward; --task module:function for a Task of yours
    python -m minirlhf grpo --prompts my_prompts.jsonl --reward my_rewards.py:exact   # your prompts and reward
    python -m minirlhf reward-model --out-dir runs/rm
    python -m minirlhf dpo --beta 0.5 --loss-type ipo --pairs my_pairs.jsonl
    python -m minirlhf grpo --preset t4 --steps 100   # real GPT-2 sizes for a Colab T4 (minirlhf.presets)
    accelerate launch --num_processes 2 -m minirlhf dpo --preset t4   # data parallel over 2 GPUs
    python -m minirlhf <command> --help       # every flag: its meaning, allowed values and default

A mistake in a flag, a file, a checkpoint or a reward function prints one line, `python -m minirlhf <command>:
error: ...`, and exits with status 2; `--traceback` (or MINIRLHF_TRACEBACK=1) prints the full traceback instead.
"""

from __future__ import annotations

import argparse
import json
import sys
import traceback

from minirlhf.cli import add_config_arguments, config_from_args, given_fields
from minirlhf.errors import TRACEBACK_ENV, env_flag, is_user_error
from minirlhf.presets import PRESETS, preset

ONLINE = ("reinforce", "rloo", "grpo", "ppo")  # the commands that sample: they take a task
TASKS = {"arithmetic": "minirlhf.tasks.arithmetic:task", "sentiment": "minirlhf.tasks.sentiment:vader_task"}


def _methods() -> dict:
    """command -> (config class, train(data, config) -> (model, tokenizer, history)). Imported lazily so that
    `--help` stays fast."""
    from minirlhf.trainers.dpo import DPOConfig, train_dpo
    from minirlhf.trainers.grpo import GRPOConfig, train_grpo
    from minirlhf.trainers.ppo import PPOConfig, train_ppo
    from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce
    from minirlhf.trainers.reward_model import RewardModelConfig, train_reward_model
    from minirlhf.trainers.sft import SFTConfig, train_sft

    return {
        "sft": (SFTConfig, train_sft),
        "reinforce": (ReinforceConfig, train_reinforce),
        "grpo": (GRPOConfig, train_grpo),
        "ppo": (PPOConfig, train_ppo),
        "reward-model": (RewardModelConfig, train_reward_model),  # pairs from --pairs
        "dpo": (DPOConfig, train_dpo),  # pairs from --pairs
    }


def _add_task_arguments(parser: argparse.ArgumentParser, command: str) -> None:
    if command not in ONLINE + ("sft",):
        return
    group = parser.add_argument_group("task (what to learn from)")
    group.add_argument("--task", metavar="arithmetic|sentiment|module:function|path.py:function",
                       help="a shipped task (sentiment: VADER is the reward), or a function of yours that returns a "
                       "Task (sft: an SFTData) (default: arithmetic)")
    group.add_argument("--prompts", metavar="FILE.jsonl|dataset-name",
                       help='your prompts, one JSON object per line with a "prompt" (sft: and a "completion"); the '
                       "other fields reach the reward functions as keyword lists")
    if command != "sft":
        group.add_argument("--reward", action="append", metavar="module:function|path.py:function",
                           help="a reward function (prompts, completions, **columns) -> list[float] for --prompts; "
                           "repeat it for several")
        group.add_argument("--reward-weights", nargs="+", type=float, metavar="W",
                           help="one weight per --reward: R = Σ_k w_k R_k (default: 1 each)")


def _task(command: str, args: argparse.Namespace):
    """What the command learns from, built from --task or --prompts/--reward (a ValueError says what is wrong)."""
    from minirlhf.data import SFTData
    from minirlhf.tasks import Task
    from minirlhf.tasks.user import load_object, located_prompt_rows, prompts_task

    rewards, weights = getattr(args, "reward", None), getattr(args, "reward_weights", None)
    if args.prompts and args.task:
        raise ValueError("give either --task or --prompts, not both")
    if (rewards or weights) and not args.prompts:
        raise ValueError("--reward and --reward-weights go with --prompts (a --task brings its own reward)")
    if args.prompts and command == "sft":
        rows = located_prompt_rows(args.prompts, required=("prompt", "completion"))
        return SFTData([(row["prompt"], row["completion"]) for _, row in rows], sources=[where for where, _ in rows])
    if args.prompts:
        if not rewards:
            raise ValueError("--prompts needs at least one --reward module:function to score the completions")
        return prompts_task(args.prompts, [load_object(spec, "reward function") for spec in rewards], weights)
    name = args.task or "arithmetic"
    if command == "sft" and name == "arithmetic":
        name = "minirlhf.tasks.arithmetic:sft_data"
    make = load_object(TASKS.get(name, name), "task")
    try:
        made = make()
    except TypeError as err:
        raise ValueError(f"task {name!r} must be callable without arguments and return a Task: {err}") from err
    expected = SFTData if command == "sft" else Task
    if not isinstance(made, expected):
        raise ValueError(f"task {name!r} returned a {type(made).__name__}; {command} needs a {expected.__name__}")
    return made


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


def _demo(argv: list[str]) -> None:
    from minirlhf.demo import run_demo

    parser = argparse.ArgumentParser(prog="python -m minirlhf demo", description="GRPO + DPO showcase.")
    parser.add_argument("--out", default="outputs/demo", help="folder for summary.md/json and the metrics")
    parser.add_argument("--quick", action="store_true", help="a few steps of each, to check that it runs")
    args = parser.parse_args(argv)
    run_demo(args.out, quick=args.quick)


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
    commands = ["demo", "sample", "sft", "reinforce", "rloo", "grpo", "ppo", "reward-model", "dpo"]
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in commands:
        print(__doc__)
        print("commands:", ", ".join(commands))
        if argv and argv[0] not in ("-h", "--help"):
            raise SystemExit(f"unknown command {argv[0]!r}")
        return
    command, rest = argv[0], argv[1:]
    if command in ("demo", "sample"):
        return {"demo": _demo, "sample": _sample}[command](rest)
    config_cls, train = _methods()["reinforce" if command == "rloo" else command]
    parser = argparse.ArgumentParser(prog=f"python -m minirlhf {command}", allow_abbrev=False)
    add_config_arguments(parser, config_cls)
    parser.add_argument("--preset", choices=sorted(PRESETS), help="GPU-sized settings (minirlhf.presets); flags win")
    _add_task_arguments(parser, command)
    if command == "rloo":
        parser.set_defaults(baseline="rloo")
    args = parser.parse_args(rest)
    if args.preset:  # the preset's values become the defaults, and the flags given are parsed again over them
        parser.set_defaults(**preset(args.preset, command))
        args = parser.parse_args(rest)
    config = config_from_args(config_cls, args, given_fields(parser, rest))
    data = _task(command, args) if command in ONLINE + ("sft",) else None  # dpo, reward model: --pairs
    history = train(data, config)[2]
    from minirlhf.distributed import is_main_process

    if is_main_process():  # under `accelerate launch`, one process reports
        print(json.dumps({k: v for k, v in history[-1].items()}, indent=1))


if __name__ == "__main__":
    main()
