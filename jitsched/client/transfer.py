"""Transfers between hosts on raw TCP: pooled sending channels, one-shot sends and the receiving sink."""

from __future__ import annotations

import logging
import queue
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from typing import Any

import msgpack

from jitsched.localreg import register_flow, unregister_flow

log = logging.getLogger("jitsched.client.transfer")

CHUNK = 256 * 1024

_HDR = struct.Struct("!I")
_ZEROS = memoryview(bytes(CHUNK))  # every payload is zeros: one buffer, not one per transfer
SMALL_PAYLOAD = 1024  # bytes sent with the header; above, an MSS-sized segment would be split anyway


class Channels:
    """Idle connections to :class:`TransferSink` receivers, kept for the next transfer.

    A framework moves a step's many small tensors over channels it keeps open
    (gRPC's, between a worker and its parameter server), not a connection
    each. :func:`send_bytes` given a ``Channels`` sends a transfer it does not
    register with an agent on an idle connection to the same receiver and
    class when there is one, and leaves its connection here afterwards; a
    registered transfer always has a connection of its own (the agents tell
    flows apart by their ports). Thread-safe. The sockets live in whatever
    network namespace they were opened in: use one ``Channels`` per sending
    host.
    """

    def __init__(self) -> None:
        self._idle: dict[tuple, list[socket.socket]] = {}
        self._lock = threading.Lock()
        self.opened = 0  # connections made through it
        self.reused = 0  # transfers sent on a kept connection

    def take(self, key: tuple) -> socket.socket | None:
        """An idle connection for ``key`` (receiver address, TOS), or None."""
        with self._lock:
            idle = self._idle.get(key)
            if idle:
                self.reused += 1
                return idle.pop()
        return None

    def count_opened(self) -> None:
        """Count a connection opened for a transfer that will leave it here."""
        with self._lock:
            self.opened += 1

    def give(self, key: tuple, sock: socket.socket) -> None:
        """Keep ``sock`` (its last transfer confirmed) for the next transfer of ``key``."""
        with self._lock:
            self._idle.setdefault(key, []).append(sock)

    def close(self) -> None:
        """Close every idle connection."""
        with self._lock:
            socks = [x for idle in self._idle.values() for x in idle]
            self._idle.clear()
        for x in socks:
            x.close()


def _connect(addr: tuple[str, int], timeout_s: float, mss: int, tos: int | None) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # An Ethernet-sized MSS: on loopback (64 KiB MTU) TCP would send 128 KiB bursts
        # and, at a low pacing rate, wait seconds between them even after the rate rises.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, mss)
        if tos is not None:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(tos))
        sock.settimeout(timeout_s)
        sock.connect(addr)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    except BaseException:
        sock.close()
        raise
    return sock


def _send_flow(sock: socket.socket, nbytes: int, flow: str, tos: int | None, keep: bool,
               peer_ticket: dict | None = None) -> None:
    head: dict[str, Any] = {"flow": flow, "bytes": int(nbytes)}
    if peer_ticket is not None:
        head["ticket"] = peer_ticket  # the receiver registers the flow with its agent by it
    if tos is not None:
        head["tos"] = int(tos)  # the receiver marks its confirmation the same way
    if keep:
        head["keep"] = True  # the receiver reads the next flow's header after confirming
    hdr = msgpack.packb(head)
    # the header and a small payload in one segment: the sink then reads the whole
    # flow in the wake-up that accepts it (TransferSink defers accepts to the data)
    first = min(int(nbytes), SMALL_PAYLOAD)
    sock.sendall(_HDR.pack(len(hdr)) + hdr + _ZEROS[:first])
    left = int(nbytes) - first
    while left > 0:
        n = sock.send(_ZEROS[:min(left, CHUNK)])
        left -= n
    if sock.recv(1) != b"\x01":
        raise ConnectionError(f"flow {flow}: receiver did not confirm")


