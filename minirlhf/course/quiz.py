"""Multiple-choice quizzes and numeric exercises for the notebooks.

Two ways to answer, so every notebook works with or without widgets:

    from minirlhf.course import quiz
    quiz.ask("dpo-collapse")            # RadioButtons + Check button + feedback (Jupyter / Colab)
    quiz.check("dpo-collapse", "d")     # plain code: prints right/wrong and why, returns a bool
    quiz.check_number("ppo-objective", 1.2, r=1.5, advantage=1.0, eps=0.2)
    quiz.show_solution("ppo-objective", r=1.5, advantage=1.0, eps=0.2)   # worked step by step, and the value

The multiple-choice questions are data, `questions.json` beside this file (read by `load_questions`). Numeric
answers are computed by the library itself (minirlhf.losses / minirlhf.course.toy), so an exercise can be
re-asked with any parameters; each also carries its solution worked by hand, which only show_solution prints (the
notebooks never call it: running a notebook top to bottom shows no answer). Ids are grouped by notebook topic:
see TOPICS and list_quizzes().
"""

from __future__ import annotations

import itertools
import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import ipywidgets as W
import torch

from minirlhf import losses
from minirlhf.checks import check_count, check_interval, check_positive
from minirlhf.course import bestofn, stats, toy
from minirlhf.sampling import filter_logits
from minirlhf.tasks.pass_at_k import pass_at_k

TOPICS = ("start-here", "kl-objective", "policy-gradient", "ppo", "grpo", "dpo", "showdown", "grpo-since-r1",
          "capstone", "toolbox")


@dataclass(frozen=True)
class Question:
    id: str
    topic: str
    question: str
    options: dict[str, str]  # letter -> option text
    answer: str  # one of the letters
    explanation: str
    source: str = "new"  # "lecture" for the quizzes taken from the lecture slides


QUESTIONS_FILE = Path(__file__).with_name("questions.json")
SOURCES = ("lecture", "new")
# The file is written with the answer wherever its author put it; load_questions shuffles each question's options
# (seeded by SHUFFLE_SEED and the question's id, so the letters never change between runs) and letters them again
# A, B, C, ... The lecture's own quizzes keep the slides' letters. tests/test_quiz.py checks that no letter is the
# answer of more than 35% of the questions.
SHUFFLE_SEED = 11


def shuffle_options(row: dict, seed: int = SHUFFLE_SEED) -> dict:
    """The question with its options in a fixed pseudo-random order, lettered A, B, C, ... again."""
    texts = [row["options"][letter] for letter in sorted(row["options"])]
    answer = row["options"][row["answer"]]
    random.Random(f"{seed}:{row['id']}").shuffle(texts)
    letters = [chr(ord("A") + i) for i in range(len(texts))]
    return {**row, "options": dict(zip(letters, texts)), "answer": letters[texts.index(answer)]}


def load_questions(path: str | Path = QUESTIONS_FILE) -> list[Question]:
    """Read the question bank: a JSON list of objects with the fields of `Question`, checked one by one, with the
    options of every question not from the lecture shuffled (see SHUFFLE_SEED)."""
    path = Path(path)
    try:
        rows = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON at line {err.lineno}, column {err.colno}: {err.msg}") from None
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected a JSON list of questions, got {type(rows).__name__}")
    fields = {"id", "topic", "source", "question", "options", "answer", "explanation"}
    questions, seen = [], set()
    for i, row in enumerate(rows):
        where = f"{path}: question {i}" + (f" ({row.get('id')!r})" if isinstance(row, dict) else "")
        if not isinstance(row, dict) or set(row) != fields:
            got = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise ValueError(f"{where}: expected exactly the fields {sorted(fields)}, got {got}")
        if row["id"] in seen:
            raise ValueError(f"{where}: field 'id' repeats an earlier question")
        if row["topic"] not in TOPICS:
            raise ValueError(f"{where}: field 'topic' is {row['topic']!r}, not one of {', '.join(TOPICS)}")
        if row["source"] not in SOURCES:
            raise ValueError(f"{where}: field 'source' is {row['source']!r}, not one of {', '.join(SOURCES)}")
        if not isinstance(row["options"], dict) or row["answer"] not in row["options"]:
            raise ValueError(f"{where}: field 'answer' is {row['answer']!r}, not one of the letters of 'options'")
        seen.add(row["id"])
        questions.append(Question(**(row if row["source"] == "lecture" else shuffle_options(row))))
    return questions


QUESTIONS_LIST = load_questions()
QUESTIONS: dict[str, Question] = {q.id: q for q in QUESTIONS_LIST}


# ---------------------------------------------------------------------------------------------------------
# Numeric exercises: the answer is computed by the library
# ---------------------------------------------------------------------------------------------------------


def _check_index(name: str, index: int, n: int, of: str) -> None:
    """`index` must name one of the n items (0 to n - 1): a negative one would count from the end, silently."""
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < n:
        raise ValueError(f"{name} must index one of the {n} {of} (0 to {n - 1}), got {index!r}")


def _grpo_advantage(rewards: Sequence[float], i: int, scale: str) -> float:
    _check_index("i", i, len(rewards), "responses")
    return float(losses.grpo_advantages(toy.as_tensor(rewards), len(rewards), scale=scale)[i])


def _rloo_advantage(rewards: Sequence[float], i: int) -> float:
    _check_index("i", i, len(rewards), "responses")
    return float(losses.rloo_advantages(toy.as_tensor(rewards), len(rewards))[i])


def _ppo_objective(r: float, advantage: float, eps: float) -> float:
    return float(losses.clipped_surrogate(toy.as_tensor(r), toy.as_tensor(advantage), eps))


def _dpo(beta: float, chosen_logratio: float, rejected_logratio: float) -> tuple[float, float]:
    """(loss, implicit reward margin) of one pair from log p_θ/p_ref of y_w and y_l (p_ref log-probs = 0)."""
    zero = toy.as_tensor([0.0])
    chosen_logps, rejected_logps = toy.as_tensor([chosen_logratio]), toy.as_tensor([rejected_logratio])
    loss, chosen, rejected = losses.dpo_loss(chosen_logps, rejected_logps, zero, zero, beta)
    return float(loss[0]), float(chosen[0] - rejected[0])


def _optimal_probability(p_ref: Sequence[float], rewards: Sequence[float], beta: float, i: int) -> float:
    _check_index("i", i, len(p_ref), "outcomes")
    return float(toy.optimal_policy(p_ref, rewards, beta)[i])


def _kl_k3(logp: float, ref_logp: float) -> float:
    return float(losses.kl_k3(toy.as_tensor(logp), toy.as_tensor(ref_logp)))


