"""(e) Over-optimisation under RL: the proxy reward rises, the gold score rises then falls; the weaker proxy turns
earlier; an ensemble of reward models moves the peak (Gao et al., 2022; Coste et al., 2023).

The preference task of the course: continue a review opening positively. VADER (the third-party scorer that
labelled the shipped pairs) is the gold; the proxy is a Bradley-Terry reward model learned from gold-labelled
pairs, and GRPO at β = 0 maximises the proxy alone. The knob is the proxy's strength: a weak one learns from 250
pairs with a quarter of the labels flipped (Coste et al.'s 25 % noise), a strong one from all 2000 clean pairs.
A proxy has blind spots where it learned a word and not the sentence ("worth every minute" is praise, "every
minute" alone is not): RL finds them, and the weaker the proxy, the sooner. The ensemble arm scores with four
reward models trained like the weak one (same pairs, four seeds), combined by `ensemble_reward`.

Every few steps the policy continues the same held-out openings with the same random numbers, and the gold (VADER),
the proxy (what the run optimises) and KL(p_θ || p_ref) are measured on those samples. Gold's standard error is
over the openings; the rise to the peak and the fall after it are each compared with the standard error of the paired
difference (the same openings at the start and at the peak, at the peak and at the end). The policy is the tiny
review model ("tiny"), whatever the lab's --model says.
"""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from pathlib import Path

from minirlhf.checks import check_choice, check_count, check_interval, check_non_negative
from minirlhf.lab.effect import RUN, Effect

POLICY = "tiny"  # the review model every run starts from, and the reward models' backbone
NEEDS = ("weak", "strong")  # the arms (e)'s criterion and effect size read
SAFETENSORS = ("model.safetensors", "model.safetensors.index.json")  # the weights of a folder, whole or sharded
MAX_DRAWS = 5  # a proxy's draws of pairs at most, for its min_accuracy (`proxy_draw`)
DRAW_STRIDE = 10_000  # draw r of a proxy's pairs is on seed + DRAW_STRIDE·r: apart from every member's seed
MEMBER_PAIRS = {  # what each ensemble member after the first learns from
    "same": "the first member's pairs, its flips included (members differ in their seed, and backbone if given)",
    "bootstrap": "a resample with replacement of the first member's pairs (the same data budget)",
    "fresh": "its own draw of as many pairs from the shipped ones, with its own flips: one member's budget each, "
             "members times its labels in all; the draws are independent, so two of n of the N shipped pairs share "
             "about n²/N (and a draw of all N is the same pairs)",
}


def settings(quick: bool) -> dict:
    return {"model": POLICY,
            # each proxy: `pairs` of the shipped ones, a share `noise` of them flipped, drawn again (`proxy_draw`) until
            # its held-out accuracy reaches `min_accuracy` (0: the first draw): the weak one must beat chance by about
            # two standard errors of an accuracy on 300 pairs, 0.5 + 2·√(0.25/300) ≈ 0.56, or it is no proxy at all
            "proxies": {"weak": {"pairs": 250, "noise": 0.25, "min_accuracy": 0.0 if quick else 0.56},
                        "strong": {"pairs": 2000, "noise": 0.0, "min_accuracy": 0.0}},
            "reward_model": {"steps": 2 if quick else 60, "lr": 1e-3, "batch_size": 16},
            "held_out_pairs": 16 if quick else 300,  # of the shipped test pairs: each proxy's accuracy
            # the ensemble: `members` proxies like `of`, combined by `rule` (λ = `lam` for mean-std, mean-var); the
            # members after the first learn from `pairs` (MEMBER_PAIRS); `backbones`: the models they start from
            # ([]: the policy's, like `of`), such as other pre-trainings of it (build_tiny_model.py --init-seed K)
            "ensemble": {"of": "weak", "members": 2 if quick else 4, "rule": "min", "lam": 1.0, "pairs": "same",
                         "backbones": []},
            # the RL runs: one per proxy; the ensemble of the weak; "pooled": one proxy on all the members' pairs
            "arms": ["weak", "strong", "ensemble"],
            "grpo": {"steps": 2 if quick else 80, "lr": 6e-4, "beta": 0.0, "prompts_per_step": 2 if quick else 8,
                     "group_size": 4 if quick else 8, "epochs": 1, "scale": "group"},
            "evaluation": {"every": 1 if quick else 10, "prompts": 4 if quick else 32, "samples": 2 if quick else 4}}


