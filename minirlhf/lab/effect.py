"""What an effect is (its arms, criterion and figure), and the one GRPO run on the lab task most effects start from."""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable

from minirlhf.lab.observe import SeenCompletions

MODEL = "tiny-lab"  # what every run starts from, unless told otherwise
RUN = {"eval_every": 0, "eval_kl": False, "progress": False, "device": "cpu"}  # every run: no evaluation during it


@dataclasses.dataclass(frozen=True)
class Effect:
    """One experiment of the lab.

    settings(quick) -> the task knobs, trainer fields and arms (quick: a few steps, for a smoke test);
    run_seed(seed, settings) -> that seed's figures, per arm;  holds(figures) -> the criterion on one seed;
    across(all seeds' figures) -> the effect size and its range;  holds_across(all seeds' figures) -> the part of
    the criterion that only the seeds together can judge (True when there is none);
    plot(ax, seeds) draws every seed's curves on one matplotlib Axes.
    """

    title: str
    criterion: str
    notebook: str  # where the course runs it live
    settings: Callable[[bool], dict]
    run_seed: Callable[[int, dict], dict]
    holds: Callable[[dict], bool]
    across: Callable[[list[dict]], dict]
    plot: Callable[..., None]
    holds_across: Callable[[list[dict]], bool] = lambda seeds: True


def grpo_run(settings: dict, seed: int, reward=None, task=None, observer: Callable = SeenCompletions, **fields):
    """One GRPO run on `task` (None: the lab task with the knobs settings["task"]) from settings["model"] with
    settings["grpo"] and `fields`; `reward` replaces the task's verifier. The trainer calls the reward through a fresh
    observer(reward or the task's verifier, tokenizer), which sees every completion; `task` itself is not copied, so a
    task whose reward or tool keeps state (a seeded rng) is made anew for each run. Returns (history, the observer,
    model, tokenizer)."""
    from minirlhf.models import load_tokenizer
    from minirlhf.tasks import lab
    from minirlhf.trainers.grpo import GRPOConfig, train_grpo

    task = task or lab.task(lab.LabConfig(**settings["task"]))
    seen = observer(reward or task.reward_fn, load_tokenizer(settings["model"]))
    config = GRPOConfig(model=settings["model"], seed=seed, **RUN, **settings["grpo"], **fields)
    model, tokenizer, history = train_grpo(dataclasses.replace(task, reward_fn=seen), config)
    return history, seen, model, tokenizer


def differences(seeds: list[dict], key: str, first: str, second: str, size: str) -> dict:
    """Per seed, arm `first`'s figure `key` minus arm `second`'s: their mean and range, described by `size`."""
    gaps = [s["arms"][first][key] - s["arms"][second][key] for s in seeds]
    return {"size": size, "mean": statistics.fmean(gaps), "range": [min(gaps), max(gaps)]}


def held_out_accuracy(model, tokenizer, task: dict, per_kind: int, seed: int, kinds) -> float:
    """The lab task's (knobs `task`) held-out accuracy after a run of `seed`: one answer per problem sampled from
    p_θ at temperature 1, `per_kind` problems of each of `kinds`, drawn with seed 10 000 + seed (apart from the
    run's own draws), averaged over the kinds."""
    from minirlhf.tasks import lab

    metrics = lab.lab_metrics(model, tokenizer, lab.LabConfig(**task), per_kind=per_kind, seed=10_000 + seed,
                              kinds=kinds)
    return statistics.fmean(metrics[f"accuracy/{kind}"] for kind in kinds)
