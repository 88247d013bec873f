"""The lab's phenomena: each effect that a 2025 fix exists for, made to show on the lab model in minutes.

Every effect runs its arms (the settings it compares) from the lab model ("tiny-lab", minirlhf.tasks.lab) on each
seed, through the trainers' public API only (train_grpo, train_ppo with their configs; what the trainers do not log
is read by wrapping the task's reward function, which sees every sampled completion, and by a callback after each
step). Each effect states its criterion in words and checks it on every seed: `shows` is true only when it holds
on all of them.

    (a) under GRPO's per-answer mean (seq-mean), wrong answers grow longer than under the constant normaliser
    (b) with random rewards, the symmetric clip (0.2, 0.2) lowers entropy more than clip-higher (0.2, 0.28)
    (g) PPO without clipping (ε = ∞), a batch reused for many updates, ends below ε = 0.2

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/phenomena.py --effects a,g,b --seeds 0,1,2 --jobs 3
    .venv/bin/python benchmarks/phenomena.py --quick            # smoke test: every effect, a few steps, one seed

Writes phenomena.json (for each effect: its settings, criterion, each seed's figures with wall time and load
average, and `shows`) and one figure per effect, phenomena_<effect>.png. Wall and CPU time are of the whole seed (all
its arms, one after another); `load` is os.getloadavg() before and after it, so a run on a shared machine can be read
for what it was. `--jobs N` runs N (effect, seed) pairs side by side, one process each.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from _bench import machine_info, pyplot, save_figure

MODEL = "tiny-lab"  # what every run starts from (--model)
RUN = {"eval_every": 0, "eval_kl": False, "progress": False, "device": "cpu"}  # every run: no evaluation during it
WINDOW = 20  # last steps averaged for a run's final value of a per-step figure


# --------------------------------------------------------------------------------------------- what a run sees


class SeenCompletions:
    """A reward function that also keeps, per call (one per step), each completion's length in tokens and its
    reward: what the trainers' history does not split (length of right and of wrong answers)."""

    def __init__(self, reward_fn: Callable, tokenizer):
        self.reward_fn, self.tokenizer = reward_fn, tokenizer
        self.__name__ = getattr(reward_fn, "__name__", "reward")
        self.steps: list[tuple[list[int], list[float]]] = []

    def __call__(self, prompts, completions, **columns):
        rewards = self.reward_fn(prompts, completions, **columns)
        lengths = [len(ids) for ids in self.tokenizer(list(completions), add_special_tokens=False)["input_ids"]]
        self.steps.append((lengths, [float(r) for r in rewards]))
        return rewards

    def mean_length(self, right: bool) -> list[float | None]:
        """Per step: the mean length of the right (reward > 0) or of the wrong answers; None when there were none."""
        curve = []
        for lengths, rewards in self.steps:
            chosen = [n for n, r in zip(lengths, rewards, strict=True) if (r > 0) == right]
            curve.append(sum(chosen) / len(chosen) if chosen else None)
        return curve


class BatchRatios:
    """How far one batch's updates moved p_θ on that batch's own tokens: the reward function (called right after
    sampling, before any update) records log p_θold of each completion; the callback after the step's updates
    computes log p_θ on the same tokens. Per step: the largest ratio r_t = p_θ / p_θold over the batch's tokens and
    the mean per-token KL(p_θold || p_θ) (k1). PPO's own logs give the mean ratio and approx KL per minibatch."""

    def __init__(self, reward_fn: Callable, model, tokenizer):
        self.reward_fn, self.model, self.tokenizer = reward_fn, model, tokenizer
        self.__name__ = getattr(reward_fn, "__name__", "reward")
        self.batch, self.max_ratio, self.kl = None, [], []

    def _logp(self):
        import torch

        from minirlhf.logprobs import response_logprobs

        with torch.no_grad():
            logp = response_logprobs(self.model, **self.batch)
        return logp

    def __call__(self, prompts, completions, **columns):
        from minirlhf.data import encode_prompt_completion

        self.batch = encode_prompt_completion(self.tokenizer, list(prompts), list(completions))
        self.old_logp = self._logp()
        return self.reward_fn(prompts, completions, **columns)

    def after_step(self, history) -> None:
        mask = self.batch["response_mask"].bool()
        log_ratio = (self._logp() - self.old_logp)[mask]
        self.max_ratio.append(float(log_ratio.max().exp()))
        self.kl.append(float(-log_ratio.mean()))


