"""Write docs/cli.md, the command-line reference: every command's `--help`, as the command line prints it.

    python scripts/cli_reference.py           # (re)write docs/cli.md
    python scripts/cli_reference.py --check   # exit 1, naming the command to run, when docs/cli.md is stale

The page is not written by hand: each section is the text `python -m minirlhf <command> --help` prints, produced
by the same parser (minirlhf.__main__.main, whose flags minirlhf.cli draws from the config dataclasses and the
comments beside their fields). The commands are the ones `python -m minirlhf --help` lists, so a new command gets
its section at the next run. The help is formatted at a fixed width, so the page does not depend on the terminal.
tests/test_docs.py runs `--check`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"
COMMAND = "python scripts/cli_reference.py"
WIDTH = 100  # columns of the help text (argparse reads COLUMNS)

INTRO = f"""\
# Command-line reference

`python -m minirlhf <command> --help` lists every flag of a method's config dataclass with its meaning, allowed
values and default, read from the comment written beside the field in the config class: the config is the one
place where a setting is explained. This page is that help for every command, generated from the same parser:
after changing a config, its comments or a command, regenerate it with

```bash
{COMMAND}
```

(`tests/test_docs.py` fails while this page differs from what the command line prints).

How the flags read: a field that may be None takes `none` (`--max-new-tokens none`: the task's default); a bool
field takes `true`/`false`, and its bare flag (`--debug`) means true; a list field takes one or more values, and its
flag may be repeated (`--reward a.py:f --reward b.py:g`). Unknown flags and abbreviations are errors.
`--eval-every 0` switches evaluation off. `--preset` sets GPU-sized values ([the GPU page](gpu.md)) and
`--recipe` (GRPO) a paper's settings ([GRPO since R1](grpo-since-r1.md)); flags given always win over both.
`--resume` continues a run with its own settings ([checkpoints and resuming](checkpoints.md)). A bad value stops
the command before anything is loaded, with one line that names the flag and the value
([what is checked at the door](door.md)); `--traceback` (any command) prints the full traceback instead.
"""


def help_text(argv: list[str]) -> str:
    """What `python -m minirlhf <argv>` prints on stdout (argparse's --help exits; the top-level help returns)."""
    from minirlhf.__main__ import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main(argv)
        except SystemExit as stop:
            if stop.code not in (0, None):
                raise RuntimeError(f"python -m minirlhf {' '.join(argv)} exited with {stop.code!r}") from None
    return out.getvalue().rstrip() + "\n"


def commands(top_help: str) -> list[str]:
    """The commands the top-level help lists on its `commands: a, b, c` line."""
    lines = [line for line in top_help.splitlines() if line.startswith("commands:")]
    if len(lines) != 1:
        raise RuntimeError(f"`python -m minirlhf --help` has {len(lines)} 'commands:' lines, expected one")
    return [name.strip() for name in lines[0].removeprefix("commands:").split(",")]


def reference() -> str:
    """The page: the introduction, the top-level help, then one section per command with its --help."""
    os.environ["COLUMNS"] = str(WIDTH)
    top = help_text(["--help"])
    sections = [INTRO, "## python -m minirlhf\n\n```text\n" + top + "```\n"]
    for command in commands(top):
        sections.append(f"## python -m minirlhf {command}\n\n```text\n" + help_text([command, "--help"]) + "```\n")
    return "\n".join(sections)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/cli.md differs; write nothing")
    args = parser.parse_args(argv)
    page = reference()
    if args.check:
        if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE.relative_to(ROOT)} is stale: the command line's --help changed; run `{COMMAND}`",
                  file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(exist_ok=True)
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # the checkout's minirlhf, also when it is not installed
    raise SystemExit(main())
