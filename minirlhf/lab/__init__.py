"""The lab: each effect that a 2025 fix exists for, made to show on the student's CPU in minutes, on purpose.

An effect is an experiment with arms (the settings it compares), run from the lab model on each of several seeds
through the trainers' public API. It states its criterion in words and checks it on every seed; it `shows` only when
the criterion holds on all of them (and on what the effect checks across seeds). One module per effect:

    (a) length_bias    under GRPO's per-answer mean (seq-mean), wrong answers grow longer      -> notebook 07a
    (b) entropy_clip   with random rewards, the symmetric clip lowers entropy; clip-higher less  -> notebook 07b
    (c) truncation     answers cut off at the cap are noise; overlong masking or the soft penalty -> notebook 07a
    (d) dead_groups    half the groups dead: dynamic sampling gains per optimizer step            -> notebook 07b
    (e) overoptimisation  RL on a learned proxy: gold rises, then falls; weaker proxies sooner   -> notebook 06b
    (f) displacement   under DPO the chosen answer's log-prob falls; the NLL term (RPO) holds it  -> notebook 05b
    (g) no_clip        PPO without clipping, a batch reused many times, ends below ε = 0.2       -> notebook 03b
                       (on arithmetic from tiny-sft: its settings name their own model and task)

The toolbox's items, keyed by their numbers (letters are the effects above, digits the toolbox's items):

    (1) sampler_mismatch sampling from weights 4 steps old loses accuracy; TIS (p_θold/μ) wins it back
    (2) distillation    on-policy distillation beats GRPO's 0/1 reward per sampled answer   (tiny-sft, from tiny-lab)
    (3) entropy_control GRPO's entropy falls as it learns; a bonus, Clip-Cov, KL-Cov hold it
    (5) sharpening      GRPO raises pass@1 more than pass@16 on held-out problems           -> notebook 09a
    (6) ensembles       the worst case of four weak reward models keeps the gold one loses  -> notebook 09a
                        (on the review task, as (e))
    (7) tool_use        with a calculator in the loop GRPO learns to call it, beats GRPO without -> notebook 09a
                        (on long sums from tiny-calculator: minirlhf.tasks.calculator)

    from minirlhf.lab import EFFECTS, run_effect
    report = run_effect("a", seeds=[0, 1, 2], quick=True)     # what benchmarks/phenomena.py runs, per effect
    report["shows"], report["effect_size"]

The lab sits beside the command line, above the trainers: it imports them, and nothing in the library imports it.
Its figures take a matplotlib `Axes` from the caller (a notebook or the benchmark), so the lab itself needs no
plotting package.
"""

from __future__ import annotations

import os
import time

from minirlhf.lab.dead_groups import EFFECT as DEAD_GROUPS
from minirlhf.lab.displacement import EFFECT as DISPLACEMENT
from minirlhf.lab.distillation import EFFECT as DISTILLATION
from minirlhf.lab.effect import MODEL, Effect
from minirlhf.lab.ensembles import EFFECT as ENSEMBLES
from minirlhf.lab.entropy_clip import EFFECT as ENTROPY_CLIP
from minirlhf.lab.entropy_control import EFFECT as ENTROPY_CONTROL
from minirlhf.lab.length_bias import EFFECT as LENGTH_BIAS
from minirlhf.lab.no_clip import EFFECT as NO_CLIP
from minirlhf.lab.overoptimisation import EFFECT as OVEROPTIMISATION
from minirlhf.lab.sampler_mismatch import EFFECT as SAMPLER_MISMATCH
from minirlhf.lab.sharpening import EFFECT as SHARPENING
from minirlhf.lab.tool_use import EFFECT as TOOL_USE
from minirlhf.lab.truncation import EFFECT as TRUNCATION

EFFECTS: dict[str, Effect] = {"a": LENGTH_BIAS, "b": ENTROPY_CLIP, "c": TRUNCATION, "d": DEAD_GROUPS,
                               "e": OVEROPTIMISATION, "f": DISPLACEMENT, "g": NO_CLIP,
                               "1": SAMPLER_MISMATCH, "2": DISTILLATION, "3": ENTROPY_CONTROL, "5": SHARPENING,
                               "6": ENSEMBLES, "7": TOOL_USE}

__all__ = ["EFFECTS", "MODEL", "Effect", "run_effect", "run_seed"]


def run_seed(key: str, seed: int, settings: dict, verbose: bool = True) -> dict:
    """One seed of one effect, all its arms: the figures, whether the criterion holds, wall and CPU time, load."""
    effect = EFFECTS[key]
    load_before, started, cpu = os.getloadavg(), time.perf_counter(), time.process_time()
    arms = effect.run_seed(seed, settings)
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    holds = bool(effect.holds(arms))
    if verbose:
        print(f"({key}) seed {seed}: holds={holds}  {wall:.0f} s  load {os.getloadavg()[0]:.1f}  {summary(arms)}",
              flush=True)
    return {"seed": seed, "arms": arms, "holds": holds, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
            "load_before": list(load_before), "load_after": list(os.getloadavg())}


def settings_of(key: str, quick: bool, model: str = MODEL) -> dict:
    """The settings an effect's runs use: the model they start from, its task knobs, trainer fields and arms."""
    if key not in EFFECTS:
        raise ValueError(f"effect {key!r}: unknown; the effects are {', '.join(EFFECTS)}")
    return {"model": model} | EFFECTS[key].settings(quick)


def verdict(key: str, settings: dict, seeds: list[dict]) -> dict:
    """One effect's report from its seeds' runs: title, criterion, settings, each seed, the effect size, `shows`."""
    effect = EFFECTS[key]
    if not seeds:  # all() over no seeds is true: "shows" would be read off no run at all
        raise ValueError(f"effect {key!r}: no seeds to judge; run it on one seed or more")
    across = effect.across(seeds)
    holds_across = bool(effect.holds_across(seeds))
    shows = all(s["holds"] for s in seeds) and holds_across
    return {"title": effect.title, "criterion": effect.criterion, "settings": settings, "seeds": seeds,
            "effect_size": across, "holds_across_seeds": holds_across, "shows": shows}


def run_effect(key: str, seeds: list[int], quick: bool = False, model: str = MODEL, verbose: bool = True) -> dict:
    """Run one effect on `seeds`, one after another, and judge it (see `verdict`)."""
    settings = settings_of(key, quick, model)
    return verdict(key, settings, [run_seed(key, seed, settings, verbose) for seed in seeds])


def summary(arms: dict) -> str:
    """One line per seed: each arm's final, max and mean figures."""
    parts = []
    for arm, figures in arms.items():
        if isinstance(figures, dict):
            finals = {k: round(v, 3) for k, v in figures.items() if k.startswith(("final_", "max_", "mean_"))
                      and isinstance(v, float)}
            parts.append(f"{arm}: {finals}")
        elif figures is not None:
            parts.append(f"{arm}: {figures:.3f}")
    return "; ".join(parts)
