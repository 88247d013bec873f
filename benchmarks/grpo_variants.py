"""GRPO since R1: GRPO, DAPO, Dr. GRPO, GSPO and REINFORCE++'s advantages on arithmetic, several seeds each.

Every run starts from the same SFT checkpoint (the trainers' default `model`) and takes the same number of steps,
each sampling `--prompts-per-step` prompts x G = 8 completions (DAPO's dynamic sampling samples more batches when
groups are all-equal: it is charged for them in wall time and completions). The four GRPO variants are the paper
recipes of `minirlhf.trainers.grpo.RECIPES` (what each sets is printed), all with the same batch shape: clipping
only acts off-policy, so each batch is cut into minibatches of `--minibatch-size` (default 4 updates per batch).
The fifth run is the REINFORCE trainer's `baseline="reinforce++"` with its own defaults (β = 0.04, lr 2e-4):
REINFORCE++'s advantages (returns-to-go of the k1-shaped per-token reward, normalised over the whole batch) with a
plain on-policy policy-gradient step, one update per batch, no ratio and no clip. It is labelled so: the REINFORCE++
paper (Hu, 2025, arXiv:2501.03262, section 3) and OpenRLHF keep PPO's clipped loss, epochs and minibatches and
replace only the critic by these advantages.

Measured per run: held-out greedy exact match every `--eval-every` steps (its cost timed and taken out of "train
time"), and per step the policy's entropy, the response length, the share of all-equal (zero-std) groups, the
clipped fractions and DAPO's groups sampled/kept. Wall time is compared with GRPO's in the same seed round; on a
shared machine the process's CPU time is given too (less sensitive to other jobs taking the cores).

Each run is a fresh process with `--threads` torch threads (default 1). The runs of one seed go one after another
(GRPO first, so that the others' time is compared with GRPO's in the same round); `--parallel-seeds` runs the seeds'
chains side by side (3 processes at once with 3 seeds), else seed 0's chain runs first, then seed 1's, ...

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python benchmarks/grpo_variants.py --parallel-seeds   # 15 runs
    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/grpo_variants.py --quick                # smoke test, < 1 min
    .venv/bin/python benchmarks/grpo_variants.py --variants grpo dapo --seeds 0 --steps 40

Writes results/grpo_variants.json (every run's curves; fields in benchmarks/README.md), grpo_variants.md (the
tables) and grpo_variants.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _bench import (
    HeldOutAccuracy,
    add_run_flags,
    fmt,
    machine_info,
    markdown_table,
    pyplot,
    run_workers,
    save_figure,
    worker_main,
)

GRPO_VARIANTS = ("grpo", "dapo", "dr-grpo", "gspo")  # recipes of minirlhf.trainers.grpo.RECIPES
REINFORCE_VARIANTS = ("reinforce++", "reinforce++-baseline")  # baselines of the REINFORCE trainer
VARIANTS = GRPO_VARIANTS + REINFORCE_VARIANTS
DEFAULT_VARIANTS = ("grpo", "dapo", "dr-grpo", "gspo", "reinforce++")
LABELS = {"grpo": "GRPO", "dapo": "DAPO", "dr-grpo": "Dr. GRPO", "gspo": "GSPO",
          "reinforce++": "REINFORCE++ adv., no clip", "reinforce++-baseline": "REINFORCE++-baseline adv., no clip"}
# the per-step history keys kept in the curves (those a trainer does not log are left out of its rows)
STEP_KEYS = ("reward", "entropy", "response_length", "eos_rate", "zero_std_groups", "clip_frac", "clip_frac_low",
             "clip_frac_high", "groups_sampled", "groups_kept", "sampling_rounds", "kl_ref", "grad_norm")
# the settings that tell the variants apart, printed for every variant
SETTINGS = ("lr", "beta", "eps", "eps_high", "importance_sampling_level", "scale", "aggregation", "dynamic_sampling",
            "mask_truncated_completions", "baseline", "prompts_per_step", "group_size", "minibatch_size", "epochs")
WINDOW = 10  # steps averaged for the "first" and "last" values of a per-step metric


# ------------------------------------------------------------------------------------------------ worker


def make_config(job: dict):
    """(config, train function) of one variant: its recipe (or baseline) and the benchmark's shared settings."""
    from minirlhf.trainers.grpo import RECIPES, GRPOConfig, train_grpo
    from minirlhf.trainers.reinforce import ReinforceConfig, train_reinforce

    shared = {"steps": job["steps"], "eval_every": job["eval_every"], "seed": job["seed"],
              "prompts_per_step": job["prompts_per_step"], "eval_kl": False, "progress": sys.stderr.isatty()}
    if job["variant"] in GRPO_VARIANTS:
        return GRPOConfig(**RECIPES[job["variant"]], minibatch_size=job["minibatch_size"], **shared), train_grpo
    return ReinforceConfig(baseline=job["variant"], **shared), train_reinforce