FIELDS = tuple(settings(quick=False))  # what the settings hold
PROXY_FIELDS = tuple(settings(quick=False)["proxies"]["weak"])  # what every proxy's settings hold
ENSEMBLE_FIELDS = tuple(settings(quick=False)["ensemble"])  # and the ensemble's


def proxy_pairs(spec: dict, seed: int) -> list:
    """The proxy's training pairs: `pairs` of the shipped 2000 (drawn by `seed`), a share `noise` of them with
    chosen and rejected swapped (a labeller who disagrees with the gold)."""
    from minirlhf.data import load_preference_pairs

    rng = random.Random(seed)
    pairs = rng.sample(load_preference_pairs("sentiment", "train"), spec["pairs"])
    return [dataclasses.replace(p, chosen=p.rejected, rejected=p.chosen) if rng.random() < spec["noise"] else p
            for p in pairs]


def bootstrap(pairs: list, seed: int) -> list:
    """A resample of `pairs` with replacement, as many as there are (drawn by `seed`): the same data budget, seen
    with other weights (about 1 − 1/e ≈ 63 % of the pairs once or more)."""
    rng = random.Random(seed)
    return [rng.choice(pairs) for _ in pairs]


def proxy_draw(spec: dict, seed: int, settings: dict) -> tuple[list, object, float, list[float]]:
    """The proxy `spec` on `seed`: its pairs drawn on seed + DRAW_STRIDE·r for r = 0, 1, … until the reward model
    trained on them (on `seed`) reaches spec["min_accuracy"] held out, at most MAX_DRAWS times (then the most
    accurate). Returns its pairs, the model, its accuracy, and every draw's accuracy."""
    drawn = []
    for r in range(MAX_DRAWS):
        pairs = proxy_pairs(spec, seed + DRAW_STRIDE * r)
        model, accuracy = train_proxy(pairs, seed, settings)
        drawn.append((pairs, model, accuracy))
        if accuracy >= spec["min_accuracy"]:
            break
    pairs, model, accuracy = max(drawn, key=lambda draw: draw[2])
    return pairs, model, accuracy, [draw[2] for draw in drawn]


def member_pairs(settings: dict, seed: int, first: list) -> list[list]:
    """The pairs each ensemble member learns from: the first is the proxy `of` itself (`first`, the pairs of the draw
    it kept, `proxy_draw`); member k ≥ 1, drawn on seed 1000·(k + 1) + seed, learns from what ensemble.pairs names
    (MEMBER_PAIRS)."""
    ensemble = settings["ensemble"]
    spec = settings["proxies"][ensemble["of"]]
    draw = {"same": lambda k: first,
            "bootstrap": lambda k: bootstrap(first, member_seed(k, seed)),
            "fresh": lambda k: proxy_pairs(spec, member_seed(k, seed))}[ensemble["pairs"]]
    return [first] + [draw(k) for k in range(1, ensemble["members"])]


def member_seed(k: int, seed: int) -> int:
    """Member k's seed (k ≥ 1; member 0 is the proxy `of`, on `seed`): its initialisation, order and draw."""
    return 1000 * (k + 1) + seed


def pooled_training(settings: dict) -> dict:
    """The pooled proxy's reward_model settings: as many steps as the ensemble's members together, members × one
    member's `steps` (RewardModelConfig's when the settings leave it out); with `epochs`, which sets the steps from
    the pairs, as they are (the same passes over members times as many pairs)."""
    from minirlhf.trainers.reward_model import RewardModelConfig

    reward_model, members = settings["reward_model"], settings["ensemble"]["members"]
    if reward_model.get("epochs") is not None:
        return reward_model
    return reward_model | {"steps": reward_model.get("steps", RewardModelConfig.steps) * members}


