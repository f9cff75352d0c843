"""A port's traffic that no schedule covers, per direction: measured from interface and class counters."""

from __future__ import annotations

import struct
import time
from collections.abc import Callable

from jitsched.agents.backends.base import payload_share
from jitsched.netns import in_netns

# Scheduled flows are counted in TCP payload (tcp_info), interfaces in frames: a full
# 1500-byte frame carries 1448 bytes of payload in 1514 bytes counted (payload_share).
# Payload bytes times this are the frames they went in; smaller segments make it a little low.
WIRE_PER_PAYLOAD = 1.0 / payload_share()
TCPI_BYTES_RECEIVED = 128  # offset of tcpi_bytes_received (u64) in struct tcp_info
TCP_INFO_LEN = 232


def link_bytes(dev: str, netns: str | None = None) -> tuple[int, int]:
    """Bytes ``dev`` sent and received since it came up: ``(tx, rx)``, from ``/proc/net/dev`` of ``netns``.

    Raises
    ------
    OSError
        The namespace or the device does not exist.
    """
    # /proc/thread-self/net is the calling thread's namespace: read it inside
    with in_netns(netns), open("/proc/thread-self/net/dev") as f:
        text = f.read()
    for line in text.splitlines()[2:]:
        name, _, rest = line.partition(":")
        if name.strip() == dev:
            fields = rest.split()
            return int(fields[8]), int(fields[0])
    raise OSError(f"no network device {dev!r} in namespace {netns or '(the agent own)'}")


def tcp_info_u64(sock, offset: int) -> int:
    """The u64 counter at ``offset`` of TCP socket ``sock``'s ``struct tcp_info``, 0 if unavailable."""
    import socket

    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
    except OSError:
        return 0
    if len(info) < offset + 8:
        return 0
    return struct.unpack_from("Q", info, offset)[0]


def bytes_received(sock) -> int:
    """Bytes received on TCP socket ``sock`` (TCP_INFO), 0 if unavailable."""
    return tcp_info_u64(sock, TCPI_BYTES_RECEIVED)


class UnscheduledMeter:
    """Per direction, the rate of a port's traffic that jitsched does not schedule.

    The port's interface counter (bytes sent, bytes received) less the
    scheduled traffic's bytes, at least 0. The scheduled bytes are the
    enforcing backend's scheduled classes' counters where it has them (the
    tc backends: everything their link class passed that their background
    class and their capped destinations' classes did not -- the flow classes,
    the class of marked DL traffic, the ACKs), else the payload of the flows the agent schedules (registered
    sockets and attached jobs' connections) scaled to frames by
    :data:`WIRE_PER_PAYLOAD`. Inbound, the interface counts what arrived,
    before any ingress shaping dropped it: what took the port.

    Parameters
    ----------
    dev : str
        The port's interface.
    netns : str or None
        Its network namespace (None: the agent's own).
    class_bytes : dict, optional
        ``{"out": callable, "in": callable}``: each returns the cumulative
        bytes of the direction's scheduled classes, or None when it has none.
    clock : callable
        Monotonic seconds (tests pass their own).
    """

    def __init__(self, dev: str, netns: str | None = None,
                 class_bytes: dict[str, Callable[[], int | None]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.dev, self.netns = dev, netns
        self.class_bytes = dict(class_bytes or {})
        self.clock = clock
        # direction -> (source of the scheduled count, t, interface bytes, scheduled bytes)
        self._last: dict[str, tuple[str, float, int, float]] = {}
        self.errors = 0  # readings that failed, since start
        self.last_error = ""

    def sample(self, scheduled_payload: Callable[[], dict[str, int]]) -> dict[str, float]:
        """The unscheduled rate per direction since the previous sample, bytes/s.

        Parameters
        ----------
        scheduled_payload : callable
            Returns ``{"out": bytes, "in": bytes}``: cumulative payload bytes
            of the flows the agent schedules, sent and received (used where
            the backend has no scheduled classes). It is called right after
            the interface counters are read, so that both counts end at the
            same moment: a scheduled flow of 6 MB/s read 25 ms apart from
            them moves a 0.2 s sample by 0.75 MB/s.

        Returns
        -------
        dict
            ``{"out": Bps, "in": Bps}``; empty on the first sample and when the
            interface cannot be read (counted in :attr:`errors`).
        """
        now = self.clock()
        try:
            link = link_bytes(self.dev, self.netns)
            sched: dict[str, tuple[str, float]] = {}
            payload: dict[str, int] | None = None
            for d in ("out", "in"):
                read = self.class_bytes.get(d)
                got = read() if read is not None else None
                if got is None and payload is None:
                    payload = scheduled_payload()
                sched[d] = (("class", float(got)) if got is not None
                            else ("payload", WIRE_PER_PAYLOAD * (payload or {}).get(d, 0)))
        except OSError as exc:
            self.errors += 1
            self.last_error = str(exc)
            return {}
        out: dict[str, float] = {}
        for k, d in enumerate(("out", "in")):
            source, s = sched[d]
            prev = self._last.get(d)
            self._last[d] = (source, now, link[k], s)
            # no rate across a change of source, an interface counter that went back or no time
            if prev is None or prev[0] != source or link[k] < prev[2] or now <= prev[1]:
                continue
            # a scheduled count that went back (a class made anew, a flow's bytes uncounted): none
            out[d] = max(link[k] - prev[2] - max(s - prev[3], 0.0), 0.0) / (now - prev[1])
        return out

    @property
    def sources(self) -> dict[str, str]:
        """Per direction measured, where its scheduled bytes came from: ``"class"`` or ``"payload"``."""
        return {d: v[0] for d, v in self._last.items()}


__all__ = ["TCPI_BYTES_RECEIVED", "WIRE_PER_PAYLOAD", "UnscheduledMeter", "bytes_received", "link_bytes",
           "tcp_info_u64"]
