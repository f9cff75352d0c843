"""The ``jitsched`` command line, generated from the command registry."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from jitsched import __version__
from jitsched.cli.registry import REGISTRY
from jitsched.errors import JitschedError

# Every module that registers commands, listed explicitly (one line per area).
COMMAND_MODULES = (
    "jitsched.cli.core",
    "jitsched.cli.sim",
    "jitsched.cli.testbed",
    "jitsched.cli.daemon",
    "jitsched.cli.workloads",
    "jitsched.cli.keys",
    "jitsched.cli.journal",
)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (exit 2): the usage of a command
    with many flags spans several lines, and ``--help`` shows it anyway."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    for mod in COMMAND_MODULES:
        importlib.import_module(mod)
    parser = OneLineParser(
        prog="jitsched", description="DAG-aware just-in-time network traffic scheduler")
    parser.add_argument("--version", action="version", version=f"jitsched {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for cmd in REGISTRY.values():
        p = sub.add_parser(cmd.name, help=cmd.help, description=cmd.help)
        for a in cmd.args:
            p.add_argument(*a.flags, **a.options)
        p.set_defaults(_run=cmd.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``jitsched`` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except JitschedError as exc:
        # Bad input is the user's to fix: one line, no traceback.
        print(f"jitsched {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"jitsched {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # whoever read stdout has gone (``| head``): stop quietly with a shell's SIGPIPE status,
        # stdout pointed at /dev/null so that the interpreter's last flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
