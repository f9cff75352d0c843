"""The ``pacing`` backend: SO_MAX_PACING_RATE on the TCP sockets jobs register with the agent."""

from __future__ import annotations

import socket
import struct

from jitsched.agents.backends.base import Backend, FlowRate, register_backend

SO_MAX_PACING_RATE = getattr(socket, "SO_MAX_PACING_RATE", 47)  # Linux value
UNLIMITED = 0xFFFFFFFFFFFFFFFF  # the kernel's "no limit" (~0UL)


def set_pacing_rate(sock: socket.socket, rate_Bps: float | None) -> None:
    """Cap ``sock``'s send rate at ``rate_Bps`` bytes/s (None: no cap).

    The value is passed as 64 bits: the 32-bit form tops out at ~34 Gbit/s.
    Without the fq qdisc, TCP paces itself once the option is set (Linux >= 4.13).
    """
    v = UNLIMITED if rate_Bps is None else max(1, min(int(rate_Bps), UNLIMITED - 1))
    sock.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, struct.pack("Q", v))


def get_pacing_rate(sock: socket.socket) -> int:
    """The socket's current SO_MAX_PACING_RATE, bytes/s."""
    return struct.unpack("Q", sock.getsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, 8))[0]


@register_backend
class PacingBackend(Backend):
    """Per-socket pacing of registered flows.

    Scheduled flows get their slot rate; registered sockets absent from the slot's
    flows (the unscheduled 1 - alpha share, or flows past their plan) split the
    leftover equally, never below ``min_rate_Bps``. Background traffic that never
    registers is not paced here: it gets the leftover because scheduled flows are
    held to their rates.
    """

    name = "pacing"
    # Only registered sockets are paced: the flows registered here are all apply needs, and
    # a registration's re-apply then costs what the host carries, not what its schedule
    # lists (bench_agent: 0.33 ms from 100 to 4000 listed flows; 7.5 ms at 1000 when every
    # registration walked the schedule, see the README).
    needs_endpoints = True

    def __init__(self, line_rate_Bps: float, *, min_rate_Bps: float | None = None,
                 **options) -> None:
        super().__init__(line_rate_Bps, **options)
        # A floor of 1 % of the line: TCP paces whole segments, and one sent at a
        # near-zero rate delays the next one long after the rate goes back up.
        self.min_rate_Bps = float(0.01 * self.line_rate_Bps if min_rate_Bps is None else min_rate_Bps)
        self.socks: dict[str, socket.socket] = {}
        self.applied: dict[str, int] = {}

    def attach(self, flow_id: str, sock: socket.socket) -> None:
        """Take over pacing of ``sock``; it shares the leftover until scheduled."""
        self.socks[flow_id] = sock
        self.applied.pop(flow_id, None)  # a new socket of a flow registered again: not paced yet

    def detach(self, flow_id: str) -> None:
        """Forget the socket (the agent closes its copy)."""
        self.socks.pop(flow_id, None)
        self.applied.pop(flow_id, None)

    def apply(self, flows: list[FlowRate], leftover_Bps: float) -> None:
        """Set every registered socket's pacing rate for this slot (bytes/s)."""
        # a ranked flow (prio) is work-conserving, its rate only a floor, and a socket's
        # pacing has no priorities to give it: it is not capped (the line rate)
        rates = {f.flow_id: self.line_rate_Bps if f.prio is not None else f.rate_Bps
                 for f in flows if f.flow_id in self.socks}
        free = [fid for fid in self.socks if fid not in rates]
        if free:
            share = max(float(leftover_Bps), 0.0) / len(free)
            for fid in free:
                rates[fid] = share
        for fid, rate in rates.items():
            v = int(max(rate, self.min_rate_Bps))
            if self.applied.get(fid) == v:
                continue  # unchanged: spare the syscall
            try:
                set_pacing_rate(self.socks[fid], v)
            except OSError:
                # the peer closed the connection; the socket is detached on unregister
                continue
            self.applied[fid] = v

    def close(self) -> None:
        """Lift every cap this backend set."""
        for sock in self.socks.values():
            try:
                set_pacing_rate(sock, None)
            except OSError:
                pass
        self.socks.clear()
        self.applied.clear()
