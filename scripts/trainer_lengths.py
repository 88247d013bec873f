"""How long each trainer is: the code lines of `train_x` in minirlhf/trainers/<x>.py.

    python scripts/trainer_lengths.py            # this checkout
    python scripts/trainer_lengths.py OTHER_DIR  # another checkout (e.g. a `git worktree` of an older commit)

A code line is one that is neither blank nor a `#` comment; the docstring is left out. "preamble" is what comes
before the `for step in run.steps(...)` loop, "loop" what is inside it, "total" the whole body (the lines after
the loop, the final evaluation and the return, included).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

TRAINERS = ("sft", "reward_model", "dpo", "kto", "grpo", "ppo", "reinforce", "distill")


def code_lines(lines: list[str], first: int, last: int) -> int:
    """Lines first..last (1-based, inclusive) that are neither blank nor a comment."""
    return sum(1 for line in lines[first - 1 : last] if line.strip() and not line.strip().startswith("#"))


def lengths(path: Path, name: str) -> tuple[int, int, int]:
    """(total, preamble, loop) code lines of `train_<name>` in `path`."""
    source = path.read_text()
    lines = source.splitlines()
    function = next(node for node in ast.parse(source).body
                    if isinstance(node, ast.FunctionDef) and node.name == f"train_{name}")
    body = function.body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):  # the docstring
        body = body[1:]
    loop = next(node for node in body if isinstance(node, ast.For) and "run.steps" in ast.unparse(node.iter))
    first = body[0].lineno
    return (code_lines(lines, first, function.end_lineno), code_lines(lines, first, loop.lineno - 1),
            code_lines(lines, loop.lineno + 1, loop.end_lineno))


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    print(f"{'trainer':14s} {'total':>5s} {'preamble':>8s} {'loop':>5s}")
    for name in TRAINERS:
        total, preamble, loop = lengths(root / "minirlhf" / "trainers" / f"{name}.py", name)
        print(f"{name:14s} {total:5d} {preamble:8d} {loop:5d}")


if __name__ == "__main__":
    main()