def run_job(job: dict) -> dict:
    """One variant and seed, start to finish, in this process. Returns its measurements (JSON-able)."""
    import torch

    from minirlhf.tasks import arithmetic

    torch.set_num_threads(job["threads"])
    steps: list[dict] = []
    t0, cpu0 = time.perf_counter(), time.process_time()
    evaluate = HeldOutAccuracy(job["held_out"], t0)
    held_out, evals = evaluate.problems, evaluate.evals

    def record_step(history) -> None:  # called at every logged row, right after the step's update
        row = history[-1]
        if "reward" in row:  # a training step (the final evaluation row has no reward)
            now = time.perf_counter()
            steps.append({"step": row["step"], "wall_s": now - t0, "train_s": now - t0 - evaluate.eval_s,
                          "cpu_s": time.process_time() - cpu0} | {k: row[k] for k in STEP_KEYS if k in row})

    config, train = make_config(job)
    task = dataclasses.replace(arithmetic.task(), evaluate=evaluate)
    _, _, history = train(task, config, callbacks=[record_step])
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    eval_rows = [row for row in history if "eval/accuracy" in row]
    assert len(eval_rows) == len(evals), "every evaluation is logged exactly once"
    for row, record in zip(eval_rows, evals, strict=True):
        record["step"] = row["step"]
    groups_sampled = sum(s.get("groups_sampled", config.prompts_per_step) for s in steps)
    return {
        "variant": job["variant"], "seed": job["seed"], "config": config.to_dict(), "steps": config.steps,
        "completions": round(groups_sampled * config.group_size), "evals": evals, "curve": steps, "wall_s": wall,
        "eval_s": evaluate.eval_s, "train_s": wall - evaluate.eval_s, "cpu_s": cpu, "held_out_problems": len(held_out),
    }


# ------------------------------------------------------------------------------------------------ report


def window_mean(curve: list[dict], key: str, last: bool) -> float | None:
    """Mean of `key` over the first (or last) WINDOW steps that log it; None when the run never logs it."""
    values = [s[key] for s in curve if s.get(key) is not None]
    if not values:
        return None
    part = values[-WINDOW:] if last else values[:WINDOW]
    return sum(part) / len(part)


def accuracy_within(result: dict, seconds: float) -> float:
    """Held-out accuracy of the last evaluation made within `seconds` of training (evaluation excluded)."""
    return [e["accuracy"] for e in result["evals"] if e["train_s"] <= seconds + 1e-9][-1]


def mean_sd(values: list[float | None]) -> tuple[float | None, float | None]:
    values = [v for v in values if v is not None]
    if not values:
        return None, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0


def summarize(results: list[dict]) -> list[dict]:
    """One row per variant, over its seeds. Time ratios are against GRPO's run of the same seed (same round)."""
    grpo = {r["seed"]: r for r in results if r["variant"] == "grpo"}
    rows = []
    for variant in dict.fromkeys(r["variant"] for r in results):
        runs = [r for r in results if r["variant"] == variant]
        per_seed = []
        for r in runs:
            base = grpo.get(r["seed"])
            per_seed.append({
                "seed": r["seed"],
                "final": r["evals"][-1]["accuracy"],
                "best": max(e["accuracy"] for e in r["evals"]),
                "at_grpo_time": accuracy_within(r, base["train_s"]) if base else None,
                "train_s": r["train_s"], "cpu_s": r["cpu_s"],
                "train_ratio": r["train_s"] / base["train_s"] if base else None,
                "cpu_ratio": r["cpu_s"] / base["cpu_s"] if base else None,
                "completions": r["completions"],
                **{f"{key}_{end}": window_mean(r["curve"], key, end == "last")
                   for key in ("entropy", "response_length", "zero_std_groups") for end in ("first", "last")},
                "clip_frac": window_mean(r["curve"], "clip_frac", True),
                "clip_frac_low": window_mean(r["curve"], "clip_frac_low", True),
                "clip_frac_high": window_mean(r["curve"], "clip_frac_high", True),
                "sampling_rounds": mean_sd([s.get("sampling_rounds") for s in r["curve"]])[0],
                "load_average_1min": r["load_average_1min"],
            })
        row = {"variant": variant, "label": LABELS[variant], "seeds": [p["seed"] for p in per_seed],
               "before": runs[0]["evals"][0]["accuracy"], "per_seed": per_seed}
        for key in per_seed[0]:
            if key not in ("seed", "load_average_1min"):
                row[key], row[f"{key}_sd"] = mean_sd([p[key] for p in per_seed])
        rows.append(row)
    return rows