def _all_equal_probability(p: float, G: int) -> float:
    """P(losses.informative_groups drops a group of G answers, each right with probability p): summed exactly over
    the 2^G patterns of 0/1 rewards, each weighted by p^(number right) (1 - p)^(number wrong)."""
    check_interval("p", p, 0.0, 1.0, why="a probability")
    patterns = torch.cartesian_prod(*[torch.tensor([0.0, 1.0], dtype=torch.float64)] * G).view(-1, G)  # (2^G, G)
    right = patterns.sum(-1)
    probability = p**right * (1 - p) ** (G - right)  # (2^G,)
    dropped = ~losses.informative_groups(patterns.reshape(-1), G)
    return float(probability[dropped].sum())


def _gae_advantage(gamma: float, lam: float, t: int) -> float:
    advantages, _ = toy.toy_gae(gamma, lam)
    _check_index("t", t, len(advantages), "tokens of toy.toy_trajectory()")
    return float(advantages[t])


def _check_distribution(name: str, probs: Sequence[float]) -> None:
    """A categorical distribution with no outcome at probability 0 (each is a ratio's denominator somewhere)."""
    if len(probs) < 2 or any(not 0 < p <= 1 for p in probs) or not math.isclose(sum(probs), 1.0, abs_tol=1e-6):
        raise ValueError(f"{name} must be two or more probabilities in (0, 1] that sum to 1, got {probs!r}")


def _approx_kl_expectation(p_old: Sequence[float], p_new: Sequence[float]) -> float:
    """E_(y~p_θold)[k3(y)] of PPO's approx_kl, k3 = (r - 1) - log r with r = p_θ/p_θold: the term
    losses.ppo_clip_loss averages over the sampled tokens (losses.kl_k3(old_logp, logp)), here weighted by p_θold
    over every outcome of one categorical next-token distribution, p_θold = p_old and p_θ = p_new."""
    _check_distribution("p_old", p_old)
    _check_distribution("p_new", p_new)
    if len(p_old) != len(p_new):
        raise ValueError(f"p_old and p_new must have as many outcomes, got {len(p_old)} and {len(p_new)}")
    old, new = toy.as_tensor(p_old), toy.as_tensor(p_new)
    return float((old * losses.kl_k3(old.log(), new.log())).sum())


def _gspo_token_weight(log_ratios: Sequence[float], advantage: float, B: int, t: int, eps: float,
                       eps_high: float) -> float:
    """∂L/∂log p_θ(y_i,t) of GSPO's loss (losses.grpo_loss with importance_sampling_level="sequence", "seq-mean",
    β = 0) for token t of answer i, whose token log-ratios log r_i,t are log_ratios, in a batch of B answers:
    autograd at θ ≠ θ_old."""
    check_count("B", B)
    check_count("len(log_ratios)", len(log_ratios))
    _check_index("t", t, len(log_ratios), "tokens of the answer")
    n = len(log_ratios)
    mask = torch.zeros(B, n + 1, dtype=torch.float64)  # one padding column, so that the mask matters
    mask[0, :n] = 1.0
    mask[1:, 0] = 1.0  # the other answers: one token each, advantage 0
    advantages = torch.zeros(B, dtype=torch.float64)
    advantages[0] = advantage
    old = torch.full((B, n + 1), -1.0, dtype=torch.float64)
    logp = old.clone()
    logp[0, :n] += toy.as_tensor(log_ratios)
    grad = toy.grad_wrt_logp(lambda lp: losses.grpo_loss(lp, old, None, advantages, mask, eps=eps, beta=0.0,
                                                         eps_high=eps_high, importance_sampling_level="sequence")[0],
                             logp)
    return float(grad[0, t])


def _leave_one_out_scale(G: int) -> float:
    """c in R_i - mean = c (R_i - mean of the others), measured: the library's centred rewards (GRPO, scale "none")
    over RLOO's advantages on seeded random rewards, averaged over the group."""
    check_count("G", G, minimum=2, why="a group needs two answers to leave one out")
    rewards = torch.randn(G, generator=torch.Generator().manual_seed(G), dtype=torch.float64)
    centred = losses.grpo_advantages(rewards, G, scale="none")
    return float((centred / losses.rloo_advantages(rewards, G)).mean())


def _k3_gradient(logits: Sequence[float], p_ref: Sequence[float], j: int) -> float:
    """Component j of E_{y~p_θ}[∇_θ k3(y)] (the samples held fixed), p_θ = softmax(logits), by autograd through
    the exact sum over outcomes (toy.kl_gradients)."""
    _check_index("j", j, len(logits), "logits")
    return float(toy.kl_gradients(logits, p_ref).in_loss_k3[j])


def _label_smoothing_optimum(beta: float, eps: float) -> float:
    """The log-ratio margin h that minimises losses.dpo_loss with label_smoothing=eps: the zero of its derivative,
    found by bisection (the loss is convex in h)."""
    check_interval("eps", eps, 0.0, 0.5, low_included=False, why="the share of flipped labels; 0 has no finite optimum")
    zero = torch.zeros(1, dtype=torch.float64)

    def slope(h: float) -> float:
        x = torch.tensor([h], dtype=torch.float64, requires_grad=True)
        loss, _, _ = losses.dpo_loss(x, zero, zero, zero, beta, label_smoothing=eps)
        (grad,) = torch.autograd.grad(loss.sum(), x)
        return float(grad)

    low, high = -200.0 / beta, 200.0 / beta
    for _ in range(200):
        middle = (low + high) / 2
        low, high = (middle, high) if slope(middle) < 0 else (low, middle)
    return (low + high) / 2


def _seq_mean_token_weight(advantage: float, length: int, B: int) -> float:
    """∂L/∂log p_θ(y_i,t) of GRPO's seq-mean loss at θ = θ_old, β = 0, for a token of answer i (|y_i| = length)
    in a batch of B answers: autograd through losses.grpo_loss."""
    check_count("length", length)
    check_count("B", B)
    T = length + 1  # one padding column, so that the mask matters
    mask = torch.zeros(B, T, dtype=torch.float64)
    mask[0, :length] = 1.0
    mask[1:, 0] = 1.0  # the other answers: one token each, advantage 0
    advantages = torch.zeros(B, dtype=torch.float64)
    advantages[0] = advantage
    old = torch.full((B, T), -1.0, dtype=torch.float64)
    grad = toy.grad_wrt_logp(lambda lp: losses.grpo_loss(lp, old, None, advantages, mask, eps=0.2, beta=0.0,
                                                         aggregation="seq-mean")[0], old)
    return float(grad[0, 0])


def _mcnemar_p(only_a: int, only_b: int) -> float:
    """stats.paired's exact two-sided p-value for two models, one right alone on only_a problems, the other on
    only_b (they agree on the rest)."""
    check_count("only_a", only_a, minimum=0)
    check_count("only_b", only_b, minimum=0)
    correct_a = [1] * only_a + [0] * only_b + [1]  # one problem both solve: the agreements do not matter
    correct_b = [0] * only_a + [1] * only_b + [1]
    return stats.paired(correct_a, correct_b).p_value



