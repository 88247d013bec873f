"""The checker's engine: run a student's function on an exercise's cases, compare with the reference, name the mistake.

It knows no topic. An exercise is a declaration in a catalogue module beside this one: its cases (inputs in the
order of the stub's parameters, because a student's function is called positionally, so renamed parameters work),
the reference (the library's own function, never a second copy of the math), the inputs whose gradient is compared,
and its catalogued wrong versions, each with the hint that names the mistake. Other correct answers the checker
accepts (a well-known implementation that differs on purpose) are declared as variants, with a note saying how.

On every case the engine checks, in this order: an input changed in place, an error (reported with the line of the
student's code that raised), the form of the result (None, a list, a number, a wrong shape or dtype), the values, and
the gradient with respect to each differentiable input (none where the reference detaches it: KTO's z_ref).

When a check fails, the hint names the kind of the mistake (mutants.py: sign flipped, detach missing or extra, wrong
axis, ...), read from the student's outputs (the result negated, a gradient where the reference has none) or from the
mutant of the worked solution whose outputs agree with the student's; with it the hint of the catalogued wrong
version that agrees, else the kind's own hint. An exercise may also recognise a family of equivalent forms from the
outputs (equivalent_forms: an ε guard of the student's own), accepted with a note or refused saying what differs.
"""

from __future__ import annotations

import contextlib
import functools
import io
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import minirlhf.course.exercises.mutants as mutants
from minirlhf.course import solutions
from minirlhf.errors import env_flag

DTYPE = torch.float64  # every case is built in float64, so a correct answer agrees to ~1e-12
RTOL, ATOL = 1e-6, 1e-9
FLOAT32_RTOL = 1e-4  # a result within this of the reference, yet outside RTOL, is float32 arithmetic (or a stray ε)
STRICT_ENV = "MINIRLHF_EXERCISES_STRICT"
TORCH_DIR = str(Path(torch.__file__).resolve().parent)
ENGINE_DIR = str(Path(__file__).resolve().parent)


class ExerciseFailed(AssertionError):
    """Raised by check in strict mode (MINIRLHF_EXERCISES_STRICT=1) when the student's function fails."""


@dataclass(frozen=True)
class Case:
    name: str
    inputs: dict[str, Any]  # in the order of the stub's parameters: the function is called positionally
    check_grad: bool = True  # False where a tie (r exactly at 1 ± ε) leaves the gradient up to the implementation


@dataclass(frozen=True)
class Mistake:
    name: str
    fn: Callable[..., Any]  # the wrong version, same parameters as the exercise
    hint: str
    kind: str = ""  # its kind (mutants.KINDS), where the mutants of the solution cannot make it


@dataclass(frozen=True)
class Variant:
    name: str
    fn: Callable[..., Any]  # another correct answer, accepted when it agrees on every case
    note: str  # what sets it apart from the reference, printed with the verdict


@dataclass(frozen=True)
class Verdict:
    accepted: bool  # True: an equivalent form, passed with the note; False: refused, the note is the hint
    note: str


@dataclass(frozen=True)
class Exercise:
    id: str
    topic: str  # the notebook's topic, as in quiz.TOPICS
    stub: str  # name of the function the student writes (and of its solution in minirlhf.course.solutions)
    reference: Callable[..., Any]  # the library's answer, called with the case's inputs in order
    cases: Callable[[], list[Case]]
    mistakes: tuple[Mistake, ...]
    grad_inputs: tuple[str, ...] = ()  # inputs whose gradient (of the first output, summed) is compared too
    variants: tuple[Variant, ...] = ()
    # a family of equivalent forms the checker recognises from the outputs (an ε guard of one's own, say): given the
    # cases and the student's outcomes, a Verdict, or None when the outputs are not of that family
    equivalent_forms: Callable[[Sequence[Case], Sequence[Outcome], Sequence[Outcome]], Verdict | None] | None = None

    @property
    def solution_fn(self) -> Callable[..., Any]:
        return getattr(solutions, self.stub)


def tensor(values: Any) -> torch.Tensor:
    """A float64 tensor of the values, for writing cases."""
    return torch.as_tensor(values, dtype=DTYPE)


def randn(*shape: int, seed: int) -> torch.Tensor:
    """Seeded float64 standard normals, for writing cases."""
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)