def train_proxy(pairs: list, seed: int, settings: dict):
    """A reward model on `pairs` from settings["model"]'s backbone (the policy's, or an ensemble member's own); its
    accuracy on the held-out (clean) pairs."""
    from minirlhf.data import PreferenceData, load_preference_pairs
    from minirlhf.trainers.reward_model import RewardModelConfig, train_reward_model

    config = RewardModelConfig(model=settings["model"], seed=seed, device="cpu", progress=False, eval_every=10**6,
                               **settings["reward_model"])
    held_out = load_preference_pairs("sentiment", "test")[: settings["held_out_pairs"]]
    model, _, history = train_reward_model(PreferenceData(pairs, test=held_out), config)
    return model, history.last("eval/accuracy")


class HeldOut:
    """The evaluation a run calls every few steps: `prompts` held-out openings, `samples` continuations each, drawn
    with the same random numbers every time. Keeps, per evaluation, each opening's mean gold (VADER) and the means
    of the proxy and of KL(p_θ || p_ref) = Σ_t log p_θ/p_ref on those samples (k1, summed per continuation), and
    the latest evaluation's first continuation of the first four openings (what the policy now writes)."""

    def __init__(self, proxy, reference, evaluation: dict):
        from minirlhf.tasks.reviews import sentiment_prompts

        self.proxy, self.reference, self.samples = proxy, reference, evaluation["samples"]
        self.prompts = sentiment_prompts("test", evaluation["prompts"])
        self.gold, self.proxy_mean, self.kl, self.latest = [], [], [], []

    def __call__(self, model, tokenizer) -> dict[str, float]:
        import torch

        from minirlhf.logprobs import response_logprobs, sequence_logprobs
        from minirlhf.sampling import sample
        from minirlhf.tasks.sentiment import MAX_NEW_TOKENS, sentiment_reward

        with torch.no_grad():
            rollout = sample(model, tokenizer, self.prompts, group_size=self.samples, max_new_tokens=MAX_NEW_TOKENS,
                             generator=torch.Generator().manual_seed(0))
            ref_logp = response_logprobs(self.reference, rollout.input_ids, rollout.attention_mask,
                                         rollout.response_mask)  # (B, T) log p_ref of the sampled tokens
            kl = sequence_logprobs(rollout.logprobs - ref_logp, rollout.response_mask)  # (B,)
        gold = torch.tensor(sentiment_reward(rollout.prompts, rollout.completions)).view(len(self.prompts), -1)
        self.gold.append(gold.mean(1).tolist())  # (prompts,) each opening's mean gold
        self.proxy_mean.append(statistics.fmean(self.proxy.score(rollout.prompts, rollout.completions)))
        self.kl.append(float(kl.mean()))
        self.latest = [prompt + completion for prompt, completion in
                       zip(rollout.prompts[:: self.samples][:4], rollout.completions[:: self.samples][:4], strict=True)]
        return {"gold": statistics.fmean(self.gold[-1]), "proxy": self.proxy_mean[-1], "kl": self.kl[-1]}


def rl_run(proxy, settings: dict, seed: int) -> dict:
    """GRPO against `proxy` (never the gold) from the policy; the held-out curves and the turn of the gold."""
    from minirlhf.models import frozen_copy, load_model
    from minirlhf.tasks.sentiment import sentiment_task
    from minirlhf.trainers.grpo import train_grpo

    reference, _ = load_model(settings["model"], device="cpu")
    held_out = HeldOut(proxy, frozen_copy(reference), settings["evaluation"])
    task = dataclasses.replace(sentiment_task(proxy), evaluate=held_out)
    _, _, history = train_grpo(task, grpo_config(settings, seed))
    steps = [row["step"] for row in history if "eval/gold" in row]
    return {"steps": steps, "kl": held_out.kl, "proxy": held_out.proxy_mean, "last_texts": held_out.latest,
            "final_gold_per_opening": held_out.gold[-1]} | turn(held_out.gold)


