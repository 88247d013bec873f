"""Plumbing shared by the side-by-side benchmarks against TRL (`trl_dpo.py`, `trl_grpo.py`).

Not part of the library, and TRL is not a dependency of minirlhf: install it only to run these scripts
(`pip install trl==1.16.0`, the version the recorded numbers come from; see benchmarks/README.md).

- Per-step timing. minirlhf: a `History` callback fires once per logged training step; TRL: a `TrainerCallback`
  (on_step_begin / on_step_end). For both, one step = the interval between two consecutive step ends, so it holds
  everything the loop does for a step (batching, tokenisation, forward, backward, optimizer, logging). Each interval
  is measured twice: wall clock (`perf_counter`) and this process's CPU time (`process_time`). The machine these
  numbers come from is shared: other processes take cores away, which stretches wall time but hardly CPU time.
- Contention hits both libraries alike because the two run interleaved in one process (round 1: minirlhf, TRL;
  round 2: minirlhf, TRL; ...) and the medians over all rounds are compared.
- The machine's dense matmul rate (torch.mm, float32, same thread count), measured in every round of the same run.
- FLOP counting of a training step from what the model actually saw (forward pre-hooks on the models).
- A stand-in model for TRL's trainers: it returns fixed per-token log-probs in the shape of TRL's fused LM head, so
  TRL's own loss code runs on tensors we choose (the cross-checks).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import torch
from _bench import machine_info

TOLERANCE = 1e-5  # cross-checks: |minirlhf - TRL| must stay below this where the two define the same quantity


def quiet() -> None:
    """Silence progress bars, deprecation chatter and info logs of transformers / datasets / TRL."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    import datasets
    import transformers

    datasets.disable_progress_bars()
    transformers.logging.set_verbosity_error()
    transformers.logging.disable_progress_bar()
    for name in ("trl", "accelerate", "datasets"):
        logging.getLogger(name).setLevel(logging.ERROR)