# ---------------------------------------------------------------------------------------------------------
# Running a function on one case
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    result: Any = None  # what the function returned, tensors detached
    values: tuple[torch.Tensor, ...] | None = None  # the outputs read as float64 tensors (None: unreadable)
    grads: dict[str, torch.Tensor | None] | None = None  # None for an input no gradient reaches
    error: BaseException | None = None
    where: str = ""  # the line of the student's code that raised
    changed: tuple[str, ...] = ()  # inputs the function changed in place


def _fresh_inputs(case: Case, grad_inputs: Sequence[str]) -> dict[str, Any]:
    """Copies of the case's inputs, so that a function that writes into them can be caught and cannot spoil a case."""
    inputs = {}
    for name, value in case.inputs.items():
        if isinstance(value, torch.Tensor):
            value = value.detach().clone().requires_grad_(name in grad_inputs)
        inputs[name] = value
    return inputs


def _changed(case: Case, inputs: dict[str, Any]) -> tuple[str, ...]:
    def same(a: torch.Tensor, b: torch.Tensor) -> bool:
        return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a.detach(), b))
    return tuple(name for name, value in case.inputs.items()
                 if isinstance(value, torch.Tensor) and not same(inputs[name], value))


def _detached(result: Any) -> Any:
    if isinstance(result, torch.Tensor):
        return result.detach()
    if isinstance(result, (tuple, list)):
        return type(result)(_detached(item) for item in result)
    return result


def _readable(result: Any) -> tuple[torch.Tensor, ...] | None:
    """The result's numbers as float64 tensors: a tuple's (or a list of tensors') items one by one, anything else
    (a tensor, a number, a list of numbers) as one tensor; None when it holds no numbers."""
    items = isinstance(result, tuple) or (isinstance(result, list) and any(isinstance(r, torch.Tensor) for r in result))
    try:
        return tuple(torch.as_tensor(_detached(item)).to(DTYPE) for item in (result if items else (result,)))
    except (TypeError, ValueError, RuntimeError):
        return None


def error_location(error: BaseException, fn: Callable[..., Any]) -> str:
    """The line of the student's code that raised: the deepest frame in fn's file, else outside torch and here."""
    frames = traceback.extract_tb(error.__traceback__)
    filename = getattr(getattr(fn, "__code__", None), "co_filename", None)
    mine = [f for f in frames if f.filename == filename] or [
        f for f in frames if not f.filename.startswith((TORCH_DIR, ENGINE_DIR))]
    if not mine:
        return ""
    frame = mine[-1]
    in_cell = "ipykernel_" in frame.filename or frame.filename.startswith("<ipython-input")
    place = "of the cell" if in_cell else f"of {frame.filename}"
    return f"line {frame.lineno} {place}, in {frame.name}" + (f": {frame.line.strip()}" if frame.line else "")


def _gradients(first: Any, inputs: dict[str, Any], names: Sequence[str]) -> dict[str, torch.Tensor | None]:
    grads: dict[str, torch.Tensor | None] = {}
    for name in names:
        grad = None
        if isinstance(first, torch.Tensor) and first.requires_grad and first.is_floating_point():
            (grad,) = torch.autograd.grad(first.sum(), inputs[name], allow_unused=True, retain_graph=True)
        grads[name] = None if grad is None else grad.detach().to(DTYPE)
    return grads


def run(fn: Callable[..., Any], case: Case, exercise: Exercise) -> Outcome:
    """Call fn positionally on fresh copies of the case's inputs; a NotImplementedError (a stub) propagates."""
    wanted = exercise.grad_inputs if case.check_grad else ()
    inputs = _fresh_inputs(case, wanted)
    try:
        result = fn(*inputs.values())
        first = result[0] if isinstance(result, (tuple, list)) and result else result
        grads = _gradients(first, inputs, wanted)
    except NotImplementedError:
        raise
    except Exception as error:  # noqa: BLE001 -- any error of the student's code is reported, not raised
        return Outcome(error=error, where=error_location(error, fn), changed=_changed(case, inputs))
    return Outcome(_detached(result), _readable(result), grads, changed=_changed(case, inputs))


@functools.cache
def cases_of(exercise: Exercise) -> tuple[Case, ...]:
    return tuple(exercise.cases())


@functools.cache
def expected_outcomes(exercise: Exercise) -> tuple[Outcome, ...]:
    return tuple(run(exercise.reference, case, exercise) for case in cases_of(exercise))


