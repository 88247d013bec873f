"""Build the shipped tiny GPT-2: corpus -> byte-level BPE tokenizer -> pre-trained model, written to data/.

    python scripts/build_tiny_model.py            # ~4 minutes on 2 CPU cores, writes data/tiny-gpt2/

Reproducible: every random choice comes from a fixed seed (results are identical for the same torch version
and thread count). The corpus mixes the two canonical tasks:
- arithmetic: "17+25=42" for a sample of *train*-split problems (held-out problems are never in the corpus);
- reviews: short movie reviews of both sentiments from the grammar in `minirlhf.tasks.reviews`.
Each document ends with the EOS token; EOS is a real, learned token (the pad token is a different id).
"""

from __future__ import annotations

import argparse
import math
import random
import time
from pathlib import Path

import torch
from _shipped import write_model
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

from minirlhf.models import SHIPPED, count_parameters
from minirlhf.tasks.arithmetic import problems
from minirlhf.tasks.reviews import generate_reviews

EOS, PAD = "<|endoftext|>", "<|pad|>"


def build_corpus(n_reviews: int, n_sums: int, seed: int) -> list[str]:
    """Grammar reviews and a *sample* of train-split sums, shuffled. Few sums on purpose: the base model learns
    the format and some addition, and leaves room for SFT and then RL to make it good."""
    rng = random.Random(seed)
    sums = rng.sample(problems("train"), n_sums)
    docs = [p.text for p in sums] + [r.text for r in generate_reviews(n_reviews, seed=seed)]
    rng.shuffle(docs)
    return docs


def train_tokenizer(docs: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    """Byte-level BPE (GPT-2 style) that keeps every digit a token of its own, so sums are written digit by
    digit and the model never has to memorise a token per number."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False)]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=[EOS, PAD], initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    tok.train_from_iterator(docs, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=EOS, eos_token=EOS, pad_token=PAD)


def batches(ids: list[list[int]], batch_size: int, pad_id: int, rng: torch.Generator):
    """Endless random batches of whole documents, right-padded: (input_ids, attention_mask), each (B, T)."""
    while True:
        order = torch.randperm(len(ids), generator=rng).tolist()  # a new shuffle every epoch
        for start in range(0, len(order) - batch_size + 1, batch_size):
            docs = [ids[i] for i in order[start : start + batch_size]]
            T = max(len(d) for d in docs)
            input_ids = torch.tensor([d + [pad_id] * (T - len(d)) for d in docs])
            mask = torch.tensor([[1] * len(d) + [0] * (T - len(d)) for d in docs])
            yield input_ids, mask


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line, with `init_seed` resolved (--seed when not given); another pre-training (an --init-seed
    other than --seed) must name its own --out, never the shipped tiny model every other model starts from."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=SHIPPED["tiny"])
    parser.add_argument("--seed", type=int, default=0, help="the corpus and its tokenizer")
    parser.add_argument("--init-seed", type=int, default=None,
                        help="the weights' initialisation and batch order (default: --seed). Another value gives a "
                             "second pre-training of the same corpus with the same tokenizer: a backbone whose "
                             "blind spots are its own (reward-model ensembles, minirlhf.lab.ensembles)")
    parser.add_argument("--reviews", type=int, default=40_000)
    parser.add_argument("--sums", type=int, default=2500, help="arithmetic documents in the corpus")
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--steps", type=int, default=1200)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    args = parser.parse_args(argv)
    args.init_seed = args.seed if args.init_seed is None else args.init_seed
    if args.init_seed != args.seed and args.out.resolve() == SHIPPED["tiny"].resolve():
        parser.error(f"--init-seed {args.init_seed} builds another pre-training: give it an --out FOLDER of its own "
                     f"(the default, {SHIPPED['tiny']}, is the shipped tiny model every other model starts from)")
    return args


def main() -> None:
    args = parse_args()
    torch.manual_seed(args.init_seed)
    t0 = time.time()
    docs = build_corpus(args.reviews, args.sums, args.seed)
    tokenizer = train_tokenizer(docs, args.vocab_size)
    ids = [tokenizer(d, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id] for d in docs]
    print(f"corpus: {len(docs)} documents, {sum(map(len, ids))} tokens, vocab {len(tokenizer)}, "
          f"longest {max(map(len, ids))} tokens ({time.time() - t0:.1f}s)")

    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=64, n_embd=128, n_layer=4, n_head=4,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    model = GPT2LMHeadModel(config)
    print(f"model: {count_parameters(model):,} parameters")
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.1, betas=(0.9, 0.95))
    warmup = 100
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer,
        lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))),
    )
    stream = batches(ids, args.batch_size, tokenizer.pad_token_id, torch.Generator().manual_seed(args.init_seed))
    model.train()
    for step in range(args.steps):
        input_ids, mask = next(stream)
        labels = input_ids.masked_fill(mask == 0, -100)  # the loss counts real tokens, EOS included
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
        if step % 100 == 0 or step == args.steps - 1:
            print(f"step {step:5d}  loss {loss.item():.3f}  ({time.time() - t0:.0f}s)", flush=True)

    write_model(model, tokenizer, args.out, t0)


if __name__ == "__main__":
    main()
