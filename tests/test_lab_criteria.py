"""Criteria of the lab's effects that read all the seeds together: entropy control's accuracy cost, and how a
verdict combines them with the per-seed criterion."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

import minirlhf.lab as lab
from minirlhf.lab import entropy_clip, entropy_control
from minirlhf.lab.entropy_control import CONTROLS, PLAIN

SLACK = entropy_control.ACCURACY_SLACK


def _arms(plain=(0.30, 0.10, 0.80), controls=None, token_entropy=(0.3, 0.3)) -> dict:
    """One seed's figures: each arm's (answer entropy at the start, after training, held-out accuracy); every arm's
    per-token entropy (filler included, never judged) is `token_entropy`, (first step, last steps)."""
    figures = {PLAIN: plain} | {c: (0.30, 0.40, 0.80) for c in CONTROLS} | (controls or {})
    return {arm: {"start_answer_entropy": start, "final_answer_entropy": final, "held_out_accuracy": accuracy,
                  "start_entropy": token_entropy[0], "final_entropy": token_entropy[1]}
            for arm, (start, final, accuracy) in figures.items()}


def test_entropy_control_holds_on_a_seed_only_when_plain_grpo_falls_and_every_control_ends_above_it():
    assert entropy_control.holds(_arms())
    assert not entropy_control.holds(_arms(plain=(0.30, 0.31, 0.80)))  # plain GRPO's entropy rose
    assert not entropy_control.holds(_arms(plain=(0.30, 0.30, 0.80)))  # nor did it fall
    # a control is judged against plain GRPO's final entropy, not against any start: falling less is holding it
    assert entropy_control.holds(_arms(controls={c: (0.30, 0.20, 0.80) for c in CONTROLS}))
    for control in CONTROLS:
        assert not entropy_control.holds(_arms(controls={control: (0.30, 0.10, 0.80)})), control  # a tie
        # a seed's accuracy is judged across seeds, never on its own
        assert entropy_control.holds(_arms(controls={control: (0.30, 0.40, 0.80 - 3 * SLACK)})), control
    # the per-token entropy counts the filler after the answer: it is recorded, never judged, either way
    assert entropy_control.holds(_arms(token_entropy=(0.3, 0.6)))
    assert not entropy_control.holds(_arms(plain=(0.30, 0.31, 0.80), token_entropy=(0.6, 0.1)))


def test_the_answer_entropy_is_read_at_the_answers_digits_only():
    """answer_entropy against the same figure computed by hand: each sampled answer scored alone, unpadded, its
    entropies kept at its digits (never the filler or EOS)."""
    import torch

    from minirlhf.logprobs import entropy_from_logits, forward_logits
    from minirlhf.models import load_model
    from minirlhf.sampling import sample
    from minirlhf.tasks import lab as lab_task

    model, tokenizer = load_model("tiny-lab", device="cpu")
    task = {"mix": (0.5, 0.5, 0.0), "max_new_tokens": 6, "tolerance": 3}
    figure = entropy_control.answer_entropy(model, tokenizer, task, 6, seed=3, kinds=["easy", "medium"])
    rng, by_hand = random.Random(20_003), []
    for kind in ("easy", "medium"):
        prompts = [dataclasses.replace(rng.choice(lab_task.problems(kind, "test")), tolerance=3).prompt
                   for _ in range(6)]
        rollout = sample(model, tokenizer, prompts, max_new_tokens=6,
                         generator=torch.Generator().manual_seed(20_003))
        for prompt, completion in zip(prompts, rollout.completions, strict=True):
            ids = tokenizer(prompt + completion, return_tensors="pt")["input_ids"]
            with torch.no_grad():
                logits, _ = forward_logits(model, ids, torch.ones_like(ids))
            P = len(tokenizer(prompt)["input_ids"])
            by_hand += [entropy_from_logits(logits[0, P - 1 + i]).item()
                        for i, c in enumerate(completion) if c.isdigit()]
    assert len(by_hand) > 6
    assert figure == pytest.approx(sum(by_hand) / len(by_hand), abs=1e-5)


def test_the_answer_entropy_reads_every_digit_wherever_the_filler_stands(monkeypatch):
    """Completions the lab's reward also scores (filler before the answer, a bare digit) and ones it does not (none,
    "1.2"): the figure is the mean over every digit token of the entropy of the distribution it was drawn from,
    computed for each text alone (dropout off); filler and EOS never count."""
    import torch

    from minirlhf import sampling
    from minirlhf.logprobs import entropy_from_logits, forward_logits
    from minirlhf.models import load_model

    model, tokenizer = load_model("tiny-lab", device="cpu")
    texts = ["..45", "45...", "7", "", "....", "1.2", "...", "123"]  # one per prompt, in the order drawn

    def forced(model, tokenizer, prompts, max_new_tokens, generator):
        """A rollout of `texts`, each closed by EOS, in `sample`'s layout (prompts left-padded to P columns)."""
        P = max(len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts)
        rows, prompt_masks, response_masks = [], [], []
        for prompt, text in zip(prompts, texts, strict=True):
            ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
            response = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            response += [tokenizer.pad_token_id] * (max_new_tokens - len(response))
            rows.append([tokenizer.pad_token_id] * (P - len(ids)) + ids + response)
            prompt_masks.append([0] * (P - len(ids)) + [1] * len(ids))
            response_masks.append([1] * (len(text) + 1) + [0] * (max_new_tokens - len(text) - 1))
        response_mask = torch.tensor(response_masks)
        return sampling.Rollout(
            prompts=list(prompts), completions=list(texts), input_ids=torch.tensor(rows),
            attention_mask=torch.cat([torch.tensor(prompt_masks), response_mask], dim=1),
            response_mask=torch.cat([torch.zeros(len(prompts), P, dtype=torch.long), response_mask], dim=1),
            logprobs=torch.zeros(len(prompts), P + max_new_tokens), prompt_length=P,
            ended_with_eos=torch.ones(len(prompts), dtype=torch.bool))

    drawn = []

    def sample(model, tokenizer, prompts, max_new_tokens, generator):
        drawn.append(prompts)
        return forced(model, tokenizer, prompts, max_new_tokens, generator)

    monkeypatch.setattr(sampling, "sample", sample)
    task = {"mix": (0.5, 0.5, 0.0), "max_new_tokens": 6, "tolerance": 3}
    model.train()  # dropout: off while it reads, the model's mode kept
    figure = entropy_control.answer_entropy(model, tokenizer, task, len(texts), seed=3, kinds=["easy"])
    assert model.training
    model.eval()
    (prompts,) = drawn
    by_hand = []
    for prompt, text in zip(prompts, texts, strict=True):
        ids = tokenizer(prompt + text, add_special_tokens=False, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            logits, _ = forward_logits(model, ids, torch.ones_like(ids))
        P = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
        by_hand += [entropy_from_logits(logits[0, P - 1 + i]).item() for i, c in enumerate(text) if c.isdigit()]
    assert len(by_hand) == 10
    assert figure == pytest.approx(sum(by_hand) / len(by_hand), abs=1e-5)
    # no digit anywhere: NaN, which fails every comparison of the criterion, and the run's figures are kept
    texts[:] = ["", "....", "...", ".", "", "..", "....", "."]
    assert math.isnan(entropy_control.answer_entropy(model, tokenizer, task, len(texts), seed=3, kinds=["easy"]))
    assert not entropy_control.holds(_arms(plain=(0.30, math.nan, 0.80)))
    assert not entropy_control.holds(_arms(controls={CONTROLS[0]: (0.30, math.nan, 0.80)}))


def test_each_arms_answer_entropy_is_read_off_its_own_trained_model_against_the_untrained_start(monkeypatch):
    """run_seed's wiring: the start is the untrained model's figure, shared by every arm; each arm's figure is read
    off the model its own run returned, on the held-out problems of `answer_per_kind` and the seed."""
    from minirlhf import models

    class History:
        def column(self, key):
            return None, [0.5, 0.4]

    read = []

    def answer_entropy(model, tokenizer, task, per_kind, seed, kinds):
        read.append((model, per_kind, seed, kinds))
        return float(len(read))  # 1.0 for the first model read, 2.0 for the next...

    monkeypatch.setattr(models, "load_model", lambda name, device: (f"untrained {name}", "tokenizer"))
    monkeypatch.setattr(entropy_control, "grpo_run",
                        lambda settings, seed, **fields: (History(), None, f"trained {sorted(fields)}", "tokenizer"))
    monkeypatch.setattr(entropy_control, "held_out_accuracy", lambda *args: 0.8)
    monkeypatch.setattr(entropy_control, "answer_entropy", answer_entropy)
    settings = lab.settings_of("3", quick=True)
    arms = entropy_control.run_seed(4, settings)
    assert read[0] == (f"untrained {settings['model']}", settings["answer_per_kind"], 4, settings["eval_kinds"])
    for i, (arm, fields) in enumerate(settings["arms"].items(), start=1):
        assert read[i][0] == f"trained {sorted(fields)}", arm
        assert (arms[arm]["start_answer_entropy"], arms[arm]["final_answer_entropy"]) == (1.0, 1.0 + i), arm


@pytest.mark.parametrize("control", CONTROLS)
def test_the_accuracy_cost_is_the_mean_over_seeds_of_each_control_alone(control):
    def seeds(*losses: float) -> list[dict]:
        return [{"arms": _arms(controls={control: (0.30, 0.40, 0.80 - loss)})} for loss in losses]

    assert entropy_control.accuracy_kept(seeds(0.0, 0.0, 0.0))
    assert entropy_control.accuracy_kept(seeds(2 * SLACK, 0.0, -0.5 * SLACK))  # one bad seed, mean 0.5 slack
    assert entropy_control.accuracy_kept(seeds(*[0.99 * SLACK] * 3))  # just inside the slack
    assert not entropy_control.accuracy_kept(seeds(SLACK + 0.01, SLACK + 0.01, SLACK))  # the mean beyond it
    assert not entropy_control.accuracy_kept(seeds(3 * SLACK, 0.0, 0.0))
    assert not entropy_control.accuracy_kept(seeds(0.0, 0.0, 4 * SLACK))  # every seed counts, the last too
    # exactly SLACK below on average is "no more than" SLACK below (0.0 and SLACK: a difference without rounding)
    at_slack = [{"arms": _arms(plain=(0.30, 0.10, SLACK), controls={control: (0.30, 0.40, 0.0)})}] * 2
    assert entropy_control.accuracy_kept(at_slack)
    # a gain of one control never pays for another's loss
    other = next(c for c in CONTROLS if c != control)
    mixed = [{"arms": _arms(controls={control: (0.30, 0.40, 0.70), other: (0.30, 0.40, 0.95)})}] * 2
    assert not entropy_control.accuracy_kept(mixed)


def test_a_verdict_shows_only_when_every_seed_holds_and_the_seeds_together_do(monkeypatch):
    effect = lab.EFFECTS["3"]
    seeds = [{"seed": s, "holds": True, "arms": _arms()} for s in range(3)]
    assert lab.verdict("3", {}, seeds)["shows"] is True
    assert lab.verdict("3", {}, [dict(seeds[0], holds=False)] + seeds[1:])["shows"] is False
    monkeypatch.setitem(lab.EFFECTS, "3", dataclasses.replace(effect, holds_across=lambda seeds: False))
    report = lab.verdict("3", {}, seeds)
    assert report["shows"] is False and report["holds_across_seeds"] is False


@pytest.mark.parametrize("key", sorted(lab.EFFECTS))
def test_a_verdict_on_no_seeds_is_refused_by_name(key):
    with pytest.raises(ValueError, match="no seeds to judge"):
        lab.verdict(key, {}, [])


def test_clip_higher_needs_the_seeds_ranges_apart():
    def seed(symmetric: float, higher: float) -> dict:
        return {"arms": {entropy_clip.SYMMETRIC: {"final_entropy": symmetric},
                         entropy_clip.HIGHER: {"final_entropy": higher}}}

    assert entropy_clip.ranges_apart([seed(0.1, 0.3), seed(0.2, 0.4)])
    assert not entropy_clip.ranges_apart([seed(0.1, 0.3), seed(0.35, 0.4)])  # each seed in order, ranges overlap


@pytest.mark.parametrize("drop", [PLAIN, *CONTROLS])
def test_entropy_control_refuses_arms_its_criterion_cannot_compare_before_any_training(drop, monkeypatch):
    from minirlhf import models

    monkeypatch.setattr(models, "load_model", lambda *a, **k: pytest.fail("a model loaded before the check"))
    monkeypatch.setattr(entropy_control, "grpo_run", lambda *a, **k: pytest.fail("an arm trained first"))
    settings = lab.settings_of("3", quick=True)
    del settings["arms"][drop]
    with pytest.raises(ValueError, match=rf"arms=.*: no '{drop}' arm"):
        entropy_control.run_seed(0, settings)