@functools.cache
def _outcomes_of(exercise: Exercise, fn: Callable[..., Any]) -> tuple[Outcome, ...]:
    return tuple(run(fn, case, exercise) for case in cases_of(exercise))


@functools.cache
def mutants_of(exercise: Exercise) -> tuple[mutants.Mutant, ...]:
    """The single-edit wrong versions of the exercise's worked solution (mutants.py), each labelled with its kind."""
    tensors = [name for name, value in cases_of(exercise)[0].inputs.items() if isinstance(value, torch.Tensor)]
    return tuple(mutants.mutants(exercise.solution_fn, exercise.grad_inputs, tensors))


def equivalent(exercise: Exercise, fn: Callable[..., Any]) -> bool:
    """Whether fn agrees with the reference on every case (a mutant that changes nothing the cases can see)."""
    return not any(difference(a, e) for a, e in zip(_outcomes_of(exercise, fn), expected_outcomes(exercise)))


# ---------------------------------------------------------------------------------------------------------
# Comparing
# ---------------------------------------------------------------------------------------------------------


def _close(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True))


def _grads_close(a: torch.Tensor | None, b: torch.Tensor | None) -> bool:
    """No gradient at all counts as a zero gradient (a case where every token is clipped expects zeros)."""
    if a is None or b is None:
        return all(g is None or not g.any() for g in (a, b))
    return _close(a, b)


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    module = type(value).__module__
    return f"a {type(value).__name__}" if module == "builtins" else f"a {module.split('.')[0]}.{type(value).__name__}"


def _shape(t: torch.Tensor) -> str:
    return "a scalar (shape ())" if t.dim() == 0 else f"shape {tuple(t.shape)}"


def _tensor_problem(value: Any, expected: torch.Tensor, what: str) -> str | None:
    if not isinstance(value, torch.Tensor):
        if isinstance(value, tuple) and len(value) == 1 and isinstance(value[0], torch.Tensor):
            advice = "a stray trailing comma? `return x,` returns a tuple, `return x` the tensor"
        elif isinstance(value, (tuple, list)):
            advice = "build the result with torch ops (torch.stack, torch.where, slicing) instead of a Python list"
        elif value is None:
            advice = "is the `return` missing?"
        else:
            advice = "keep it a tensor: .item(), .tolist(), float() and numpy give plain numbers, with no gradient"
        return f"{what} is {_kind(value)}, not a torch.Tensor: {advice}"
    if value.shape != expected.shape:
        return f"{what} has {_shape(value)}, expected {_shape(expected)}"
    if value.dtype != expected.dtype and expected.dtype == torch.bool:
        return (f"{what} has dtype {value.dtype}, expected torch.bool: a mask is True/False, as a comparison "
                f"(x >= y) gives it; .int(), .long(), .float() or torch.where(..., 1, 0) make numbers of it, and a 0/1 "
                f"integer tensor used as an index picks items 0 and 1 instead of filtering")
    if value.dtype != expected.dtype:
        return (f"{what} has dtype {value.dtype}, expected {expected.dtype} (the inputs' dtype): make new tensors "
                f"like the inputs (torch.zeros_like(x), dtype=x.dtype), torch.zeros(...) alone gives float32")
    return None


def form_problem(result: Any, expected: Any) -> str | None:
    """What is wrong with the result's form (type, number of outputs, shape, dtype), or None."""
    if result is None:
        return "your function returned None: is the `return` missing?"
    if isinstance(expected, tuple):
        if not isinstance(result, (tuple, list)):
            return f"your function returned {_kind(result)}, expected a tuple of {len(expected)} tensors"
        if len(result) != len(expected):
            return f"your function returned {len(result)} outputs, expected {len(expected)}"
        problems = (_tensor_problem(r, e, f"output {i}") for i, (r, e) in enumerate(zip(result, expected)))
        return next((p for p in problems if p), None)
    return _tensor_problem(result, expected, "the result")


def difference(actual: Outcome, expected: Outcome) -> str:
    """What differs between two outcomes of one case ("" when they agree), in the order the checks run."""
    if actual.changed:  # first: it spoils what follows (a gradient through a changed input raises)
        return "an input changed in place"
    if actual.error is not None or expected.error is not None:
        return "" if actual.error is not None and expected.error is not None else "an error"
    problem = form_problem(actual.result, expected.result)
    if problem:
        return problem
    for i, (a, e) in enumerate(zip(actual.values, expected.values)):
        if not _close(a, e):
            return "the values" if len(expected.values) == 1 else f"the values of output {i}"
    for name, grad in expected.grads.items():
        if not _grads_close(actual.grads[name], grad):
            return f"the gradient with respect to {name}"
    return ""


