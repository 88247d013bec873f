"""(6) An ensemble of reward models against over-optimisation (Coste et al., 2023, "Reward model ensembles help
mitigate overoptimization").

The setting of effect (e): GRPO at β = 0 on the review task maximises a learned proxy, and VADER, the scorer that
labelled the shipped pairs, is the gold the run never sees. The weak proxy (250 pairs, a quarter of their labels
flipped) has blind spots the policy finds: its gold rises, then falls. Four reward models trained like it, on the
same pairs from different seeds, disagree where the data did not pin them down; their worst case (`min`, Coste et
al.'s WCO), or mean − λ·std (UWO), scores an answer only as high as every member agrees it is. A blind spot of one
member is then not a blind spot of the ensemble, unless all four share it.

Two arms, on the same seed: one weak member alone, and the ensemble of it and three more (`ensemble_reward`,
minirlhf.trainers.reward_model.RewardEnsemble). The readout is the gold at the end of the run, on the same held-out
openings and random numbers for both arms, and how far each arm's gold fell from its own peak. The ensemble's
settings (`overoptimisation.settings`) also take UWO's λ and members on bootstrap resamples of the same pairs;
benchmarks/README.md records what those, and a KL penalty in both arms, did on the seeds.
"""

from __future__ import annotations

import functools
import statistics

import minirlhf.lab.overoptimisation as overoptimisation
from minirlhf.lab.effect import Effect

ARMS = ["weak", "ensemble"]


def settings(quick: bool) -> dict:
    return overoptimisation.settings(quick) | {"arms": ARMS}


def holds(arms: dict) -> bool:
    """The ensemble ends with more gold than its weak member alone, by more than the standard error of that
    difference (paired over the held-out openings), and falls less from its own peak."""
    weak, ensemble = arms["weak"], arms["ensemble"]
    gap, stderr = final_gap(arms)
    return gap > stderr and ensemble["fall"] < weak["fall"]


def final_gap(arms: dict) -> tuple[float, float]:
    """The ensemble's final gold minus the weak proxy's, and the standard error of that paired difference."""
    ensemble, weak = arms["ensemble"]["final_gold_per_opening"], arms["weak"]["final_gold_per_opening"]
    return statistics.fmean(ensemble) - statistics.fmean(weak), overoptimisation.paired_stderr(ensemble, weak)


def across(seeds: list[dict]) -> dict:
    gaps = [final_gap(s["arms"]) for s in seeds]
    return {"size": "final gold, ensemble of four weak reward models (min) minus one of them (VADER points)",
            "mean": statistics.fmean(g for g, _ in gaps), "range": [min(g for g, _ in gaps), max(g for g, _ in gaps)],
            "gap_in_stderrs": [round(g / e, 1) if e else None for g, e in gaps],
            "fall": {arm: [round(s["arms"][arm]["fall"], 3) for s in seeds] for arm in ARMS},
            "peak_step": {arm: [s["arms"][arm]["peak_step"] for s in seeds] for arm in ARMS},
            "final_gold": {arm: [round(s["arms"][arm]["final_gold"], 3) for s in seeds] for arm in ARMS},
            "weak_rm_accuracy": [s["arms"]["weak"]["rm_accuracy"] for s in seeds]}


def plot(ax, seeds: list[dict]) -> None:
    overoptimisation.plot(ax, seeds, title="(6) gold against √KL: one weak proxy, and an ensemble of four")


EFFECT = Effect(
    title="reward-model ensembles: the worst case of four weak proxies keeps the gold that one of them loses",
    criterion="final gold under the ensemble (min of four weak reward models) above one weak member's, by more than "
              "the standard error of the paired difference over the held-out openings, and a smaller fall from its "
              "own peak",
    notebook="09a_toolbox.ipynb",
    settings=settings, run_seed=functools.partial(overoptimisation.run_seed, needs=tuple(ARMS)), holds=holds,
    across=across, plot=plot)