def _best_of_n_kl(probs: Sequence[float], n: int) -> float:
    """KL(p_N || p) of best-of-n from a categorical p whose outcomes are listed from the lowest reward to the highest
    (minirlhf.course.bestofn)."""
    p = toy.as_tensor(probs)
    return bestofn.kl(bestofn.best_of_n_probs(p, torch.arange(len(p), dtype=p.dtype), n), p)


def _pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of one problem from n samples with c right (minirlhf.tasks.pass_at_k)."""
    return pass_at_k(n, c, k)


TOP_P_TIE = 1e-6  # top_p this close to a mass of the most probable tokens is a tie that rounding decides


def _top_p_weight(probs: Sequence[float], top_p: float, token: int) -> float:
    """ρ = p_θold(y)/μ(y) of token y = `token` drawn by a top-p sampler μ from p_θold = probs (minirlhf.sampling)."""
    _check_distribution("probs", probs)  # the sampler renormalises: probs off 1 would move its cut from the hand's
    check_interval("top_p", top_p, 0.0, 1.0, low_included=False)
    _check_index("token", token, len(probs), "probabilities")
    # the mass of the k most probable tokens, k = 1 .. n - 1 (at all n there is no next token to keep or drop)
    masses = list(itertools.accumulate(sorted(probs, reverse=True)))[:-1]
    tie = next((k for k, mass in enumerate(masses, 1) if math.isclose(mass, top_p, rel_tol=0, abs_tol=TOP_P_TIE)),
               None)
    if tie is not None:
        tokens = "most probable token" if tie == 1 else f"{tie} most probable tokens"
        raise ValueError(f"top_p={top_p} equals the mass of the {tokens} ({masses[tie - 1]:.9g}) to within "
                         f"{TOP_P_TIE:g}: whether the next token is kept then depends on float rounding; move top_p")
    p_old = toy.as_tensor(probs)
    mu = filter_logits(p_old.log(), top_p=top_p).softmax(-1)  # μ: p_θold filtered and renormalised
    equal = [j for j in range(len(probs)) if p_old[j] == p_old[token]]
    kept = [j for j in equal if mu[j] > 0]
    if 0 < len(kept) < len(equal):
        raise ValueError(f"tokens {equal} have the same probability and top-p keeps only {kept} of them: whether "
                         f"token {token} can be drawn is then the sort's order among equal probabilities, not top-p's "
                         f"rule; draw another token or move top_p")
    if mu[token] == 0:
        raise ValueError(f"token {token} is filtered out at top_p={top_p}: μ never draws it, so it has no weight")
    return float(p_old[token] / mu[token])


# Worked solutions. Each `steps` function redoes an exercise by hand, with plain floats and the math module (it
# reads the toy data, but calls no torch or minirlhf function), and returns the numbers its `worked` text quotes,
# the result under "answer"; tests/test_quiz.py checks that "answer" equals the library's value for many parameters.


def _numbers(values: Sequence[float]) -> str:
    return "(" + ", ".join(f"{v:.4g}" for v in values) + ")"


def _optimal_probability_steps(p_ref: Sequence[float], rewards: Sequence[float], beta: float, i: int) -> dict:
    # p*(y_i) = p_ref(y_i) e^{R_i/β} / Z,   Z = Σ_j p_ref(y_j) e^{R_j/β}
    weights = [p * math.exp(r / beta) for p, r in zip(p_ref, rewards, strict=True)]
    partition = sum(weights)
    return {"weights": _numbers(weights), "weight": weights[i], "partition": partition,
            "answer": weights[i] / partition}


def _rloo_advantage_steps(rewards: Sequence[float], i: int) -> dict:
    # Â_i = R_i - (1 / (G - 1)) Σ_{j ≠ i} R_j
    others = [r for j, r in enumerate(rewards) if j != i]
    baseline = sum(others) / len(others)
    return {"others": _numbers(others), "n_others": len(others), "reward": rewards[i], "baseline": baseline,
            "answer": rewards[i] - baseline}


def _ppo_objective_steps(r: float, advantage: float, eps: float) -> dict:
    # min(r Â, clip(r, 1 - ε, 1 + ε) Â)
    unclipped = r * advantage
    clipped_ratio = min(max(r, 1 - eps), 1 + eps)
    clipped = clipped_ratio * advantage
    gradient = ("the clipped term is the smaller, so this token gives r(θ) no gradient" if clipped < unclipped
                else "the unclipped term is the smaller (or they are equal), so the gradient flows through r(θ)")
    return {"low": 1 - eps, "high": 1 + eps, "unclipped": unclipped, "clipped_ratio": clipped_ratio,
            "clipped": clipped, "gradient": gradient, "answer": min(unclipped, clipped)}


def _gae_advantage_steps(gamma: float, lam: float, t: int) -> dict:
    # δ_k = r_k + γ V(s_{k+1}) - V(s_k) with V(s_T) = 0;   Â_t = Σ_l (γλ)^l δ_{t+l}
    trajectory = toy.toy_trajectory()
    rewards, values = trajectory.rewards[0].tolist(), trajectory.values[0].tolist()
    next_values = values[1:] + [0.0]
    deltas = [r + gamma * v_next - v for r, v, v_next in zip(rewards, values, next_values, strict=True)]
    return {"rewards": _numbers(rewards), "values": _numbers(values), "last": len(rewards) - 1,
            "deltas": _numbers(deltas[t:]), "decay": gamma * lam,
            "answer": sum((gamma * lam) ** l * delta for l, delta in enumerate(deltas[t:]))}


def _grpo_advantage_steps(rewards: Sequence[float], i: int, scale: str) -> dict:
    # Â_i = (R_i - mean) / std (sample std, divide by G - 1); scale="none": Â_i = R_i - mean
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / (len(rewards) - 1))
    if std < 1e-4:  # losses.grpo_advantages' eps: a constant group has nothing to learn
        how, answer = "every reward is the same (std below 1e-4), so there is nothing to learn: Â", 0.0
    elif scale == "none":
        how, answer = f"with scale 'none' nothing is divided: Â = {rewards[i]:.4g} - {mean:.4f}", rewards[i] - mean
    else:  # "group", or "batch", which is the same for a batch of one group
        how, answer = f"divided by the std: Â = ({rewards[i]:.4g} - {mean:.4f}) / {std:.4f}", (rewards[i] - mean) / std
    return {"mean": mean, "std": std, "n": len(rewards), "reward": rewards[i], "how": how, "answer": answer}


def _approx_kl_expectation_steps(p_old: Sequence[float], p_new: Sequence[float]) -> dict:
    # k3 = (r - 1) - log r ≥ 0 since log r ≤ r - 1; E_p_θold[r] = Σ_y p_θ(y) = 1, so
    # E_p_θold[k3] = -E_p_θold[log r] = KL(p_θold ‖ p_θ)
    ratios = [q / p for p, q in zip(p_old, p_new, strict=True)]
    k3 = [r - 1 - math.log(r) for r in ratios]

    def std(values: list[float]) -> float:  # under p_θold, the distribution the samples come from
        mean = sum(p * v for p, v in zip(p_old, values))
        return math.sqrt(max(sum(p * (v - mean) ** 2 for p, v in zip(p_old, values)), 0.0))

    return {"ratios": _numbers(ratios), "k3": _numbers(k3), "mean_ratio": sum(p * r for p, r in zip(p_old, ratios)),
            "k1_std": std([-math.log(r) for r in ratios]), "k3_std": std(k3),
            "reverse": sum(q * math.log(q / p) for p, q in zip(p_old, p_new)),
            "answer": sum(p * math.log(p / q) for p, q in zip(p_old, p_new))}


def _gspo_token_weight_steps(log_ratios: Sequence[float], advantage: float, B: int, t: int, eps: float,
                             eps_high: float) -> dict:
    # L = -(1/B) Σ_i min(s_i Â_i, clip(s_i, 1 - ε, 1 + ε_high) Â_i), s_i = exp((1/|y_i|) Σ_t log r_i,t), so
    # ∂s_i/∂log p_θ(y_i,t) = s_i/|y_i| and ∂L/∂log p_θ(y_i,t) = -s_i Â_i/(B|y_i|) for every t; 0 where the clip holds
    def weight(ratio: float, n: int) -> float:
        clipped = (advantage > 0 and ratio > 1 + eps_high) or (advantage < 0 and ratio < 1 - eps)
        return 0.0 if clipped else -ratio * advantage / (B * n)

    n = len(log_ratios)
    s = math.exp(sum(log_ratios) / n)
    held = weight(s, n) == 0.0 and advantage != 0  # the clip holds s_i
    where = ("outside the range on the side Â pushes, so the clipped term is the smaller and constant: no gradient"
             if held else "the unclipped term s_i·Â_i is the smaller (or equal), so the gradient flows through s_i")
    return {"n": n, "s": s, "low": 1 - eps, "high": 1 + eps_high, "where": where,
            "grpo": _numbers([weight(math.exp(x), n) for x in log_ratios]), "answer": weight(s, n)}


def _all_equal_probability_steps(p: float, G: int) -> dict:
    # all right or all wrong, two cases that exclude each other: p^G + (1 - p)^G
    return {"all_right": p**G, "all_wrong": (1 - p) ** G, "answer": p**G + (1 - p) ** G}


def _kl_k3_steps(logp: float, ref_logp: float) -> dict:
    # k3 = ρ - 1 - log ρ,   ρ = p_ref / p_θ
    log_rho = ref_logp - logp
    return {"log_rho": log_rho, "rho": math.exp(log_rho), "answer": math.exp(log_rho) - 1 - log_rho}


def _dpo_margin_steps(beta: float, chosen_logratio: float, rejected_logratio: float) -> dict:
    # margin = β (log p_θ/p_ref (y_w) - log p_θ/p_ref (y_l))
    difference = chosen_logratio - rejected_logratio
    return {"difference": difference, "answer": beta * difference}


def _dpo_loss_steps(beta: float, chosen_logratio: float, rejected_logratio: float) -> dict:
    # loss = -log σ(margin) = log(1 + e^{-margin})
    margin_steps = _dpo_margin_steps(beta, chosen_logratio, rejected_logratio)
    margin = margin_steps["answer"]
    loss = math.log1p(math.exp(-margin)) if margin > -30 else -margin  # log(1 + e^x) = x + O(e^-x) for large x
    return {**margin_steps, "margin": margin, "answer": loss}


def _leave_one_out_scale_steps(G: int) -> dict:
    # mean = (R_i + (G - 1) mean_-i) / G, so R_i - mean = (G - 1)/G · (R_i - mean_-i)
    return {"answer": (G - 1) / G}


def _k3_gradient_steps(logits: Sequence[float], p_ref: Sequence[float], j: int) -> dict:
    # E[∇k3] = ∇KL(p_ref ‖ p_θ) = -Σ_y p_ref(y) ∇log p_θ(y); for a softmax, ∂ log p_θ(y)/∂θ_j = 1[y = j] - p_θ(j)
    top = max(logits)
    weights = [math.exp(x - top) for x in logits]
    p = [w / sum(weights) for w in weights]
    return {"p": _numbers(p), "p_j": p[j], "p_ref_j": p_ref[j], "answer": p[j] - p_ref[j]}


def _label_smoothing_optimum_steps(beta: float, eps: float) -> dict:
    # d/dh [-(1-ε) log σ(βh) - ε log σ(-βh)] = -β(1-ε) σ(-βh) + β ε σ(βh) = 0  <=>  σ(βh) = 1 - ε
    odds = (1 - eps) / eps
    return {"odds": odds, "log_odds": math.log(odds), "answer": math.log(odds) / beta}


def _seq_mean_token_weight_steps(advantage: float, length: int, B: int) -> dict:
    # L = -(1/B) Σ_i (1/|y_i|) Σ_t Â_i log p_θ(y_i,t)  at r = 1, β = 0
    return {"denominator": B * length, "answer": -advantage / (B * length)}


def _mcnemar_p_steps(only_a: int, only_b: int) -> dict:
    # under H0 each of the n = b + c disagreements goes either way with probability 1/2
    n, low = only_a + only_b, min(only_a, only_b)
    tail = sum(math.comb(n, k) for k in range(low + 1)) / 2**n
    return {"n": n, "low": low, "tail": tail, "answer": min(1.0, 2 * tail)}



def _best_of_n_kl_steps(probs: Sequence[float], n: int) -> dict:
    # the kept outcome is k or a worse one exactly when all n draws are: F(k)^n, F the cumulative probability in
    # reward order; so p_N(k) = F(k)^n - F(k-1)^n, and KL(p_N || p) = Σ_k p_N(k) log(p_N(k) / p(k))
    cdf, total = [], 0.0
    for p in probs:
        total += p
        cdf.append(min(total, 1.0))
    p_n = [f**n - below**n for f, below in zip(cdf, [0.0] + cdf[:-1])]
    kl = sum(q * math.log(q / p) for q, p in zip(p_n, probs) if q > 0)
    return {"cdf": _numbers(cdf), "p_n": _numbers(p_n), "bound": math.log(n) - (n - 1) / n, "answer": kl}


def _pass_at_k_steps(n: int, c: int, k: int) -> dict:
    # pass@k = 1 - C(n - c, k) / C(n, k): one minus the chance that k of the n samples, drawn without replacement,
    # are all wrong;  the naive 1 - (1 - c/n)^k draws with replacement
    all_wrong = math.comb(n - c, k) / math.comb(n, k)
    return {"wrong": n - c, "subsets": math.comb(n, k), "wrong_subsets": math.comb(n - c, k), "all_wrong": all_wrong,
            "naive": 1 - (1 - c / n) ** k, "answer": 1 - all_wrong}

def _top_p_weight_steps(probs: Sequence[float], top_p: float, token: int) -> dict:
    # top-p keeps, in order of probability, every token whose predecessors' mass is below top_p (the one that
    # crosses top_p included); μ = p_θold / Z on those, Z their mass, so ρ = p_θold(y) / μ(y) = Z for any kept y
    order = sorted(range(len(probs)), key=lambda j: -probs[j])
    kept, before = [], 0.0
    for j in order:
        if before < top_p:
            kept.append(j)
        before += probs[j]
    if token not in kept:
        raise ValueError(f"token {token} is filtered out at top_p={top_p}: μ never draws it, so it has no weight")
    mass = sum(probs[j] for j in kept)
    return {"kept": ", ".join(str(j) for j in sorted(kept)), "mass": mass, "mu": probs[token] / mass,
            "answer": mass}


@dataclass(frozen=True)
class Exercise:
    id: str
    topic: str
    prompt: str  # formatted with the parameters
    solve: Callable[..., float]  # the library's answer
    defaults: dict
    steps: Callable[..., dict]  # the same answer by hand: the numbers `worked` quotes, the result under "answer"
    worked: str  # the reasoning, formatted with the parameters and the numbers from `steps`
    tol: float = 1e-2  # accepted if within tol absolutely or relatively


EXERCISES_LIST = [
    Exercise("optimal-policy", "kl-objective",
             "p*(y_i) for p_ref = {p_ref}, R = {rewards}, β = {beta}, i = {i}.",
             _optimal_probability, {"p_ref": toy.TOY_P_REF, "rewards": toy.TOY_REWARDS, "beta": 0.5, "i": 0},
             _optimal_probability_steps,
             "p*(y) = p_ref(y)·exp(R(y)/β) / Z, where Z = Σ_y p_ref(y)·exp(R(y)/β) makes the probabilities sum to 1.\n"
             "The weights p_ref(y)·exp(R(y)/β) with β = {beta} are {weights}; their sum is Z = {partition:.4f}.\n"
             "p*(y_{i}) = {weight:.4f} / {partition:.4f} = {answer:.4f}."),
    Exercise("rloo-advantage", "policy-gradient",
             "RLOO advantage R_i - mean(others) of response i = {i} in the group with rewards {rewards}.",
             _rloo_advantage, {"rewards": (1.0, 0.0, 0.0, 1.0), "i": 0},
             _rloo_advantage_steps,
             "The baseline of response {i} is the mean reward of the {n_others} others {others}: "
             "b = {baseline:.4f}.\n"
             "It leaves response {i} itself out, so it cannot depend on the sample it judges.\n"
             "Â_{i} = R_{i} - b = {reward:.4g} - {baseline:.4f} = {answer:.4f}."),
    Exercise("ppo-objective", "ppo",
             "Clipped surrogate min(r Â, clip(r, 1-ε, 1+ε) Â) at r = {r}, Â = {advantage}, ε = {eps}.",
             _ppo_objective, {"r": 1.5, "advantage": 1.0, "eps": 0.2},
             _ppo_objective_steps,
             "Unclipped term: r·Â = {r:.4g} · {advantage:.4g} = {unclipped:.4f}.\n"
             "Clipped term: clip({r:.4g}, {low:.4g}, {high:.4g}) = {clipped_ratio:.4g}, times Â: {clipped:.4f}.\n"
             "The objective is the smaller one, min({unclipped:.4f}, {clipped:.4f}) = {answer:.4f}: {gradient}."),
    Exercise("gae-advantage", "ppo",
             "GAE advantage Â_t at t = {t} on toy.toy_trajectory() with γ = {gamma}, λ = {lam}.",
             _gae_advantage, {"gamma": 1.0, "lam": 0.0, "t": 6},
             _gae_advantage_steps,
             "toy.toy_trajectory() has rewards r = {rewards} and values V = {values}; V after the last token is 0.\n"
             "TD errors δ_k = r_k + γ·V(s_(k+1)) - V(s_k) for k = {t}..{last}: {deltas}.\n"
             "Â_{t} = Σ_l (γλ)^l·δ_({t}+l) with γλ = {decay:.4g}: {answer:.4f}.\n"
             "(λ = 0 keeps δ_t alone; γ = λ = 1 gives the sum of the rewards from t on minus V(s_t).)"),
    Exercise("approx-kl-expectation", "ppo",
             "PPO logs approx_kl, the mean of k3 = (r - 1) - log r over tokens sampled from p_θold, r = p_θ/p_θold. "
             "One next-token distribution has p_θold = {p_old} before a batch's updates and p_θ = {p_new} after. "
             "Show that k3 ≥ 0 and that E_(y~p_θold)[k3] is a KL divergence (which one?), then give that expectation "
             "in nats.",
             _approx_kl_expectation, {"p_old": (0.6, 0.3, 0.1), "p_new": (0.2, 0.5, 0.3)},
             _approx_kl_expectation_steps,
             "Per outcome r = p_θ/p_θold = {ratios} and k3 = (r - 1) - log r = {k3}: none negative, since "
             "log r ≤ r - 1 (log lies below its tangent at r = 1), with equality only at r = 1.\n"
             "E_p_θold[r] = Σ_y p_θold(y)·p_θ(y)/p_θold(y) = Σ_y p_θ(y) = {mean_ratio:.4f}: the (r - 1) term "
             "averages to 0, so it changes the spread, not the mean (per-sample std {k3_std:.4f} here against "
             "{k1_std:.4f} for k1 = -log r), and E[k3] = -E_p_θold[log r] = "
             "Σ_y p_θold log(p_θold/p_θ) = KL(p_θold ‖ p_θ) = {answer:.4f} nats.\n"
             "The other direction, KL(p_θ ‖ p_θold) = {reverse:.4f}, is what samples from p_θ would estimate; "
             "approx_kl's samples come from p_θold.",
             tol=1e-3),
    Exercise("grpo-advantage", "grpo",
             "GRPO advantage of response i = {i} in the group with rewards {rewards} (scale = {scale!r}, "
             "sample std).",
             _grpo_advantage,
             {"rewards": (1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0), "i": 0, "scale": "group"},
             _grpo_advantage_steps,
             "Group mean: {mean:.4f}. Sample std (divide by G - 1 = {n} - 1): {std:.4f}.\n"
             "Response {i} has R = {reward:.4g}; {how} = {answer:.4f}."),
    Exercise("kl-k3", "grpo",
             "k3 estimate for one token with log p_θ = {logp} and log p_ref = {ref_logp}.",
             _kl_k3, {"logp": -1.0, "ref_logp": -1.5},
             _kl_k3_steps,
             "With ρ = p_ref/p_θ, k3 = ρ - 1 - log ρ.\n"
             "log ρ = log p_ref - log p_θ = {ref_logp:.4g} - ({logp:.4g}) = {log_rho:.4f}, so ρ = {rho:.4f}.\n"
             "k3 = {rho:.4f} - 1 - ({log_rho:.4f}) = {answer:.4f} (never negative, since e^d ≥ 1 + d)."),
    Exercise("all-equal-groups", "grpo-since-r1",
             "P(all G = {G} answers of a group get the same 0/1 reward), each right with probability p = {p}.",
             _all_equal_probability, {"p": 0.9, "G": 8},
             _all_equal_probability_steps,
             "The rewards are all equal when all {G} answers are right, probability p^G = {p:.4g}^{G} = "
             "{all_right:.4f}, or all wrong, (1 - p)^G = {all_wrong:.4g}.\n"
             "The two cases exclude each other, so P = {all_right:.4f} + {all_wrong:.4g} = {answer:.4f}: that share "
             "of the groups gets Â = 0 and adds nothing to the gradient (dynamic sampling drops them)."),
    Exercise("gspo-token-weight", "grpo-since-r1",
             "GSPO's loss, L = -(1/B) Σ_i min(s_i Â_i, clip(s_i, 1 - ε, 1 + ε_high) Â_i) with β = 0, B = {B} "
             "answers, ε = {eps}, ε_high = {eps_high}. Answer i has Â_i = {advantage} and token log-ratios "
             "log r_i,t = {log_ratios}. Derive ∂L/∂log p_θ(y_i,t) and give it for token t = {t} (counted from 0).",
             _gspo_token_weight,
             {"log_ratios": (0.3, -0.1, 0.2, 0.0), "advantage": 1.0, "B": 4, "t": 1, "eps": 0.2, "eps_high": 0.2},
             _gspo_token_weight_steps,
             "log s_i = (1/|y_i|) Σ_t log r_i,t = (1/|y_i|) Σ_t (log p_θ(y_i,t) - log p_θold(y_i,t)), so "
             "∂log s_i/∂log p_θ(y_i,t) = 1/|y_i| for every token t, and ∂s_i/∂log p_θ(y_i,t) = s_i/|y_i|.\n"
             "Here |y_i| = {n} and s_i = {s:.4f}, against the range [{low:.4g}, {high:.4g}]: {where}.\n"
             "∂L/∂log p_θ(y_i,t) = -s_i·Â_i / (B·|y_i|) = {answer:.4f}, the same for every token of the answer. "
             "GRPO's token ratios, each clipped on its own, would give the tokens {grpo}.",
             tol=1e-3),
    Exercise("dpo-margin", "dpo",
             "Implicit reward margin β·(log-ratio of y_w - log-ratio of y_l) with β = {beta}, log-ratios "
             "{chosen_logratio} and {rejected_logratio}.",
             lambda **p: _dpo(**p)[1], {"beta": 0.1, "chosen_logratio": 0.1, "rejected_logratio": -2.0},
             _dpo_margin_steps,
             "The implicit reward of a response is β·log p_θ(y|x)/p_ref(y|x); the margin is their difference:\n"
             "β·(({chosen_logratio:.4g}) - ({rejected_logratio:.4g})) = {beta:.4g} · "
             "{difference:.4g} = {answer:.4f}."),
    Exercise("dpo-loss", "dpo",
             "DPO loss -log σ(implicit reward margin) with β = {beta}, log-ratios {chosen_logratio} and "
             "{rejected_logratio}.",
             lambda **p: _dpo(**p)[0], {"beta": 0.1, "chosen_logratio": 0.1, "rejected_logratio": -2.0},
             _dpo_loss_steps,
             "Margin: β·(({chosen_logratio:.4g}) - ({rejected_logratio:.4g})) = {beta:.4g} · {difference:.4g} "
             "= {margin:.4f}.\n"
             "Loss: -log σ(margin) = log(1 + e^(-margin)) = {answer:.4f} "
             "(log 2 = 0.6931 at margin 0, falling towards 0 as the margin grows)."),
    Exercise("leave-one-out-scale", "grpo",
             "For every group of G = {G} rewards, R_i - mean(all G) = c · (R_i - mean of the other G - 1), RLOO's "
             "advantage. Derive c.",
             _leave_one_out_scale, {"G": 8},
             _leave_one_out_scale_steps,
             "The group mean contains R_i: mean = (R_i + (G - 1)·mean_-i) / G.\n"
             "So R_i - mean = (G·R_i - R_i - (G - 1)·mean_-i) / G = (G - 1)/G · (R_i - mean_-i).\n"
             "c = ({G} - 1)/{G} = {answer:.4f}: GRPO's centred reward is RLOO's advantage shrunk by a constant, "
             "the same for every answer and every group of that size."),
    Exercise("k3-gradient", "grpo",
             "p_θ = softmax(θ) with θ = {logits}, p_ref = {p_ref}. Component j = {j} of E_(y~p_θ)[∇_θ k3(y)], the "
             "samples held fixed (what the in-loss k3 term's gradient averages to).",
             _k3_gradient, {"logits": (1.0, 0.0, -1.0), "p_ref": (0.2, 0.3, 0.5), "j": 0},
             _k3_gradient_steps,
             "∇k3 = (1 - p_ref/p_θ) ∇log p_θ, so E_p_θ[∇k3] = Σ_y p_θ ∇log p_θ - Σ_y p_ref ∇log p_θ. The first sum "
             "is ∇Σ_y p_θ = 0; the second is -∇KL(p_ref ‖ p_θ): the gradient follows the FORWARD KL.\n"
             "For a softmax ∂log p_θ(y)/∂θ_j = 1[y = j] - p_θ(j), so -Σ_y p_ref(y) (1[y = j] - p_θ(j)) = "
             "p_θ(j) - p_ref(j).\n"
             "p_θ = {p}; component {j}: {p_j:.4f} - {p_ref_j:.4g} = {answer:.4f}."),
    Exercise("seq-mean-token-weight", "grpo",
             "GRPO's seq-mean loss at θ = θ_old, β = 0, batch of B = {B} answers: ∂L/∂log p_θ(y_i,t) for a token of "
             "an answer with Â_i = {advantage} and |y_i| = {length} tokens.",
             _seq_mean_token_weight, {"advantage": 1.5, "length": 3, "B": 4},
             _seq_mean_token_weight_steps,
             "At r = 1 and β = 0, L = -(1/B) Σ_i (1/|y_i|) Σ_t Â_i log p_θ(y_i,t): the token appears once, "
             "with coefficient -Â_i / (B·|y_i|).\n"
             "-({advantage:.4g}) / ({B} · {length}) = -({advantage:.4g}) / {denominator} = {answer:.4f}."),
    Exercise("label-smoothing-optimum", "dpo",
             "The log-ratio margin h* that minimises -(1-ε) log σ(βh) - ε log σ(-βh) (label smoothing) at "
             "β = {beta}, ε = {eps}.",
             _label_smoothing_optimum, {"beta": 0.5, "eps": 0.1},
             _label_smoothing_optimum_steps,
             "d/dh = -β(1-ε) σ(-βh) + β ε σ(βh), using d/dx log σ(x) = σ(-x). Zero when ε σ(βh) = (1-ε) σ(-βh) = "
             "(1-ε)(1 - σ(βh)), i.e. σ(βh) = 1 - ε: the model's probability that y_w wins equals the share of "
             "labels that say so.\n"
             "βh* = log((1-ε)/ε) = log {odds:.4g} = {log_odds:.4f}, "
             "so h* = {log_odds:.4f} / {beta:.4g} = {answer:.4f}."),
    Exercise("mcnemar-p", "showdown",
             "Two models on the same problems: A alone is right on b = {only_a}, B alone on c = {only_b}. The exact "
             "two-sided McNemar p-value.",
             _mcnemar_p, {"only_a": 12, "only_b": 4},
             _mcnemar_p_steps,
             "If the two were equally good, each of the n = b + c = {n} disagreements would go either way with "
             "probability 1/2, so the smaller count is Binomial({n}, 1/2).\n"
             "P(count ≤ {low}) = Σ_(k ≤ {low}) C({n}, k) / 2^{n} = {tail:.4f}; two-sided, doubled (at most 1): "
             "p = {answer:.4f}. The problems both got right or both got wrong say nothing about which is better.",
             tol=1e-3),
    Exercise("best-of-n-kl-exact", "showdown",
             "Best-of-N draws N = {n} answers from p and keeps the one with the highest reward. The outcomes, listed "
             "from the lowest reward to the highest, have p = {probs}. Derive p_N(k), the chance that outcome k is "
             "the one kept, and give KL(p_N ‖ p) in nats.",
             _best_of_n_kl, {"probs": (0.5, 0.3, 0.15, 0.05), "n": 3},
             _best_of_n_kl_steps,
             "The kept outcome is k or a worse one exactly when all N = {n} draws are: probability F(k)^N, with F the "
             "cumulative probability in reward order, F = {cdf}. So p_N(k) = F(k)^N − F(k−1)^N = {p_n}.\n"
             "KL(p_N ‖ p) = Σ_k p_N(k) log(p_N(k) / p(k)) = {answer:.4f} nats, at most the bound "
             "log N − (N−1)/N = {bound:.4f}.",
             tol=1e-3),
    Exercise("pass-at-k", "toolbox",
             "n = {n} answers sampled for one problem, c = {c} of them right. The unbiased estimate of pass@k for "
             "k = {k}.",
             _pass_at_k, {"n": 16, "c": 3, "k": 4},
             _pass_at_k_steps,
             "pass@k is the chance that a set of k answers holds at least one right one; from the n samples, take "
             "every k-subset: C({n}, {k}) = {subsets} of them, of which C({wrong}, {k}) = {wrong_subsets} hold only "
             "wrong answers.\n"
             "P(all k wrong) = {wrong_subsets} / {subsets} = {all_wrong:.4f}, so pass@{k} = 1 - {all_wrong:.4f} = "
             "{answer:.4f}.\n"
             "The plug-in 1 - (1 - c/n)^k = {naive:.4f} draws the k with replacement; averaged over the draws of the n "
             "samples it falls below the true pass@k (Jensen: 1 - (1 - p)^k is concave in p).",
             tol=1e-3),
    Exercise("top-p-weight", "toolbox",
             "p_θold's next-token probabilities are p = {probs} (tokens 0, 1, 2, ...). The sampler μ filters them "
             "with top-p = {top_p} and draws token {token}. Its importance weight ρ = p_θold(y) / μ(y)?",
             _top_p_weight, {"probs": (0.5, 0.3, 0.15, 0.05), "top_p": 0.9, "token": 2},
             _top_p_weight_steps,
             "Top-p keeps the most probable tokens until their mass reaches top_p (the token that crosses it "
             "included): tokens {kept}, of mass Z = {mass:.4g}. μ renormalises p over them: μ(y) = p(y) / Z = "
             "{mu:.4f}.\n"
             "ρ = p(y) / μ(y) = Z = {answer:.4f}, the same for every kept token and never above 1: top-p only ever "
             "down-weights, so a cap C ≥ 1 never acts on it. A filtered token has μ = 0: μ never draws it, and no "
             "weight can put its share of E_p_θold back.",
             tol=1e-3),
]
EXERCISES: dict[str, Exercise] = {e.id: e for e in EXERCISES_LIST}


# ---------------------------------------------------------------------------------------------------------
# Lookup and checking
# ---------------------------------------------------------------------------------------------------------


def _lookup(registry: dict, key: str, kind: str):
    if key not in registry:
        raise KeyError(f"unknown {kind} id {key!r}; valid ids: {', '.join(registry)}")
    return registry[key]


def list_quizzes(topic: str | None = None) -> list[str]:
    """Ids of the multiple-choice questions, optionally only those of one topic (see TOPICS)."""
    if topic is not None and topic not in TOPICS:
        raise ValueError(f"unknown topic {topic!r}; valid topics: {', '.join(TOPICS)}")
    return [q.id for q in QUESTIONS_LIST if topic is None or q.topic == topic]


def list_exercises(topic: str | None = None) -> list[str]:
    """Ids of the numeric exercises, optionally only those of one topic."""
    if topic is not None and topic not in TOPICS:
        raise ValueError(f"unknown topic {topic!r}; valid topics: {', '.join(TOPICS)}")
    return [e.id for e in EXERCISES_LIST if topic is None or e.topic == topic]


def _letter(answer: str) -> str:
    """'d', ' D ', 'D)' and 'D. ...' all mean D."""
    text = str(answer).strip().upper()
    return text[0] if len(text) > 1 and text[1] in ").:" else text


def feedback(quiz_id: str, answer: str) -> tuple[bool, str]:
    """(is_correct, text) for an answer letter; the text starts with "Correct" or "Not quite"."""
    q: Question = _lookup(QUESTIONS, quiz_id, "quiz")
    letter = _letter(answer)
    if letter not in q.options:
        return False, f"Not quite: {answer!r} is not one of the options {', '.join(q.options)}."
    if letter == q.answer:
        return True, f"Correct! {q.explanation}"
    return False, f"Not quite: the answer is {q.answer}) {q.options[q.answer]}. {q.explanation}"


def format_question(quiz_id: str) -> str:
    """The question and its lettered options as plain text."""
    q: Question = _lookup(QUESTIONS, quiz_id, "quiz")
    return "\n".join([q.question] + [f"  {letter}) {text}" for letter, text in q.options.items()])


def check(quiz_id: str, answer: str) -> bool:
    """Print whether `answer` (a letter, any case) is right and why; return True when it is."""
    ok, text = feedback(quiz_id, answer)
    print(text)
    return ok


class QuizWidget(W.VBox):
    """Question, RadioButtons (one per letter), a Check button and a feedback area."""

    def __init__(self, quiz_id: str):
        q: Question = _lookup(QUESTIONS, quiz_id, "quiz")
        self.quiz_id = quiz_id
        options = [(f"{letter}) {text}", letter) for letter, text in q.options.items()]
        self.choices = W.RadioButtons(options=options, value=None, layout=W.Layout(width="auto"))
        self.button = W.Button(description="Check", button_style="primary")
        self.feedback = W.HTML(value="")
        self.button.on_click(self._on_check)
        super().__init__([W.HTML(f"<b>{q.question}</b>"), self.choices, self.button, self.feedback])

    def _on_check(self, _button: W.Button | None = None) -> None:
        if self.choices.value is None:
            self.feedback.value = "Pick an option first."
            return
        ok, text = feedback(self.quiz_id, self.choices.value)
        color = "green" if ok else "firebrick"
        self.feedback.value = f"<span style='color:{color}'>{text}</span>"


def ask(quiz_id: str) -> QuizWidget:
    """An interactive question; in plain Python use check(quiz_id, letter) instead."""
    return QuizWidget(quiz_id)


def _parameters(exercise: Exercise, params: dict) -> dict:
    """The exercise's defaults with `params` overriding them; an unknown parameter is an error."""
    unknown = set(params) - set(exercise.defaults)
    if unknown:
        raise TypeError(f"exercise {exercise.id!r} takes {sorted(exercise.defaults)}, got {sorted(unknown)}")
    return {**exercise.defaults, **params}