def grpo_config(settings: dict, seed: int):
    """Every arm's GRPO config: settings["grpo"] from the policy, the held-out evaluation every
    evaluation.every steps."""
    from minirlhf.trainers.grpo import GRPOConfig

    return GRPOConfig(model=settings["model"], seed=seed, **(RUN | {"eval_every": settings["evaluation"]["every"]}),
                      **settings["grpo"])


def turn(gold: list[list[float]]) -> dict:
    """From each evaluation's per-opening gold: the mean curve with its standard errors, the peak, the rise from the
    first evaluation to the peak and the fall from the peak to the last, each with the standard error of the
    difference (paired over the same openings)."""
    means = [statistics.fmean(g) for g in gold]
    stderr = [statistics.stdev(g) / math.sqrt(len(g)) for g in gold]
    peak = max(range(len(means)), key=means.__getitem__)
    return {"gold": means, "gold_stderr": stderr, "peak": peak, "peak_gold": means[peak], "final_gold": means[-1],
            "rise": means[peak] - means[0], "rise_stderr": paired_stderr(gold[peak], gold[0]),
            "fall": means[peak] - means[-1], "fall_stderr": paired_stderr(gold[peak], gold[-1])}


def paired_stderr(a: list[float], b: list[float]) -> float:
    """The standard error of the mean of a − b, paired item by item (the same held-out openings)."""
    differences = [x - y for x, y in zip(a, b, strict=True)]
    return statistics.stdev(differences) / math.sqrt(len(differences))


def check_settings(settings: dict, needs: tuple[str, ...] = NEEDS) -> None:
    """Refuses arms, proxies, an ensemble and a held-out evaluation that a run cannot make (or arms the effect's
    criterion cannot read, `needs`), naming the field and its value, before any reward model trains."""
    from minirlhf.data import load_preference_pairs
    from minirlhf.tasks.reviews import sentiment_prompts
    from minirlhf.trainers.reward_model import ENSEMBLE_RULES

    check_fields("", settings, FIELDS)
    arms, proxies, ensemble = settings["arms"], settings["proxies"], settings["ensemble"]
    combined = ["ensemble", "pooled"]  # the arms made from the ensemble's members, not from one proxy of `proxies`
    known = [*proxies, *combined]
    if not isinstance(arms, list):
        raise ValueError(f"arms={arms!r}: a list of arms from {', '.join(known)}")
    for i, arm in enumerate(arms):
        check_choice(f"arms[{i}]", arm, known)
    if len(set(arms)) != len(arms) or not set(needs) <= set(arms):
        raise ValueError(f"arms={arms!r}: distinct arms, holding {' and '.join(needs)} (what the criterion compares)")
    evaluation, openings = settings["evaluation"], len(sentiment_prompts("test"))
    check_count("evaluation.prompts", evaluation["prompts"], 2, why="gold's standard error is over the openings")
    if evaluation["prompts"] > openings:
        raise ValueError(f"evaluation.prompts={evaluation['prompts']!r}: at most the {openings} held-out openings")
    check_count("evaluation.samples", evaluation["samples"], why="continuations of each opening")
    check_count("evaluation.every", evaluation["every"], why="steps between the points of the gold curve")
    try:  # the RL runs build it after every reward model has trained
        grpo_config(settings, seed=0)
    except TypeError as error:
        raise ValueError(f"grpo={settings['grpo']!r}: {error}") from error
    shipped, tests = (len(load_preference_pairs("sentiment", split)) for split in ("train", "test"))
    check_count("held_out_pairs", settings["held_out_pairs"], why="each proxy's accuracy is read on them")
    if settings["held_out_pairs"] > tests:
        raise ValueError(f"held_out_pairs={settings['held_out_pairs']!r}: at most the {tests} shipped test pairs")
    for name, spec in proxies.items():
        if name in combined:
            raise ValueError(f"proxies.{name}: the name of the arm made from the ensemble's members; name it otherwise")
        check_fields(f"proxies.{name}", spec, PROXY_FIELDS)
        check_count(f"proxies.{name}.pairs", spec["pairs"])
        if spec["pairs"] > shipped:
            raise ValueError(f"proxies.{name}.pairs={spec['pairs']!r}: at most the {shipped} shipped training pairs "
                             f"(a draw without replacement)")
        check_interval(f"proxies.{name}.noise", spec["noise"], 0.0, 1.0, why="the share of labels flipped")
        check_interval(f"proxies.{name}.min_accuracy", spec["min_accuracy"], 0.0, 1.0, high_included=False,
                       why="the held-out accuracy a draw must reach (0: the first draw)")
    if "ensemble" in arms or "pooled" in arms:  # the pooled proxy learns from the ensemble members' pairs
        check_fields("ensemble", ensemble, ENSEMBLE_FIELDS)
        check_choice("ensemble.of", ensemble["of"], list(proxies))
        check_count("ensemble.members", ensemble["members"], 2, why=f"{ensemble['of']!r} and more like it")
        check_choice("ensemble.rule", ensemble["rule"], ENSEMBLE_RULES)
        check_non_negative("ensemble.lam", ensemble["lam"], why="the weight of the members' spread")
        check_choice("ensemble.pairs", ensemble["pairs"], list(MEMBER_PAIRS), why="what the members after the first "
                     "learn from")
        spec = proxies[ensemble["of"]]
        if ensemble["pairs"] == "fresh" and spec["pairs"] == shipped and spec["noise"] == 0:
            raise ValueError(f"ensemble.pairs='fresh' with proxies.{ensemble['of']} ({shipped} pairs, none flipped): "
                             f"every draw is all {shipped} shipped pairs, as 'same'; draw fewer or flip some")
        check_backbones(ensemble["backbones"], ensemble["members"], settings["model"])


