"""The ``jitsched`` command line, generated from the command registry."""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import re
import sys

from jitsched import __version__
from jitsched.cli.registry import COMMANDS, REGISTRY
from jitsched.errors import JitschedError

# The errors of a write whose device is full or failing.
WRITE_FAILURES = (errno.ENOSPC, errno.EDQUOT, errno.EIO)

# Every module that registers commands, with the commands it registers (from COMMANDS).
# main() imports only the module of the command it runs: the others bring NumPy, SciPy and
# the planner, 1.1 s before `jitsched status` could start on a 2-core machine where its own
# module takes 0.2 s.
COMMAND_MODULE = {name: mod for name, (mod, _) in COMMANDS.items()}
COMMAND_MODULES: dict[str, tuple[str, ...]] = {}
for _name, _mod in COMMAND_MODULE.items():
    COMMAND_MODULES[_mod] = (*COMMAND_MODULES.get(_mod, ()), _name)


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (exit 2): the usage of a command
    with many flags spans several lines, and ``--help`` shows it anyway."""

    # the command line being parsed (main sets it): an unknown flag is the command's
    argv: list[str] | None = None

    def error(self, message: str):
        prog = self.prog
        if message.startswith("unrecognized arguments") and self.argv is not None:
            # argparse reports a command's unknown flags from the top parser: name the
            # command, whose --help lists its flags
            command = next((a for a in self.argv if a in REGISTRY), None)
            if command is None:
                message += "; a COMMAND comes first"
            else:
                prog = f"{self.prog} {command}"
        self.exit(2, f"{prog}: error: {message} (see {prog} --help)\n")


def build_parser(command: str | None = None, *, listing: bool = False) -> argparse.ArgumentParser:
    """The parser of every command, or of ``command`` alone (its module alone imported; the
    others listed by name and help); with ``listing``, every command listed and none
    imported (enough for ``--help``, ``--version`` and the error of an unknown or missing
    command)."""
    mods = [] if listing else [COMMAND_MODULE[command]] if command in COMMAND_MODULE else list(COMMAND_MODULES)
    for mod in mods:
        importlib.import_module(mod)
    loaded = {name for mod in mods for name in COMMAND_MODULES[mod]}
    parser = OneLineParser(
        prog="jitsched", description="DAG-aware just-in-time network traffic scheduler")
    parser.add_argument("--version", action="version", version=f"jitsched {__version__}")
    # not required here: main() says it is missing, after an unknown flag given before
    # any COMMAND is named (argparse's required check would hide it)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=False)
    for name, (_, help_) in COMMANDS.items():
        p = sub.add_parser(name, help=help_, description=help_)
        if name not in loaded:
            continue  # listed only
        for a in REGISTRY[name].args:
            p.add_argument(*a.flags, **a.options)
        p.set_defaults(_run=REGISTRY[name].run)
    return parser


def _as_flag(parser: OneLineParser, command: str, message: str) -> str:
    """``message`` with the option field it starts with (``slot_s: ...``, ``[daemon].x: ...``)
    named as the flag the user gave it by (``--slot-s: ...``); unchanged when the value
    came from elsewhere (a config file, a default)."""
    m = re.match(r"(?:\[\w+\]\.)?(\w+):", message)
    if m is None:
        return message
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for action in subs.choices[command]._actions:
        flags = [s for s in action.option_strings if s.startswith("--")]
        if action.dest == m.group(1) and flags and any(a == flags[0] or a.startswith(flags[0] + "=")
                                                          for a in parser.argv or ()):
            return flags[0] + message[m.end() - 1:]
    return message


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``jitsched`` console script; returns the exit code."""
    given = list(sys.argv[1:] if argv is None else argv)
    # the first word that is not a flag names the command (the top level has no valued flags);
    # without a known one, the parser only lists the commands
    word = next((a for a in given if not a.startswith("-")), None)
    parser = build_parser(word) if word in COMMAND_MODULE else build_parser(listing=True)
    parser.argv = given
    args = parser.parse_args(argv)
    if args.command is None:
        parser.error("the following arguments are required: COMMAND")
    try:
        return int(args._run(args) or 0)
    except JitschedError as exc:
        # Bad input is the user's to fix: one line, no traceback.
        print(f"jitsched {args.command}: error: {_as_flag(parser, args.command, str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"jitsched {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # whoever read stdout has gone (``| head``): stop quietly with a shell's SIGPIPE status,
        # stdout pointed at /dev/null so that the interpreter's last flush does not fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        if exc.errno not in WRITE_FAILURES:
            raise
        # the output's device is full or failing (`> /dev/full`): say so in one line, and
        # point stdout at /dev/null so that the interpreter's last flush does not fail again
        print(f"jitsched {args.command}: error: cannot write the output ({exc.strerror})", file=sys.stderr)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
