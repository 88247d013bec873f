"""`python -m minirlhf.course demo-figures [OUT]`: the figures of `python -m minirlhf demo`, drawn from its metrics."""

from __future__ import annotations

import argparse

from minirlhf.course import viz


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m minirlhf.course")
    commands = parser.add_subparsers(dest="command", required=True)
    figures = commands.add_parser("demo-figures", help="draw the demo's figures from its metrics.jsonl files")
    figures.add_argument("out", nargs="?", default="outputs/demo", help="the demo's output folder (its --out)")
    args = parser.parse_args(argv)
    for path in viz.plot_demo(args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
