"""Map a method's config dataclass onto command-line flags: every field becomes `--field-name VALUE`."""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from typing import Any


def _field_type(tp: Any) -> type:
    """The concrete scalar type behind `int`, `float | None`, `str | None`, ..."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0]
    return tp


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
        tp = _field_type(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else None
        parser.add_argument(
            "--" + f.name.replace("_", "-"),
            dest=f.name,
            type=_parse_bool if tp is bool else tp,
            default=default,
            help=f"(default: {default!r})",
        )


def config_from_args(config_cls: type, args: argparse.Namespace):
    """Build (and so validate) the config from parsed flags."""
    names = {f.name for f in dataclasses.fields(config_cls)}
    return config_cls(**{k: v for k, v in vars(args).items() if k in names})
