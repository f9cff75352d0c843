"""The testbed's side of network namespaces: availability check, listing by prefix, its error type.

Switching namespaces, sockets and commands in a namespace live in
:mod:`jitsched.netns`, which the host agent's tc backends use too; they are
re-exported here for the testbed's code.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator, Sequence

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


# A one-link experiment's traffic, for ``python -c``: a sink draining every connection
# to port 5201 of argv[1]; a source sending two bulk flows from argv[1] (ports 40000 and
# 40001) to argv[2] for argv[3] seconds.
BULK_SINK = """
import socket, sys, threading
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((sys.argv[1], 5201)); srv.listen(4)
def drain(c):
    while c.recv(1 << 16):
        pass
while True:
    threading.Thread(target=drain, args=(srv.accept()[0],), daemon=True).start()
"""

BULK_SOURCE = """
import socket, sys, threading, time
src, dst, end = sys.argv[1], sys.argv[2], time.monotonic() + float(sys.argv[3])
def send(sport):
    s = socket.socket(); s.bind((src, sport)); s.connect((dst, 5201))
    buf = b"x" * (1 << 16)
    while time.monotonic() < end:
        s.send(buf)
    s.close()
ts = [threading.Thread(target=send, args=(p,)) for p in (40000, 40001)]
[t.start() for t in ts]; [t.join() for t in ts]
"""

# The two ends of :func:`veth_pair`: 198.18.200.1 on a0 in the first namespace, .2 on a1 in the second.
PAIR_ADDRS = ("198.18.200.1", "198.18.200.2")


@contextlib.contextmanager
def veth_pair(prefix: str = "jst") -> Iterator[tuple[str, str]]:
    """Two fresh namespaces joined by a veth pair (``a0`` / ``a1``, :data:`PAIR_ADDRS`), deleted on exit.

    For experiments on one link (the tc backends' tests and benches); the
    names are ``<prefix>-<8 hex digits>``, so that runs never meet.

    Yields
    ------
    (str, str)
        The namespaces of ``a0`` and of ``a1``.
    """
    names = (f"{prefix}-{uuid.uuid4().hex[:8]}", f"{prefix}-{uuid.uuid4().hex[:8]}")
    try:
        for name in names:
            run(["ip", "netns", "add", name])
        run(["ip", "-n", names[0], "link", "add", "a0", "type", "veth", "peer", "name", "a1", "netns", names[1]])
        for name, dev, addr in zip(names, ("a0", "a1"), PAIR_ADDRS, strict=True):
            run(["ip", "-n", name, "addr", "add", f"{addr}/24", "dev", dev])
            run(["ip", "-n", name, "link", "set", dev, "up"])
        yield names
    finally:
        for name in names:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)


__all__ = ["BULK_SINK", "BULK_SOURCE", "NETNS_DIR", "PAIR_ADDRS", "TestbedError", "ifindex_in", "in_netns",
           "list_netns", "ns_command", "require_netns", "run", "socket_in", "veth_pair"]
