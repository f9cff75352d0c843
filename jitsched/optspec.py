"""Options classes declared once: dataclass fields with their help and choices, the argparse flags built from them, and their checks."""

from __future__ import annotations

import argparse
import math
import types
import typing
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import MISSING, Field, field, fields
from typing import Any

import numpy as np

from jitsched.errors import ValidationError


def option(default: Any = MISSING, help: str = "", *, choices: Sequence[str] | None = None,
           flag: bool = True, default_factory: Callable[[], Any] | None = None,
           metavar: str | None = None) -> Any:
    """A dataclass field of an options class: its default, help text, choices and whether it is a flag.

    Parameters
    ----------
    default : object
        The field's default (also the flag's).
    help : str
        One-line help; the flag's help text, where ``%(default)s`` is argparse's default.
    choices : sequence of str, optional
        The only values accepted (the flag's ``choices``).
    flag : bool
        Whether :func:`add_options` makes it a ``--flag`` (False: a Python-only setting).
    default_factory : callable, optional
        For a mutable default, as :func:`dataclasses.field`'s.
    metavar : str, optional
        The flag's value in its help (``MS``; default argparse's, the field's name).
    """
    metadata = {"help": help, "flag": flag}
    if metavar is not None:
        metadata["metavar"] = metavar
    if choices is not None:
        metadata["choices"] = tuple(choices)
    if default_factory is not None:
        return field(default_factory=default_factory, metadata=metadata)
    return field(default=default, metadata=metadata)


def check_choice(opts, name: str) -> None:
    value = getattr(opts, name)
    choices = _field(type(opts), name).metadata["choices"]
    if value not in choices:
        raise ValidationError(f"{name}: expected one of {', '.join(choices)}, got {value!r}")


def check_flag(opts, name: str) -> bool:
    """``opts``'s field ``name`` as a bool: true or false (a numpy bool too), else a ValidationError."""
    value = getattr(opts, name)
    if not isinstance(value, (bool, np.bool_)):
        raise ValidationError(f"{name}: expected true or false, got {value!r}")
    return bool(value)


def check_types(opts) -> None:
    # each field against its annotation: bool is an int to Python but never a
    # count or a rate here, and an int is a fine float
    hints = typing.get_type_hints(type(opts))
    for f in fields(opts):
        kind, optional = _flag_type(hints[f.name])
        value = getattr(opts, f.name)
        if kind not in (bool, int, float, str) or (value is None and optional):
            continue
        if kind is bool:
            ok = isinstance(value, bool)
        else:
            ok = not isinstance(value, bool) and isinstance(value, (int, float) if kind is float else kind)
        if not ok:
            raise ValidationError(f"{f.name}: expected {'a' if kind is not int else 'an'} {kind.__name__}"
                                  f"{' or None' if optional else ''}, got {value!r}")


def check_range(opts, name: str, lo: float, hi: float = math.inf, open_lo: bool = False) -> None:
    value = getattr(opts, name)
    # written so that NaN fails too
    if not ((lo < value if open_lo else lo <= value) and value <= hi):
        low = f"({lo:g}" if open_lo else f"[{lo:g}"
        high = f"{hi:g}]" if math.isfinite(hi) else "inf)"
        raise ValidationError(f"{name}: must be within {low}, {high}, got {value!r}")


def _field(cls: type, name: str) -> Field:
    return next(f for f in fields(cls) if f.name == name)


def flag_fields(cls: type) -> list[Field]:
    """The fields of options class ``cls`` that are command-line flags, in declaration order."""
    return [f for f in fields(cls) if f.metadata.get("flag", False)]


def _flag_type(hint: Any) -> tuple[type, bool]:
    # the type a flag's value is parsed to, and whether the field may be None
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"a flag cannot parse a union of {args}")
        return args[0], True
    return hint, False


def argument_specs(cls: type, *, exclude: Collection[str] = (), defaults: Mapping[str, Any] | None = None,
                   many: Collection[str] = ()) -> list[tuple[tuple[str, ...], dict]]:
    """``(flags, add_argument keywords)`` of every flag field of options class ``cls``.

    A field ``link_mbit: float | None`` becomes ``--link-mbit`` with
    ``type=float``; ``bool | None`` a ``--x/--no-x`` pair, ``bool`` a
    ``store_true`` flag; the default is the field's, the help and choices its
    metadata's.

    Parameters
    ----------
    cls : type
        A dataclass whose fields were declared with :func:`option`.
    exclude : collection of str
        Fields left out.
    defaults : mapping, optional
        Other defaults for some fields (their help's ``%(default)s`` follows).
    many : collection of str
        Fields that take one or more values (``nargs="+"``, the default a
        one-item list), for a sweep: the caller builds one options object per value.

    Returns
    -------
    list of (tuple of str, dict)
    """
    defaults = dict(defaults or {})
    names = {f.name for f in flag_fields(cls)}
    unknown = (set(exclude) | set(defaults) | set(many)) - names
    if unknown:
        raise ValueError(f"{cls.__name__} has no flag field {', '.join(sorted(unknown))}")
    hints = typing.get_type_hints(cls)
    out = []
    for f in flag_fields(cls):
        if f.name in exclude:
            continue
        kind, optional = _flag_type(hints[f.name])
        default = defaults.get(f.name, f.default)
        kw: dict[str, Any] = {"dest": f.name, "help": f.metadata["help"]}
        if kind is bool:
            kw["action"] = argparse.BooleanOptionalAction if optional or default else "store_true"
        else:
            kw["type"] = kind
        if "choices" in f.metadata:
            kw["choices"] = f.metadata["choices"]
        if "metavar" in f.metadata:
            kw["metavar"] = f.metadata["metavar"]
        if f.name in many:
            kw["nargs"] = "+"
            kw["help"] += "; several values: one set of runs each"
            default = [default]
        kw["default"] = default
        out.append(((f"--{f.name.replace('_', '-')}",), kw))
    return out


def add_options(parser: argparse.ArgumentParser, cls: type, **kw) -> argparse.ArgumentParser:
    """Add the flags of options class ``cls`` to ``parser`` (keywords: :func:`argument_specs`'s); returns it."""
    for flags, options in argument_specs(cls, **kw):
        parser.add_argument(*flags, **options)
    return parser


def options_from_args(args: argparse.Namespace, cls: type, **overrides):
    """An instance of options class ``cls`` from parsed flags: every flag field ``args`` has, then ``overrides``.

    Fields whose flag was excluded from the parser keep their defaults; a
    field added with ``many`` holds a list in ``args`` and needs its one
    value in ``overrides``.

    Raises
    ------
    ValidationError
        A value out of range, naming the field.
    """
    values = {f.name: getattr(args, f.name) for f in flag_fields(cls) if hasattr(args, f.name)}
    return cls(**(values | overrides))


__all__ = ["add_options", "argument_specs", "check_choice", "check_range", "check_types", "flag_fields",
           "option", "options_from_args"]