def versions() -> dict[str, str | None]:
    out = {}
    for package in ("trl", "accelerate", "torch", "transformers", "datasets"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = None
    return out


def set_threads(threads: int | None) -> int:
    """Use `threads` intra-op threads (None: keep torch's choice, e.g. from OMP_NUM_THREADS); return the count."""
    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


# ----------------------------------------------------------------------------------------------- timing


class StepClock:
    """(wall, cpu) timestamps, one per finished training step."""

    def __init__(self) -> None:
        self.ends: list[tuple[float, float]] = []
        self.begins: list[tuple[float, float]] = []

    def begin(self) -> None:
        self.begins.append((time.perf_counter(), time.process_time()))

    def end(self) -> None:
        self.ends.append((time.perf_counter(), time.process_time()))

    def steps(self, warmup: int) -> list[dict[str, float]]:
        """Per-step seconds between consecutive step ends, for steps `warmup`, `warmup + 1`, ... (step 0 has no
        start mark, so `warmup` is at least 1)."""
        out = []
        for i in range(max(1, warmup), len(self.ends)):
            row = {"wall": self.ends[i][0] - self.ends[i - 1][0], "cpu": self.ends[i][1] - self.ends[i - 1][1]}
            if len(self.begins) == len(self.ends):  # TRL: also the on_step_begin -> on_step_end part
                row["wall_in_step"] = self.ends[i][0] - self.begins[i][0]
                row["cpu_in_step"] = self.ends[i][1] - self.begins[i][1]
            out.append(row)
        return out


def minirlhf_callback(clock: StepClock, on_step: Callable[[], None] | None = None):
    """A minirlhf `History` callback: marks the end of every training step (rows with a "loss"), ignoring the rows
    that only hold the final evaluation."""

    def callback(history) -> None:
        if history and "loss" in history[-1]:
            clock.end()
            if on_step is not None:
                on_step()

    return callback


def trl_callback(clock: StepClock, on_step: Callable[[], None] | None = None):
    """A `transformers.TrainerCallback` marking the beginning and end of every optimizer step."""
    from transformers import TrainerCallback

    class _Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            clock.begin()

        def on_step_end(self, args, state, control, **kwargs):
            clock.end()
            if on_step is not None:
                on_step()

    return _Clock()


def median(values: Sequence[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize_steps(rows: Sequence[dict[str, float]], items_per_step: int) -> dict[str, float | None]:
    """Medians of the per-step seconds and the matching throughput (items per second)."""
    out: dict[str, float | None] = {"steps_timed": len(rows)}
    for key in ("wall", "cpu", "wall_in_step", "cpu_in_step"):
        values = [r[key] for r in rows if key in r]
        out[f"step_s_{key}"] = median(values)
        out[f"per_s_{key}"] = items_per_step / median(values) if values else None
    return out


# ----------------------------------------------------------------------------------------------- matmul rate


def matmul_rate(sizes: Sequence[int] = (1024, 2048), seconds: float = 0.6) -> dict[str, float]:
    """Dense float32 torch.mm rate of this machine at the current thread count, in GFLOP/s.

    For each size n (n x n times n x n, 2n^3 FLOPs), a few repeats of a timed batch of products; the median repeat
    per size, then the best size (the one that saturates). Reported for wall clock and for process CPU time.
    """
    best = {"wall": 0.0, "cpu": 0.0, "n_wall": 0, "n_cpu": 0}
    for n in sizes:
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)  # warm-up (allocation, MKL dispatch)
        flops = 2.0 * n**3
        start = time.perf_counter()
        torch.mm(a, b)
        per_call = max(time.perf_counter() - start, 1e-4)
        calls = max(1, int(seconds / 5 / per_call))
        walls, cpus = [], []
        for _ in range(5):
            w, c = time.perf_counter(), time.process_time()
            for _ in range(calls):
                torch.mm(a, b)
            walls.append(flops * calls / (time.perf_counter() - w) / 1e9)
            cpus.append(flops * calls / max(time.process_time() - c, 1e-6) / 1e9)
        for key, values in (("wall", walls), ("cpu", cpus)):
            if statistics.median(values) > best[key]:
                best[key], best[f"n_{key}"] = statistics.median(values), n
    return best


# ----------------------------------------------------------------------------------------------- FLOPs


def matmul_params(model: torch.nn.Module) -> int:
    """N of the 6·N·tokens rule: the weights that take part in a matrix product per token. For GPT-2 that is every
    weight matrix of the blocks (12·d² per layer) plus the LM head (vocab x d, tied to the input embedding); the
    embedding lookups, biases and layer norms are not matmuls."""
    config = model.config
    d, layers = config.n_embd, config.n_layer
    inner = config.n_inner or 4 * d
    per_layer = d * 3 * d + d * d + d * inner + inner * d
    return layers * per_layer + config.vocab_size * d


class ForwardLog:
    """Forward pre-hooks that record what each forward pass saw: (rows, padded width, real length of every row,
    whether autograd was recording). `take()` returns and clears the records of the current step. A packed forward
    (no attention mask, position ids restarting at 0 for each sequence) counts each segment as a sequence; the tail
    padding of a packed row (`minirlhf.logprobs.packed_response_logprobs` gives every padding token position 0)
    makes 1-token segments, which are not counted (a scored sequence has a prompt and a response: >= 2 tokens)."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.handles = []

    def attach(self, *models: torch.nn.Module) -> ForwardLog:
        records = self.records

        # A plain function, not a bound method: `copy.deepcopy(model)` (how p_ref is made) copies the hook with the
        # model, and a copied bound method would write into a copy of this log.
        def hook(module, args, kwargs) -> None:
            input_ids = kwargs.get("input_ids", args[0] if args else None)
            mask, positions = kwargs.get("attention_mask"), kwargs.get("position_ids")
            if input_ids is None or kwargs.get("use_cache"):  # KV-cache decoding steps are not training forwards
                return
            if mask is not None:
                lengths = mask.sum(-1).tolist()
            elif positions is not None and positions.shape == input_ids.shape:  # packed rows: positions restart
                starts = (positions == 0).nonzero().tolist()
                ends = starts[1:] + [[None, None]]
                lengths = [(e[1] if e[0] == s[0] else input_ids.shape[1]) - s[1] for s, e in zip(starts, ends)]
                lengths = [n for n in lengths if n > 1]  # 1-token segments: padding
            else:
                lengths = [input_ids.shape[1]] * input_ids.shape[0]
            records.append({"shape": tuple(input_ids.shape), "lengths": lengths, "grad": torch.is_grad_enabled()})

        # The backbone (GPT-2's `transformer`): every forward goes through it, also those that call it directly and
        # apply the LM head themselves (TRL's fused head, a packed forward).
        for model in models:
            target = getattr(model, "base_model", model)
            self.handles.append(target.register_forward_pre_hook(hook, with_kwargs=True))
        return self

    def take(self) -> list[dict[str, Any]]:
        records = list(self.records)
        self.records.clear()
        return records

    def detach(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []


def step_flops(records: Sequence[dict[str, Any]], n_params: int, layers: int, d_model: int) -> dict[str, float]:
    """FLOPs of one training step from its forward records: per sequence of length T, a forward costs
    2·N·T + 4·layers·d·T² (QKᵀ and attention-times-V over all T² pairs, as in the PaLM appendix); a forward with
    autograd is trained, so it costs 3x (forward + backward). "executed" counts the padded width the model ran on,
    "useful" only the real tokens of each row."""
    executed = useful = 0.0
    for r in records:
        rows, width = r["shape"]
        mult = 3.0 if r["grad"] else 1.0
        executed += mult * rows * (2 * n_params * width + 4 * layers * d_model * width**2)
        useful += mult * sum(2 * n_params * t + 4 * layers * d_model * t**2 for t in r["lengths"])
    return {"executed": executed, "useful": useful}


# ----------------------------------------------------------------------------------------------- TRL stand-in


class FixedLogProbModel(torch.nn.Module):
    """Stands in for a model patched with TRL's fused LM head (`add_fused_lm_head`): called with
    `fused_lm_head=True`, it returns `log_probs` (B, L-1) = the per-token log-probs we give it for the label at
    column t+1, zero where the label is -100, the entropies we give it the same way (zero when none are given),
    plus zero mean logits / top-1 flags. So TRL's own loss code (`DPOTrainer._compute_loss`,
    `GRPOTrainer._compute_loss`) runs on fixed tensors of our choosing."""

    def __init__(self, per_token_logps: torch.Tensor, entropy: torch.Tensor | None = None):
        super().__init__()
        self.per_token_logps = per_token_logps  # (B, L-1), may require grad
        self.entropy = entropy  # (B, L-1) or None, may require grad

    def forward(self, input_ids=None, attention_mask=None, labels=None, fused_lm_head=False, **kwargs):
        from trl.trainer.utils import FusedCausalLMOutput

        assert fused_lm_head, "TRL's trainers call the model with fused_lm_head=True"
        valid = labels[:, 1:] != -100
        log_probs = torch.where(valid, self.per_token_logps, torch.zeros_like(self.per_token_logps))
        zeros = torch.zeros_like(log_probs).detach()
        entropy = zeros if self.entropy is None else torch.where(valid, self.entropy, zeros)
        return FusedCausalLMOutput(
            loss=-log_probs.sum(), log_probs=log_probs, entropy=entropy, mean_logits=zeros,
            is_top1=torch.zeros_like(valid), label_mask=valid,
        )


def max_abs_diff(a: torch.Tensor | float, b: torch.Tensor | float) -> float:
    a = torch.as_tensor(a, dtype=torch.float64)
    b = torch.as_tensor(b, dtype=torch.float64)
    return float((a - b).abs().max()) if a.numel() else 0.0


def grad_diff(params_a: Sequence[torch.Tensor], params_b: Sequence[torch.Tensor]) -> float:
    """max |grad_a - grad_b| over matching parameters (a missing grad counts as 0)."""
    worst = 0.0
    for a, b in zip(params_a, params_b, strict=True):
        ga = a.grad if a.grad is not None else torch.zeros_like(a)
        gb = b.grad if b.grad is not None else torch.zeros_like(b)
        worst = max(worst, max_abs_diff(ga, gb))
    return worst


def check_row(quantity: str, setting: str, diff: float, same_definition: bool = True, note: str = "") -> dict:
    """One line of a cross-check table. `same_definition=False` marks a quantity that minirlhf and TRL define
    differently on purpose: its difference is reported, not checked."""
    if same_definition:
        status = "match" if diff <= TOLERANCE else "MISMATCH"
    else:
        status = "differs by definition"
    return {"quantity": quantity, "setting": setting, "max_abs_diff": diff, "status": status, "note": note}


def check_table(rows: Sequence[dict]) -> str:
    from _bench import markdown_table

    return markdown_table(
        ["quantity", "setting", "max abs diff", "result", "note"],
        [[r["quantity"], r["setting"], f"{r['max_abs_diff']:.2e}", r["status"], r["note"]] for r in rows],
    )


def failed_checks(rows: Sequence[dict]) -> list[dict]:
    return [r for r in rows if r["status"] == "MISMATCH"]


# ----------------------------------------------------------------------------------------------- profile


class PhaseTimer:
    """Where a training step's CPU time goes, by phase, without touching either library's code.

    Phases nest; time is charged to the innermost open phase only (exclusive), so the phases add up to the total.
    Model forwards are classified by forward hooks on the model and on its base model (minirlhf's shared-prompt
    pass calls the base model directly): "forward with autograd" (the policy pass that is trained) and "forward
    without autograd" (reference / old log-probs). Generation wrappers, `Tensor.backward` and
    `torch.optim.AdamW.step` are wrapped for the run (`patch`) and restored after. A generation phase keeps the
    forwards it makes.
    """

    def __init__(self, warmup: int, steps: int) -> None:
        self.totals: dict[str, float] = {}
        self.stack: list[tuple[str, float]] = []
        self._undo: list[Callable[[], None]] = []
        self.warmup, self.steps, self.seen = warmup, steps, 0
        self.result: dict[str, float] = {}  # per-step ms by phase, over steps warmup+1 .. steps

    def step_end(self) -> None:
        """Call at the end of every training step: the totals count from the end of step `warmup` to the end of
        step `steps` (setup, warm-up and what follows the last step are left out)."""
        self.seen += 1
        now = time.process_time()
        self._charge(now)
        if self.stack:
            self.stack[-1] = (self.stack[-1][0], now)
        if self.seen == self.warmup:
            self.totals = {}
        if self.seen == self.steps:
            n = self.steps - self.warmup
            self.result = {phase: 1000 * t / n for phase, t in self.totals.items()}

    def _charge(self, now: float) -> None:
        if self.stack:
            name, since = self.stack[-1]
            self.totals[name] = self.totals.get(name, 0.0) + now - since

    def enter(self, name: str) -> None:
        now = time.process_time()
        self._charge(now)
        self.stack.append((name, now))

    def exit(self) -> None:
        now = time.process_time()
        self._charge(now)
        self.stack.pop()
        if self.stack:
            self.stack[-1] = (self.stack[-1][0], now)

    def wrap(self, owner: Any, attribute: str, phase: str) -> None:
        """Charge calls of owner.attribute (a function or method) to `phase` until `restore()`."""
        original = getattr(owner, attribute)
        timer = self

        def wrapper(*args, **kwargs):
            timer.enter(phase)
            try:
                return original(*args, **kwargs)
            finally:
                timer.exit()

        setattr(owner, attribute, wrapper)
        self._undo.append(lambda: setattr(owner, attribute, original))

    def watch(self, *models: torch.nn.Module) -> None:
        timer = self

        def pre(module, args, kwargs):
            if timer.stack and timer.stack[-1][0] == "generation":
                timer.enter("generation")
            else:
                timer.enter("forward with autograd" if torch.is_grad_enabled() else "forward without autograd")

        def post(module, args, kwargs, output):
            timer.exit()

        # a nested call (the base model inside the model) charges the same phase as its caller
        for module in {m for model in models for m in (model, model.base_model)}:
            handles = [module.register_forward_pre_hook(pre, with_kwargs=True),
                       module.register_forward_hook(post, with_kwargs=True)]
            self._undo += [h.remove for h in handles]

    def patch_common(self) -> None:
        self.wrap(torch.Tensor, "backward", "backward")
        self.wrap(torch.optim.AdamW, "step", "optimizer step")

    def restore(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo = []

    def run(self, fn: Callable[[], Any]) -> Any:
        """Run fn with all its time charged to "other (loop, loss, metrics)" unless a phase claims it."""
        self.enter("other (loop, loss, metrics)")
        try:
            return fn()
        finally:
            self.exit()
            self.restore()


def phase_table(timers: dict[str, PhaseTimer]) -> str:
    """CPU ms per training step, by phase, one column per library."""
    from _bench import markdown_table

    phases: list[str] = []
    for timer in timers.values():
        phases += [p for p in timer.result if p not in phases]
    rows = [[phase] + [f"{t.result.get(phase, 0.0):.0f}" for t in timers.values()] for phase in phases]
    rows.append(["total"] + [f"{sum(t.result.values()):.0f}" for t in timers.values()])
    return markdown_table(["phase (CPU ms per step)"] + list(timers), rows)


# --------------------------------------------------------------------------------------------- the scripts' frame


def add_run_arguments(parser: argparse.ArgumentParser, results: Path, profile_help: str) -> None:
    """The flags both scripts share: rounds and steps, threads, --quick, --check-only, --profile, --out."""
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (minirlhf, TRL) in this process")
    parser.add_argument("--steps", type=int, default=10, help="training steps per run (round)")
    parser.add_argument("--warmup", type=int, default=3, help="steps of each run left out of the timing")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: OMP_NUM_THREADS / torch)")
    parser.add_argument("--quick", action="store_true", help="1 round of 4 steps: checks the plumbing only")
    parser.add_argument("--check-only", action="store_true", help="only the cross-check")
    parser.add_argument("--profile", action="store_true", help=profile_help)
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results JSON (default results/{results.name}; with --check-only: none unless given)")


def parse_run_args(parser: argparse.ArgumentParser, argv: list[str] | None) -> tuple[argparse.Namespace, int]:
    """Parse the flags, shrink a --quick run to 1 round of 4 steps, silence the libraries' logs and set the thread
    count: (args, threads)."""
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.warmup = 1, 4, 1
    quiet()
    return args, set_threads(args.threads)


def report_checks(method: str, checks: list[dict], args: argparse.Namespace) -> bool:
    """Print the cross-check table (with --check-only also write it to --out, when given); True if a check failed."""
    print(f"\n### {method} cross-check: minirlhf vs TRL\n")
    print(check_table(checks))
    if args.check_only and args.out is not None:
        write_json(args.out, {"versions": versions(), "cross_check": checks})
    return bool(failed_checks(checks))


def interleaved_rounds(rounds: int, runs: dict[str, Callable[[int], dict[str, list]]], timed_steps: int,
                       describe: Callable[[dict], str] = lambda out: "") -> dict[str, Any]:
    """Run every library once per round, in turn, on a machine shared with other jobs: the rounds spread any
    disturbance over all libraries alike. `runs[name](seed)` returns lists (its steps' timings, ...), which are
    concatenated over the rounds. The machine's torch.mm rate is measured at the start of each round.

    Returns {"per_library": {name: {key: list}}, "matmul": [rate per round], "ratios": [TRL/minirlhf wall per round]}.
    """
    per_library: dict[str, dict[str, list]] = {name: {} for name in runs}
    matmul, ratios = [], []
    for r in range(rounds):
        matmul.append(matmul_rate())
        print(f"round {r + 1}/{rounds}: matmul {matmul[-1]['wall']:.1f} GFLOP/s wall, "
              f"{matmul[-1]['cpu']:.1f} GFLOP/s CPU", flush=True)
        for name, run in runs.items():
            out = run(r)
            for key, values in out.items():
                per_library[name].setdefault(key, []).extend(values)
            print(f"  {name}: median step {median([x['wall'] for x in out['steps']]):.3f} s wall, "
                  f"{median([x['cpu'] for x in out['steps']]):.3f} s CPU{describe(out)}", flush=True)
        ratios.append(median([x["wall"] for x in per_library["trl"]["steps"][-timed_steps:]])
                      / median([x["wall"] for x in per_library["minirlhf"]["steps"][-timed_steps:]]))
    return {"per_library": per_library, "matmul": matmul, "ratios": ratios}


def speed_summary(results: dict[str, dict], rounds: dict[str, Any]) -> dict[str, Any]:
    """The benchmark's result: per-library summaries, the matmul rate and minirlhf's speed relative to TRL."""
    matmul = rounds["matmul"]
    return {
        "libraries": results,
        "matmul_gflops": {"wall": median([m["wall"] for m in matmul]), "cpu": median([m["cpu"] for m in matmul]),
                          "per_round": matmul},
        "ratio_wall": results["trl"]["step_s_wall"] / results["minirlhf"]["step_s_wall"],
        "ratio_cpu": results["trl"]["step_s_cpu"] / results["minirlhf"]["step_s_cpu"],
        "ratio_wall_per_round": rounds["ratios"],
    }


def speed_line(bench: dict[str, Any]) -> str:
    """The headline: minirlhf's speed relative to TRL, overall and per round."""
    per_round = ", ".join(f"{r:.2f}" for r in bench["ratio_wall_per_round"])
    return (f"\nminirlhf / TRL speed: {bench['ratio_wall']:.2f}x (wall), {bench['ratio_cpu']:.2f}x (CPU time); "
            f"per round (wall): {per_round}")


def write_results(path: Path, threads: int, settings: dict, checks: list[dict], bench: dict[str, Any]) -> None:
    """Everything a run measured, with the machine and versions, as JSON."""
    write_json(path, {
        "machine": machine_info() | {"torch_threads": threads},
        "versions": versions(),
        "settings": settings,
        "cross_check": checks,
        "benchmark": bench,
    })


def write_json(path: Path, payload: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=1, default=str))
    print(f"\nwrote {path}")

