"""The testbed's side of network namespaces: availability check, listing by prefix, its error type.

Switching namespaces, sockets and commands in a namespace live in
:mod:`jitsched.netns`, which the host agent's tc backends use too; they are
re-exported here for the testbed's code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence

from jitsched import netns as _netns
from jitsched.errors import JitschedError
from jitsched.netns import NETNS_DIR, ifindex_in, in_netns, ns_command, socket_in


class TestbedError(JitschedError):
    """The emulated cluster cannot be built or driven on this machine."""


def require_netns() -> None:
    """Raise :class:`TestbedError` unless this process can create network namespaces.

    Checks, in order: Linux, root, the ``ip`` and ``tc`` tools (iproute2), and
    that a namespace can really be created and deleted.
    """
    if not os.path.exists("/proc/self/ns/net"):
        raise TestbedError("network namespaces are unavailable (no /proc/self/ns/net; Linux only)")
    if os.geteuid() != 0:
        raise TestbedError("the testbed needs root (it creates network namespaces, veths and qdiscs)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise TestbedError(f"{tool!r} not found: install iproute2 (apt-get install iproute2)")
    probe = f"js-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        raise TestbedError(f"cannot create a network namespace: {r.stderr.strip()}")
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def list_netns(prefix: str = "") -> list[str]:
    """Names of the named network namespaces that start with ``prefix``."""
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(prefix))


def run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess:
    """Run a setup command; raise :class:`TestbedError` with its stderr when it fails."""
    try:
        return _netns.run(argv, check=check)
    except _netns.CommandError as exc:
        raise TestbedError(str(exc)) from None


__all__ = ["NETNS_DIR", "TestbedError", "ifindex_in", "in_netns", "list_netns", "ns_command",
           "require_netns", "run", "socket_in"]
