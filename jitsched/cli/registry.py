"""The command registry the jitsched CLI is generated from, and the argument and output helpers its commands share."""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Arg:
    """One argparse argument: positional names/flags and keyword options."""

    flags: tuple[str, ...]
    options: dict = field(default_factory=dict)


def arg(*flags: str, **options) -> Arg:
    return Arg(tuple(flags), options)


def emit_json(obj) -> None:
    """``obj`` as one line of compact JSON on stdout."""
    json.dump(obj, sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")


def seed(text: str) -> int:
    """A random seed from the command line: an integer >= 0 (argparse ``type``)."""
    value = int(text)  # argparse reports a ValueError as "invalid seed value"
    if value < 0:
        raise argparse.ArgumentTypeError(f"a seed is an integer >= 0, got {value}")
    return value


def positive(text: str) -> float:
    """A positive finite number from the command line (argparse ``type``)."""
    value = float(text)
    if not 0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text}")
    return value


def non_negative(text: str) -> float:
    """A finite number >= 0 from the command line (argparse ``type``)."""
    value = float(text)
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


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
