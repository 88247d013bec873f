"""Multiple-choice quizzes and numeric exercises for the notebooks.

Two ways to answer, so every notebook works with or without widgets:

    from minirlhf.course import quiz
    quiz.ask("dpo-collapse")            # RadioButtons + Check button + feedback (Jupyter / Colab)
    quiz.check("dpo-collapse", "d")     # plain code: prints right/wrong and why, returns a bool
    quiz.check_number("ppo-objective", 1.2, r=1.5, advantage=1.0, eps=0.2)

Numeric answers are computed by the library itself (minirlhf.losses / minirlhf.toy), so an exercise can
be re-asked with any parameters. Ids are grouped by notebook topic: see TOPICS and list_quizzes().
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import ipywidgets as W

from minirlhf import losses
from minirlhf.course import toy

TOPICS = ("start-here", "kl-objective", "policy-gradient", "ppo", "grpo", "dpo", "showdown")


@dataclass(frozen=True)
class Question:
    id: str
    topic: str
    question: str
    options: dict[str, str]  # letter -> option text
    answer: str  # one of the letters
    explanation: str
    source: str = "new"  # "lecture" for the quizzes taken from the lecture slides


QUESTIONS_LIST = [
    # ------------------------------------------------------------------ start here / notation
    Question(
        "notation-ratio", "start-here",
        "In PPO and GRPO, what is the probability ratio r_t(θ)?",
        {"A": "p_θ(y_t | x, y_<t) / p_ref(y_t | x, y_<t)",
         "B": "p_θ(y_t | x, y_<t) / p_θold(y_t | x, y_<t)",
         "C": "The reward received at token t",
         "D": "The reward-model score divided by the value estimate"},
        "B",
        "r_t(θ) compares the policy being updated with the policy that generated the batch (θ_old): it is "
        "the importance weight that lets several gradient steps reuse the same samples. p_ref only shows up "
        "in the KL penalty. (Careful: the letter r also names per-token rewards in GAE; the code calls the "
        "ratio `ratio` and the rewards `rewards`.)",
    ),
    Question(
        "notation-ref-vs-old", "start-here",
        "Which statement about p_ref and p_θold is right?",
        {"A": "Both are updated after every gradient step",
         "B": "p_ref is a frozen copy (usually the SFT model) kept for the whole run; p_θold is the policy "
              "that sampled the current batch and is refreshed every iteration",
         "C": "p_θold is frozen for the whole run; p_ref is refreshed every iteration",
         "D": "They are two names for the same model"},
        "B",
        "p_ref anchors the whole run: the KL(p_θ ‖ p_ref) penalty measures drift from where training "
        "started. "
        "p_θold is only a snapshot of the policy at sampling time, used in the ratio r_t(θ); it catches up "
        "with p_θ at the next sampling round.",
    ),
    Question(
        "notation-offline", "start-here",
        "Which of the three methods learns from a fixed dataset collected before training starts?",
        {"A": "PPO", "B": "GRPO", "C": "DPO", "D": "All three"},
        "C",
        "DPO is offline: it reads log-probs of stored preference pairs (y_w, y_l). PPO and GRPO are "
        "on-policy: "
        "every iteration they generate fresh responses from the current policy and score them, which costs "
        "inference time but keeps the data matched to the model being trained.",
    ),
    # ------------------------------------------------------------------ KL-regularised objective
    Question(
        "kl-small-beta", "kl-objective",
        "The optimum of E_p[R] - β KL(p ‖ p_ref) is p*(y) ∝ p_ref(y) exp(R(y)/β). What happens as β → 0?",
        {"A": "p* → p_ref",
         "B": "p* → the uniform distribution",
         "C": "p* piles its mass onto the highest-reward responses that p_ref allows",
         "D": "p* does not depend on β"},
        "C",
        "exp(R/β) grows fastest for the largest R, and the gap between the best response and the rest is "
        "blown up by 1/β, so a tiny β means pure reward maximisation. The opposite limit, β → ∞, makes "
        "exp(R/β) → 1 and gives back p_ref. Try both ends with widgets.optimal_policy_explorer().",
    ),
    Question(
        "kl-zero-ref", "kl-objective",
        "The response with the highest reward has p_ref(y) = 0. What probability does p* give it?",
        {"A": "0",
         "B": "1",
         "C": "exp(R(y)/β) / Z",
         "D": "It depends on the value of Z"},
        "A",
        "p* is p_ref times a positive factor, so a zero stays a zero, whatever the reward. Equivalently, "
        "any p "
        "that puts mass where p_ref has none has infinite KL(p ‖ p_ref). The KL term keeps the policy inside "
        "what the reference model could already produce.",
    ),
    Question(
        "kl-optimal-value", "kl-objective",
        "What is the largest value J(p) = E_p[R] - β KL(p ‖ p_ref) can take?",
        {"A": "max_y R(y)", "B": "E_{p_ref}[R]", "C": "β log Z", "D": "0"},
        "C",
        "At p*, log p*/p_ref = R/β - log Z, so β KL(p* ‖ p_ref) = E_p*[R] - β log Z and J(p*) = β log Z. "
        "It sits between E_{p_ref}[R] (what doing nothing earns) and max_y R (what ignoring the KL would "
        "earn). toy.kl_regularised_objective and toy.log_partition confirm it numerically.",
    ),
    # ------------------------------------------------------------------ policy gradient
    Question(
        "pg-log-derivative", "policy-gradient",
        "Why rewrite ∇_θ p_θ(y) as p_θ(y) ∇_θ log p_θ(y)?",
        {"A": "It makes the gradient exact without any sampling",
         "B": "It turns Σ_y ∇p_θ(y) R(y) into an expectation under p_θ, which samples from the model can "
              "estimate",
         "C": "It lets gradients flow through the discrete sampling step",
         "D": "It removes the need for a reward"},
        "B",
        "The sum over all responses is intractable, and samples from p_θ would weight each term by p_θ(y) a "
        "second time. Writing ∇p = p ∇log p puts that p_θ(y) in front, so ∇J = E_{y~p_θ}[R(y) ∇ log p_θ(y)]: "
        "average R·∇log p over sampled responses. Nothing is differentiated through sampling or the reward.",
    ),
    Question(
        "pg-baseline", "policy-gradient",
        "Why does subtracting a baseline b (that does not depend on the sampled y) leave the expected "
        "policy gradient unchanged?",
        {"A": "Because b is usually small",
         "B": "Because E_{y~p_θ}[∇ log p_θ(y)] = Σ_y ∇p_θ(y) = ∇ Σ_y p_θ(y) = ∇1 = 0",
         "C": "Because the optimiser ignores constants",
         "D": "It does change it, but in a helpful direction"},
        "B",
        "E[(R - b) ∇log p] = E[R ∇log p] - b E[∇log p], and the second expectation is the gradient of the "
        "constant total probability 1, which is zero. The mean stays put while the spread drops when b is "
        "close to the typical reward: toy.score_function_gradients shows both.",
    ),
    Question(
        "pg-loo", "policy-gradient",
        "RLOO's baseline for response i is the mean reward of the other G-1 responses. Why leave i out?",
        {"A": "To save compute",
         "B": "With R_i inside its own baseline, the baseline depends on the sample and the expected "
              "gradient "
              "shrinks by a factor (G-1)/G; leaving it out keeps the estimate unbiased",
         "C": "To make the estimate noisier, which helps exploration",
         "D": "Because response i has no reward yet"},
        "B",
        "The zero-mean argument needs b independent of y_i. The plain group mean contains R_i/G, so "
        "R_i - mean = (G-1)/G · (R_i - mean of the others): the same direction, scaled down. The other G-1 "
        "rewards come from independent samples, so their mean is a legitimate baseline.",
    ),
    # ------------------------------------------------------------------ PPO
    Question(
        "ppo-eps-inf", "ppo",
        "In PPO, what happens if the clipping range is set to ε = ∞ (no clipping at all)?",
        {"A": "PPO becomes equivalent to DPO",
         "B": "The value function is no longer needed",
         "C": "Policy updates are no longer held back and can change the policy drastically in one step",
         "D": "The reward model is no longer needed"},
        "C",
        "With ε = ∞, clip(r, 1-ε, 1+ε) = r and the objective is just r_t·Â_t, the importance-weighted policy "
        "gradient (at r = 1 it matches REINFORCE with the critic as baseline). Nothing then stops the ratio "
        "from running far from 1 during the several epochs spent on one batch, and such big steps are what "
        "make training collapse. Â still needs the critic and the reward model, and the method is still "
        "online RL.",
        source="lecture",
    ),
    Question(
        "ppo-neg-low-ratio", "ppo",
        "Â_t = -1, ε = 0.2 and r_t = 0.5. What is the derivative of min(r Â, clip(r, 1-ε, 1+ε) Â) with "
        "respect to r_t?",
        {"A": "-1", "B": "0", "C": "+1", "D": "-0.8"},
        "B",
        "The unclipped term is -0.5 and the clipped one is clip(0.5)·(-1) = -0.8; the min picks -0.8, a "
        "constant "
        "in r. The bad token is already half as likely as before, so PPO stops pushing it down. (Had r "
        "been 1.5, "
        "the min would pick -1.5 and the gradient would keep pushing.)",
    ),
    Question(
        "ppo-gae-lambda", "ppo",
        "What does GAE give with λ = 0?",
        {"A": "The Monte-Carlo return minus V(s_t): unbiased but noisy",
         "B": "The one-step TD error δ_t = r_t + γ V(s_t+1) - V(s_t): low variance, but only as good as "
              "the critic",
         "C": "Zero advantages everywhere",
         "D": "The GRPO group-normalised advantage"},
        "B",
        "GAE sums the TD errors δ_t + γλ δ_t+1 + (γλ)² δ_t+2 + ...; λ = 0 keeps only δ_t, which trusts "
        "V(s_t+1) for everything after the next token. λ = 1 adds all the δs up to the actual return minus "
        "V(s_t). λ trades the critic's bias against the variance of sampled rewards; see "
        "widgets.gae_explorer().",
    ),
    Question(
        "ppo-kl-where", "ppo",
        "In RLHF with PPO, where does the KL penalty to p_ref usually enter?",
        {"A": "Only through the clipping range ε",
         "B": "In the per-token rewards: -β KL_t on every token, with the reward-model score added on the "
              "last token",
         "C": "In the value-function loss",
         "D": "Nowhere: clipping replaces it"},
        "B",
        "The reward becomes r_t = -β KL_t (+ RM score at the end), and GAE spreads it over the tokens "
        "like any "
        "other reward. Clipping and KL do different jobs: clipping keeps each update near p_θold, the KL "
        "keeps "
        "the whole run near p_ref.",
    ),
    # ------------------------------------------------------------------ GRPO
    Question(
        "ppo-vs-grpo", "grpo",
        "What is the main difference between how PPO and GRPO estimate advantages?",
        {"A": "PPO uses a learned value function; GRPO uses the mean reward of a group of samples",
         "B": "PPO uses verifiable rewards; GRPO uses learned rewards",
         "C": "PPO generates one sample per prompt; GRPO generates several",
         "D": "PPO clips the objective; GRPO does not"},
        "A",
        "The baseline is the difference. PPO trains a critic V(s_t) and turns rewards into per-token "
        "advantages "
        "with GAE; GRPO samples G responses to the same prompt and standardises each reward against the "
        "group's "
        "mean and std, so no critic has to be trained or kept in memory. Both clip, both accept any "
        "reward, and "
        "both work on batches of many responses.",
        source="lecture",
    ),
    Question(
        "grpo-all-same", "grpo",
        "All G = 8 responses to a prompt are correct (reward 1 each). What advantages does GRPO give them?",
        {"A": "+1 each",
         "B": "0 each: every reward equals the group mean, so this prompt gives no policy-gradient signal",
         "C": "+1/8 each",
         "D": "Undefined: the std is 0 and training crashes"},
        "B",
        "R_i - mean = 0 for every i, and the std is 0 too. losses.grpo_advantages does not divide 0 by 0: "
        "it treats any group whose std is below eps = 1e-4 as constant and sets its advantages to exactly 0 "
        "(so float noise cannot be blown up into advantages of order ±1). Prompts that are always solved, or "
        "never solved, teach nothing; only the KL term still acts on them. A larger G makes such groups "
        "rarer: see widgets.group_size_explorer().",
    ),
    Question(
        "grpo-k3", "grpo",
        "GRPO estimates the per-token KL with k3 = p_ref/p_θ - log(p_ref/p_θ) - 1, on tokens sampled from "
        "p_θ. "
        "Why not simply k1 = log(p_θ/p_ref)?",
        {"A": "k3 is the exact KL, not an estimate",
         "B": "Both are unbiased, but k3 is never negative and, while p_θ stays close to p_ref, has a much "
              "smaller variance",
         "C": "k3 does not need the reference model",
         "D": "k1 is biased"},
        "B",
        "With x = p_ref/p_θ, E_p_θ[x] = 1, so E[k3] = E[-log x] = KL, the same as k1. But x - 1 - log x ≥ "
        "0 for every "
        "x, so single-token k3 values are never negative, unlike k1, and they vary less when p_θ is close to "
        "p_ref. toy.kl_estimator_study measures bias and spread of k1, k2, k3.",
    ),
    Question(
        "grpo-group-size", "grpo",
        "What does increasing the group size G buy, and what does it cost?",
        {"A": "A less noisy baseline and fewer all-equal (zero-signal) groups, at the price of generating "
              "more "
              "responses per prompt",
         "B": "Cheaper generation",
         "C": "A biased baseline",
         "D": "It removes the need for clipping"},
        "A",
        "The group mean of G rewards has standard deviation σ/√G, and the chance that all G binary "
        "rewards agree "
        "is p^G + (1-p)^G, which falls quickly with G. Each extra sample is one more generation, which is "
        "the "
        "dominant cost of GRPO; typical values are G = 8 to 64.",
    ),
    # ------------------------------------------------------------------ DPO
    Question(
        "dpo-collapse", "dpo",
        "After DPO training, a pair has log p_θ(y_w|x)/p_ref(y_w|x) = 0.1 for the chosen response and "
        "log p_θ(y_l|x)/p_ref(y_l|x) = -2.0 for the rejected one. What happened?",
        {"A": "The model failed to learn the preference",
         "B": "The KL penalty was too large",
         "C": "The model learned a strong preference by making the chosen response more likely",
         "D": "The model mostly made the rejected response less likely, without making the chosen one "
              "more likely"},
        "D",
        "The margin is 0.1 - (-2.0) = 2.1, so the implicit reward gap β·2.1 is large and the loss is low: "
        "the "
        "preference was learned (not A). But 2.0 of the 2.1 comes from pushing y_l down; y_w barely moved "
        "(not C). "
        "The loss only sees the difference, and lowering the loser is often the easier route: the model "
        "learns "
        "what not to say rather than what to say, the road to DPO's collapse problem.",
        source="lecture",
    ),
    Question(
        "dpo-weight", "dpo",
        "The DPO gradient on a pair is scaled by σ(-β·h), with h the log-ratio margin between y_w and y_l. "
        "Which pairs move the model most?",
        {"A": "Pairs it already ranks correctly by a wide margin",
         "B": "Pairs it ranks the wrong way round (h < 0)",
         "C": "All pairs equally",
         "D": "Pairs with the longest responses"},
        "B",
        "σ(-βh) is near 1 when h is very negative (the model prefers the loser) and near 0 when h is "
        "large and "
        "positive. The loss behaves like logistic regression: confident correct pairs are nearly ignored, "
        "surprising "
        "ones dominate. widgets.dpo_explorer() plots the weight for any β.",
    ),
    Question(
        "dpo-beta", "dpo",
        "What does a larger β mean in DPO?",
        {"A": "A weaker pull towards p_ref",
         "B": "A stronger KL constraint: the implied optimal policy stays closer to p_ref, and the loss "
              "flattens "
              "out at a smaller log-ratio margin",
         "C": "A larger learning rate",
         "D": "Longer responses"},
        "B",
        "β is the KL coefficient of the objective DPO is derived from, so large β means conservative "
        "updates and "
        "small β means chasing preferences more aggressively. In the loss -log σ(β h) it shows up as the "
        "scale "
        "of h: with a larger β the loss is already small at a small margin.",
    ),
    Question(
        "dpo-ipo", "dpo",
        "IPO replaces DPO's -log σ(β h) with the squared loss (h - 1/(2β))². What does that change?",
        {"A": "It no longer needs a reference model",
         "B": "The margin has a finite target 1/(2β), so the loss stops pushing h once it gets there instead "
              "of always rewarding a larger margin",
         "C": "It turns DPO into an online method",
         "D": "Nothing: the two losses have the same minimiser"},
        "B",
        "-log σ(βh) keeps decreasing as h grows, so on pairs that are always labelled the same way DPO "
        "can drive "
        "the log-ratios without bound and overfit. IPO's squared loss is minimised at h = 1/(2β) and "
        "pulls back "
        "if h overshoots, which acts as a stronger regulariser. Compare loss_types=('sigmoid', 'ipo') in "
        "viz.plot_dpo.",
    ),
    # ------------------------------------------------------------------ showdown
    Question(
        "showdown-critic", "showdown",
        "Which model does GRPO do without, compared with PPO?",
        {"A": "The reference model", "B": "The value function (critic)", "C": "The reward model",
         "D": "The policy"},
        "B",
        "PPO keeps policy, reference, reward model and critic in memory; GRPO replaces the critic with group "
        "statistics. It still needs a reward (learned, or rule-based like an answer checker) and still uses "
        "p_ref for its KL penalty.",
    ),
    Question(
        "showdown-verifiable", "showdown",
        "You have math problems with an automatic answer checker, but no preference pairs. Which method "
        "fits best?",
        {"A": "DPO", "B": "GRPO", "C": "Training only a Bradley–Terry reward model", "D": "None of these"},
        "B",
        "DPO needs pairs (y_w, y_l). An on-policy method with a rule-based reward needs nothing else, and "
        "GRPO "
        "avoids training a critic: the DeepSeek-Math / DeepSeek-R1 recipe.",
    ),
    Question(
        "showdown-frontier", "showdown",
        "On a plot of reward against KL(p_θ ‖ p_ref) for finished runs, what does a better method look like?",
        {"A": "More KL for the same reward",
         "B": "More reward for the same KL (points further up and to the left)",
         "C": "The point with the largest KL",
         "D": "The point with the smallest KL"},
        "B",
        "Reward alone is easy to raise by drifting far from p_ref, which is where reward hacking lives. "
        "The KL "
        "measures what the reward cost; comparing methods at matched KL (the frontier in "
        "viz.plot_frontier) is "
        "the fair comparison.",
    ),
]
QUESTIONS: dict[str, Question] = {q.id: q for q in QUESTIONS_LIST}


# ---------------------------------------------------------------------------------------------------------
# Numeric exercises: the answer is computed by the library
# ---------------------------------------------------------------------------------------------------------


def _grpo_advantage(rewards: Sequence[float], i: int, scale: str) -> float:
    return float(losses.grpo_advantages(toy.as_tensor(rewards), len(rewards), scale=scale)[i])


def _rloo_advantage(rewards: Sequence[float], i: int) -> float:
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
    return float(toy.optimal_policy(p_ref, rewards, beta)[i])


def _kl_k3(logp: float, ref_logp: float) -> float:
    return float(losses.kl_k3(toy.as_tensor(logp), toy.as_tensor(ref_logp)))


def _gae_advantage(gamma: float, lam: float, t: int) -> float:
    advantages, _ = toy.toy_gae(gamma, lam)
    return float(advantages[t])


@dataclass(frozen=True)
class Exercise:
    id: str
    topic: str
    prompt: str  # formatted with the parameters
    solve: Callable[..., float]
    defaults: dict = field(default_factory=dict)
    tol: float = 1e-2  # accepted if within tol absolutely or relatively


EXERCISES_LIST = [
    Exercise("optimal-policy", "kl-objective",
             "p*(y_i) for p_ref = {p_ref}, R = {rewards}, β = {beta}, i = {i}.",
             _optimal_probability, {"p_ref": toy.TOY_P_REF, "rewards": toy.TOY_REWARDS, "beta": 0.5, "i": 0}),
    Exercise("rloo-advantage", "policy-gradient",
             "RLOO advantage R_i - mean(others) of response i = {i} in the group with rewards {rewards}.",
             _rloo_advantage, {"rewards": (1.0, 0.0, 0.0, 1.0), "i": 0}),
    Exercise("ppo-objective", "ppo",
             "Clipped surrogate min(r Â, clip(r, 1-ε, 1+ε) Â) at r = {r}, Â = {advantage}, ε = {eps}.",
             _ppo_objective, {"r": 1.5, "advantage": 1.0, "eps": 0.2}),
    Exercise("gae-advantage", "ppo",
             "GAE advantage Â_t at t = {t} on toy.toy_trajectory() with γ = {gamma}, λ = {lam}.",
             _gae_advantage, {"gamma": 1.0, "lam": 0.0, "t": 6}),
    Exercise("grpo-advantage", "grpo",
             "GRPO advantage of response i = {i} in the group with rewards {rewards} (scale = {scale!r}, "
             "sample std).",
             _grpo_advantage,
             {"rewards": (1.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0), "i": 0, "scale": "group"}),
    Exercise("kl-k3", "grpo",
             "k3 estimate for one token with log p_θ = {logp} and log p_ref = {ref_logp}.",
             _kl_k3, {"logp": -1.0, "ref_logp": -1.5}),
    Exercise("dpo-margin", "dpo",
             "Implicit reward margin β·(log-ratio of y_w - log-ratio of y_l) with β = {beta}, log-ratios "
             "{chosen_logratio} and {rejected_logratio}.",
             lambda **p: _dpo(**p)[1], {"beta": 0.1, "chosen_logratio": 0.1, "rejected_logratio": -2.0}),
    Exercise("dpo-loss", "dpo",
             "DPO loss -log σ(implicit reward margin) with β = {beta}, log-ratios {chosen_logratio} and "
             "{rejected_logratio}.",
             lambda **p: _dpo(**p)[0], {"beta": 0.1, "chosen_logratio": 0.1, "rejected_logratio": -2.0}),
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


def solution(exercise_id: str, **params) -> float:
    """The library's value for a numeric exercise, with `params` overriding its defaults."""
    exercise: Exercise = _lookup(EXERCISES, exercise_id, "exercise")
    unknown = set(params) - set(exercise.defaults)
    if unknown:
        raise TypeError(f"exercise {exercise_id!r} takes {sorted(exercise.defaults)}, got {sorted(unknown)}")
    return exercise.solve(**{**exercise.defaults, **params})


def describe(exercise_id: str, **params) -> str:
    """The exercise's question with its (default or given) parameters filled in."""
    exercise: Exercise = _lookup(EXERCISES, exercise_id, "exercise")
    return exercise.prompt.format(**{**exercise.defaults, **params})


def check_number(exercise_id: str, value: float, tol: float | None = None, **params) -> bool:
    """Print whether `value` matches the library's answer (within tol, absolute or relative); return it."""
    exercise: Exercise = _lookup(EXERCISES, exercise_id, "exercise")
    expected = solution(exercise_id, **params)
    tol = exercise.tol if tol is None else tol
    ok = math.isclose(float(value), expected, rel_tol=tol, abs_tol=tol)
    question = describe(exercise_id, **params)
    if ok:
        print(f"Correct! {question} = {expected:.4f}")
    else:
        print(f"Not quite: {value} is off for: {question} (call quiz.solution({exercise_id!r}, ...) to "
              f"see it)")
    return ok
