"""Map a method's config dataclass onto command-line flags: every field becomes `--field-name VALUE`.

A field that may be None (`int | None`, `str | None`, ...) takes `none`; a bool field takes true/false, and its bare
flag (`--debug`) means true. A list field takes one or more values (`--k 1 4`, or `--k 1 --k 4`); one that may be None
takes `none` alone (`--k none`). Unknown flags and abbreviations are errors (argparse's own message names them).

The help of each flag is the field's own documentation: the comment written beside it (and any comment lines right
above it) in the config class, read from the source with `tokenize`, with its allowed values (`choice` fields) and
its default. The config stays the one place where a setting is explained.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import io
import textwrap
import tokenize
import types
import typing
from collections.abc import Callable
from typing import Any

from minirlhf.checks import parse_bool


def _field_type(tp: Any) -> tuple[type, bool]:
    """The concrete scalar type behind `int`, `float | None`, `str | None`, ..., and whether None is allowed."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0], True
    return tp, False


def _optional(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """`parse`, except that "none" gives None (for fields whose default or meaning can be None)."""

    def parse_or_none(text: str) -> Any:
        return None if text.lower() == "none" else parse(text)

    parse_or_none.__name__ = getattr(parse, "__name__", "value")  # argparse names the type in its errors
    return parse_or_none


def _parse_bool(text: str) -> bool:
    try:
        return parse_bool("the value", text)
    except ValueError as err:  # argparse shows the message of this error type, with the flag
        raise argparse.ArgumentTypeError(str(err)) from None


def field_docs(config_cls: type) -> dict[str, str]:
    """field name -> its documentation: the comments beside (and right above) its line in the class source. A
    subclass that comments a field again adds its note to the base class's meaning."""
    docs: dict[str, str] = {}
    for cls in reversed(config_cls.__mro__):
        own = vars(cls).get("__annotations__", {})
        if not own:
            continue
        source = textwrap.dedent(inspect.getsource(cls))
        notes: dict[str, list[str]] = {}
        above: list[str] = []  # comment lines waiting for the field below them
        current = None  # the field whose line is being read
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                text = tok.string.lstrip("#").strip()
                if tok.line.strip().startswith("#"):
                    above.append(text)
                elif current is not None:
                    notes.setdefault(current, []).append(text)
            elif tok.type == tokenize.NAME and tok.start[1] == 4:  # a statement of the class body
                current = tok.string if tok.string in own and tok.line.split(":")[0].strip() == tok.string else None
                if current is not None:
                    notes[current] = above
                above = []
            elif tok.type == tokenize.NL and not tok.line.strip():  # a blank line ends a comment block
                above = []
        for name, lines in notes.items():
            if lines:
                docs[name] = "; ".join(filter(None, [docs.get(name), " ".join(lines)]))
    return docs


def _list_of(tp: Any) -> type | None:
    """The item type of a `list[...]` field (its flag takes one or more values, and may be repeated), else None."""
    return typing.get_args(tp)[0] if typing.get_origin(tp) is list else None


def _metavar(tp: type, nullable: bool, choices: tuple[str, ...] | None, many: bool = False) -> str | tuple[str, str]:
    """`INT|none`; for a list field (`many`) the first value and the others: `--k INT|none [INT ...]`."""
    shown = "|".join(choices) if choices else "true|false" if tp is bool else tp.__name__.upper()
    if many and nullable:
        return shown + "|none", shown
    return shown + ("|none" if nullable else "")


class _ExtendOrNone(argparse.Action):
    """A list flag: `--k 1 4` and `--k 1 --k 4` give [1, 4]; for a field that may be None, `--k none` (alone) gives
    None, and a later `--k 4` starts the list again."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        if None not in values:
            setattr(namespace, self.dest, [*(getattr(namespace, self.dest) or []), *values])
        elif len(values) == 1:
            setattr(namespace, self.dest, None)
        else:
            raise argparse.ArgumentError(self, "none (None) stands alone, not among values")


def add_config_arguments(parser: argparse.ArgumentParser, config_cls: type) -> None:
    """One flag per dataclass field: `--scale group|batch|none` with the field's documentation and its default."""
    hints = typing.get_type_hints(config_cls)  # resolves the string annotations of `from __future__`
    docs = field_docs(config_cls)
    for f in dataclasses.fields(config_cls):
        tp, nullable = _field_type(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else None
        choices = f.metadata.get("choices")
        item = _list_of(tp)
        parse = _parse_bool if tp is bool else item or tp
        flag_only = {"nargs": "?", "const": True} if tp is bool else {}  # `--debug` alone means true
        if item is not None:  # `--reward a b` or `--reward a --reward b`; `--reward none` alone: None
            flag_only = {"nargs": "+", "action": _ExtendOrNone}
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=_optional(parse) if nullable else parse,
            default=default,
            metavar=f.metadata.get("metavar") or _metavar(item or tp, nullable, choices, many=item is not None),
            help=f"{docs.get(f.name, '')} (default: {default!r})".replace("%", "%%").strip(),
            **flag_only,
        )


def given_fields(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The fields whose flags appear in `argv` (`--beta 0.1` or `--beta=0.1`), as opposed to defaults."""
    dest_of = {option: action.dest for action in parser._actions for option in action.option_strings}
    return {dest_of[token.split("=")[0]] for token in argv if token.split("=")[0] in dest_of}


def config_from_args(config_cls: type, args: argparse.Namespace, given: set[str] = frozenset()):
    """Build (and so validate) the config from parsed flags. With `--resume`, the interrupted run's own config is
    the starting point and only the flags in `given` change it (e.g. `--steps 400` to train longer); its out_dir
    is the folder of the checkpoint resumed from, wherever that folder is now. A data file (`--prompts p.jsonl`,
    `--reward r.py:f`) is recorded by its absolute path, so a resume from another working directory finds it."""
    from minirlhf.trainers.run.checkpoint import saved_config
    from minirlhf.trainers.run.manifest import absolute_data_paths

    names = {f.name for f in dataclasses.fields(config_cls)}
    values = {k: v for k, v in vars(args).items() if k in names}
    if values.get("resume"):
        saved = saved_config(values["resume"])
        saved.pop("out_dir", None)  # where it wrote before a move: it now writes in the folder it resumes from
        saved.pop("fork_to", None)  # a fork happens once, when asked
        values = saved | {k: values[k] for k in given | {"resume"} if k in names}
    return config_cls.from_dict(absolute_data_paths(values))  # data files found from any folder
