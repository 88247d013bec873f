"""Wrong versions of a worked solution, made by editing its code: the kinds of mistake the checker must name.

`mutants(fn, grad_params, tensor_params)` reads the function's source and returns one edited copy per place where
a classic mistake can be made, each labelled with its kind (the labels the checker's hints print):

    sign flipped                 a - b written b - a or a + b (and a + b as a - b), a unary minus dropped, an
                                 assigned term or the result negated
    detach missing / extra       a .detach() dropped; an input or an assigned intermediate detached
    wrong axis                   dim=1 (or -1) of a reduction read as 0, and 0 as -1
    mask dropped                 the mask replaced by ones; a torch.where(mask, x, 0) replaced by x
    mean over padding            a masked sum over a count (x.sum() / mask.sum()) replaced by x.mean()
    biased std                   .std()/.var() with correction=0 (the population statistic)
    min and max swapped          minimum/maximum, min/max, amin/amax, clamp_min/clamp_max exchanged
    the clip on the wrong quantity   clamp(r) * A written r * clamp(A), or clamp(r * A)
    in-place change of an input  input - x written input.sub_(x) (and add_, mul_, div_)

The engine (engine.py) runs the mutants of an exercise's solution on its cases, to name the kind of a student's
mistake by the mutant whose outputs agree with the student's; `python scripts/exercise_mutants.py` prints, per
exercise, how many mutants there are, how many change the behaviour on the cases, and how many the checker refuses
with a hint naming their kind.
"""

from __future__ import annotations
import __future__

import ast
import copy
import functools
import inspect
import textwrap
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

SIGN = "sign flipped"
DETACH_MISSING = "detach missing"
DETACH_EXTRA = "detach extra"
AXIS = "wrong axis"
MASK = "mask dropped"
PADDING = "mean over padding"
BIASED_STD = "biased std"
MIN_MAX = "min and max swapped"
CLIP = "the clip on the wrong quantity"
IN_PLACE = "in-place change of an input"

KIND_HINTS = {  # what each kind of mistake means, for the hint that names it
    SIGN: "one sign is the wrong way round (a - b written b - a, a minus dropped or added): your result agrees with "
          "the reference's with that one sign changed. Check the sign of each term against the equation.",
    DETACH_MISSING: "a quantity the equation treats as a constant carries a gradient: detach it (.detach()), so "
                    "that no gradient flows through it (a reference point, a returned reward, a frozen input).",
    DETACH_EXTRA: "a quantity that must carry the gradient is detached (.detach(), .item(), torch.tensor(...) of "
                  "computed numbers, numpy or torch.no_grad()): keep torch ops from the input to the result.",
    AXIS: "a reduction runs over the wrong dimension: check each dim= (or axis) against the shapes, (B, T) has the "
          "tokens on dim 1 (-1), (B/G, G) has a group per row.",
    MASK: "the mask is not applied: padding positions change the result. Zero them (torch.where(mask.bool(), x, 0)) "
          "before summing, and count only the real tokens.",
    PADDING: "the mean counts padding: divide the masked sum by the number of real tokens (mask.sum()), not by the "
             "number of positions (.mean()).",
    BIASED_STD: "the std (or variance) is the population one, dividing by G: the reference uses the sample std, "
                "dividing by G - 1 (torch.std's default, correction=1).",
    MIN_MAX: "a min and a max are exchanged (minimum/maximum, clamp_min/clamp_max, min=/max=): the clipped objective "
             "takes the MIN, the pessimistic bound, and a floor at 0 is a max.",
    CLIP: "the clip acts on the wrong quantity: it is the RATIO that is clipped, then multiplied by the advantage, "
          "min(r Â, clip(r, 1 - ε, 1 + ε) Â); not the advantage, not the product.",
    IN_PLACE: "an input is changed in place (x.sub_(...), x -= ..., x[...] = ...), which overwrites the caller's "
              "tensor: work on copies, x = x * mask or x = x.clone() before changing it.",
}
KINDS = tuple(KIND_HINTS)

REDUCTIONS = {"sum", "mean", "std", "var", "softmax", "log_softmax", "amax", "amin", "logsumexp", "cumsum", "prod",
              "max", "min", "any", "all", "argmax", "norm"}
SWAPS = {"minimum": "maximum", "min": "max", "amin": "amax", "clamp_min": "clamp_max"}
SWAPS.update({b: a for a, b in SWAPS.items()})
IN_PLACE_OPS = {ast.Sub: "sub_", ast.Add: "add_", ast.Mult: "mul_", ast.Div: "div_"}


@dataclass(frozen=True)
class Mutant:
    kind: str  # one of KINDS
    edit: str  # the edited expression, before -> after
    fn: Callable[..., Any]