def _close(sock: socket.socket) -> None:
    try:
        # shutdown, not just close: an agent may hold a duplicate of this socket
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def send_bytes(addr: tuple[str, int], nbytes: int, flow: str, *, agent: str | None = None,
               timeout_s: float = 60.0, mss: int = 1448, tos: int | None = None,
               channels: Channels | None = None, ticket: dict | None = None,
               peer_ticket: dict | None = None) -> float:
    """Move ``nbytes`` bytes to a :class:`TransferSink` at ``addr`` over TCP.

    The connected socket is registered with the local agent listening at
    ``agent`` (see :func:`jitsched.localreg.local_address`) so that it paces
    it; the call returns once the receiver confirms every byte arrived.
    ``mss`` (bytes) caps the segment size as a 1500-byte MTU would; ``tos``
    sets the IPv4 TOS byte (DSCP class) of the connection's packets. With
    ``channels`` and no ``agent``, an idle connection to the same receiver and
    class is used if there is one, and the connection is kept there after
    (one the receiver closed meanwhile is replaced once, transparently).
    ``ticket`` is the daemon's ticket for the flow's job, this host and this user,
    without which the agent refuses the registration (the flow then goes unpaced);
    ``peer_ticket``, the one for the receiving host, goes in the flow's header for
    the receiver's own registration (:class:`TransferSink` with an ``agent``).

    Returns
    -------
    float
        Seconds from the start (connect, or taking a kept connection) to the
        receiver's confirmation.
    """
    t0 = time.perf_counter()
    keep = channels is not None and agent is None
    key = (tuple(addr), tos)
    sock = channels.take(key) if keep else None
    if sock is not None:
        try:
            sock.settimeout(timeout_s)
            _send_flow(sock, nbytes, flow, tos, True, peer_ticket)
            channels.give(key, sock)
            return time.perf_counter() - t0
        except (OSError, ConnectionError):
            _close(sock)  # the receiver closed it while idle: a new connection below
    sock = _connect(addr, timeout_s, mss, tos)
    if keep:
        channels.count_opened()
    ctrl = None
    try:
        if agent is not None:
            ctrl = register_flow(agent, flow, sock, ticket=ticket)
        _send_flow(sock, nbytes, flow, tos, keep, peer_ticket)
        if keep:
            channels.give(key, sock)
            sock = None
        return time.perf_counter() - t0
    finally:
        unregister_flow(ctrl, flow)
        if sock is not None:
            _close(sock)


class _Inbound:
    """One connection a :class:`TransferSink` is reading: its header, then its payload."""

    __slots__ = ("conn", "head", "flow", "left", "total", "ctrl", "done", "keep", "ticket")

    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.ctrl: socket.socket | None = None  # the agent registration of a large flow (the registrar's)
        self.done = False  # finished or dropped: a registration still queued is skipped
        self.next_flow()

    def next_flow(self) -> None:
        """Wait for a flow's header (the first, or the next on a kept connection)."""
        self.head = bytearray()  # the length prefix and the header, until complete
        self.flow: str | None = None
        self.left = self.total = 0
        self.keep = False  # the sender keeps the connection for its next flow
        self.ticket: dict | None = None  # the header's ticket for this host, to register the flow by


