"""(5) pass@k (issue 35, item 5): RL sharpens more than it widens. GRPO raises pass@1 more than pass@16.

pass@k is the chance that at least one of k sampled answers is right (the unbiased estimator of Chen et al. 2021,
`minirlhf.tasks.pass_at_k`). pass@1 is the accuracy of one sample; pass@16 asks whether the right answer is anywhere
among what the policy samples. GRPO on a 0/1 reward moves probability onto answers the policy could already reach:
pass@1 rises, while pass@k for large k, already high, rises much less, and can fall when the answers it drops were
the only right ones on some problems (Yue et al. 2504.13837, "Does reinforcement learning really incentivize
reasoning capacity in LLMs beyond the base model?", on 7B-32B models and large k).

The same held-out problems (the lab's easy and medium sums; 16 answers each at temperature 1) are scored before
and after a GRPO run from the lab model; the products, which it never solves, stay at pass@16 = 0 (reported too).
"""

from __future__ import annotations

import statistics

from minirlhf.lab.effect import Effect, grpo_run

KS = (1, 2, 4, 8, 16)
LARGE_K = 16  # the k the criterion compares pass@1 with
KINDS = ("easy", "medium")  # what the criterion averages over: the kinds GRPO can learn


def settings(quick: bool) -> dict:
    """Easy and medium sums, cap 20, 8 prompts × G 8, lr 3e-4, one update per batch, 40 steps; pass@k on 100 held-out
    problems of each kind, 16 answers each, before and after."""
    return {"task": {"mix": (0.5, 0.5, 0.0), "max_new_tokens": 20},
            "grpo": {"steps": 2 if quick else 40, "lr": 3e-4, "beta": 0.0, "prompts_per_step": 4 if quick else 8,
                     "group_size": 8, "epochs": 1, "aggregation": "token-mean"},
            "pass_at_k": {"n": LARGE_K, "ks": KS, "per_kind": 5 if quick else 100}}


def pass_at_ks(model, tokenizer, settings: dict, seed: int) -> dict:
    """pass@k for each k and kind on the held-out problems of this seed, and its mean over KINDS per k."""
    from minirlhf.tasks import lab

    metrics = lab.held_out_pass_at_k(model, tokenizer, lab.LabConfig(**settings["task"]), seed=10_000 + seed,
                                     **settings["pass_at_k"])
    return metrics | {f"pass@{k}": statistics.fmean(metrics[f"pass@{k}/{kind}"] for kind in KINDS)
                      for k in settings["pass_at_k"]["ks"]}


def run_seed(seed: int, settings: dict) -> dict:
    from minirlhf.models import load_model

    before = pass_at_ks(*load_model(settings["model"], device="cpu"), settings, seed)
    _, _, model, tokenizer = grpo_run(settings, seed)
    after = pass_at_ks(model, tokenizer, settings, seed)
    gains = {f"gain@{k}": after[f"pass@{k}"] - before[f"pass@{k}"] for k in settings["pass_at_k"]["ks"]}
    return {"before": before, "after": after, "gains": gains}


def holds(arms: dict) -> bool:
    return arms["gains"]["gain@1"] > arms["gains"][f"gain@{LARGE_K}"]


def across(seeds: list[dict]) -> dict:
    def values(key: str) -> list[float]:
        return [s["arms"]["gains"][key] for s in seeds]

    gaps = [one - large for one, large in zip(values("gain@1"), values(f"gain@{LARGE_K}"), strict=True)]
    return {"size": f"GRPO's gain in pass@1 minus its gain in pass@{LARGE_K} (held-out easy and medium sums)",
            "mean": statistics.fmean(gaps), "range": [min(gaps), max(gaps)],
            "gain@1_range": [min(values("gain@1")), max(values("gain@1"))],
            f"gain@{LARGE_K}_range": [min(values(f"gain@{LARGE_K}")), max(values(f"gain@{LARGE_K}"))]}


def plot(ax, seeds: list[dict]) -> None:
    """pass@k against k (log scale), before (dashed) and after (solid) GRPO, every seed."""
    for figures in seeds:
        ks = sorted(int(key.split("@")[1]) for key in figures["arms"]["after"] if key.count("/") == 0)
        for when, style in (("before", "--"), ("after", "-")):
            ax.plot(ks, [figures["arms"][when][f"pass@{k}"] for k in ks], style, marker="o", markersize=3,
                    color="C0" if when == "after" else "grey", alpha=0.8,
                    label=f"{when} GRPO" if figures is seeds[0] else None)
    ax.set_xscale("log", base=2)
    ax.set(xlabel="k (answers sampled per problem)", ylabel="pass@k (held-out easy and medium sums)",
           title="(5) GRPO sharpens: pass@1 rises more than pass@16")
    ax.legend(fontsize=8)


EFFECT = Effect(
    title="RL sharpens more than it widens: GRPO raises pass@1 more than pass@16",
    criterion=f"on held-out easy and medium sums (16 answers a problem, the same problems before and after), GRPO's "
              f"gain in pass@1 above its gain in pass@{LARGE_K}, in every seed",
    notebook="09a_toolbox.ipynb",
    settings=settings, run_seed=run_seed, holds=holds, across=across, plot=plot)