def _attr_call(node: ast.AST) -> str | None:
    """The name of the called attribute (x.sum(...), torch.std(...) -> sum, std), else None."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _detached(node: ast.expr) -> ast.expr:
    return ast.Call(ast.Attribute(node, "detach", ast.Load()), [], [])


def _int_of(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant) \
            and type(node.operand.value) is int:
        return -node.operand.value
    return None


class _Context:
    def __init__(self, fn_def: ast.FunctionDef, grad_params: Sequence[str], tensor_params: Sequence[str]):
        self.grad_params, self.tensor_params = set(grad_params), set(tensor_params)
        self.mask_params = {p for p in self.tensor_params if "mask" in p}
        # names computed from a mask (keep = mask.bool(), mask = rollout.response_mask.bool()): a torch.where on them
        # is a masking step, a division by their sum a masked mean
        self.masks = set(self.mask_params)
        for node in ast.walk(fn_def):
            if isinstance(node, ast.Assign) and (_names(node.value) & self.masks or "mask" in ast.unparse(node.value)):
                self.masks |= {t.id for t in node.targets if isinstance(t, ast.Name)}


def _edits(node: ast.AST, ctx: _Context) -> Iterator[tuple[str, ast.AST]]:
    """(kind, replacement of node) for each mutation of this node."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and _int_of(node) is None:
        yield SIGN, node.operand
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Sub):
        yield SIGN, ast.BinOp(node.right, ast.Sub(), node.left)
        yield SIGN, ast.BinOp(node.left, ast.Add(), node.right)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        yield SIGN, ast.BinOp(node.left, ast.Sub(), node.right)
    if isinstance(node, ast.Return) and node.value is not None:
        first = node.value.elts[0] if isinstance(node.value, ast.Tuple) else node.value
        negated = ast.UnaryOp(ast.USub(), first)
        yield SIGN, ast.Return(ast.Tuple([negated, *node.value.elts[1:]], ast.Load())
                               if isinstance(node.value, ast.Tuple) else negated)
    name = _attr_call(node)
    if name == "detach" and not node.args:
        yield DETACH_MISSING, node.func.value
    if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in ctx.grad_params:
        yield DETACH_EXTRA, _detached(node)
    if isinstance(node, ast.Assign) and isinstance(node.value, (ast.BinOp, ast.Call)) and \
            _names(node.value) & ctx.grad_params and _attr_call(node.value) != "detach":
        yield DETACH_EXTRA, ast.Assign(node.targets, _detached(node.value))
    if isinstance(node, ast.Assign) and isinstance(node.value, (ast.BinOp, ast.Call, ast.UnaryOp)):
        yield SIGN, ast.Assign(node.targets, ast.UnaryOp(ast.USub(), node.value))
    if name in REDUCTIONS:
        yield from _axis_edits(node)
    if name in ("std", "var") and not {k.arg for k in node.keywords} & {"correction", "unbiased"}:
        yield BIASED_STD, ast.Call(node.func, node.args, [*node.keywords, ast.keyword("correction", ast.Constant(0))])
    if name in SWAPS or (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in SWAPS):
        func = copy.deepcopy(node.func)
        if isinstance(func, ast.Attribute):
            func.attr = SWAPS[func.attr]
        else:
            func.id = SWAPS[func.id]
        yield MIN_MAX, ast.Call(func, node.args, node.keywords)
    if name == "clamp":
        swapped = {"min": "max", "max": "min"}
        if node.keywords and all(k.arg in swapped for k in node.keywords) and len(node.keywords) == 1:
            yield MIN_MAX, ast.Call(node.func, node.args, [ast.keyword(swapped[k.arg], k.value) for k in node.keywords])
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        yield from _clip_edits(node)
    if isinstance(node, ast.Call) and name == "where" and len(node.args) == 3 and _names(node.args[0]) & ctx.masks:
        yield MASK, node.args[1]
    if ctx.masks and isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        left, negate = (node.left.operand, True) if isinstance(node.left, ast.UnaryOp) and isinstance(
            node.left.op, ast.USub) else (node.left, False)
        if _attr_call(left) == "sum" and _names(node.right) & ctx.masks:
            mean = ast.Call(ast.Attribute(left.func.value, "mean", ast.Load()), left.args, left.keywords)
            yield PADDING, ast.UnaryOp(ast.USub(), mean) if negate else mean
    if isinstance(node, ast.BinOp) and type(node.op) in IN_PLACE_OPS and isinstance(node.left, ast.Name) and \
            node.left.id in ctx.tensor_params:
        yield IN_PLACE, ast.Call(ast.Attribute(ast.Name(node.left.id, ast.Load()), IN_PLACE_OPS[type(node.op)],
                                               ast.Load()), [node.right], [])