def solution(exercise_id: str, **params) -> float:
    """The library's value for a numeric exercise, with `params` overriding its defaults."""
    exercise: Exercise = _lookup(EXERCISES, exercise_id, "exercise")
    return exercise.solve(**_parameters(exercise, params))


def _question(exercise: Exercise, params: dict) -> str:
    """The question alone, without the precision describe() asks for (check_number names its own tolerance's)."""
    return exercise.prompt.format(**_parameters(exercise, params))


def describe(exercise_id: str, **params) -> str:
    """The exercise's question with its (default or given) parameters filled in, and the precision it asks for."""
    exercise: Exercise = _lookup(EXERCISES, exercise_id, "exercise")
    return _question(exercise, params) + f" Give at least {significant_digits(exercise.tol)} significant digits."


def significant_digits(tol: float) -> int:
    """The fewest significant digits n whose rounding always stays within relative error tol: rounding to n digits
    moves a number by at most half a unit of its n-th digit, 0.5·10^(1-n) of its leading one."""
    return max(1, math.ceil(1 - math.log10(2 * tol)))


def shown(value: float, tol: float) -> str:
    """`value` with 4 decimals, or more where those hold fewer significant digits than the question asks for
    (significant_digits(tol)): 0.0768 at tol 1e-3 is shown 0.07680, never rounded below what a student must give."""
    leading = math.floor(math.log10(abs(value))) if value else 0  # the power of ten of the first digit
    return f"{value:.{max(4, significant_digits(tol) - 1 - leading)}f}"