class TransferSink:
    """A TCP receiver: accepts :func:`send_bytes` connections and confirms each complete flow.

    One thread serves the listening socket and every connection through a
    selector. A thread per connection cost more than the transfers: on the
    testbed's paper-mini workload (~8400 transfers of ~100 bytes) a small
    transfer waited 313 ms (p50) between its ``connect`` returning and the
    sink's ``accept``, the accept loop being held up starting threads in a
    busy process. With an ``agent``, a second thread registers and
    unregisters the large inbound flows, in the order they come: each is a
    round trip to the agent (8 ms p50, 78 ms p99 on paper-mini under jit),
    during which the selector would hold every other connection.

    Parameters
    ----------
    host : str
        Address to listen on.
    on_arrival : callable, optional
        ``on_arrival(flow, nbytes)`` after the last byte of a flow arrived
        (called on the sink's thread: keep it short). An exception it raises is
        counted (``callback_errors``, ``last_callback_error``) and logged; the flow
        is confirmed and the sink serves on.
    agent : str, optional
        Local socket name of this host's agent: each inbound flow of more than
        ``register_min_bytes`` is registered with it (``direction="in"``) for
        as long as it lasts, so an agent enforcing its ingress can give it its
        planned rate. The registration carries the ticket the flow's header
        brings (the sender's ``peer_ticket``): the agent refuses a job's flow
        without the daemon's ticket for this host and this process's user.
    register_min_bytes : int
        Flows up to this size are not registered (they fit in a class's burst).
    """

    MAX_HEADER = 4096  # bytes; a longer header is not one of send_bytes'

    def __init__(self, host: str = "127.0.0.1", port: int = 0,
                 on_arrival: Callable[[str, int], None] | None = None, *,
                 agent: str | None = None, register_min_bytes: int = 0) -> None:
        self.server = socket.create_server((host, port), backlog=1024)
        if hasattr(socket, "TCP_DEFER_ACCEPT"):
            # a connection is accepted once its first data is in: with the header and a
            # small payload in one segment, one wake-up serves a small flow whole
            self.server.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT, 1)
        self.server.setblocking(False)
        self.address = self.server.getsockname()[:2]
        self.on_arrival = on_arrival
        self.callback_errors = 0  # exceptions on_arrival raised
        self.last_callback_error = ""
        self.agent, self.register_min_bytes = agent, int(register_min_bytes)
        self.received: dict[str, int] = {}
        self._stop = False
        self._wake_r, self._wake_w = socket.socketpair()
        self._sel = selectors.DefaultSelector()
        self._sel.register(self.server, selectors.EVENT_READ, None)
        self._sel.register(self._wake_r, selectors.EVENT_READ, self._wake_r)
        self._buf = bytearray(CHUNK)
        self._open: set[_Inbound] = set()
        # ("in", connection, a duplicate of its socket) or ("out", connection); None ends the registrar
        self._reg_q: queue.SimpleQueue | None = None
        self._registrar: threading.Thread | None = None
        if agent is not None:
            self._reg_q = queue.SimpleQueue()
            self._registrar = threading.Thread(target=self._register_loop, name="jitsched-sink-reg",
                                               daemon=True)
            self._registrar.start()
        self._thread = threading.Thread(target=self._serve, name="jitsched-sink", daemon=True)
        self._thread.start()

    def _register_loop(self) -> None:
        # Only this thread touches a connection's ctrl; one queue keeps a flow's
        # registration ahead of its end.
        while (item := self._reg_q.get()) is not None:
            c = item[1]
            if item[0] == "in":
                dup = item[2]
                try:
                    if not c.done:  # a flow that ended while queued is not registered at all
                        c.ctrl = register_flow(self.agent, c.flow, dup, direction="in", ticket=c.ticket)
                finally:
                    dup.close()
            elif c.ctrl is not None:
                unregister_flow(c.ctrl, c.flow, direction="in")
                c.ctrl = None

    def _serve(self) -> None:
        try:
            while not self._stop:
                for key, _ in self._sel.select():
                    if key.data is None:
                        self._accept()
                    elif key.data is not self._wake_r:
                        self._readable(key.data)
        finally:
            for c in list(self._open):
                self._drop(c)
            self._sel.close()

    def _accept(self) -> None:
        while True:  # every connection the kernel has queued
            try:
                conn, _ = self.server.accept()
            except OSError:
                return  # none queued (BlockingIOError), or close() is stopping the loop
            conn.setblocking(False)
            c = _Inbound(conn)
            self._open.add(c)
            self._sel.register(conn, selectors.EVENT_READ, c)
            self._readable(c)  # its first bytes are most likely in already

    def _readable(self, c: _Inbound) -> None:
        try:
            if c.flow is None:
                got = c.conn.recv(_HDR.size + self.MAX_HEADER - len(c.head))
                if not got:
                    raise ConnectionError("closed before its header")
                c.head += got
                if len(c.head) < _HDR.size:
                    return
                hlen = _HDR.unpack_from(c.head)[0]
                if hlen > self.MAX_HEADER:
                    raise ValueError(f"header of {hlen} bytes")
                if len(c.head) < _HDR.size + hlen:
                    return
                self._start(c, msgpack.unpackb(bytes(c.head[_HDR.size:_HDR.size + hlen])))
                extra = len(c.head) - _HDR.size - hlen  # payload read with the header
                c.left -= extra
            else:
                n = c.conn.recv_into(self._buf, min(c.left, CHUNK))
                if n == 0:
                    raise ConnectionError("closed before its last byte")
                c.left -= n
            if c.left <= 0:
                self._finish(c)
        except (BlockingIOError, InterruptedError):
            return
        except (OSError, ValueError, KeyError, TypeError, OverflowError, msgpack.UnpackException):
            self._drop(c)  # not a header of send_bytes' (an infinite size, ...) or a cut connection

    def _start(self, c: _Inbound, hdr: dict) -> None:
        c.flow, c.left = str(hdr["flow"]), int(hdr["bytes"])
        c.total = c.left
        c.keep = bool(hdr.get("keep", False))
        got = hdr.get("ticket")
        c.ticket = got if isinstance(got, dict) else None  # the agent checks it
        if "tos" in hdr:
            # the confirmation is the transfer's last step: unmarked, it would queue as
            # background behind this host's own outbound DL flows
            c.conn.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, int(hdr["tos"]) & 0xFF)
        if self._registers(c):
            # the registrar gets its own descriptor: this thread may close c.conn (and
            # the kernel reuse its number for the next accept) before the agent has it
            self._reg_q.put(("in", c, c.conn.dup()))

    def _registers(self, c: _Inbound) -> bool:
        # whether the flow goes to the registrar (its header read: total is known)
        return self._reg_q is not None and c.total > self.register_min_bytes

    def _finish(self, c: _Inbound) -> None:
        self.received[c.flow] = c.total
        if self.on_arrival is not None:
            try:
                self.on_arrival(c.flow, c.total)
            except Exception as exc:  # noqa: BLE001 - the caller's code: it must not stop the sink
                self.callback_errors += 1
                self.last_callback_error = f"{c.flow}: {type(exc).__name__}: {exc}"
                if self.callback_errors <= 3:
                    log.error("event=sink_callback_failed flow=%s count=%d", c.flow, self.callback_errors,
                              exc_info=exc)
        c.conn.send(b"\x01")  # one byte into an empty send buffer: never blocks
        if c.keep and not self._registers(c):
            c.next_flow()  # a kept channel (Channels): its next header, on this connection
        else:
            self._drop(c)  # a registered flow's agent filters on its ports: never reused

    def _drop(self, c: _Inbound) -> None:
        self._open.discard(c)
        try:
            self._sel.unregister(c.conn)
        except (KeyError, ValueError):
            pass
        if not c.done and self._registers(c):
            self._reg_q.put(("out", c))
        c.done = True
        c.conn.close()

    def close(self) -> None:
        """Stop accepting, drop the connections still open, and wait for the sink's thread."""
        self._stop = True
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(5.0)
        if self._registrar is not None:  # after the selector: the ends it queued are sent first
            self._reg_q.put(None)
            self._registrar.join(5.0)
        self.server.close()
        self._wake_r.close()
        self._wake_w.close()


__all__ = ["CHUNK", "Channels", "TransferSink", "send_bytes"]