RENAMED = {"ensemble.bootstrap": "replaced by ensemble.pairs: 'bootstrap' for true, 'same' for false"}


def check_fields(name: str, value, fields) -> None:
    """`value`, the settings' field `name` ("": the settings themselves), is a dict of exactly `fields`: a field
    left out would end in a KeyError that names no setting, an unknown one (a typo, a field an older record holds)
    would be ignored without a word."""
    prefix, where = (f"{name}.", name) if name else ("", "the settings")
    if not isinstance(value, dict):
        raise ValueError(f"{name}={value!r}: a dict of {', '.join(fields)}")
    for field in value:
        if field not in fields:
            why = RENAMED.get(prefix + field, f"the fields of {where}: {', '.join(fields)}")
            raise ValueError(f"{prefix}{field}={value[field]!r}: no such setting ({why})")
    missing = [prefix + field for field in fields if field not in value]
    if missing:
        raise ValueError(f"{', '.join(missing)}: missing (the fields of {where}: {', '.join(fields)})")


def check_backbones(backbones, members: int, policy: str) -> None:
    """Either no backbones (every member starts from the policy's model) or one model for each member after the
    first: a shipped name or a `save_pretrained` folder here (never the hub, mid-run) with its safetensors weights,
    with the policy's tokenizer (the members score the policy's texts token for token)."""
    from minirlhf.models import SHIPPED, load_tokenizer

    if not isinstance(backbones, list) or backbones and len(backbones) != members - 1:
        raise ValueError(f"ensemble.backbones={backbones!r}: [] or a list of {members - 1} models, one for each "
                         f"member after the first")
    vocabulary = load_tokenizer(policy).get_vocab() if backbones else None
    for i, name in enumerate(backbones):
        field = f"ensemble.backbones[{i}]={name!r}"
        if not isinstance(name, str) or not (name in SHIPPED or Path(name, "config.json").is_file()):
            raise ValueError(f"{field}: a shipped model ({', '.join(SHIPPED)}) or a model folder with a config.json "
                             f"(scripts/build_tiny_model.py --init-seed K --out FOLDER writes one)")
        if name not in SHIPPED and not any(Path(name, weights).is_file() for weights in SAFETENSORS):
            raise ValueError(f"{field}: no model.safetensors in the folder (load_model reads the weights from "
                             f"safetensors only)")
        try:
            tokenizer = load_tokenizer(name)
        except OSError as error:
            raise ValueError(f"{field}: {error}") from error
        if tokenizer.get_vocab() != vocabulary:
            raise ValueError(f"{field}: its tokenizer is not the policy's ({policy!r}); a member must read the "
                             f"policy's tokens (build it with scripts/build_tiny_model.py --init-seed K --out FOLDER)")