def _agrees_with_mistake(actual: Outcome, wrong: Outcome) -> bool:
    """Whether the student's outputs are the wrong version's: the numbers (and gradients), whatever their form."""
    if actual.error is not None or wrong.error is not None:
        return actual.error is not None and wrong.error is not None
    if actual.values is None or wrong.values is None or len(actual.values) != len(wrong.values):
        return False
    if not all(_close(a, w) for a, w in zip(actual.values, wrong.values)):
        return False
    return all(_grads_close(actual.grads.get(name), grad) for name, grad in wrong.grads.items())


def _named_mistake(exercise: Exercise, student: Sequence[Outcome], failing: int) -> tuple[Mistake | None, bool]:
    """The catalogued wrong version that agrees with the student on every case (and True), else on the failing case
    (and False); only a wrong version that shows on the failing case (differs from the reference there) counts."""
    expected = expected_outcomes(exercise)[failing]
    shown = [m for m in exercise.mistakes if not _agrees_with_mistake(expected, _outcomes_of(exercise, m.fn)[failing])]
    for every_case, rule in ((True, range(len(student))), (False, (failing,))):
        for mistake in shown:
            if all(_agrees_with_mistake(student[i], _outcomes_of(exercise, mistake.fn)[i]) for i in rule):
                return mistake, every_case
    return None, False


def _negated(actual: Outcome, expected: Outcome) -> bool:
    """Whether the first output is minus the reference's (and not zero, where a sign cannot show)."""
    return bool(actual.values and expected.values) and _close(actual.values[0], -expected.values[0])


def _no_gradient(grad: torch.Tensor | None) -> bool:
    return grad is None or not grad.any()


def _signature_kinds(exercise: Exercise, student: Sequence[Outcome]) -> list[str]:
    """The kinds the student's outcomes show by themselves: an input changed in place, the result negated on every
    case, a gradient where the reference has none, no gradient on any case where it has one."""
    expected = expected_outcomes(exercise)
    if any(a.changed or (a.error is not None and "in-place" in str(a.error)) for a in student):
        return [mutants.IN_PLACE]
    if any(a.error is not None for a in student):
        return []
    shows_sign = [i for i, e in enumerate(expected) if e.values and e.values[0].numel() and
                  e.values[0].abs().max() > ATOL]
    if shows_sign and all(_negated(student[i], expected[i]) for i in shows_sign):
        return [mutants.SIGN]
    pairs = list(zip(student, expected))
    if any(difference(a, e) and not difference(a, e).startswith("the gradient") for a, e in pairs):
        return []  # a detach shows as right values with a wrong gradient
    kinds = []
    names = {name for _, e in pairs for name in e.grads}
    # detach missing: a gradient on an input that the reference gives none on any case
    if any(all(_no_gradient(e.grads.get(n)) for _, e in pairs) and
           any(not _no_gradient(a.grads.get(n)) for a, _ in pairs) for n in names):
        kinds.append(mutants.DETACH_MISSING)
    # detach extra: no gradient on any case reaches an input the reference's gradient reaches
    if any(any(not _no_gradient(e.grads.get(n)) for _, e in pairs) and
           all(_no_gradient(a.grads.get(n)) for a, _ in pairs) for n in names):
        kinds.append(mutants.DETACH_EXTRA)
    return kinds


def _agreeing_mutants(exercise: Exercise, student: Sequence[Outcome], cases: Sequence[int]) -> list[mutants.Mutant]:
    """The worked solution's mutants whose outputs agree with the student's on the given cases (an error agrees
    with no mutant: the report shows the error itself)."""
    if any(student[i].error is not None for i in cases):
        return []
    return [m for m in mutants_of(exercise) if not equivalent(exercise, m.fn) and
            all(_agrees_with_mistake(student[i], _outcomes_of(exercise, m.fn)[i]) for i in cases)]


@dataclass(frozen=True)
class Diagnosis:
    kinds: list[str]  # the kinds of mistake (mutants.KINDS) the student's outcomes show, possibly none
    mistake: Mistake | None  # the catalogued wrong version that agrees with them
    edit: str = ""  # the edit of the worked solution that gives the student's outcomes, when one does


