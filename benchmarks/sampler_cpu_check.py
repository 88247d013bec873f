"""The CPU sampler before/after a change: a digest of the tokens and log-probs it draws for fixed seeds (equal digests:
byte-identical rollouts) and the median wall time of one call (16 arithmetic prompts x 8 completions x 16 new tokens,
the shipped tiny-sft model, one thread). Run it from each tree to compare:

    PYTHONPATH=$PWD python benchmarks/sampler_cpu_check.py [calls]
"""

import hashlib
import statistics
import sys
import time

import torch

from minirlhf.models import load_model
from minirlhf.sampling import sample
from minirlhf.tasks import arithmetic

torch.set_num_threads(1)
model, tokenizer = load_model("tiny-sft", device="cpu")
prompts = [p.prompt for p in arithmetic.problems("test")[:16]]
digest = hashlib.sha256()
for seed in range(3):
    rollout = sample(model, tokenizer, prompts, group_size=8, max_new_tokens=16,
                     generator=torch.Generator().manual_seed(seed))
    digest.update(rollout.input_ids.numpy().tobytes())
    digest.update(rollout.logprobs.numpy().tobytes())
print("digest", digest.hexdigest()[:16])
times = []
for i in range(int(sys.argv[1]) if len(sys.argv) > 1 else 15):
    start = time.perf_counter()
    sample(model, tokenizer, prompts, group_size=8, max_new_tokens=16, generator=torch.Generator().manual_seed(i))
    times.append(time.perf_counter() - start)
print(f"median {1000 * statistics.median(times):.1f} ms, min {1000 * min(times):.1f} ms over {len(times)} calls")