def run_seed(seed: int, settings: dict, needs: tuple[str, ...] = NEEDS) -> dict:
    """Trains the proxies that settings["arms"] name, each standardised on p_ref's texts, then one GRPO run per arm.
    The ensemble's members are the proxy `of` and more like it, on other seeds (`member_pairs`), from the policy's
    model or, with ensemble.backbones, from other pre-trainings. "pooled" is one proxy on all the members' pairs
    together, from the policy's model whatever the backbones, trained for as many steps as the members together
    (`pooled_training`; with ensemble.pairs "same", `of`'s pairs members times over: `of` trained longer). `needs`:
    the arms the criterion reads."""
    from minirlhf.tasks.reward_models import RewardEnsemble, reference_texts

    check_settings(settings, needs)
    texts = reference_texts()  # p_ref's texts: each proxy's scale is read there, as the reward-models task does
    ensemble, of = settings["ensemble"], settings["ensemble"]["of"]
    wants_members = "ensemble" in settings["arms"] or "pooled" in settings["arms"]
    single = [arm for arm in settings["arms"] if arm in settings["proxies"]]
    drawn = {name: proxy_draw(settings["proxies"][name], seed, settings)  # (pairs, model, accuracy, draws) each
             for name in dict.fromkeys(single + ([of] if wants_members else []))}  # `of`: the members' first
    trained = {name: (model, accuracy) for name, (_, model, accuracy, _) in drawn.items()}

    def alone(name: str) -> RewardEnsemble:  # one trained reward model, standardised on p_ref's texts
        return RewardEnsemble([trained[name][0]], rule="mean").standardise(*texts)

    proxies = {name: alone(name) for name in single}
    pairs = member_pairs(settings, seed, drawn[of][0]) if wants_members else []  # one list of pairs per member
    if "ensemble" in settings["arms"]:
        backbones = ensemble["backbones"] or [settings["model"]] * (ensemble["members"] - 1)
        members = [trained[of]] + [train_proxy(pairs[k], member_seed(k, seed), settings | {"model": backbone})
                                   for k, backbone in enumerate(backbones, start=1)]  # (reward model, accuracy) each
        proxies["ensemble"] = RewardEnsemble([model for model, _ in members], rule=ensemble["rule"],
                                             lam=ensemble["lam"]).standardise(*texts)
    if "pooled" in settings["arms"]:
        trained["pooled"] = train_proxy([pair for member in pairs for pair in member], seed,
                                        settings | {"reward_model": pooled_training(settings)})
        proxies["pooled"] = alone("pooled")
    arms = {name: rl_run(proxies[name], settings, seed) for name in settings["arms"]}
    for name, figures in arms.items():
        figures["rm_accuracy"] = trained[name][1] if name in trained else None
        figures["rm_draws"] = drawn[name][3] if name in drawn else None  # each draw's accuracy (`proxy_draw`)
        figures["peak_step"] = figures["steps"][figures["peak"]]
    if "ensemble" in arms:
        arms["ensemble"]["member_accuracy"] = [accuracy for _, accuracy in members]
    return arms


def holds(arms: dict) -> bool:
    """The weak proxy's gold rose, then fell: it peaks above the first evaluation by more than the standard error of
    that rise (a peak at the first evaluation rises by 0, within any error), and ends below the peak by more than
    the standard error of that fall."""
    weak = arms["weak"]
    return weak["rise"] > weak["rise_stderr"] and weak["fall"] > weak["fall_stderr"]


