"""Reward-vs-KL frontier on the sentiment task: DPO at several beta, PPO and GRPO at several KL coefficients.

As in Figure 2 of the DPO paper (Rafailov et al., 2023): every run is one point, x = the sequence-level
KL(p_θ || p_ref) and y = the GROUND-TRUTH reward (VADER sentiment of prompt + continuation), both measured on
the same continuations sampled (same seed) for the held-out openings. Up and to the left is better.

- p_ref (and the start of every run) is the base model "tiny", the task's reference policy.
- DPO trains on the shipped VADER-labelled pairs (`train_dpo(None, DPOConfig(beta=...))`).
- PPO and GRPO never see VADER: they optimise a LEARNED Bradley-Terry reward model, trained once at the start on
  the same pairs (or loaded with `--reward-model DIR`). The table also gives that proxy reward on the held-out
  samples, so proxy and ground truth can be compared (reward over-optimisation).
- Hyperparameters other than beta and the step budget are the trainers' defaults at run time.

Each run is a fresh process (peak RSS = ru_maxrss of that run); the models each method holds while it trains
are counted by the garbage collector (the lecture's "models in memory" row, measured).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/frontier.py            # ~20 min here
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/frontier.py --quick    # smoke test, < 1 min
    .venv/bin/python benchmarks/frontier.py --reward-model runs/rm_bench   # train once, then reuse

Writes results/frontier.json, frontier.md (the table) and frontier.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import tempfile
import time
from pathlib import Path

from _bench import (
    add_run_flags,
    census_mb,
    census_summary,
    fmt,
    machine_info,
    markdown_table,
    model_census,
    pyplot,
    run_workers,
    save_figure,
    worker_main,
)

REFERENCE = "tiny"  # the sentiment task's reference policy: p_ref and the start of every run

# ------------------------------------------------------------------------------------------------ worker


def timed(fn, clock: dict):
    """`fn`, with the seconds spent in it added to clock["eval"] (to take evaluation out of training time)."""

    def wrapper(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            clock["eval"] += time.perf_counter() - start

    return wrapper


def load_reward_model(directory: str):
    from minirlhf.trainers.reward_model import RewardModel

    return RewardModel.load(directory, device="cpu")


def final_evaluation(model, tokenizer, ref, reward_model, job: dict) -> dict:
    """The one measurement every run gets: same held-out openings, same seed, same sample count."""
    from minirlhf.tasks.sentiment import evaluate_sentiment

    def proxy(prompts, completions, **_):
        return reward_model.score(prompts, completions, tokenizer=tokenizer)

    start = time.perf_counter()
    metrics = evaluate_sentiment(
        model, tokenizer, ref_model=ref, reward_fn=proxy, seed=job["seed"], **job["eval"],
    )
    return metrics | {"final_eval_s": time.perf_counter() - start}


def run_job(job: dict) -> dict:
    from minirlhf.models import load_model
    from minirlhf.tasks.sentiment import sentiment_task

    kind, t0, clock = job["kind"], time.perf_counter(), {"eval": 0.0}
    progress = sys.stderr.isatty()

    if kind == "reward_model":
        import minirlhf.trainers.reward_model as rm_module
        from minirlhf.data import PreferenceData, load_preference_pairs

        census: list[dict] = []
        config = rm_module.RewardModelConfig(model=REFERENCE, seed=job["seed"], progress=progress, **job["overrides"])
        eval_pairs = load_preference_pairs(config.pairs, "test")[: job["eval_pairs"]]  # None = all held-out pairs
        original = rm_module.evaluate_pairs
        rm_module.evaluate_pairs = timed(original, clock)  # only adds a clock; removed after
        try:
            data = PreferenceData(load_preference_pairs(config.pairs, "train"), test=eval_pairs)
            rm, _, history = rm_module.train_reward_model(
                data, config, callbacks=[lambda h: census or census.extend(model_census())]
            )
        finally:
            rm_module.evaluate_pairs = original
        wall = time.perf_counter() - t0
        rm.save(job["reward_model"])
        return {"kind": kind, "config": config.to_dict(), "steps": config.steps, "census": census, "wall_s": wall,
                "train_s": wall - clock["eval"], "eval_accuracy": history.last("eval/accuracy"),
                "eval_pairs": len(eval_pairs)}

    ref, ref_tokenizer = load_model(REFERENCE)  # for evaluation (and the reward model's tokenizer)
    if kind == "reference":  # p_ref itself: the point (KL = 0, its sentiment) every run starts from
        metrics = final_evaluation(ref, ref_tokenizer, ref, load_reward_model(job["reward_model"]), job)
        return {"kind": kind, "final": metrics, "census": [], "wall_s": 0.0, "train_s": 0.0, "checkpoints": []}

    census = []

    def take_census(history) -> None:  # the benchmark's own evaluation copy of p_ref is not the method's
        if not census:
            census.extend(model_census(exclude=[ref]))

    if kind == "dpo":
        import minirlhf.trainers.dpo as dpo

        steps = job["steps"] or dpo.DPOConfig().steps  # None: the trainer's default
        config = dpo.DPOConfig(
            model=REFERENCE, beta=job["beta"], steps=steps, eval_every=max(1, math.ceil(steps / job["evals"])),
            seed=job["seed"],
            eval_prompts=job["eval"]["n_prompts"], eval_samples=job["eval"]["samples_per_prompt"], progress=progress,
        )
        from minirlhf.data import PreferenceData, load_preference_pairs
        from minirlhf.tasks.sentiment import evaluate_sentiment

        # no held-out PAIRS evaluation: the frontier needs the sampled one only, timed (the wrapper adds a clock)
        data = PreferenceData(load_preference_pairs(config.pairs, "train"), evaluate=timed(evaluate_sentiment, clock))
        model, tokenizer, history = dpo.train_dpo(data, config, callbacks=[take_census])
        completions, pairs = 0, steps * config.batch_size
        reward_model = load_reward_model(job["reward_model"])  # DPO trains without one: loaded to score only
    else:
        reward_model = load_reward_model(job["reward_model"])
        if kind == "ppo":
            from minirlhf.trainers.ppo import PPOConfig as config_cls
            from minirlhf.trainers.ppo import train_ppo as train
        else:
            from minirlhf.trainers.grpo import GRPOConfig as config_cls
            from minirlhf.trainers.grpo import train_grpo as train
        batch_size = config_cls(model=REFERENCE, beta=job["beta"]).batch_size
        steps = max(1, job["completions"] // batch_size)
        config = config_cls(
            model=REFERENCE, beta=job["beta"], steps=steps, eval_every=max(1, math.ceil(steps / job["evals"])),
            seed=job["seed"], progress=progress, eval_kl=False,  # the task's evaluation measures eval/kl itself
        )
        task = sentiment_task(reward_model, ref_model=ref, tokenizer=ref_tokenizer, seed=job["seed"], **job["eval"])
        task = dataclasses.replace(task, evaluate=timed(task.evaluate, clock))
        model, tokenizer, history = train(task, config, callbacks=[take_census])
        completions, pairs = steps * batch_size, 0
    wall = time.perf_counter() - t0
    checkpoints = [
        {"step": row["step"], "sentiment": row["eval/sentiment"], "kl": row["eval/kl"],
         "reward": row.get("eval/reward")}
        for row in history if "eval/sentiment" in row and "eval/kl" in row
    ]
    metrics = final_evaluation(model, tokenizer, ref, reward_model, job)
    return {
        "kind": kind, "beta": job["beta"], "config": config.to_dict(), "steps": config.steps,
        "completions": completions, "pairs": pairs, "census": census, "wall_s": wall, "train_s": wall - clock["eval"],
        "final": metrics, "checkpoints": checkpoints,
    }


# ------------------------------------------------------------------------------------------------ report

METHOD_NAMES = {"reference": "p_ref (tiny)", "dpo": "DPO", "ppo": "PPO", "grpo": "GRPO"}


def table(results: list[dict], shared_process: bool) -> str:
    header = [
        "method", "β", "steps", "completions sampled", "sentiment (VADER, ground truth)", "KL(p_θ‖p_ref) (nats)",
        "learned-RM reward", "response length", "train time excl. eval (s)", "wall incl. in-run evals (s)",
        "peak RSS (MiB)" + (" (shared process!)" if shared_process else ""), "RSS above torch import (MiB)",
        "models in memory (measured)", "weights held (MiB)",
    ]
    rows = []
    for r in results:
        final = r.get("final", {})
        kind = r["kind"]
        if kind == "reward_model":
            method, beta = "reward model (Bradley–Terry)", "—"
            quality = f"held-out pair accuracy {fmt(r['eval_accuracy'])} ({r['eval_pairs']} pairs)"
            cells = [quality, "—", "—", "—"]
            steps, completions = r["steps"], "0 (pairs)"
        else:
            method, beta = METHOD_NAMES[kind], fmt(r.get("beta"), 3) if "beta" in r else "—"
            cells = [fmt(final["sentiment"]), fmt(final["kl"], 2), fmt(final["reward"]),
                     fmt(final["response_length"], 1)]
            steps = r.get("steps", 0)
            completions = f"0 ({r['pairs']} pairs)" if kind == "dpo" else r.get("completions", 0)
        rows.append([
            method, beta, steps, completions, *cells, f"{r['train_s']:.0f}", f"{r['wall_s']:.0f}",
            f"{r['peak_rss_mb']:.0f}", f"{r['peak_rss_mb'] - r['import_rss_mb']:.0f}",
            census_summary(r["census"]) if r["census"] else "—",
            f"{census_mb(r['census']):.1f}" if r["census"] else "—",
        ])
    return markdown_table(header, rows)


def plot(results: list[dict], path: Path) -> None:
    pyplot()  # viz draws with it
    from minirlhf.course import viz

    runs = []
    for r in results:
        if r["kind"] == "reward_model":
            continue
        label = "p_ref" if r["kind"] == "reference" else f"β={r['beta']:g}"
        runs.append({"method": METHOD_NAMES[r["kind"]], "label": label, "kl": r["final"]["kl"],
                     "reward": r["final"]["sentiment"]})
    fig = viz.plot_frontier(runs, title="Sentiment: ground truth (VADER) vs KL(p_θ‖p_ref), held-out openings")
    ax = fig.axes[0]
    colors = {line.get_label(): line.get_color() for line in ax.get_lines()}
    for r in results:  # intermediate checkpoints (step > 0, before the last): faint, as in the DPO paper
        points = [c for c in r.get("checkpoints", []) if 0 < c["step"] < r.get("steps", 0)]
        if points:
            ax.scatter([c["kl"] for c in points], [c["sentiment"] for c in points], marker="x", s=18, alpha=0.4,
                       color=colors.get(METHOD_NAMES[r["kind"]], "gray"))
    ax.set_ylabel("held-out sentiment (VADER)")
    ax.set_xlabel("KL(p_θ ‖ p_ref), nats per sequence  (×: mid-run checkpoints)")
    ax.grid(alpha=0.3)
    save_figure(fig, path)


# ------------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dpo-betas", type=float, nargs="*", default=[0.1, 0.5, 2.0])
    parser.add_argument("--ppo-betas", type=float, nargs="*", default=[0.02, 0.1, 0.5])
    parser.add_argument("--grpo-betas", type=float, nargs="*", default=[0.0, 0.2],
                        help="0 is GRPOConfig's default (no p_ref in memory); 0.04 is the GRPO paper's")
    parser.add_argument("--dpo-steps", type=int, default=None,
                        help="DPO steps (default: DPOConfig's own; quick: 2)")
    parser.add_argument("--completions", type=int, default=None,
                        help="sampled completions per PPO/GRPO run (default 5120; quick: 64)")
    parser.add_argument("--rm-steps", type=int, default=None,
                        help="reward-model steps (default: RewardModelConfig's own; quick: 3)")
    parser.add_argument("--reward-model", default=None,
                        help="folder of a saved RewardModel: loaded if it exists, else trained and saved there")
    parser.add_argument("--evals", type=int, default=2, help="in-run evaluations per run besides step 0")
    parser.add_argument("--seed", type=int, default=0)
    add_run_flags(parser, "frontier", "one beta per method, a step or two each, 8 prompts, one process")
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(*args.worker, run_job)

    if args.quick:
        args.dpo_betas, args.ppo_betas, args.grpo_betas = args.dpo_betas[1:2], args.ppo_betas[1:2], args.grpo_betas[:1]
    dpo_steps = args.dpo_steps or (2 if args.quick else None)  # None: DPOConfig's default
    completions = args.completions or (64 if args.quick else 5120)
    evaluation = {"n_prompts": 8 if args.quick else 100, "samples_per_prompt": 2 if args.quick else 4}
    machine = machine_info()
    started = time.perf_counter()

    with tempfile.TemporaryDirectory(prefix="minirlhf-rm-") as tmp:
        rm_dir = Path(args.reward_model or Path(tmp) / "reward_model")
        common = {"seed": args.seed, "reward_model": str(rm_dir), "eval": evaluation}
        jobs = []
        if not (rm_dir / "reward_head.safetensors").is_file():
            overrides = {"steps": args.rm_steps or 3} if args.quick or args.rm_steps else {}
            jobs.append({"name": "reward model", "kind": "reward_model", "overrides": overrides,
                         "eval_pairs": 32 if args.quick else None, **common})
        jobs.append({"name": "p_ref", "kind": "reference", **common})
        jobs += [{"name": f"DPO β={b:g}", "kind": "dpo", "beta": b, "steps": dpo_steps, "evals": args.evals, **common}
                 for b in args.dpo_betas]
        jobs += [{"name": f"{kind.upper()} β={b:g}", "kind": kind, "beta": b, "completions": completions,
                  "evals": args.evals, **common}
                 for kind, betas in (("ppo", args.ppo_betas), ("grpo", args.grpo_betas)) for b in betas]
        results = run_workers(str(Path(__file__).resolve()), jobs, one_process=args.quick)

    notes = [
        f"Evaluation: {evaluation['n_prompts']} held-out openings × {evaluation['samples_per_prompt']} continuations "
        f"(temperature 1, seed {args.seed}, identical for every run); KL = Σ_t log p_θ/p_ref on those samples.",
        f"Budget: DPO {', '.join(sorted({str(r['steps']) for r in results if r['kind'] == 'dpo'}))} steps of the "
        f"trainer's default batch; PPO and GRPO {completions} sampled completions each "
        "(steps = completions // (prompts_per_step × group_size)); the trainers' defaults otherwise.",
        "PPO and GRPO are rewarded by the learned reward model only (never VADER). The reward model is counted in "
        "their models in memory; the benchmark's own evaluation copy of p_ref is not.",
        f"Machine: {machine['cpu_count']} CPU cores, torch {machine['torch']}, transformers {machine['transformers']}, "
        f"torch threads {results[0]['torch_threads']} (OMP_NUM_THREADS={machine['OMP_NUM_THREADS']}), "
        f"load average at start {machine['load_average_1min_at_start']:.1f}; {machine['date']}; "
        f"total {(time.perf_counter() - started) / 60:.1f} min.",
    ]
    if args.quick:
        notes.append("QUICK RUN (smoke test): numbers are meaningless; all runs shared one process, so peak RSS "
                     "is cumulative.")
    report = "\n".join([table(results, args.quick), "", *notes])
    print("\n" + report)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "frontier.md").write_text(report + "\n")
    payload = {"machine": machine, "args": vars(args) | {"dpo_steps": dpo_steps, "completions": completions},
               "evaluation": evaluation, "total_seconds": time.perf_counter() - started, "results": results}
    (out / "frontier.json").write_text(json.dumps(payload, indent=1))
    plot(results, out / "frontier.png")
    print(f"\nwritten: {out / 'frontier.json'}, {out / 'frontier.md'}, {out / 'frontier.png'}")


if __name__ == "__main__":
    main()
