"""minirlhf vs TRL on a DPO training step: preference pairs per second, a correctness cross-check, and the FLOP rate.

Same model (the shipped tiny GPT-2, "tiny"), same pairs (shipped "sentiment" train split), same batch (32 pairs),
max length (64 = the context), β (0.5), loss ("sigmoid"), optimizer (AdamW, lr 5e-4, no weight decay, constant
lr, grad-norm clip 1.0), dropout off, float32, reference log-probs computed by a frozen copy in every step (no
precomputation). TRL settings that differ from its defaults: `bf16=False, use_cpu=True, report_to="none"`,
`gradient_checkpointing=False` (TRL turns it on by default; minirlhf never recomputes activations),
`lr_scheduler_type="constant"`, `optim="adamw_torch"`.

A step is timed from the end of the previous step to the end of this one (minirlhf: `train_dpo`'s per-step
callback; TRL: a TrainerCallback), so it includes batching and tokenisation for both. The two libraries run
interleaved in one process, round after round, and the medians over all rounds are compared.

Cross-check (also run by tests/test_benchmarks_trl.py): on fixed per-token log-prob tensors fed to TRL's own
`DPOTrainer._compute_loss` (through a stand-in model) and on the same model and batch (real forward passes), the
loss, implicit rewards, sequence log-probs and gradients of minirlhf equal TRL's within 1e-5. IPO is defined
differently (TRL divides the log-ratios by the completion length): reported, not hidden.

Efficiency: FLOPs of a step (6·N·tokens + attention for the policy, 2·N·tokens + attention for the reference
forward) per second, as a fraction of this machine's torch.mm rate measured in the same rounds.

    pip install trl==1.16.0          # only for this script; not a dependency of minirlhf
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/trl_dpo.py             # ~4 min on a busy 2-core machine
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/trl_dpo.py --quick     # smoke test
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/trl_dpo.py --check-only

Writes results/trl_dpo.json and prints the markdown tables.
"""

from __future__ import annotations

import argparse
import copy
import sys
import tempfile
from pathlib import Path

import torch
from _bench import fmt, markdown_table
from _trl_common import (
    FixedLogProbModel,
    ForwardLog,
    PhaseTimer,
    StepClock,
    add_run_arguments,
    check_row,
    grad_diff,
    interleaved_rounds,
    matmul_params,
    max_abs_diff,
    median,
    minirlhf_callback,
    parse_run_args,
    phase_table,
    report_checks,
    speed_line,
    speed_summary,
    step_flops,
    summarize_steps,
    trl_callback,
    write_results,
)

from minirlhf.data import PreferencePair, load_preference_pairs
from minirlhf.losses import dpo_loss
from minirlhf.models import disable_dropout, frozen_copy, load_model
from minirlhf.trainers.dpo import DPOConfig as MiniDPOConfig
from minirlhf.trainers.dpo import encode_pairs, pair_logps, train_dpo

MODEL = "tiny"
DATA = "sentiment"
RESULTS = Path(__file__).resolve().parent / "results" / "trl_dpo.json"


def trl_config(output_dir: str, steps: int, batch_size: int, beta: float, lr: float, max_length: int, seed: int,
               loss_type: str = "sigmoid", gradient_checkpointing: bool = False):
    """TRL's DPOConfig with the settings of the comparison (see the module docstring)."""
    from trl import DPOConfig

    return DPOConfig(
        output_dir=output_dir, max_steps=steps, per_device_train_batch_size=batch_size, learning_rate=lr,
        beta=beta, loss_type=[loss_type], max_length=max_length, truncation_mode="keep_start",
        precompute_ref_log_probs=False, disable_dropout=True,
        bf16=False, use_cpu=True, report_to="none", gradient_checkpointing=gradient_checkpointing,
        lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch", weight_decay=0.0, max_grad_norm=1.0,
        save_strategy="no", logging_steps=10**6, disable_tqdm=True, seed=seed, dataloader_num_workers=0,
    )


def pairs_dataset(pairs: list[PreferencePair]):
    from datasets import Dataset

    return Dataset.from_list([{"prompt": p.prompt, "chosen": p.chosen, "rejected": p.rejected} for p in pairs])


# ----------------------------------------------------------------------------------------------- cross-check


