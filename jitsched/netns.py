"""Network namespaces: availability, listing, per-thread switching, sockets and commands in a namespace, veth pairs.

A low layer: the host agent's tc backends (``jitsched.agents.backends``) and
the emulated testbed (:mod:`jitsched.testbed`) both use it, and it imports
neither.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import socket
import subprocess
import threading
import uuid
from collections.abc import Iterator, Sequence

from jitsched.errors import JitschedError

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_lock = threading.Lock()


class NetnsUnavailable(JitschedError):
    """This process cannot create network namespaces (not Linux, not root, no iproute2)."""


class CommandError(JitschedError):
    """A set-up command (``ip``, ``tc``) failed; the message holds its command line and stderr."""


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextlib.contextmanager
def in_netns(name: str | None) -> Iterator[None]:
    """Run the body with the calling thread inside network namespace ``name``.

    ``setns`` moves only the calling thread, and a socket stays in the
    namespace it was created in, so sockets opened in the body can be used
    from anywhere afterwards. ``None`` means "stay where you are".
    """
    if name is None:
        yield
        return
    with open("/proc/thread-self/ns/net", "rb") as home, open(f"{NETNS_DIR}/{name}", "rb") as target:
        _setns(target.fileno())
        try:
            yield
        finally:
            _setns(home.fileno())


class Namespaces:
    """Enter network namespaces by name from descriptors opened once per namespace.

    :func:`in_netns` opens two files each time, which a process that opens a
    socket per transfer in one of a few namespaces pays thousands of times.
    The descriptors keep their namespaces alive: :meth:`close` them when done.
    """

    def __init__(self) -> None:
        self._home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        self._fds: dict[str, int] = {}
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def entered(self, name: str | None) -> Iterator[None]:
        """Run the body with the calling thread in namespace ``name`` (None: stay), then back home."""
        if name is None:
            yield
            return
        fd = self._fds.get(name)
        if fd is None:
            with self._lock:
                fd = self._fds.get(name)
                if fd is None:
                    fd = self._fds[name] = os.open(f"{NETNS_DIR}/{name}", os.O_RDONLY | os.O_CLOEXEC)
        _setns(fd)
        try:
            yield
        finally:
            _setns(self._home)

    def close(self) -> None:
        """Close every descriptor (the namespaces can then go away)."""
        with self._lock:
            for fd in [self._home, *self._fds.values()]:
                os.close(fd)
            self._fds.clear()


def socket_in(netns: str | None, family: int = socket.AF_INET, type: int = socket.SOCK_STREAM,
              proto: int = 0) -> socket.socket:
    """A new socket that lives in network namespace ``netns`` (None: the current one)."""
    with _lock, in_netns(netns):
        return socket.socket(family, type, proto)


def ifindex_in(netns: str | None, dev: str) -> int:
    """Interface index of ``dev`` inside ``netns``."""
    with _lock, in_netns(netns):
        return socket.if_nametoindex(dev)


def ns_command(netns: str | None, argv: Sequence[str]) -> list[str]:
    """``argv`` prefixed so that it runs inside ``netns`` (unchanged for None)."""
    if netns is None:
        return list(argv)
    return ["ip", "netns", "exec", netns, *argv]


def run(argv: Sequence[str], *, check: bool = True) -> subprocess.CompletedProcess:
    """Run a setup command; raise :class:`CommandError` with its stderr when it fails."""
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise CommandError(f"{' '.join(argv)} failed: {r.stderr.strip() or r.stdout.strip()}")
    return r




def require_netns() -> None:
    """Raise :class:`NetnsUnavailable` unless this process can create network namespaces.

    Checks, in order: Linux, root, the ``ip`` and ``tc`` tools (iproute2), and
    that a namespace can really be created and deleted.
    """
    if not os.path.exists("/proc/self/ns/net"):
        raise NetnsUnavailable("network namespaces are unavailable (no /proc/self/ns/net; Linux only)")
    if os.geteuid() != 0:
        raise NetnsUnavailable("the testbed needs root (it creates network namespaces, veths and qdiscs)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise NetnsUnavailable(f"{tool!r} not found: install iproute2 (apt-get install iproute2)")
    probe = f"js-probe-{os.getpid()}"
    r = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if r.returncode != 0:
        raise NetnsUnavailable(f"cannot create a network namespace: {r.stderr.strip()}")
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def list_netns(prefix: str = "") -> list[str]:
    """Names of the named network namespaces that start with ``prefix``."""
    try:
        names = os.listdir(NETNS_DIR)
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n.startswith(prefix))


# A one-link experiment's traffic, for ``python -c``: a sink draining every connection
# to port 5201 of argv[1]; a source sending two bulk flows from argv[1] (ports 40000 and
# 40001) to argv[2] for argv[3] seconds, the one from port 40000 with the TOS byte argv[4]
# and the one from port 40001 with argv[5], if given.
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
tos = int(sys.argv[4], 0) if len(sys.argv) > 4 else 0
tos2 = int(sys.argv[5], 0) if len(sys.argv) > 5 else 0
def send(sport, mark):
    s = socket.socket(); s.bind((src, sport))
    if mark:
        s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, mark)
    s.connect((dst, 5201))
    buf = b"x" * (1 << 16)
    while time.monotonic() < end:
        s.send(buf)
    s.close()
ts = [threading.Thread(target=send, args=a) for a in ((40000, tos), (40001, tos2))]
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


__all__ = ["BULK_SINK", "BULK_SOURCE", "NETNS_DIR", "PAIR_ADDRS", "CommandError", "Namespaces", "NetnsUnavailable",
           "ifindex_in", "in_netns", "list_netns", "ns_command", "require_netns", "run", "socket_in", "veth_pair"]
