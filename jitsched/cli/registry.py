"""The command registry the jitsched CLI is generated from."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Arg:
    """One argparse argument: positional names/flags and keyword options."""

    flags: tuple[str, ...]
    options: dict = field(default_factory=dict)


def arg(*flags: str, **options) -> Arg:
    return Arg(tuple(flags), options)


@dataclass(frozen=True)
class Command:
    """A CLI command: its name, one-line help, arguments and handler ``(args) -> exit code``."""

    name: str
    help: str
    args: tuple[Arg, ...]
    run: Callable[[argparse.Namespace], int]


REGISTRY: dict[str, Command] = {}


def register(name: str, help: str, *args: Arg):
    """Decorator: register ``fn(args) -> int`` as the command ``name``."""

    def deco(fn: Callable[[argparse.Namespace], int]):
        if name in REGISTRY:
            raise RuntimeError(f"command {name!r} registered twice")
        REGISTRY[name] = Command(name, help, tuple(args), fn)
        return fn

    return deco
