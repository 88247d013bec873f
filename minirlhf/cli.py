"""Map a method's config dataclass onto command-line flags: every field becomes `--field-name VALUE`.

A field that may be None (`int | None`, `str | None`, ...) takes `none`; a bool field takes true/false, and its bare
flag (`--debug`) means true. Unknown flags and abbreviations are errors (argparse's own message names them).
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any


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
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true/false, got {text!r}")


def add_config_arguments(parser: argparse.ArgumentParser, config_cls: type) -> None:
    """One flag per dataclass field, with its default in the help text."""
    hints = typing.get_type_hints(config_cls)  # resolves the string annotations of `from __future__`
    for f in dataclasses.fields(config_cls):
        tp, nullable = _field_type(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else None
        parse = _parse_bool if tp is bool else tp
        flag_only = {"nargs": "?", "const": True} if tp is bool else {}  # `--debug` alone means true
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=_optional(parse) if nullable else parse,
            default=default,
            help=f"(default: {default!r})" + (", none for None" if nullable else ""),
            **flag_only,
        )


def given_fields(parser: argparse.ArgumentParser, argv: list[str]) -> set[str]:
    """The fields whose flags appear in `argv` (`--beta 0.1` or `--beta=0.1`), as opposed to defaults."""
    dest_of = {option: action.dest for action in parser._actions for option in action.option_strings}
    return {dest_of[token.split("=")[0]] for token in argv if token.split("=")[0] in dest_of}


def config_from_args(config_cls: type, args: argparse.Namespace, given: set[str] = frozenset()):
    """Build (and so validate) the config from parsed flags. With `--resume`, the interrupted run's own config is
    the starting point and only the flags in `given` change it (e.g. `--steps 400` to train longer); its out_dir
    is the folder of the checkpoint resumed from, wherever that folder is now."""
    from minirlhf.trainers.checkpoint import saved_config

    names = {f.name for f in dataclasses.fields(config_cls)}
    values = {k: v for k, v in vars(args).items() if k in names}
    if values.get("resume"):
        saved = saved_config(values["resume"])
        saved.pop("out_dir", None)  # where it wrote before a move: it now writes in the folder it resumes from
        values = saved | {k: values[k] for k in given | {"resume"} if k in names}
    return config_cls.from_dict(values)
