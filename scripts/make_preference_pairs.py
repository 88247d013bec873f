"""Build the shipped preference pairs of the sentiment task: data/sentiment_pairs/{train,test}.jsonl.

    python scripts/make_preference_pairs.py        # ~1 minute on 2 CPU cores

The recipe of the DPO paper's controlled-sentiment experiment at toy scale. There, GPT-2 fine-tuned on IMDb is
the SFT policy, it continues review prefixes, and a sentiment classifier labels pairs of its continuations.
Here the shipped base model "tiny" (pre-trained on the review grammar) is the SFT policy, and VADER (the ground
truth, `minirlhf.tasks.sentiment`) is the labeller:

1. walk through the split's openings in a shuffled order (train: `sentiment_prompts("train")`; test: the
   held-out `sentiment_prompts("test")`, so no test prompt is ever trained on), reshuffling after each pass;
2. sample a group of G = 4 continuations y_1..y_G ~ p_ref(·|x) (temperature 1, at most `--max-new-tokens`);
   continuations that do not end with EOS within the budget, or are empty, are dropped;
3. score each with VADER on prompt + continuation, exactly as `sentiment_reward` does;
4. form ALL pairs (y_i, y_j) of the group whose score gap is at least `--min-gap`, the higher-scored one as
   chosen (the DPO paper's IMDb recipe: 4 samples per prefix, up to 6 pairs). A near-tie is a coin flip for a
   human labeller too and would teach nothing, so it is left out; duplicate pairs are dropped;
until the split has its number of pairs. Every pair's texts are samples of p_ref, as DPO assumes.

Reproducible: fixed seeds for the opening draws and for sampling, and one CPU thread (for one torch version).
"""

from __future__ import annotations

import argparse
import itertools
import random
import time
from pathlib import Path

import torch

from minirlhf.data import PREFERENCE_DATASETS, PreferencePair, save_preference_pairs
from minirlhf.models import load_model
from minirlhf.sampling import sample
from minirlhf.tasks.reviews import sentiment_prompts
from minirlhf.tasks.sentiment import MAX_NEW_TOKENS, sentiment_reward


def make_pairs(model, tokenizer, split: str, n_pairs: int, args, seed: int) -> tuple[list[PreferencePair], dict]:
    rng = random.Random(seed)
    generator = torch.Generator().manual_seed(seed)
    queue: list[str] = []
    pairs, seen = [], set()
    stats = {"groups": 0, "samples": 0, "dropped_no_eos": 0, "small_gap": 0, "gaps": []}
    G = args.group_size
    while len(pairs) < n_pairs:
        prompts = []
        while len(prompts) < args.prompts_per_batch:
            queue = queue or rng.sample(sentiment_prompts(split), len(sentiment_prompts(split)))  # one pass
            prompts.append(queue.pop())
        rollout = sample(model, tokenizer, prompts, group_size=G, max_new_tokens=args.max_new_tokens,
                         temperature=1.0, generator=generator)
        scores = sentiment_reward(rollout.prompts, rollout.completions)
        ended = rollout.ended_with_eos.tolist()
        for g, prompt in enumerate(prompts):
            rows = [i for i in range(g * G, (g + 1) * G) if ended[i] and rollout.completions[i].strip()]
            stats["groups"] += 1
            stats["samples"] += G
            stats["dropped_no_eos"] += G - len(rows)
            for i, j in itertools.combinations(rows, 2):
                hi, lo = (i, j) if scores[i] >= scores[j] else (j, i)
                if scores[hi] - scores[lo] < args.min_gap:
                    stats["small_gap"] += 1
                    continue
                pair = PreferencePair(prompt, rollout.completions[hi], rollout.completions[lo])
                if pair in seen or pair.chosen == pair.rejected:
                    continue
                seen.add(pair)
                pairs.append(pair)
                stats["gaps"].append(scores[hi] - scores[lo])
            if len(pairs) >= n_pairs:
                break
    return pairs[:n_pairs], stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="tiny", help="the policy whose samples are compared (p_ref)")
    parser.add_argument("--out", type=Path, default=PREFERENCE_DATASETS["sentiment"])
    parser.add_argument("--train-pairs", type=int, default=2000)
    parser.add_argument("--test-pairs", type=int, default=300)
    parser.add_argument("--group-size", type=int, default=4, help="continuations sampled per opening (G)")
    parser.add_argument("--min-gap", type=float, default=0.5, help="smallest VADER score gap of a kept pair")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS)
    parser.add_argument("--prompts-per-batch", type=int, default=128, help="openings per sampling call")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    t0 = time.time()
    # One thread: the matrices of the tiny model are too small to gain from more, a fixed count keeps the samples
    # reproducible across machines, and on a shared machine extra threads only wait for each other.
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model, tokenizer = load_model(args.model, device="cpu")
    model.eval()
    for split, n, seed in (("train", args.train_pairs, args.seed), ("test", args.test_pairs, args.seed + 1)):
        pairs, stats = make_pairs(model, tokenizer, split, n, args, seed)
        path = save_preference_pairs(pairs, args.out / f"{split}.jsonl")
        gaps = stats["gaps"]
        print(
            f"{split}: {len(pairs)} pairs from {stats['groups']} groups of {args.group_size} "
            f"({stats['dropped_no_eos']} of {stats['samples']} samples without EOS, "
            f"{stats['small_gap']} candidate pairs with gap < {args.min_gap}); mean gap {sum(gaps) / len(gaps):.2f}; "
            f"{len({p.prompt for p in pairs})} distinct openings; {path} ({path.stat().st_size / 1e3:.0f} kB)"
        )
    print(f"done in {time.time() - t0:.0f}s")


if __name__ == "__main__":
    main()
