"""Implement-it exercises: the student writes the function, the library checks it.

    from minirlhf.course import exercises
    exercises.check_function("ppo-clip", clipped_policy_loss)   # True when it matches minirlhf.losses everywhere
    exercises.solution("ppo-clip")                              # prints a worked solution

`check_function` runs the student's function and the library's own (minirlhf.losses, never a second copy of the
math) on named cases: random inputs and the edge cases where the classic mistakes show (padding in the mask, ties,
groups with zero or near-zero std, clipping active at several ε, Â of both signs, one-token and empty responses,
G = 2). Every argument and every differentiable input changes the result of at least one case. Values are
compared, and gradients with respect to every differentiable input (a detached ratio gives the right loss and no
gradient; a KTO loss that keeps z_ref in the graph gives the right loss and a gradient where there must be none). The
first failing case is printed with its inputs, the expected and actual values and a hint whose label names the kind
of mistake (sign flipped, detach missing, wrong axis, mask dropped, ...: `mutants`, the single-edit wrong versions
of each worked solution, whose outputs tell the kinds apart) and the catalogued wrong version whose outputs agree
with the student's.

The engine (`engine`) knows no topic; each notebook topic declares its exercises in a catalogue module
(`policy_gradient`, `ppo`, `grpo`, `dpo`, `reward_model`, `grpo_r1`,
`toolbox`): cases, reference, wrong versions and their hints.
Adding an exercise is one `Exercise(...)` entry there, with its worked solution in minirlhf.course.solutions.

In the notebooks each stub cell carries the tag "exercise:<id>" in its metadata; `fill_solutions(nb)` replaces
those stubs with the solutions (the headless notebook test runs them that way). With the environment variable
MINIRLHF_EXERCISES_STRICT=1 a failed check raises instead of only printing.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from minirlhf.course.exercises import dpo, grpo, grpo_r1, policy_gradient, ppo, reward_model, toolbox
from minirlhf.course.exercises.engine import STRICT_ENV, Case, Exercise, ExerciseFailed, Mistake, Variant, check

__all__ = ["CAPSTONE_TAG", "STRICT_ENV", "TAG_PREFIX", "Case", "Exercise", "ExerciseFailed", "Mistake", "Variant",
           "EXERCISES", "EXERCISES_LIST", "check_function", "fill_solutions", "list_exercises", "solution",
           "solution_source"]

TAG_PREFIX = "exercise:"
CAPSTONE_TAG = "capstone:grpo-step"  # the capstone's my_step (minirlhf.course.capstone)
EXERCISES_LIST: list[Exercise] = [*policy_gradient.EXERCISES, *ppo.EXERCISES, *grpo.EXERCISES, *dpo.EXERCISES,
                                  *reward_model.EXERCISES, *grpo_r1.EXERCISES, *toolbox.EXERCISES]
EXERCISES: dict[str, Exercise] = {e.id: e for e in EXERCISES_LIST}


def list_exercises(topic: str | None = None) -> list[str]:
    """Ids of the implement-it exercises, optionally only those of one notebook topic."""
    return [e.id for e in EXERCISES_LIST if topic is None or e.topic == topic]


def _lookup(exercise_id: str) -> Exercise:
    if exercise_id not in EXERCISES:
        raise KeyError(f"unknown exercise id {exercise_id!r}; valid ids: {', '.join(EXERCISES)}")
    return EXERCISES[exercise_id]


def check_function(exercise_id: str, fn: Callable[..., Any], strict: bool | None = None) -> bool:
    """Run `fn` and the library's function on every case of the exercise; print the verdict, return True if all pass.

    `fn` is called positionally, in the order of the stub's parameters. The first failing case is printed with its
    inputs, the expected and actual values (or gradients) and a hint naming the mistake the function makes.
    `strict` (default: the environment variable MINIRLHF_EXERCISES_STRICT=1) raises ExerciseFailed instead of
    returning False.
    """
    return check(_lookup(exercise_id), fn, strict)


def solution_source(exercise_id: str) -> str:
    """The worked solution as code: the imports it needs and the function, named like the notebook's stub."""
    source = inspect.getsource(_lookup(exercise_id).solution_fn)
    imports = "import torch\n" + ("import torch.nn.functional as F\n" if "F." in source else "")
    return f"{imports}\n\n{source}"


def solution(exercise_id: str) -> None:
    """Print a worked solution of the exercise."""
    print(solution_source(exercise_id))


def fill_solutions(nb: Any) -> Any:
    """Replace every stub cell tagged "exercise:<id>" (or the capstone's) in a notebook with its solution.

    Returns the notebook (changed in place) so the headless test can run a notebook with every exercise solved.
    """
    for cell in nb["cells"]:
        all_tags = cell.get("metadata", {}).get("tags", [])
        tags = [t for t in all_tags if t.startswith(TAG_PREFIX)]
        if cell["cell_type"] == "code" and tags:
            cell["source"] = solution_source(tags[0][len(TAG_PREFIX):])
        elif cell["cell_type"] == "code" and CAPSTONE_TAG in all_tags:
            from minirlhf.course import capstone  # loads the model stack: only where a capstone is filled in

            cell["source"] = capstone.solution_source()
    return nb