def diagnose(exercise: Exercise, student: Sequence[Outcome], failing: int) -> Diagnosis:
    """What the student's mistake is: a signature of the outputs first (in place, negated, a gradient where the
    reference has none or none where it has one), then the mutants that agree on every case, then (when no
    catalogued version agrees on every case) those that agree on the failing case."""
    mistake, every_case = _named_mistake(exercise, student, failing)
    kinds = _signature_kinds(exercise, student) or ([mistake.kind] if mistake and mistake.kind else [])
    if kinds:
        return Diagnosis(kinds, mistake)
    agreeing = _agreeing_mutants(exercise, student, range(len(student)))
    if not agreeing and not every_case:
        agreeing = _agreeing_mutants(exercise, student, (failing,))
    return Diagnosis(list(dict.fromkeys(m.kind for m in agreeing)), mistake, agreeing[0].edit if agreeing else "")


@dataclass(frozen=True)
class MutantScore:
    mutant: mutants.Mutant
    equivalent: bool  # agrees with the reference on every case: nothing to refuse
    raises: bool  # raises on some case: refused with the error and its line
    refused: bool
    named: bool  # the hint names the mutant's kind (for one that raises: the error is shown with its line)


def score_mutants(exercise: Exercise) -> list[MutantScore]:
    """Run the checker on every mutant of the exercise's worked solution: is each refused, with its kind named?"""
    scores = []
    for mutant in mutants_of(exercise):
        if equivalent(exercise, mutant.fn):
            scores.append(MutantScore(mutant, True, False, False, False))
            continue
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            refused = not check(exercise, mutant.fn, strict=False)
        report = out.getvalue()
        raises = any(o.error is not None for o in _outcomes_of(exercise, mutant.fn))
        named = refused and (hint_names(report, mutant.kind) or (raises and "raised an error" in report))
        scores.append(MutantScore(mutant, False, raises, refused, named))
    return scores


def _label(report: str) -> tuple[list[str], str, str]:
    """The hint's label, read back from a report: (the kinds it names, the catalogued mistake it names, the text)."""
    hint = next((line for line in report.splitlines() if line.startswith("  hint: (")), "  hint: ()")
    label, _, text = hint[len("  hint: ("):].partition(") ")
    kinds, rest = [], label
    while True:  # the label is "kind or kind: mistake name", "kind", or "mistake name"
        kind = next((k for k in mutants.KINDS if rest == k or rest.startswith((k + " or ", k + ": "))), None)
        if kind is None:
            return (kinds, rest, text) if kinds or not label else ([], label, text)
        kinds.append(kind)
        rest = rest[len(kind):]
        if not rest.startswith(" or "):
            return kinds, rest.removeprefix(": "), text
        rest = rest[len(" or "):]


def hint_names(report: str, kind: str) -> bool:
    """Whether a report's hint names the kind of mistake (mutants.KINDS) in its label."""
    kinds, name, _ = _label(report)
    return kind in kinds or kind == name


def names_mistake(report: str, mistake: Mistake) -> bool:
    """Whether a report's hint names the catalogued mistake and gives its hint."""
    kinds, name, text = _label(report)
    return mistake.name in (name, *kinds) and text.startswith(mistake.hint)


# ---------------------------------------------------------------------------------------------------------
# The verdict
# ---------------------------------------------------------------------------------------------------------


