"""How well the exercise checkers name mistakes: per exercise, the single-edit wrong versions of the worked solution
(minirlhf.course.exercises.mutants), how many change the behaviour on the checker's cases, and how many the checker
refuses with a hint naming their kind.

    python scripts/exercise_mutants.py        # the table
    python scripts/exercise_mutants.py -v     # and every behaviour-changing mutant whose kind is not named
    python scripts/exercise_mutants.py --capstone   # the capstone's my_step too (~20 s: 31 checks of 2 steps)

Columns: generated; equivalent (agree with the reference on every case, skipped); raises (raise on some case: refused
with the error and the line); changing (the rest, a wrong value or gradient); refused and named (of the raising and
changing ones: refused; refused with the hint naming the mutant's kind, or the error shown).
"""

from __future__ import annotations

import contextlib
import io
import sys

from minirlhf.course import capstone, exercises, solutions
from minirlhf.course.exercises import engine, mutants


def main(verbose: bool) -> None:
    header = ("exercise", "generated", "equivalent", "raises", "changing", "refused", "named")
    print(f"{header[0]:<20}" + "".join(f"{h:>11}" for h in header[1:]))
    totals = [0] * 6
    for exercise in exercises.EXERCISES_LIST:
        scores = engine.score_mutants(exercise)
        row = [len(scores), sum(s.equivalent for s in scores), sum(s.raises for s in scores),
               sum(not s.equivalent and not s.raises for s in scores), sum(s.refused for s in scores),
               sum(s.named for s in scores)]
        totals = [t + r for t, r in zip(totals, row)]
        print(f"{exercise.id:<20}" + "".join(f"{n:>11}" for n in row))
        for s in scores:
            if verbose and not s.equivalent and not s.named:
                print(f"    not named: ({s.mutant.kind}) {s.mutant.edit}")
    print(f"{'all':<20}" + "".join(f"{n:>11}" for n in totals))


def capstone_row(verbose: bool) -> None:
    """The capstone's my_step: a mutant is equivalent when check_step passes it and capstone.EQUIVALENT_MUTANTS says
    why it is right (listed with -v, with the reason); one that passes without a reason is counted as changing and
    not refused."""
    row = [0] * 6
    for mutant in mutants.mutants(solutions.my_step):
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
            passed = capstone.check_step(mutant.fn)
        report = out.getvalue()
        equivalent = passed and mutant.edit in capstone.EQUIVALENT_MUTANTS
        raises = "my_step raised" in report
        named = not passed and (f"({mutant.kind})" in report or raises)
        row = [n + d for n, d in zip(row, (1, equivalent, raises, not equivalent and not raises, not passed, named))]
        if verbose and equivalent:
            print(f"    equivalent: ({mutant.kind}) {mutant.edit}: {capstone.EQUIVALENT_MUTANTS[mutant.edit]}")
        elif verbose and not named:
            print(f"    {'passed' if passed else 'not named'}: ({mutant.kind}) {mutant.edit}")
    print(f"{'capstone':<20}" + "".join(f"{n:>11}" for n in row))


if __name__ == "__main__":
    main("-v" in sys.argv[1:])
    if "--capstone" in sys.argv[1:]:
        capstone_row("-v" in sys.argv[1:])