def _axis_edits(node: ast.Call) -> Iterator[tuple[str, ast.AST]]:
    def other(dim: int) -> ast.expr:
        return ast.Constant(0) if dim != 0 else ast.UnaryOp(ast.USub(), ast.Constant(1))
    for i, keyword in enumerate(node.keywords):
        if keyword.arg in ("dim", "axis") and _int_of(keyword.value) is not None:
            keywords = list(node.keywords)
            keywords[i] = ast.keyword(keyword.arg, other(_int_of(keyword.value)))
            yield AXIS, ast.Call(node.func, node.args, keywords)
    is_torch_fn = isinstance(node.func.value, ast.Name) and node.func.value.id in ("torch", "F")
    position = 1 if is_torch_fn else 0
    if len(node.args) > position and _int_of(node.args[position]) is not None:
        args = list(node.args)
        args[position] = other(_int_of(args[position]))
        yield AXIS, ast.Call(node.func, args, node.keywords)


def _clip_edits(node: ast.BinOp) -> Iterator[tuple[str, ast.AST]]:
    """clamp(r, lo, hi) * A -> r * clamp(A, lo, hi) and clamp(r * A, lo, hi)."""
    for clipped, other, clipped_first in ((node.left, node.right, True), (node.right, node.left, False)):
        if _attr_call(clipped) == "clamp" and isinstance(clipped.func.value, ast.Name) and \
                clipped.func.value.id == "torch" and clipped.args:
            quantity, bounds = clipped.args[0], clipped.args[1:]
            other_clipped = ast.Call(clipped.func, [other, *bounds], clipped.keywords)
            yield CLIP, ast.BinOp(quantity, ast.Mult(), other_clipped) if clipped_first else \
                ast.BinOp(other_clipped, ast.Mult(), quantity)
            product = ast.BinOp(quantity, ast.Mult(), other)
            yield CLIP, ast.Call(clipped.func, [product, *bounds], clipped.keywords)


def _mask_dropped(fn_def: ast.FunctionDef, ctx: _Context) -> Iterator[tuple[str, ast.FunctionDef]]:
    """The whole function with a mask input replaced by ones."""
    for name in sorted(ctx.mask_params):
        edited = copy.deepcopy(fn_def)
        ones = ast.parse(f"{name} = torch.ones_like({name})").body[0]
        edited.body.insert(1 if ast.get_docstring(fn_def) else 0, ones)
        yield f"{name} -> torch.ones_like({name})", edited


def _replace(tree: ast.AST, target: ast.AST, new: ast.AST) -> None:
    for parent in ast.walk(tree):
        for field, value in ast.iter_fields(parent):
            if value is target:
                setattr(parent, field, new)
                return
            if isinstance(value, list) and any(v is target for v in value):
                value[[i for i, v in enumerate(value) if v is target][0]] = new
                return


def _compile(fn_def: ast.FunctionDef, fn: Callable[..., Any]) -> Callable[..., Any]:
    module = ast.fix_missing_locations(ast.Module([fn_def], []))
    namespace = dict(fn.__globals__)
    flags = __future__.annotations.compiler_flag
    exec(compile(module, f"<mutant of {fn.__name__}>", "exec", flags=flags, dont_inherit=True), namespace)  # noqa: S102
    mutant = namespace[fn_def.name]

    @functools.wraps(mutant)
    def quiet(*args: Any) -> Any:  # a mutant's warnings (a std over one element) are not the student's
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return mutant(*args)
    return quiet


def mutants(fn: Callable[..., Any], grad_params: Sequence[str] = (), tensor_params: Sequence[str] = ()
            ) -> list[Mutant]:
    """Every single-edit wrong version of fn, each labelled with its kind (in the order of the source).

    grad_params: inputs that carry a gradient (they may be detached by mistake); tensor_params: every tensor input
    (they may be changed in place, and those named like a mask may be dropped).
    """
    fn_def = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
    fn_def.decorator_list = []
    ctx = _Context(fn_def, grad_params, tensor_params)
    docstring = fn_def.body[0] if ast.get_docstring(fn_def) else None
    sites = [node for node in ast.walk(fn_def) if node is not fn_def and node is not docstring]
    found = []
    for index, node in enumerate(sites):
        for kind, new in _edits(node, ctx):
            edited = copy.deepcopy(fn_def)
            target = [n for n in ast.walk(edited) if n is not edited and n is not (
                edited.body[0] if docstring else None)][index]
            new = ast.fix_missing_locations(ast.copy_location(new, node))
            _replace(edited, target, new)
            edit = f"{ast.unparse(node)} -> {ast.unparse(new)}".replace("\n", " ")
            found.append(Mutant(kind, edit, _compile(edited, fn)))
    found += [Mutant(MASK, edit, _compile(edited, fn)) for edit, edited in _mask_dropped(fn_def, ctx)]
    return found
