"""(6) An ensemble of reward models against over-optimisation (Coste et al., 2023, "Reward model ensembles help
mitigate overoptimization"; Eisenstein et al., 2023, "Helping or herding?").

The setting of effect (e): GRPO at β = 0 on the review task maximises a learned proxy, and VADER, the scorer that
labelled the shipped pairs, is the gold the run never sees. The weak proxy (250 pairs, a quarter of their labels
flipped) has blind spots the policy finds: its gold rises, then falls. Three more reward models, each on its own
draw of 250 noisy pairs, are wrong in other places; their worst case (`min`, Coste et al.'s WCO), or mean − λ·std
(UWO), scores an answer only as high as every member agrees it is. A blind spot of one member is then not a blind
spot of the ensemble, unless all four share it. Members on the *same* pairs share the data's blind spots (the
record's earlier rounds: the policy found one on a seed; benchmarks/README.md, entry (6)).

Three arms on the same seed: one weak member alone; the ensemble of it and three more (`ensemble_reward`,
minirlhf.tasks.reward_models.RewardEnsemble); and "pooled", one reward model on the four members' pairs together,
which separates what the ensemble adds from what four times the labels add (the draws are independent: their 1000
pairs are 818-834 distinct ones on seeds 0-5, 56-68 of them labelled both ways). The readout is the gold at the
end of the run, on the same held-out openings and random numbers for every arm, and how far each arm's gold fell
from its own peak. The criterion compares the ensemble with its weak member; the pooled arm is reported beside it.
"""

from __future__ import annotations

import statistics

import minirlhf.lab.overoptimisation as overoptimisation
from minirlhf.lab.effect import Effect

ARMS = ["weak", "ensemble"]  # what the criterion compares
MIN_GAP = 0.05  # VADER points: a gap smaller than this is no gain, however small its standard error


def settings(quick: bool) -> dict:
    base = overoptimisation.settings(quick)
    weak = base["proxies"]["weak"] | {"min_accuracy": 0.0}  # the record's: the first draw, near chance on some seeds
    return base | {"arms": [*ARMS, "pooled"], "ensemble": base["ensemble"] | {"pairs": "fresh"},
                   "proxies": base["proxies"] | {"weak": weak}}


def run_seed(seed: int, settings: dict) -> dict:
    """(e)'s run (`overoptimisation.run_seed`) of the arms the criterion reads: the ensemble and its first member
    alone, the weak proxy (an ensemble of another proxy would be judged against a proxy it does not hold)."""
    overoptimisation.check_settings(settings, tuple(ARMS))
    if settings["ensemble"]["of"] != ARMS[0]:
        raise ValueError(f"ensemble.of={settings['ensemble']['of']!r}: (6) compares the ensemble with its first member "
                         f"alone, the arm {ARMS[0]!r}: it must be an ensemble of {ARMS[0]!r}")
    return overoptimisation.run_seed(seed, settings, tuple(ARMS))


def holds(arms: dict) -> bool:
    """The ensemble ends with more gold than its weak member alone, by more than the standard error of that
    difference (paired over the held-out openings) and by at least MIN_GAP (two runs that collapse to the same
    text differ by ~0 with a standard error of ~0), and falls less from its own peak."""
    weak, ensemble = arms["weak"], arms["ensemble"]
    gap, stderr = final_gap(arms)
    return gap > stderr and gap >= MIN_GAP and ensemble["fall"] < weak["fall"]


def final_gap(arms: dict, arm: str = "ensemble") -> tuple[float, float]:
    """`arm`'s final gold minus the weak proxy's, and the standard error of that paired difference."""
    other, weak = arms[arm]["final_gold_per_opening"], arms["weak"]["final_gold_per_opening"]
    return statistics.fmean(other) - statistics.fmean(weak), overoptimisation.paired_stderr(other, weak)


def across(seeds: list[dict]) -> dict:
    gaps = [final_gap(s["arms"]) for s in seeds]
    arms = list(seeds[0]["arms"])
    members = len(seeds[0]["arms"]["ensemble"]["member_accuracy"])
    figures = {"size": f"final gold, the ensemble of {members} reward models minus its first member alone, the weak "
                       f"proxy (VADER points)",
               "mean": statistics.fmean(g for g, _ in gaps),
               "range": [min(g for g, _ in gaps), max(g for g, _ in gaps)],
               "gap_in_stderrs": [round(g / e, 1) if e else None for g, e in gaps],
               "fall": {arm: [round(s["arms"][arm]["fall"], 3) for s in seeds] for arm in arms},
               "peak_step": {arm: [s["arms"][arm]["peak_step"] for s in seeds] for arm in arms},
               "final_gold": {arm: [round(s["arms"][arm]["final_gold"], 3) for s in seeds] for arm in arms},
               "weak_rm_accuracy": [s["arms"]["weak"]["rm_accuracy"] for s in seeds]}
    if "pooled" in arms:
        pooled = [final_gap(s["arms"], "pooled") for s in seeds]
        figures["pooled_gap"] = [round(g, 3) for g, _ in pooled]  # the pooled proxy's final gold minus weak's
        figures["pooled_holds"] = [holds({"weak": s["arms"]["weak"], "ensemble": s["arms"]["pooled"]})
                                   for s in seeds]  # the criterion, read with the pooled proxy in the ensemble's place
        figures["pooled_rm_accuracy"] = [s["arms"]["pooled"]["rm_accuracy"] for s in seeds]
    return figures


def plot(ax, seeds: list[dict]) -> None:
    overoptimisation.plot(ax, seeds, title="(6) gold against √KL: weak, ensemble, pooled")


EFFECT = Effect(
    title="reward-model ensembles: the worst case of four weak proxies, each on its own draw of noisy pairs, keeps "
          "the gold that one of them loses",
    criterion="final gold under the ensemble (min of four weak reward models, each on its own 250 noisy pairs) above "
              "one weak member's, by more than the standard error of the paired difference over the held-out "
              f"openings and by at least {MIN_GAP} VADER points, and a smaller fall from its own peak; a proxy on the "
              "four members' pairs pooled is reported beside it, not judged",
    notebook="09a_toolbox.ipynb",
    settings=settings, run_seed=run_seed, holds=holds,
    across=across, plot=plot)