def _fmt(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        value = value.detach()
        if value.is_floating_point():
            value = value.double().round(decimals=6)
        return str(value.tolist())
    if isinstance(value, (tuple, list)):
        return "(" + ", ".join(_fmt(v) for v in value) + ")"
    return repr(value)


def _describe(result: Any) -> str:
    if isinstance(result, tuple):
        return f"a tuple of {len(result)} tensors (" + ", ".join(_describe(r) for r in result) + ")"
    return f"a tensor of {_shape(result)} and dtype {result.dtype}"


ERROR_HINTS = {  # words of a torch error: what the student most likely did
    "must match the size of tensor": "two shapes do not broadcast: print the shape of each operand; a reduction "
                                     "without keepdim=True drops a dimension, (B/G,) against (B/G, G), and "
                                     "F.one_hot(a) without num_classes is only as wide as the largest action",
    "numpy() on Tensor that requires grad": "numpy leaves autograd, so no gradient could reach the input: keep "
                                            "torch ops from the inputs to the result",
    "used in an in-place operation": "an input is changed in place (x *= ..., x[...] = ...): work on a copy, "
                                     "x = x * mask",
    "does not require grad and does not have a grad_fn": "the loss has no graph to backpropagate: what it is built "
                                                         "from was computed under torch.no_grad() or detached "
                                                         "(.detach(), .item(), torch.tensor(...) of computed numbers): "
                                                         "compute the log-probs with a gradient",
    "invalid for input of size": "the view does not fit the number of elements: rewards.view(-1, G) gives one row "
                                 "per group of G consecutive rewards",
}


def error_hint(message: str) -> str:
    """The hint for an error raised by the student's code: what its words usually mean, else where to look."""
    return next((hint for words, hint in ERROR_HINTS.items() if words in message),
                "read the error and the line it points at")


def _nearly(actual: Sequence[torch.Tensor], expected: Sequence[torch.Tensor]) -> bool:
    """Whether the outputs agree to float32's precision (about 1e-5 relative) though not to float64's."""
    def near(a: torch.Tensor, e: torch.Tensor) -> bool:
        scale = float(e.abs().max()) if e.numel() else 0.0
        return a.shape == e.shape and bool(torch.allclose(a, e, rtol=FLOAT32_RTOL, atol=FLOAT32_RTOL * scale))
    return len(actual) == len(expected) and all(near(a, e) for a, e in zip(actual, expected))


def _fallback_hint(exercise: Exercise, actual: Outcome, expected: Outcome, what: str) -> str:
    if what == "an input changed in place":
        return ("work on copies: x = x * mask or x = x.clone() before changing it, not x *= mask, x[...] = 0 or "
                "x.zero_(), which overwrite the caller's tensor.")
    if what.startswith("the gradient"):
        name = what.rsplit(" ", 1)[-1]
        if expected.grads[name] is None or not expected.grads[name].any():
            return (f"a gradient reaches {name}, which the reference detaches: {name} enters the equation as a "
                    f"constant, so detach what is computed from it (.detach()).")
        if actual.grads[name] is None or not actual.grads[name].any():
            return (f"the values are right but no gradient reaches {name}: something detaches it (.detach(), "
                    f".item(), torch.tensor(...) of computed numbers, numpy, or torch.no_grad()).")
        return f"a term that depends on {name} is wrong although the values agree: check each use of {name}."
    if actual.error is not None:
        return error_hint(str(actual.error)) + f" (stuck? exercises.solution({exercise.id!r}))."
    if not what.startswith("the values"):
        return f"return what the stub describes: {_describe(expected.result)}."
    if _nearly(actual.values, expected.values):
        return ("your numbers agree with the reference to about 5 digits but not to float64's 12: a step computes in "
                "float32 (torch.tensor(...) or torch.zeros(...) without dtype=, .float()), or a small constant "
                "(an ε added somewhere) is not in the equation. Keep the inputs' dtype and the equation's terms.")
    return f"compare your steps with the equation term by term (stuck? exercises.solution({exercise.id!r}))."


def _hint(exercise: Exercise, student: Sequence[Outcome], failing: int, what: str, verdict: Verdict | None) -> str:
    """The hint: a label in brackets naming the kinds of the mistake (or the catalogued version's name), then the
    catalogued version's hint, the equivalent form's note, or the kind's own hint."""
    numbers = what.startswith(("the values", "the gradient")) or " has shape " in what  # a wrong axis changes shapes
    in_place = what == "an input changed in place" or "in-place" in str(student[failing].error or "")
    if not (numbers or in_place or verdict):  # a wrong form or an error: the report says what it is
        mistake = _named_mistake(exercise, student, failing)[0]
        return (f"({mistake.name}) {mistake.hint}" if mistake else
                _fallback_hint(exercise, student[failing], expected_outcomes(exercise)[failing], what))
    diagnosis = diagnose(exercise, student, failing)
    kinds, mistake = diagnosis.kinds, diagnosis.mistake
    if mistake is not None:
        text = mistake.hint + (f" In numbers: {verdict.note}" if verdict else "")
    elif verdict is not None:
        text = verdict.note
    elif what.startswith("the gradient") and set(kinds) & {mutants.DETACH_MISSING, mutants.DETACH_EXTRA}:
        text = _fallback_hint(exercise, student[failing], expected_outcomes(exercise)[failing], what)
    elif kinds:
        text = " ".join(dict.fromkeys(mutants.KIND_HINTS[k] for k in kinds))
        if diagnosis.edit:
            before, after = diagnosis.edit.split(" -> ", 1)
            text += f" Your results are those of the worked solution with `{before}` written `{after}`."
    else:
        return _fallback_hint(exercise, student[failing], expected_outcomes(exercise)[failing], what)
    if not kinds and mistake is None:
        return text
    label = " or ".join(kinds) if kinds else mistake.name
    if kinds and mistake is not None and mistake.name not in kinds:
        label += f": {mistake.name}"
    return f"({label}) {text}"


def _details(expected: Outcome, actual: Outcome, what: str) -> list[str]:
    """The lines that show what went wrong: the error and where, the two gradients, or the two results."""
    if what == "an input changed in place":
        return []
    if actual.error is not None:
        return [f"  error: {type(actual.error).__name__}: {actual.error}"] + ([f"  at: {actual.where}"] if actual.where
                                                                            else [])
    if what.startswith("the gradient"):
        name = what.rsplit(" ", 1)[-1]
        yours = actual.grads[name]
        return [f"  expected gradient: {_fmt(expected.grads[name])}",
                f"  yours:             {'none (no gradient reaches it)' if yours is None else _fmt(yours)}"]
    return [f"  expected: {_fmt(expected.result)}", f"  yours:    {_fmt(actual.result)}"]


def _report(exercise: Exercise, case: Case, expected: Outcome, actual: Outcome, what: str, hint: str) -> str:
    if what == "an input changed in place":
        names = ", ".join(f"`{name}`" for name in actual.changed)
        problem = f"your function changed its input {names} in place"
    elif actual.error is not None:
        problem = "your function raised an error"
    elif what.startswith(("the values", "the gradient")):
        problem = f"mismatch in {what}"

    else:
        problem = what
    stop = "" if problem.endswith((".", "?")) else "."
    lines = [f"✗ {exercise.id}: case '{case.name}' failed: {problem}{stop}", "  inputs:"]
    lines += [f"    {name} = {_fmt(value)}" for name, value in case.inputs.items()]
    lines += _details(expected, actual, what)
    lines.append(f"  hint: {hint}")
    return "\n".join(lines)


def check(exercise: Exercise, fn: Callable[..., Any], strict: bool | None = None) -> bool:
    """Run `fn` and the reference on every case; print the verdict, return True if fn passes.

    The first failing case is printed with its inputs, the expected and actual values (or gradients) and a hint
    naming the mistake. `strict` (default: MINIRLHF_EXERCISES_STRICT=1) raises ExerciseFailed instead of False.
    """
    strict = env_flag(STRICT_ENV) if strict is None else strict
    cases, expected = cases_of(exercise), expected_outcomes(exercise)
    try:
        student = [run(fn, case, exercise) for case in cases]
    except NotImplementedError:
        message = (f"{exercise.id}: not implemented yet. Replace `raise NotImplementedError` in {exercise.stub}() "
                   f"with your code and run the check again (stuck? exercises.solution({exercise.id!r}) shows one "
                   f"way).")
    else:
        differences = [difference(actual, wanted) for actual, wanted in zip(student, expected)]
        failing = next((i for i, what in enumerate(differences) if what), None)
        grads = " and gradients" if exercise.grad_inputs else ""
        if failing is None:
            print(f"✓ {exercise.id}: passed {len(cases)} cases (values{grads} match minirlhf's own function).")
            return True
        for variant in exercise.variants:
            if not any(difference(a, v) for a, v in zip(student, _outcomes_of(exercise, variant.fn))):
                print(f"✓ {exercise.id}: passed {len(cases)} cases as {variant.name}, not minirlhf's own function. "
                      f"{variant.note}")
                return True
        only_values = all(not what or what.startswith("the values") for what in differences)
        verdict = exercise.equivalent_forms(cases, student, expected) if exercise.equivalent_forms and only_values \
            else None
        if verdict and verdict.accepted:
            print(f"✓ {exercise.id}: passed {len(cases)} cases in an equivalent form. {verdict.note}")
            return True
        actual, what = student[failing], differences[failing]
        message = _report(exercise, cases[failing], expected[failing], actual, what,
                          _hint(exercise, student, failing, what, verdict))
    print(message)
    if strict:
        raise ExerciseFailed(message)
    return False
