"""minirlhf: a tiny, readable post-training library (SFT, reward model, REINFORCE/RLOO, PPO, GRPO, DPO/IPO).

Layout: `losses` (pure objectives) <- `logprobs`/`sampling` (the shared core) <- `trainers` (one loop per
method). The notebooks' package, `minirlhf.course` (toy maths, figures, widgets, quizzes), reads the core; the
core never imports it. Start with `load_model("tiny")`.
"""

from minirlhf.logprobs import response_logprobs, sequence_logprobs
from minirlhf.models import load_model, load_tokenizer, resolve_device
from minirlhf.sampling import Rollout, sample

__all__ = ["Rollout", "load_model", "load_tokenizer", "resolve_device", "response_logprobs", "sample",
           "sequence_logprobs"]
__version__ = "0.1.0"
