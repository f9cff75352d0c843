"""A constant-rate UDP stream between two testbed hosts: traffic on a port that no schedule covers and that does not yield."""

from __future__ import annotations

import socket
import threading
import time

from jitsched.netns import socket_in

DATAGRAM_B = 1400  # payload of one datagram: one frame with its headers under a 1500-byte MTU
TICK_S = 0.002  # the sender catches up with its rate this often


class UdpStream:
    """Sends ``rate_Bps`` bytes/s of UDP payload from one namespace to an address in another until closed.

    The receiving socket is bound (so no ICMP error comes back) and never
    read: the datagrams cross the destination's port, which is what the
    stream is for, and the socket drops what its buffer cannot hold.

    Parameters
    ----------
    src_netns, dst_netns : str
        Namespaces of the sending and the receiving host.
    dst_addr : str
        The receiving host's address.
    rate_Bps : float
        Payload bytes per second.
    """

    def __init__(self, src_netns: str, dst_netns: str, dst_addr: str, rate_Bps: float) -> None:
        if not rate_Bps > 0:
            raise ValueError(f"rate_Bps: expected a positive rate, got {rate_Bps!r}")
        self.rate_Bps = float(rate_Bps)
        self.rx = socket_in(dst_netns, socket.AF_INET, socket.SOCK_DGRAM)
        self.rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        self.rx.bind((dst_addr, 0))
        self.tx = socket_in(src_netns, socket.AF_INET, socket.SOCK_DGRAM)
        self.tx.connect(self.rx.getsockname())
        self.sent_bytes = 0  # payload handed to the kernel
        self.refused = 0  # sends the sender's queue refused (its qdisc full)
        self.started_s = self.stopped_s = float("nan")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="jitsched-tb-udp", daemon=True)

    def start(self) -> UdpStream:
        """Start sending."""
        self.started_s = time.monotonic()
        self._thread.start()
        return self

    def _run(self) -> None:
        payload = bytes(DATAGRAM_B)
        t0 = self.started_s
        while not self._stop.wait(TICK_S):
            due = int((time.monotonic() - t0) * self.rate_Bps) - self.sent_bytes
            while due >= DATAGRAM_B:
                try:
                    self.tx.send(payload)
                except OSError:  # ENOBUFS: the qdisc dropped it, as a switch would
                    self.refused += 1
                self.sent_bytes += DATAGRAM_B
                due -= DATAGRAM_B

    def close(self) -> dict:
        """Stop, close both sockets; returns ``{"rate_Bps", "sent_bytes", "refused", "seconds"}``."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5.0)
        self.stopped_s = time.monotonic()
        self.tx.close()
        self.rx.close()
        return {"rate_Bps": self.rate_Bps, "sent_bytes": self.sent_bytes, "refused": self.refused,
                "seconds": self.stopped_s - self.started_s}


__all__ = ["DATAGRAM_B", "UdpStream"]