def settings_table(results: list[dict]) -> str:
    """What each variant ran with, read from its config (the first seed's; the seeds differ only in `seed`)."""
    configs: dict[str, dict] = {}
    for r in results:
        configs.setdefault(r["variant"], r["config"])
    rows = [[LABELS[variant], "grpo" if variant in GRPO_VARIANTS else "reinforce",
             *(config.get(key, "—") for key in SETTINGS)] for variant, config in configs.items()]
    return markdown_table(["variant", "trainer", *SETTINGS], rows)


def pm(mean: float | None, sd: float | None, digits: int = 3) -> str:
    return "n/a" if mean is None else f"{fmt(mean, digits)} ± {fmt(sd, digits)}"


def first_last(summary: dict, key: str, digits: int) -> str:
    first, last = summary[f"{key}_first"], summary[f"{key}_last"]
    return "n/a" if first is None else f"{fmt(first, digits)} → {fmt(last, digits)}"


def results_table(summaries: list[dict]) -> str:
    header = ["variant", "held-out acc. after (mean ± sd)", "best", "acc. at GRPO's train time", "train s (excl. eval)",
              "× GRPO (wall)", "CPU s", "× GRPO (CPU)", "completions sampled", "entropy (nats/token)",
              "response length (tokens)", "zero-std groups", "clipped (low / high)", "sampling rounds"]
    rows = []
    for s in summaries:
        clip = "n/a" if s["clip_frac"] is None else \
            f"{fmt(s['clip_frac'], 3)} ({fmt(s['clip_frac_low'], 3)} / {fmt(s['clip_frac_high'], 3)})"
        rows.append([
            s["label"], pm(s["final"], s["final_sd"]), fmt(s["best"]), fmt(s["at_grpo_time"]),
            f"{s['train_s']:.0f} ± {s['train_s_sd']:.0f}", fmt(s["train_ratio"], 2), f"{s['cpu_s']:.0f}",
            fmt(s["cpu_ratio"], 2), f"{s['completions']:.0f}", first_last(s, "entropy", 3),
            first_last(s, "response_length", 2), first_last(s, "zero_std_groups", 2), clip,
            "—" if s["sampling_rounds"] is None else fmt(s["sampling_rounds"], 2),
        ])
    return markdown_table(header, rows)


def plot(results: list[dict], path: Path) -> None:
    panels = [("accuracy", "held-out accuracy"), ("entropy", "entropy (nats/token)"),
              ("response_length", "response length (tokens)"), ("zero_std_groups", "share of zero-std groups")]
    fig, axes = pyplot().subplots(1, 4, figsize=(17, 4))
    colors = {}
    for r in results:
        color = colors.setdefault(r["variant"], f"C{len(colors)}")
        label = LABELS[r["variant"]] if r["seed"] == results[0]["seed"] else None
        axes[0].plot([e["train_s"] for e in r["evals"]], [e["accuracy"] for e in r["evals"]], "o-", ms=3, lw=1,
                     color=color, label=label, alpha=0.8)
        for ax, (key, _) in zip(axes[1:], panels[1:], strict=True):
            points = [(s["step"], s[key]) for s in r["curve"] if s.get(key) is not None]
            if points:
                ax.plot(*zip(*points, strict=True), lw=0.8, color=color, alpha=0.7)
    axes[0].set_xlabel("training time, evaluation excluded (s)")
    for ax, (_, title) in zip(axes, panels, strict=True):
        ax.set_title(title)
        ax.grid(alpha=0.3)
    for ax in axes[1:]:
        ax.set_xlabel("step")
    axes[0].legend(fontsize=8, loc="lower right")
    fig.suptitle("Arithmetic from tiny-sft: GRPO variants, every seed drawn")
    save_figure(fig, path, dpi=80)


