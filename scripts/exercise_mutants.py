"""How well the exercise checkers name mistakes: per exercise, the single-edit wrong versions of the worked solution
(minirlhf.course.exercises.mutants), how many change the behaviour on the checker's cases, and how many the checker
refuses with a hint naming their kind.

    python scripts/exercise_mutants.py        # the table
    python scripts/exercise_mutants.py -v     # and every behaviour-changing mutant whose kind is not named

Columns: generated; equivalent (agree with the reference on every case, skipped); raises (raise on some case: refused
with the error and the line); changing (the rest, a wrong value or gradient); refused and named (of the raising and
changing ones: refused; refused with the hint naming the mutant's kind, or the error shown).
"""

from __future__ import annotations

import sys

from minirlhf.course import exercises
from minirlhf.course.exercises import engine


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


if __name__ == "__main__":
    main("-v" in sys.argv[1:])