def worked_solution(exercise_id: str, **params) -> str:
    """The exercise worked by hand, step by step, for its (default or given) parameters."""
    exercise: Exercise = _lookup(EXERCISES, exercise_id, "exercise")
    values = _parameters(exercise, params)
    exercise.solve(**values)  # parameters the library refuses are refused here too, with its message
    return exercise.worked.format(**values, **exercise.steps(**values))


def show_solution(exercise_id: str, **params) -> None:
    """Print the question, its worked solution and the library's value: the answer, when you want to compare."""
    print(describe(exercise_id, **params))
    print(worked_solution(exercise_id, **params))
    exercise: Exercise = _lookup(EXERCISES, exercise_id, "exercise")
    print(f"The library's value: {shown(solution(exercise_id, **params), exercise.tol)}")


def _call(function: str, exercise_id: str, params: dict) -> str:
    """How to call `function` for this exercise with these parameters, as the student would type it."""
    arguments = [repr(exercise_id)] + [f"{name}={value!r}" for name, value in params.items()]
    return f"quiz.{function}({', '.join(arguments)})"


# a refused answer this close (relatively) to the library's may be a right one rounded: check_number says so
ROUNDING_HINT_RTOL = 1e-2


def check_number(exercise_id: str, value: float | None, tol: float | None = None, **params) -> bool:
    """Print whether `value` matches the library's answer (within tol, absolute or relative); return it.

    `value` None (the notebooks' placeholder) or ... only prints a reminder to fill it in and returns False."""
    exercise: Exercise = _lookup(EXERCISES, exercise_id, "exercise")
    if tol is not None:  # 0 would ask for infinitely many digits: a value computed in floats matches exactly by luck
        check_positive("tol", tol, why="only a positive tolerance is met by rounding to some number of digits")
    expected = solution(exercise_id, **params)
    question = _question(exercise, params)  # a custom tol asks for other digits than describe()'s
    if value is None or value is Ellipsis:
        print(f"Fill in your answer first: replace the None with your number and run this cell again ({exercise_id}).")
        return False
    if not hasattr(value, "__float__"):
        raise TypeError(f"exercise {exercise_id!r}: the answer must be a number, got {value!r}")
    tol = exercise.tol if tol is None else tol
    ok = math.isclose(float(value), expected, rel_tol=tol, abs_tol=tol)
    if ok:
        print(f"Correct! {question} = {shown(expected, tol)}")
    else:
        rounded = math.isclose(float(value), expected, rel_tol=ROUNDING_HINT_RTOL)  # e.g. 0.40 for 0.3961 at tol 1e-3
        print(f"Not quite: {value} is off for: {question} "
              + (f"It is within {ROUNDING_HINT_RTOL:.0%} of the answer, outside the tolerance {tol:g}: if you "
                 f"rounded, give {significant_digits(tol)} significant digits. " if rounded else "")
              + f"Try again, or see the worked solution with {_call('show_solution', exercise_id, params)}")
    return ok