def across(seeds: list[dict]) -> dict:
    falls = [s["arms"]["weak"]["fall"] for s in seeds]
    return {"size": "gold's fall from its peak to the end, weak proxy (VADER points)",
            "mean": statistics.fmean(falls), "range": [min(falls), max(falls)],
            "fall_in_stderrs": [_in_stderrs(s["arms"]["weak"], "fall") for s in seeds],
            "rise": [round(s["arms"]["weak"]["rise"], 3) for s in seeds],
            "rise_in_stderrs": [_in_stderrs(s["arms"]["weak"], "rise") for s in seeds],
            "peak_step": {arm: [s["arms"][arm]["peak_step"] for s in seeds] for arm in seeds[0]["arms"]},
            "final_gold": {arm: [round(s["arms"][arm]["final_gold"], 3) for s in seeds] for arm in seeds[0]["arms"]},
            "rm_accuracy": {arm: [s["arms"][arm]["rm_accuracy"] for s in seeds] for arm in ("weak", "strong")},
            "mean_curve": {arm: mean_turn([s["arms"][arm]["gold"] for s in seeds], seeds[0]["arms"][arm]["steps"])
                           for arm in seeds[0]["arms"]}}


def mean_turn(curves: list[list[float]], steps: list[int]) -> dict:
    """The turn read across seeds rather than per seed: the mean gold curve over the seeds (evaluated at `steps`),
    its peak, and each seed's rise to that peak and fall from it to the last evaluation, as a mean with its standard
    error over the seeds (None for one seed). The peak is the mean curve's highest point, chosen after the fact,
    which favours a fall."""
    by_step = [list(values) for values in zip(*curves, strict=True)]  # each evaluation: one gold per seed
    mean = [statistics.fmean(values) for values in by_step]
    peak = max(range(len(mean)), key=mean.__getitem__)
    spread = len(curves) > 1  # a standard error over the seeds needs two of them

    def change(later: int, earlier: int) -> tuple[float, float | None]:  # its mean over seeds, and standard error
        mean_change = statistics.fmean(a - b for a, b in zip(by_step[later], by_step[earlier], strict=True))
        return mean_change, paired_stderr(by_step[later], by_step[earlier]) if spread else None

    (rise, rise_stderr), (fall, fall_stderr) = change(peak, 0), change(peak, -1)
    return {"gold": [round(g, 3) for g in mean], "peak_step": steps[peak], "rise": rise, "rise_stderr": rise_stderr,
            "fall": fall, "fall_stderr": fall_stderr}


def _in_stderrs(figures: dict, change: str) -> float | None:
    return round(figures[change] / figures[f"{change}_stderr"], 1) if figures[f"{change}_stderr"] else None


COLORS = {"weak": "C3", "strong": "C0", "ensemble": "C2", "pooled": "C4"}


def plot(ax, seeds: list[dict], title: str = "(e) gold against √KL, GRPO on a learned proxy") -> None:
    for figures in seeds:
        for arm, curve in figures["arms"].items():
            ax.plot([math.sqrt(max(kl, 0.0)) for kl in curve["kl"]], curve["gold"], color=COLORS.get(arm, "C7"),
                    alpha=0.8, marker=".", label=arm if figures is seeds[0] else None)  # grey: an arm a user added
    ax.set(xlabel="√KL(p_θ ‖ p_ref) (√nats)", ylabel="gold: VADER of held-out samples", title=title)
    ax.legend(fontsize=8)


EFFECT = Effect(
    title="over-optimisation: GRPO on a learned proxy raises the gold, then lowers it; weaker proxies turn earlier",
    criterion="weak proxy: gold rises from the first evaluation to a later peak, then falls from it to the last "
              "evaluation, each by more than the standard error of that change (paired over the held-out openings)",
    notebook="06b_best_of_n.ipynb",
    settings=settings, run_seed=run_seed, holds=holds, across=across, plot=plot)