def _trl_trainer(model, ref_model, tokenizer, pairs, beta: float, max_length: int, tmp: str, loss_type="sigmoid"):
    from trl import DPOTrainer

    args = trl_config(tmp, steps=1, batch_size=len(pairs), beta=beta, lr=1e-4, max_length=max_length, seed=0,
                      loss_type=loss_type)
    return DPOTrainer(model=model, ref_model=ref_model, args=args, train_dataset=pairs_dataset(pairs),
                      processing_class=tokenizer)


def check_fixed_tensors(trainer, beta: float, n_pairs: int = 6, width: int = 9, seed: int = 0) -> list[dict]:
    """TRL's `_compute_loss` on fixed per-token log-probs (a stand-in model) against `losses.dpo_loss` on the
    same numbers: per-pair loss, mean loss, implicit rewards, gradient w.r.t. the per-token log-probs."""
    g = torch.Generator().manual_seed(seed)
    B, T = n_pairs, width
    prompt_len = torch.randint(1, 4, (2 * B,), generator=g)
    prompt_len[B:] = prompt_len[:B]  # chosen and rejected share their prompt
    completion_len = torch.randint(1, T - 3, (2 * B,), generator=g)
    cols = torch.arange(T)[None, :]
    completion_mask = ((cols >= prompt_len[:, None]) & (cols < (prompt_len + completion_len)[:, None])).long()
    attention_mask = (cols < (prompt_len + completion_len)[:, None]).long()
    input_ids = torch.randint(2, 50, (2 * B, T), generator=g)
    token_logps = -torch.rand(2 * B, T - 1, generator=g) * 3  # log p of the label at column t + 1
    ref_seq = -torch.rand(2 * B, generator=g) * 3 * completion_len
    shift_mask = completion_mask[:, 1:].bool()

    trainer.precompute_ref_logps = True  # TRL then reads the reference log-probs from the batch
    trainer.model.train()
    rows = []
    for loss_type in ("sigmoid", "hinge", "ipo"):
        trainer.loss_types, trainer.loss_weights = [loss_type], [1.0]

        def trl_loss(idx, logps):
            batch = {
                "input_ids": input_ids[idx], "attention_mask": attention_mask[idx],
                "completion_mask": completion_mask[idx],
                "ref_chosen_logps": ref_seq[idx[: len(idx) // 2]], "ref_rejected_logps": ref_seq[idx[len(idx) // 2:]],
            }
            return trainer._compute_loss(FixedLogProbModel(logps[idx]), batch, return_outputs=False)

        # TRL: the whole batch (loss and gradient), then pair by pair (per-pair loss and implicit rewards)
        logps_trl = token_logps.clone().requires_grad_(True)
        everything = torch.cat([torch.arange(B), torch.arange(B) + B])
        loss_trl = trl_loss(everything, logps_trl)
        loss_trl.backward()
        per_pair, chosen_r, rejected_r = [], [], []
        for i in range(B):
            per_pair.append(float(trl_loss(torch.tensor([i, B + i]), token_logps)))
            chosen_r.append(trainer._metrics["train"]["rewards/chosen"][-1])
            rejected_r.append(trainer._metrics["train"]["rewards/rejected"][-1])

        # minirlhf: sequence log-probs = masked sum of the same per-token numbers, then losses.dpo_loss
        logps_ours = token_logps.clone().requires_grad_(True)
        seq = (logps_ours * shift_mask).sum(-1)  # (2B,)
        ours_type = loss_type
        losses, r_c, r_r = dpo_loss(seq[:B], seq[B:], ref_seq[:B], ref_seq[B:], beta, ours_type)
        losses.mean().backward()
        setting = f"fixed log-prob tensors, loss_type={loss_type}, β={beta}, {B} pairs"
        same = loss_type != "ipo"
        note = "" if same else (
            "TRL divides each sequence log-ratio by its completion length before the IPO square; minirlhf uses "
            "the summed sequence log-ratio h in (h - 1/(2β))²"
        )
        rows.append(check_row("DPO loss (per pair)", setting, max_abs_diff(losses, per_pair), same, note))
        rows.append(check_row("DPO loss (batch mean)", setting, max_abs_diff(losses.mean(), loss_trl), same, note))
        rows.append(check_row("∂loss/∂ per-token log-probs", setting,
                              max_abs_diff(logps_ours.grad, logps_trl.grad), same, note))
        if loss_type == "sigmoid":
            rows.append(check_row("implicit reward β·log p_θ/p_ref (chosen)", setting, max_abs_diff(r_c, chosen_r)))
            rows.append(check_row("implicit reward β·log p_θ/p_ref (rejected)", setting,
                                  max_abs_diff(r_r, rejected_r)))
        if loss_type == "ipo":  # the only difference is the length normalisation: feed ours normalised log-probs
            length = completion_mask.sum(-1).clamp(min=1)
            normed, _, _ = dpo_loss((seq / length)[:B], (seq / length)[B:], (ref_seq / length)[:B],
                                    (ref_seq / length)[B:], beta, "ipo")
            rows.append(check_row(
                "IPO loss with length-normalised log-probs", setting, max_abs_diff(normed.detach(), per_pair),
                note="minirlhf's ipo fed log p / |y| equals TRL's ipo",
            ))
    trainer.precompute_ref_logps = False
    trainer.loss_types, trainer.loss_weights = ["sigmoid"], [1.0]
    return rows


def check_same_model_and_batch(beta: float, max_length: int, n_pairs: int = 8, seed: int = 0) -> list[dict]:
    """The same (perturbed) policy, reference and pairs through both libraries, real forward passes: sequence
    log-probs, loss, implicit rewards and the gradient of every parameter."""
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    torch.manual_seed(seed)
    ref, tokenizer = load_model(MODEL, device="cpu")
    ref.eval().requires_grad_(False)
    policy = disable_dropout(copy.deepcopy(ref).requires_grad_(True))  # as train_dpo does (TRL: disable_dropout=True)
    with torch.no_grad():  # move p_θ away from p_ref, so that log-ratios and rewards are not all zero
        for p in policy.parameters():
            p.add_(0.02 * torch.randn_like(p))
    pairs = load_preference_pairs(DATA)[:n_pairs]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        trl_policy = copy.deepcopy(policy)
        trainer = _trl_trainer(trl_policy, copy.deepcopy(ref), tokenizer, pairs, beta, max_length, tmp)
        rows += check_fixed_tensors(trainer, beta)

        # TRL's own tokenisation and collation of the same pairs
        collator = DataCollatorForPreference(pad_token_id=tokenizer.pad_token_id, max_length=max_length)
        batch = collator([trainer.train_dataset[i] for i in range(n_pairs)])
        captured = {}

        def capture(name):
            def hook(module, args, kwargs, output):
                captured[name] = output.log_probs.detach()
            return hook

        handles = [trainer.model.register_forward_hook(capture("policy"), with_kwargs=True),
                   trainer.ref_model.register_forward_hook(capture("ref"), with_kwargs=True)]
        trainer.model.train()
        loss_trl = trainer._compute_loss(trainer.model, batch, return_outputs=False)
        loss_trl.backward()
        for h in handles:
            h.remove()
        metrics = {k: v[-1] for k, v in trainer._metrics["train"].items()}
        trl_seq = captured["policy"].sum(-1)
        trl_ref_seq = captured["ref"].sum(-1)

        # minirlhf: its own tokenisation (encode_preference_pairs) and log-probs, losses.dpo_loss
        policy.train()
        encoded = encode_pairs(tokenizer, pairs, max_length, "cpu")
        chosen, rejected = pair_logps(policy, encoded)
        with torch.inference_mode():
            ref_chosen, ref_rejected = pair_logps(ref, encoded)
        losses, r_c, r_r = dpo_loss(chosen, rejected, ref_chosen.clone(), ref_rejected.clone(), beta)
        losses.mean().backward()

    same_tokens = int(batch["completion_mask"].sum()) == _our_completion_tokens(tokenizer, pairs, max_length)
    setting = f"same model and batch: tiny GPT-2 (perturbed) vs frozen copy, {n_pairs} sentiment pairs, β={beta}"
    B = n_pairs
    trl_r_c = beta * (trl_seq[:B] - trl_ref_seq[:B])
    trl_r_r = beta * (trl_seq[B:] - trl_ref_seq[B:])
    rows += [
        check_row("sequence log p_θ(y|x), chosen + rejected", setting,
                  max_abs_diff(torch.cat([chosen, rejected]).detach(), trl_seq),
                  note="completion tokens identical in both tokenisations: " + ("yes" if same_tokens else "NO")),
        check_row("sequence log p_ref(y|x)", setting, max_abs_diff(torch.cat([ref_chosen, ref_rejected]), trl_ref_seq)),
        check_row("DPO loss (batch mean)", setting, max_abs_diff(losses.mean().detach(), loss_trl.detach())),
        check_row("implicit rewards, per pair (chosen, rejected)", setting,
                  max(max_abs_diff(r_c, trl_r_c), max_abs_diff(r_r, trl_r_r))),
        check_row("logged means: rewards/chosen, rewards/rejected, rewards/margins", setting, max(
            max_abs_diff(r_c.mean(), metrics["rewards/chosen"]),
            max_abs_diff(r_r.mean(), metrics["rewards/rejected"]),
            max_abs_diff((r_c - r_r).mean(), metrics["rewards/margins"]),
        )),
        check_row("gradient of every parameter", setting, grad_diff(list(policy.parameters()),
                                                                    list(trl_policy.parameters()))),
    ]
    return rows


def _our_completion_tokens(tokenizer, pairs, max_length) -> int:
    from minirlhf.data import encode_preference_pairs

    return int(encode_preference_pairs(tokenizer, pairs, max_length)["response_mask"].sum())


def cross_check(beta: float = 0.5, max_length: int = 64, n_pairs: int = 8) -> list[dict]:
    return check_same_model_and_batch(beta, max_length, n_pairs)


# ----------------------------------------------------------------------------------------------- throughput


def run_minirlhf(pairs, steps: int, warmup: int, batch_size: int, beta: float, lr: float, max_length: int,
                 seed: int, timer: PhaseTimer | None = None) -> dict:
    """`train_dpo` itself, timed step by step through its callback."""
    import minirlhf.trainers.dpo as dpo_module

    model, tokenizer = load_model(MODEL, device="cpu")
    log = ForwardLog().attach(model)  # frozen_copy (p_ref) deep-copies the hook with the model
    clock, step_records = StepClock(), []

    def on_step() -> None:
        step_records.append(log.take())
        if timer is not None:
            timer.step_end()

    config = MiniDPOConfig(
        model=MODEL, steps=steps, batch_size=batch_size, lr=lr, beta=beta, loss_type="sigmoid", max_length=max_length,
        precompute_ref=False, eval_every=0, eval_prompts=0, progress=False, device="cpu", seed=seed,
    )

    def train() -> None:
        train_dpo(pairs, config, model=model, tokenizer=tokenizer, callbacks=[minirlhf_callback(clock, on_step)])

    if timer is None:
        train()
    else:
        timer.watch(model)
        timer.patch_common()
        timer.wrap(dpo_module, "encode_preference_pairs", "data (tokenise + pad)")
        timer.run(train)
    log.detach()
    return {"steps": clock.steps(warmup), "forwards": step_records[max(1, warmup):]}


def run_trl(pairs, steps: int, warmup: int, batch_size: int, beta: float, lr: float, max_length: int, seed: int,
            gradient_checkpointing: bool = False, timer: PhaseTimer | None = None) -> dict:
    """TRL's DPOTrainer.train on the same model, timed step by step through a TrainerCallback."""
    from trl import DPOTrainer

    model, tokenizer = load_model(MODEL, device="cpu")
    ref = frozen_copy(model)  # the same p_ref as minirlhf's (TRL would otherwise reload it from disk)
    clock, step_records = StepClock(), []
    log = ForwardLog()

    def on_step() -> None:
        step_records.append(log.take())
        if timer is not None:
            timer.step_end()

    threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        args = trl_config(tmp, steps, batch_size, beta, lr, max_length, seed,
                          gradient_checkpointing=gradient_checkpointing)
        trainer = DPOTrainer(model=model, ref_model=ref, args=args, train_dataset=pairs_dataset(pairs),
                             processing_class=tokenizer, callbacks=[trl_callback(clock, on_step)])
        log.attach(trainer.model, trainer.ref_model)
        assert torch.get_num_threads() == threads, "TRL changed the thread count"
        if timer is None:
            trainer.train()
        else:
            timer.watch(trainer.model, trainer.ref_model)
            timer.patch_common()
            timer.wrap(trainer, "get_batch_samples", "data (collate + pad)")
            timer.run(trainer.train)
    log.detach()
    return {"steps": clock.steps(warmup), "forwards": step_records[max(1, warmup):]}


def flops_summary(forwards: list[list[dict]], model) -> dict:
    """Median FLOPs per step (executed = padded width, useful = real tokens) and token counts."""
    n, layers, d = matmul_params(model), model.config.n_layer, model.config.n_embd
    per_step = [step_flops(records, n, layers, d) for records in forwards]
    tokens = [sum(r["shape"][0] * r["shape"][1] for r in records if r["grad"]) for records in forwards]
    real = [sum(sum(r["lengths"]) for r in records if r["grad"]) for records in forwards]
    return {
        "matmul_params": n,
        "flops_executed": median([f["executed"] for f in per_step]),
        "flops_useful": median([f["useful"] for f in per_step]),
        "policy_positions": median(tokens),
        "policy_real_tokens": median(real),
        "forwards_per_step": median([len(records) for records in forwards]),
    }


def benchmark(rounds: int, steps: int, warmup: int, batch_size: int, beta: float, lr: float, max_length: int,
              trl_checkpointing_row: bool) -> dict:
    pairs = load_preference_pairs(DATA)
    model, _ = load_model(MODEL, device="cpu")
    runs = {"minirlhf": (run_minirlhf, {}), "trl": (run_trl, {})}
    if trl_checkpointing_row:
        runs["trl (gradient_checkpointing=True, its default)"] = (run_trl, {"gradient_checkpointing": True})
    measured = interleaved_rounds(rounds, {
        name: lambda seed, run=run, extra=extra: run(pairs, steps, warmup, batch_size, beta, lr, max_length,
                                                      seed=seed, **extra)
        for name, (run, extra) in runs.items()
    }, timed_steps=steps - warmup)
    matmul_wall = median([m["wall"] for m in measured["matmul"]])
    matmul_cpu = median([m["cpu"] for m in measured["matmul"]])
    results = {}
    for name, data in measured["per_library"].items():
        summary = summarize_steps(data["steps"], batch_size) | flops_summary(data["forwards"], model)
        for clock, rate in (("wall", matmul_wall), ("cpu", matmul_cpu)):
            achieved = summary["flops_executed"] / summary[f"step_s_{clock}"]
            summary[f"gflops_{clock}"] = achieved / 1e9
            summary[f"fraction_of_matmul_{clock}"] = achieved / 1e9 / rate
            useful = summary["flops_useful"] / summary[f"step_s_{clock}"]
            summary[f"useful_fraction_of_matmul_{clock}"] = useful / 1e9 / rate
        summary["raw_steps"] = data["steps"]
        results[name] = summary
    return speed_summary(results, measured)


def throughput_table(bench: dict, threads: int) -> str:
    rows = []
    base = bench["libraries"]["trl"]
    for name, s in bench["libraries"].items():
        rows.append([
            name, threads, s["steps_timed"], fmt(s["per_s_wall"], 1), fmt(s["step_s_wall"] * 1000, 0),
            fmt(s["per_s_cpu"], 1), fmt(s["step_s_cpu"] * 1000, 0),
            fmt(base["step_s_wall"] / s["step_s_wall"], 2), fmt(base["step_s_cpu"] / s["step_s_cpu"], 2),
        ])
    return markdown_table(
        ["library", "threads", "steps timed", "pairs/s (wall)", "step ms (wall)", "pairs/s (CPU time)",
         "step ms (CPU time)", "speed vs TRL (wall)", "speed vs TRL (CPU time)"], rows)


def flops_table(bench: dict, threads: int) -> str:
    m = bench["matmul_gflops"]
    rows = []
    for name, s in bench["libraries"].items():
        rows.append([
            name, threads, fmt(s["flops_executed"] / 1e9, 2), fmt(s["flops_useful"] / 1e9, 2),
            f"{fmt(s['gflops_wall'], 1)} / {fmt(m['wall'], 1)} = {s['fraction_of_matmul_wall']:.0%}",
            f"{fmt(s['gflops_cpu'], 1)} / {fmt(m['cpu'], 1)} = {s['fraction_of_matmul_cpu']:.0%}",
            f"{s['useful_fraction_of_matmul_cpu']:.0%}",
        ])
    return markdown_table(
        ["library", "threads", "GFLOP/step (executed)", "GFLOP/step (real tokens)",
         "achieved / torch.mm GFLOP/s (wall)", "achieved / torch.mm GFLOP/s (CPU time)",
         "real-token FLOPs / torch.mm (CPU time)"], rows)


def profile(steps: int, warmup: int, batch_size: int, beta: float, lr: float, max_length: int) -> dict:
    """One run of each library with the CPU time of a step split by phase (see `PhaseTimer`), and the top operators
    of torch.profiler over the same kind of run."""
    pairs = load_preference_pairs(DATA)
    timers = {"minirlhf": PhaseTimer(warmup, steps), "trl": PhaseTimer(warmup, steps)}
    run_minirlhf(pairs, steps, warmup, batch_size, beta, lr, max_length, seed=0, timer=timers["minirlhf"])
    run_trl(pairs, steps, warmup, batch_size, beta, lr, max_length, seed=0, timer=timers["trl"])
    ops = {}
    for name, run in (("minirlhf", run_minirlhf), ("trl", run_trl)):
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
            run(pairs, steps, warmup, batch_size, beta, lr, max_length, seed=0)
        ops[name] = top_ops(prof)
    return {"phases": {k: t.result for k, t in timers.items()}, "phase_table": phase_table(timers), "ops": ops}


def top_ops(prof, n: int = 12) -> list[tuple[str, float]]:
    """(operator, share of the run's self CPU time) of the n most expensive operators."""
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    events.sort(key=lambda e: -e.self_cpu_time_total)
    return [(e.key, e.self_cpu_time_total / total) for e in events[:n]]


def ops_table(ops: dict[str, list[tuple[str, float]]]) -> str:
    rows = []
    names = list(ops)
    for i in range(max(len(v) for v in ops.values())):
        row = []
        for name in names:
            op, share = ops[name][i] if i < len(ops[name]) else ("", 0.0)
            row += [op, f"{share:.0%}"]
        rows.append(row)
    return markdown_table([h for name in names for h in (f"{name}: operator", "share")], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_run_arguments(parser, RESULTS, "instead of the throughput rounds: where a step's CPU time goes "
                      "(phases, operators)")
    parser.add_argument("--batch-size", type=int, default=32, help="preference pairs per step")
    parser.add_argument("--beta", type=float, default=0.5)
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--max-length", type=int, default=64)
    parser.add_argument("--trl-default-checkpointing", action="store_true",
                        help="also time TRL with gradient_checkpointing=True (its default)")
    args, threads = parse_run_args(parser, argv)

    checks = cross_check(args.beta, args.max_length)
    bad = report_checks("DPO", checks, args)
    if args.check_only:
        return 1 if bad else 0

    if args.profile:
        prof = profile(args.steps, args.warmup, args.batch_size, args.beta, args.lr, args.max_length)
        print(f"\n### DPO step: CPU time by phase ({threads} thread(s), steps {args.warmup + 1}-{args.steps})\n")
        print(prof["phase_table"])
        print("\n### DPO run: top operators (torch.profiler, self CPU time)\n")
        print(ops_table(prof["ops"]))
        return 1 if bad else 0

    bench = benchmark(args.rounds, args.steps, args.warmup, args.batch_size, args.beta, args.lr, args.max_length,
                      args.trl_default_checkpointing)
    print(f"\n### DPO step throughput ({args.batch_size} pairs/step, {args.rounds} interleaved rounds x "
          f"{args.steps - args.warmup} timed steps, medians)\n")
    print(throughput_table(bench, threads))
    print(speed_line(bench))
    print("\n### DPO step FLOP rate vs this machine's torch.mm rate\n")
    print(flops_table(bench, threads))
    settings = {k: v for k, v in vars(args).items() if k != "out"} | {"model": MODEL, "data": DATA}
    write_results(args.out or RESULTS, threads, settings, checks, bench)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
