"""Network-namespace helpers: availability checks, per-thread namespace switching, processes in a namespace."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator, Sequence

from jitsched.errors import JitschedError

NETNS_DIR = "/run/netns"
CLONE_NEWNET = 0x40000000

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_lock = threading.Lock()


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
    """Run a setup command; raise :class:`TestbedError` with its stderr when it fails."""
    r = subprocess.run(list(argv), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise TestbedError(f"{' '.join(argv)} failed: {r.stderr.strip() or r.stdout.strip()}")
    return r
