"""Network-namespace helpers: per-thread namespace switching, sockets and commands in a namespace.

A low layer: the host agent's tc backends (``jitsched.agents.backends``) and
the emulated testbed (:mod:`jitsched.testbed`) both use it, and it imports
neither. The testbed-only parts (the availability check, listing namespaces
by prefix, :class:`jitsched.testbed.netns.TestbedError`) live in
:mod:`jitsched.testbed.netns`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import socket
import subprocess
import threading
from collections.abc import Iterator, Sequence

from jitsched.errors import JitschedError

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_lock = threading.Lock()


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


__all__ = ["CommandError", "NETNS_DIR", "Namespaces", "ifindex_in", "in_netns", "ns_command", "run", "socket_in"]