def random_reward(seed: int) -> Callable:
    """R ~ Bernoulli(0.5), independent of the completion (seeded): no signal, so any drift is the update's own."""
    rng = random.Random(seed)

    def random_bernoulli(prompts, completions, **columns):
        return [float(rng.random() < 0.5) for _ in completions]

    return random_bernoulli


def tail_mean(values: list[float | None], window: int = WINDOW) -> float | None:
    kept = [v for v in values[-window:] if v is not None]
    return sum(kept) / len(kept) if kept else None


def column(history, key: str) -> list[float]:
    return list(history.column(key)[1])


def final_metrics(model, tokenizer, task_config, seed: int, per_kind: int) -> dict[str, float]:
    from minirlhf.tasks import lab

    return lab.lab_metrics(model, tokenizer, task_config, per_kind=per_kind, seed=10_000 + seed)


# ------------------------------------------------------------------------------------------------- the effects


@dataclasses.dataclass
class Effect:
    title: str
    criterion: str
    settings: Callable[[bool], dict]  # quick -> the settings
    run_seed: Callable[[int, dict], dict]  # (seed, settings) -> the seed's figures (per arm)
    holds: Callable[[dict], bool]  # one seed's figures -> does the criterion hold on it
    across: Callable[[list[dict]], dict]  # all seeds' figures -> the effect size and its range (plus cross-seed checks)
    plot: Callable[..., None]


def grpo_run(settings: dict, seed: int, reward=None, **fields):
    """One GRPO run on the lab task from the lab model; returns (history, the completions it saw, model, tokenizer)."""
    from minirlhf.models import load_tokenizer
    from minirlhf.tasks import lab
    from minirlhf.trainers.grpo import GRPOConfig, train_grpo

    task_config = lab.LabConfig(**settings["task"])
    task = lab.task(task_config)
    seen = SeenCompletions(reward or task.reward_fn, load_tokenizer(settings["model"]))
    task = dataclasses.replace(task, reward_fn=seen)
    config = GRPOConfig(model=settings["model"], seed=seed, **RUN, **settings["grpo"], **fields)
    model, tokenizer, history = train_grpo(task, config)
    return history, seen, model, tokenizer


# (a) Dr. GRPO's length bias ---------------------------------------------------------------------------------

def length_bias_settings(quick: bool) -> dict:
    return {"task": {"mix": (1.0, 0.0, 0.0), "max_new_tokens": 40},
            "grpo": {"steps": 3 if quick else 100, "lr": 1e-3, "beta": 0.0, "prompts_per_step": 4 if quick else 8,
                     "group_size": 8, "epochs": 1, "scale": "group"},
            "arms": {"seq-mean": {"aggregation": "seq-mean"}, "constant": {"aggregation": "constant"}}}


def length_bias_seed(seed: int, settings: dict) -> dict:
    arms = {}
    for arm, fields in settings["arms"].items():
        history, seen, _, _ = grpo_run(settings, seed, **fields)
        wrong, right = seen.mean_length(right=False), seen.mean_length(right=True)
        arms[arm] = {"wrong_length": wrong, "right_length": right, "reward": column(history, "reward"),
                     "final_wrong_length": tail_mean(wrong), "final_right_length": tail_mean(right),
                     "start_wrong_length": next((v for v in wrong if v is not None), None),
                     "final_reward": tail_mean(column(history, "reward"))}
    arms["gap"] = _gap(arms["seq-mean"]["final_wrong_length"], arms["constant"]["final_wrong_length"])
    return arms


