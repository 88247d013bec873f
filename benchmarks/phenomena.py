"""The lab's phenomena: each effect that a 2025 fix exists for, made to show on the lab model in minutes.

The effects themselves are the library's lab (minirlhf.lab: one module per effect, its arms, criterion and figure),
which the notebooks run live; this script runs them on several seeds, side by side, and writes the record. Each
effect states its criterion in words and checks it on every seed: `shows` is true only when it holds on all of them,
and on the seeds together where part of the criterion is judged across them (a mean over seeds, ranges apart).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/phenomena.py --effects a,g,b --seeds 0,1,2 --jobs 3
    .venv/bin/python benchmarks/phenomena.py --quick            # smoke test: every effect, a few steps, one seed

Writes phenomena.json (for each effect: its settings, criterion, each seed's figures with wall time and load
average, and `shows`) and one figure per effect, phenomena_<effect>.png. Wall and CPU time are of the whole seed (all
its arms, one after another); `load` is os.getloadavg() before and after it, so a run on a shared machine can be read
for what it was. `--jobs N` runs N (effect, seed) pairs side by side, one process each.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from _bench import machine_info, pyplot, save_figure

from minirlhf.lab import EFFECTS, MODEL, run_seed, settings_of, verdict


def run_effects(effects: list[str], seeds: list[int], quick: bool, model: str, jobs: int) -> dict[str, dict]:
    """Every (effect, seed) run, `jobs` processes at a time, gathered per effect with its verdict."""
    settings = {key: settings_of(key, quick, model) for key in effects}
    runs = [(key, seed) for key in effects for seed in seeds]
    if jobs > 1:
        # fork: the parent has not started torch's threads (the trainers are imported inside the runs)
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            results = list(pool.map(run_seed, *zip(*[(key, seed, settings[key]) for key, seed in runs])))
    else:
        results = [run_seed(key, seed, settings[key]) for key, seed in runs]
    seeds_of = {key: [r for (k, _), r in zip(runs, results, strict=True) if k == key] for key in effects}
    return {key: verdict(key, _jsonable(settings[key]), seeds_of[key]) for key in effects}


def _jsonable(value):
    return json.loads(json.dumps(value, default=str))


def draw(key: str, report: dict, out: Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6, 4))
    EFFECTS[key].plot(ax, report["seeds"])
    save_figure(fig, out / f"phenomena_{key}.png")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--effects", default=",".join(EFFECTS), help=f"comma-separated, of {','.join(EFFECTS)}")
    parser.add_argument("--seeds", default="0,1,2", help="comma-separated seeds")
    parser.add_argument("--quick", action="store_true", help="smoke test: every effect, a few steps, seed 0 only")
    parser.add_argument("--out", default="benchmarks/results", help="folder for phenomena.json and the figures")
    parser.add_argument("--model", default=MODEL, help="the policy the lab-task runs start from (an effect on another "
                        "task names its own)")
    parser.add_argument("--jobs", type=int, default=1, help="(effect, seed) runs side by side, one process each")
    args = parser.parse_args(argv)
    effects = [e.strip() for e in args.effects.split(",") if e.strip()]
    unknown = [e for e in effects if e not in EFFECTS]
    if unknown or not effects:
        parser.error(f"--effects {args.effects!r}: unknown {unknown}; the effects are {','.join(EFFECTS)}")
    if len(set(effects)) < len(effects):
        parser.error(f"--effects {args.effects!r} names an effect twice")
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        parser.error(f"--seeds {args.seeds!r} must be comma-separated whole numbers")
    if not all(0 <= seed < 2**32 for seed in seeds) or len(set(seeds)) < len(seeds):
        parser.error(f"--seeds {args.seeds!r} must be distinct whole numbers in [0, 2**32) (numpy's seeds)")
    seeds = seeds[:1] if args.quick else seeds
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs} must be at least 1")
    out = Path(args.out)
    try:  # before the runs, which take minutes: a folder they could not write into would lose them
        out.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=out).close()
    except OSError as err:
        parser.error(f"--out {args.out!r}: cannot write there ({err.strerror})")
    report = {"machine": machine_info(), "quick": args.quick, "seeds": seeds, "jobs": args.jobs,
              "effects": run_effects(effects, seeds, args.quick, args.model, args.jobs)}
    (out / "phenomena.json").write_text(json.dumps(report, indent=1))  # first: a figure that fails loses no run
    print(f"wrote {out / 'phenomena.json'}")
    for key, effect in report["effects"].items():
        print(f"({key}) shows={effect['shows']}  {effect['effect_size']}", flush=True)
        draw(key, effect, out)


if __name__ == "__main__":
    sys.exit(main())
