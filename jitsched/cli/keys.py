"""Key commands: ``keys init`` writes the CURVE key pairs of the daemon, its hosts and its clients."""

from __future__ import annotations

import argparse
import os

from jitsched.cli.registry import arg, register
from jitsched.errors import ValidationError


def _names(text: str, flag: str) -> list[str]:
    """The comma-separated names of ``flag``; a name given twice is refused (one key each)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValidationError(f"{flag}: {', '.join(repr(n) for n in twice)} named more than once; "
                              "each name gets one key pair")
    return names


@register(
    "keys",
    arg("action", choices=("init", "add"),
        help="init: write a key directory; add: write the named hosts' and clients' keys beside "
             "the daemon's (a running daemon lets a new host's key in: the host joins)"),
    arg("dir", metavar="DIR", help="the key directory (made 0700; secret keys 0600, public keys in DIR/public/)"),
    arg("--hosts", default=None, metavar="H0,H1,...", help="host names, comma-separated"),
    arg("--hosts-count", type=int, default=None, metavar="N", help="hosts h0..h<N-1> (the testbed's names)"),
    arg("--clients", default="client", metavar="NAME,...",
        help="client names, comma-separated (default: one client named 'client')"),
    arg("--force", action="store_true", help="replace keys that exist already"),
)
def cmd_keys(args: argparse.Namespace) -> int:
    from jitsched.keys import init_keys

    if args.hosts is not None and args.hosts_count is not None:
        raise ValidationError("--hosts and --hosts-count: give one")
    if args.hosts_count is not None and args.hosts_count < 0:
        raise ValidationError(f"--hosts-count: must be >= 0, got {args.hosts_count}")
    hosts = _names(args.hosts, "--hosts") if args.hosts is not None else [f"h{i}" for i in range(args.hosts_count or 0)]
    clients = _names(args.clients, "--clients")
    if args.action == "add":
        clients = [] if args.clients == "client" else clients
        if not hosts and not clients:
            raise ValidationError("keys add: name --hosts or --clients to add")
        written = init_keys(args.dir, hosts, clients, force=args.force, add=True)
        print(f"added {len(written) // 2} key pairs to {args.dir}: {len(hosts)} hosts, {len(clients)} clients")
        return 0
    if not clients:
        raise ValidationError("--clients: no client names; a daemon with no client keys serves no one")
    written = init_keys(args.dir, hosts, clients, force=args.force)
    print(f"wrote {len(written) // 2} key pairs to {args.dir}: daemon, {len(hosts)} hosts, {len(clients)} clients")
    print(f"  the daemon needs {os.path.join(args.dir, 'daemon.secret')} and {os.path.join(args.dir, 'public')}/; "
          "host H needs hosts/H.secret and public/daemon.public; client C clients/C.secret and "
          "public/daemon.public")
    return 0