def _gap(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def length_bias_plot(ax, seeds: list[dict]) -> None:
    for figures in seeds:
        for arm, color in (("seq-mean", "C3"), ("constant", "C0")):
            ax.plot(_smooth(figures["arms"][arm]["wrong_length"]), color=color, alpha=0.8,
                    label=f"{arm}, wrong" if figures is seeds[0] else None)
            ax.plot(_smooth(figures["arms"][arm]["right_length"]), color=color, alpha=0.8, linestyle=":",
                    label=f"{arm}, right" if figures is seeds[0] else None)
    ax.set(xlabel="step", ylabel="mean answer length (tokens)", title="(a) length of wrong and right answers")
    ax.legend(fontsize=8)


# (b) the clip and entropy under random rewards --------------------------------------------------------------

def entropy_clip_settings(quick: bool) -> dict:
    prompts = 4 if quick else 8
    return {"task": {"mix": (0.25, 0.5, 0.25), "max_new_tokens": 40},
            "grpo": {"steps": 3 if quick else 60, "lr": 1e-3, "beta": 0.0, "prompts_per_step": prompts,
                     "group_size": 8, "epochs": 4, "minibatch_size": prompts * 8 // 4, "aggregation": "token-mean"},
            "reward": "Bernoulli(0.5), independent of the completion",
            "arms": {"(0.2, 0.2)": {"eps": 0.2, "eps_high": 0.2}, "(0.2, 0.28)": {"eps": 0.2, "eps_high": 0.28}}}


def entropy_clip_seed(seed: int, settings: dict) -> dict:
    arms = {}
    for arm, fields in settings["arms"].items():
        history, _, _, _ = grpo_run(settings, seed, reward=random_reward(seed), **fields)
        entropy, high = column(history, "entropy"), column(history, "clip_frac_high")
        arms[arm] = {"entropy": entropy, "clip_frac_high": high, "clip_frac_low": column(history, "clip_frac_low"),
                     "start_entropy": entropy[0], "final_entropy": tail_mean(entropy),
                     "mean_clip_frac_high": statistics.fmean(high)}
    return arms


def entropy_clip_holds(arms: dict) -> bool:
    return (arms["(0.2, 0.2)"]["mean_clip_frac_high"] >= 0.05
            and arms["(0.2, 0.2)"]["final_entropy"] < arms["(0.2, 0.28)"]["final_entropy"])


def entropy_clip_across(seeds: list[dict]) -> dict:
    symmetric = [s["arms"]["(0.2, 0.2)"]["final_entropy"] for s in seeds]
    higher = [s["arms"]["(0.2, 0.28)"]["final_entropy"] for s in seeds]
    gaps = [h - s for s, h in zip(symmetric, higher, strict=True)]
    return {"size": "final entropy, (0.2, 0.28) minus (0.2, 0.2)", "mean": statistics.fmean(gaps),
            "range": [min(gaps), max(gaps)], "symmetric_range": [min(symmetric), max(symmetric)],
            "higher_range": [min(higher), max(higher)], "ranges_apart": max(symmetric) < min(higher)}


def entropy_clip_plot(ax, seeds: list[dict]) -> None:
    for figures in seeds:
        for arm, color in (("(0.2, 0.2)", "C3"), ("(0.2, 0.28)", "C0")):
            ax.plot(_smooth(figures["arms"][arm]["entropy"]), color=color, alpha=0.8,
                    label=f"ε = {arm}" if figures is seeds[0] else None)
    ax.set(xlabel="step", ylabel="entropy (nats per token)", title="(b) random rewards: entropy under the clip")
    ax.legend(fontsize=8)


# (g) PPO without clipping ---------------------------------------------------------------------------------

def no_clip_settings(quick: bool) -> dict:
    return {"task": {"mix": (0.5, 0.5, 0.0), "max_new_tokens": 40},
            "ppo": {"steps": 3 if quick else 30, "lr": 3e-4, "beta": 0.0, "prompts_per_step": 16 if quick else 32,
                    "group_size": 1, "epochs": 8, "minibatch_size": 2 if quick else 8},
            "eval_per_kind": 10 if quick else 100,
            "arms": {"eps=0.2": {"eps": 0.2}, "eps=inf": {"eps": 1e9}}}


def no_clip_seed(seed: int, settings: dict) -> dict:
    from minirlhf.models import load_model
    from minirlhf.tasks import lab
    from minirlhf.trainers.ppo import PPOConfig, train_ppo

    task_config = lab.LabConfig(**settings["task"])
    arms = {}
    for arm, fields in settings["arms"].items():
        config = PPOConfig(model=settings["model"], seed=seed, **RUN, **settings["ppo"], **fields)
        model, tokenizer = load_model(settings["model"], device="cpu")
        task = lab.task(task_config)
        ratios = BatchRatios(task.reward_fn, model, tokenizer)
        model, tokenizer, history = train_ppo(dataclasses.replace(task, reward_fn=ratios), config, model, tokenizer,
                                              callbacks=[ratios.after_step])
        final = final_metrics(model, tokenizer, task_config, seed, settings["eval_per_kind"])
        reward, approx_kl = column(history, "reward"), column(history, "approx_kl")
        arms[arm] = {"reward": reward, "approx_kl": approx_kl, "ratio_mean": column(history, "ratio_mean"),
                     "batch_max_ratio": ratios.max_ratio, "batch_kl": ratios.kl,
                     "entropy": column(history, "entropy"), "final_reward": tail_mean(reward, 10),
                     "max_approx_kl": max(approx_kl), "max_batch_ratio": max(ratios.max_ratio),
                     "max_batch_kl": max(ratios.kl),
                     "final": final, "final_accuracy": statistics.fmean(final[f"accuracy/{k}"] for k in lab.KINDS)}
    return arms


def no_clip_plot(ax, seeds: list[dict]) -> None:
    for figures in seeds:
        for arm, color in (("eps=0.2", "C0"), ("eps=inf", "C3")):
            ax.plot(_smooth(figures["arms"][arm]["reward"], 5), color=color, alpha=0.8,
                    label=arm if figures is seeds[0] else None)
    ax.set(xlabel="step", ylabel="training reward", title="(g) PPO, 8 epochs x 8 minibatches per batch")
    ax.legend(fontsize=8)


def _smooth(values: list[float | None], window: int = 10) -> list[float | None]:
    out = []
    for i in range(len(values)):
        kept = [v for v in values[max(0, i - window + 1) : i + 1] if v is not None]
        out.append(sum(kept) / len(kept) if kept else None)
    return out


def _differences(seeds: list[dict], key: str, first: str, second: str, size: str) -> dict:
    gaps = [s["arms"][first][key] - s["arms"][second][key] for s in seeds]
    return {"size": size, "mean": statistics.fmean(gaps), "range": [min(gaps), max(gaps)]}


EFFECTS: dict[str, Effect] = {
    "a": Effect(
        "wrong answers grow longer under GRPO's per-answer mean (Dr. GRPO)",
        "mean length of the wrong answers over the last 20 steps: seq-mean exceeds constant by >= 5 tokens",
        length_bias_settings, length_bias_seed,
        lambda arms: arms["gap"] is not None and arms["gap"] >= 5,
        lambda seeds: _differences(seeds, "final_wrong_length", "seq-mean", "constant",
                                   "wrong-answer length, seq-mean minus constant (tokens)"),
        length_bias_plot),
    "b": Effect(
        "the symmetric clip lowers entropy even when rewards are random; clip-higher counters it",
        "upper clip acts on >= 5 % of tokens under (0.2, 0.2); final entropy under (0.2, 0.2) below (0.2, 0.28) in "
        "every seed, the seeds' ranges not overlapping",
        entropy_clip_settings, entropy_clip_seed, entropy_clip_holds, entropy_clip_across, entropy_clip_plot),
    "g": Effect(
        "PPO without clipping destroys the policy when a batch is reused many times",
        "held-out accuracy (mean over easy, medium, hard) after training: eps = inf ends below eps = 0.2",
        no_clip_settings, no_clip_seed,
        lambda arms: arms["eps=inf"]["final_accuracy"] < arms["eps=0.2"]["final_accuracy"],
        lambda seeds: _differences(seeds, "final_accuracy", "eps=0.2", "eps=inf",
                                   "held-out accuracy, eps = 0.2 minus eps = inf"),
        no_clip_plot),
}


# ------------------------------------------------------------------------------------------------------ driver


def run_seed(key: str, seed: int, settings: dict) -> dict:
    """One seed of one effect, all its arms: the figures, whether the criterion holds, wall time and load."""
    effect = EFFECTS[key]
    load_before, started, cpu = os.getloadavg(), time.perf_counter(), time.process_time()
    arms = effect.run_seed(seed, settings)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    holds = bool(effect.holds(arms))
    print(f"({key}) seed {seed}: holds={holds}  {wall:.0f} s  load {os.getloadavg()[0]:.1f}  {_summary(arms)}",
          flush=True)
    return {"seed": seed, "arms": arms, "holds": holds, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "load_before": list(load_before), "load_after": list(os.getloadavg())}


def run_effects(effects: list[str], seeds: list[int], quick: bool, model: str, jobs: int) -> dict[str, dict]:
    """Every (effect, seed) run, `jobs` processes at a time, gathered per effect with its verdict."""
    settings = {key: {"model": model} | EFFECTS[key].settings(quick) for key in effects}
    runs = [(key, seed) for key in effects for seed in seeds]
    if jobs > 1:
        # fork: the parent has not started torch's threads (the trainers are imported inside the runs)
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            results = list(pool.map(run_seed, *zip(*[(key, seed, settings[key]) for key, seed in runs])))
    else:
        results = [run_seed(key, seed, settings[key]) for key, seed in runs]
    report = {}
    for key in effects:
        seeds_of = [r for (k, _), r in zip(runs, results, strict=True) if k == key]
        across = EFFECTS[key].across(seeds_of)
        shows = all(r["holds"] for r in seeds_of) and across.get("ranges_apart", True)
        report[key] = {"title": EFFECTS[key].title, "criterion": EFFECTS[key].criterion,
                       "settings": _jsonable(settings[key]), "seeds": seeds_of, "effect_size": across, "shows": shows}
    return report


def _summary(arms: dict) -> str:
    parts = []
    for arm, figures in arms.items():
        if isinstance(figures, dict):
            finals = {k: round(v, 3) for k, v in figures.items() if k.startswith(("final_", "max_", "mean_"))
                      and isinstance(v, float)}
            parts.append(f"{arm}: {finals}")
        elif figures is not None:
            parts.append(f"{arm}: {figures:.3f}")
    return "; ".join(parts)


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))


