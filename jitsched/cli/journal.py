"""Journal commands: ``journal check`` reports a daemon journal's health, ``journal recover`` salvages it."""

from __future__ import annotations

import argparse

from jitsched.cli.registry import arg, emit_json, register


def _summary(rep) -> str:
    return (f"{rep.jobs} jobs ({rep.running} running, resumable), {rep.events} progress events, "
            f"{rep.flows} announced flows")


@register(
    "journal",
    arg("action", choices=("check", "recover"), help="check: read every row and report; recover: write "
                                                      "every readable row into the new journal NEW"),
    arg("file", metavar="FILE", help="the journal (sqlite); read only, never locked or changed"),
    arg("out", metavar="NEW", nargs="?", default=None, help="recover: the new journal to write"),
    arg("--json", action="store_true", help="print the report as JSON"),
)
def cmd_journal(args: argparse.Namespace) -> int:
    from jitsched.daemon.journal import check_journal, recover_journal
    from jitsched.errors import ValidationError

    if args.action == "check":
        if args.out is not None:
            raise ValidationError("journal check takes one FILE")
        rep = check_journal(args.file)
    else:
        if args.out is None:
            raise ValidationError("journal recover FILE NEW: give the new journal's path")
        rep = recover_journal(args.file, args.out)
    if args.json:
        emit_json({"path": rep.path, "sound": rep.sound, "problems": rep.problems, "jobs": rep.jobs,
                   "running": rep.running, "events": rep.events, "flows": rep.flows,
                   "unreadable": rep.unreadable})
    elif args.action == "check":
        print(f"journal {rep.path}: {'sound' if rep.sound else 'DAMAGED'}: {_summary(rep)}")
        for line in (rep.problems + rep.unreadable)[:20]:
            print(f"  {line}")
    else:
        print(f"journal {args.out}: recovered {_summary(rep)} from {rep.path}"
              + (f"; {len(rep.unreadable)} unreadable (not recovered)" if rep.unreadable else ""))
        for line in rep.unreadable[:20]:
            print(f"  {line}")
    return 0 if args.action == "recover" or rep.sound else 1