# ------------------------------------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(DEFAULT_VARIANTS))
    parser.add_argument("--seeds", nargs="+", type=int, default=None, help="default 0 1 2; --quick: 0")
    parser.add_argument("--steps", type=int, default=None, help="steps per run (default 60; --quick: 2)")
    parser.add_argument("--eval-every", type=int, default=None,
                        help="held-out evaluation every N steps (default 12; --quick: 1)")
    parser.add_argument("--prompts-per-step", type=int, default=None,
                        help="prompts per step, x G = 8 completions (default 32, GRPOConfig's; --quick: 4)")
    parser.add_argument("--minibatch-size", type=int, default=None,
                        help="completions per update of the GRPO variants (default 64; --quick: 16)")
    parser.add_argument("--held-out", type=int, default=None,
                        help="held-out problems evaluated (default: all; --quick: 50)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per run (torch.set_num_threads)")
    parser.add_argument("--parallel-seeds", action="store_true",
                        help="run the seeds' chains of runs side by side (one process per seed at a time)")
    parser.add_argument("--merge", nargs="+", metavar="FILE",
                        help="no runs: the report of runs already made, from grpo_variants.json or worker result files")
    add_run_flags(parser, "grpo_variants", "2 small steps per variant, one seed, 50 held-out problems, one process")
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(*args.worker, run_job)
    if args.merge:
        return merge(args.merge, Path(args.out), argv if argv is not None else sys.argv[1:])

    quick = args.quick
    settings = {
        "steps": args.steps or (2 if quick else 60),
        "eval_every": args.eval_every or (1 if quick else 12),
        "prompts_per_step": args.prompts_per_step or (4 if quick else 32),
        "minibatch_size": args.minibatch_size or (16 if quick else 64),
        "held_out": args.held_out or (50 if quick else None),
        "threads": args.threads,
    }
    seeds = args.seeds or ([0] if quick else [0, 1, 2])
    jobs = [{"name": f"{variant} seed {seed}", "variant": variant, "seed": seed, **settings}
            for seed in seeds for variant in args.variants]
    chains = [[job for job in jobs if job["seed"] == seed] for seed in seeds] if args.parallel_seeds else [jobs]
    machine = machine_info()
    started = time.perf_counter()
    with ThreadPoolExecutor(len(chains)) as pool:  # each chain: its runs one after another, each a fresh process
        done = pool.map(lambda chain: run_workers(str(Path(__file__).resolve()), chain, one_process=quick), chains)
        results = [result for chain in done for result in chain]
    total = time.perf_counter() - started
    how = "the seeds side by side" if args.parallel_seeds else "runs one after another"
    record = vars(args) | settings | {"seeds": seeds, "variants": args.variants}
    write_report(results, machine, how, total, Path(args.out), record, quick)


def merge(files: list[str], out: Path, argv: list[str] | None) -> None:
    """The report of runs made by several invocations: each file is a grpo_variants.json or a worker's results
    file (a list of runs). Runs are ordered by seed, then variant (GRPO first)."""
    results = []
    for name in files:
        loaded = json.loads(Path(name).read_text())
        results += loaded["results"] if isinstance(loaded, dict) else loaded
    results.sort(key=lambda r: (r["seed"], VARIANTS.index(r["variant"])))
    how = f"the runs of {len(files)} result files (how they ran: benchmarks/README.md)"
    write_report(results, machine_info(), how, None, out, {"merge": files, "argv": argv}, quick=False)


def write_report(results: list[dict], machine: dict, how: str, total: float | None, out: Path, record: dict,
                 quick: bool) -> None:
    """Print the tables and write grpo_variants.{md,json,png} to `out`."""
    summaries = summarize(results)
    first = results[0]
    loads = [x for r in results for x in r["load_average_1min"] if x is not None]
    notes = [
        f"{first['steps']} steps per run, seeds {', '.join(map(str, sorted({r['seed'] for r in results})))}; "
        f"held-out greedy exact match every {first['config']['eval_every']} steps on {first['held_out_problems']} "
        f"problems, from {first['config']['model']} (accuracy before: {fmt(summaries[0]['before'])}).",
        f"Entropy, length and zero-std groups: mean of the first → last {WINDOW} steps; clipped fractions: last "
        f"{WINDOW} steps. Time ratios: against GRPO's run of the same seed.",
        f"Machine: {machine['cpu_count']} CPU cores, torch {machine['torch']}, transformers {machine['transformers']}, "
        f"torch threads {first['torch_threads']} per run, {how}; 1-min load average {min(loads):.1f}-{max(loads):.1f} "
        f"(at each run's start and end); {machine['date']}"
        + (f"; total {total / 60:.1f} min." if total is not None else "."),
    ]
    if quick:
        notes.append("QUICK RUN (smoke test): numbers are meaningless; all runs shared one process.")
    report = "\n".join([settings_table(results), "", results_table(summaries), "", *notes])
    print("\n" + report)

    out.mkdir(parents=True, exist_ok=True)
    (out / "grpo_variants.md").write_text(report + "\n")
    payload = {"machine": machine, "args": record, "total_seconds": total, "summaries": summaries, "results": results}
    (out / "grpo_variants.json").write_text(json.dumps(payload, indent=1))
    plot(results, out / "grpo_variants.png")
    print(f"\nwritten: {out / 'grpo_variants.json'}, {out / 'grpo_variants.md'}, {out / 'grpo_variants.png'}")

if __name__ == "__main__":
    main()