def draw(key: str, report: dict, out: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    EFFECTS[key].plot(ax, report["seeds"])
    save_figure(fig, out / f"phenomena_{key}.png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--effects", default=",".join(EFFECTS), help=f"comma-separated, of {','.join(EFFECTS)}")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--quick", action="store_true", help="smoke test: every effect, a few steps, seed 0 only")
    parser.add_argument("--out", default="benchmarks/results", help="folder for phenomena.json and the figures")
    parser.add_argument("--model", default=MODEL, help="the policy every run starts from")
    parser.add_argument("--jobs", type=int, default=1, help="(effect, seed) runs side by side, one process each")
    args = parser.parse_args(argv)
    effects = [e.strip() for e in args.effects.split(",") if e.strip()]
    unknown = [e for e in effects if e not in EFFECTS]
    if unknown or not effects:
        parser.error(f"--effects {args.effects!r}: unknown {unknown}; the effects are {','.join(EFFECTS)}")
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r} must be comma-separated whole numbers")
    seeds = seeds[:1] if args.quick else seeds
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs} must be at least 1")
    report = {"machine": machine_info(), "quick": args.quick, "seeds": seeds, "jobs": args.jobs,
              "effects": run_effects(effects, seeds, args.quick, args.model, args.jobs)}
    for key, effect in report["effects"].items():
        draw(key, effect, out)
        print(f"({key}) shows={effect['shows']}  {effect['effect_size']}", flush=True)
    (out / "phenomena.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {out / 'phenomena.json'}")


if __name__ == "__main__":
    sys.exit(main())
