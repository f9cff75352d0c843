"""The socket loop's bounds on peers: connections per socket, idle connections, unread reply bytes.

ZeroMQ hides connections behind a ROUTER socket: there is no call to list
or close one. Two facilities of libzmq 4.3 expose them enough:

* the socket monitor (``zmq_socket_monitor``) reports each accepted TCP
  connection with its file descriptor (``EVENT_ACCEPTED``), each closed
  one (``EVENT_DISCONNECTED``) and each failed ``accept`` with its errno
  (``EVENT_ACCEPT_FAILED``: EMFILE when the process is out of descriptors);
* every received message carries the descriptor it came on
  (``zmq_msg_get(ZMQ_SRCFD)``), which dates each connection's last message.

A connection is closed by ``shutdown(2)`` of a duplicate of its descriptor:
libzmq sees the end of the stream and closes it as if the peer had left
(a zmq client reconnects by itself). Before that, the duplicate's peer
address is compared with the one seen at accept, so a descriptor number
libzmq has since reused for another connection is left alone.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import socket
from collections import deque
from dataclasses import dataclass

import zmq
import zmq.utils.monitor

from jitsched.daemon.logs import LogLimiter

# Replies of at least this many bytes are sent zero-copy and tracked until libzmq has
# written them to the kernel: their bytes count against the peer's cap. Smaller ones
# (acks, errors: ~50 bytes) are bounded by the socket's SNDHWM in messages instead.
TRACK_BYTES = 4096

# Over the cap, connections that never sent a message (no handshake finished, or not
# yet a request: raw connects, bare greetings) make way first, oldest first, then one
# silent for at least this long (the longest silent first); when none is, the new one is
# refused. Refusing only the newest let 1,000 idle raw connections lock every new client
# out, and with 400 raw connects/s against a cap of 50 refusing every newest connection
# but those silent 1 s left 5 of 10 keyed status calls without an answer (measured).
# The agent socket uses the heartbeat timeout instead: live agents speak every heartbeat_s.
EVICT_AFTER_S = 1.0
EXPIRE_MIN_S = 0.05  # the smallest gap between two scans for idle connections, seconds

MONITOR_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_ACCEPT_FAILED


@dataclass
class Conn:
    """One accepted TCP connection: its peer address and when it last sent (monotonic s)."""

    peer: tuple
    last_s: float
    closing: bool = False
    spoke: bool = False  # a message came on it


def _dup(fd: int) -> socket.socket | None:
    # a socket object over a duplicate of ``fd``; its family is read from the descriptor
    try:
        return socket.socket(fileno=os.dup(fd))
    except OSError:
        return None


def _peer_of(fd: int) -> tuple | None:
    """The TCP peer address of descriptor ``fd``, None if it is no connected TCP socket
    (ipc peers are local and not tracked)."""
    s = _dup(fd)
    if s is None:
        return None
    try:
        peer = s.getpeername()
        return peer if isinstance(peer, tuple) else None
    except OSError:
        return None
    finally:
        s.close()


def _shutdown(fd: int, peer: tuple) -> bool:
    """End the TCP connection on ``fd`` if it still is the one with ``peer``; whether it was."""
    s = _dup(fd)
    if s is None:
        return False
    try:
        if s.getpeername() != peer:
            return False
        s.shutdown(socket.SHUT_RDWR)
        return True
    except OSError:
        return False
    finally:
        s.close()  # the duplicate only: libzmq closes its own descriptor


class Connections:
    """The TCP connections of one ROUTER socket: at most ``cap`` at once, none idle for
    more than ``idle_s`` seconds.

    Parameters
    ----------
    sock : zmq.Socket
        A bound ROUTER socket (TCP endpoints; ipc/inproc peers are not tracked).
    name : str
        ``jobs`` or ``agents``, for log lines.
    cap : int
        At most this many at once: beyond, the connections silent longest (at
        least ``evict_after_s``) are closed to make room, else the newest.
    idle_s : float
        A connection with no message for this long is closed.
    logs : LogLimiter
        Rate-limited warnings (refused, idle-closed, accept failures).
    evict_after_s : float
        Silence (seconds) after which a connection may be closed for a new one.
    """

    def __init__(self, sock: zmq.Socket, name: str, cap: int, idle_s: float, logs: LogLimiter,
                 evict_after_s: float = EVICT_AFTER_S) -> None:
        self.name, self.cap, self.idle_s, self.logs = name, cap, idle_s, logs
        self.evict_after_s = evict_after_s
        self.monitor = sock.get_monitor_socket(MONITOR_EVENTS)
        # a burst of connects must not lose events (the table would drift): no HWM here
        self.monitor.setsockopt(zmq.RCVHWM, 0)
        self.sock = sock
        self.open: dict[int, Conn] = {}
        self.unspoken: dict[int, None] = {}  # open connections no message came on, in accept order
        self.refused = 0  # connections closed at accept, over the cap
        self.evicted = 0  # silent connections closed to make room for new ones
        self.idle_closed = 0  # connections closed for silence
        self.accept_failed = 0  # accept(2) failures libzmq reported (EMFILE: out of descriptors)
        self._next_expire_s = -math.inf

    def close(self) -> None:
        """Stop monitoring (before the socket closes)."""
        try:
            self.sock.disable_monitor()
        except zmq.ZMQError:
            pass
        self.monitor.close(0)

    def events(self, now_s: float) -> None:
        """Take every queued monitor event, then close new connections beyond the cap."""
        new: deque[int] = deque()
        while True:
            try:
                frames = self.monitor.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            ev = zmq.utils.monitor.parse_monitor_message(frames)
            event, value = ev["event"], int(ev["value"])
            if event == zmq.EVENT_ACCEPTED:
                peer = _peer_of(value)
                if peer is not None:
                    self.open[value] = Conn(peer, now_s)
                    self.unspoken.pop(value, None)  # a reused descriptor goes to the end
                    self.unspoken[value] = None
                    new.append(value)
            elif event == zmq.EVENT_DISCONNECTED:
                self.open.pop(value, None)
                self.unspoken.pop(value, None)
            elif event == zmq.EVENT_ACCEPT_FAILED:
                self.accept_failed += 1
                self.logs.log(logging.WARNING, "accept_failed", socket=self.name,
                              error=errno.errorcode.get(value, str(value)), count=self.accept_failed)
        # those being closed are on their way out (libzmq reports them disconnected soon)
        over = sum(1 for c in self.open.values() if not c.closing) - self.cap
        if over <= 0:
            return
        fresh = set(new)
        # 1. connections that never sent anything, but for the ones accepted just now
        # (a client finishing its handshake is among those): oldest first, a dict walk
        for fd in list(self.unspoken):
            if over <= 0:
                return
            if fd not in fresh:
                over -= self._close(fd, now_s)
        # 2. connections silent for evict_after_s, the longest silent first
        silent = sorted((c.last_s, fd) for fd, c in self.open.items()
                        if fd not in fresh and not c.closing and c.last_s <= now_s - self.evict_after_s)
        for _, fd in silent[:over]:
            over -= self._close(fd, now_s)
        # 3. nothing else makes way: the ones accepted just now, the newest last
        for fd in new:
            if over <= 0:
                return
            over -= self._close(fd, now_s)

    def _close(self, fd: int, now_s: float) -> int:
        """Close connection ``fd`` over the cap; 1 if it is gone (or was), 0 if already closing.

        Counted as evicted if it had been silent ``evict_after_s``, else as refused."""
        conn = self.open.get(fd)
        self.unspoken.pop(fd, None)
        if conn is None or conn.closing:
            return 0
        conn.closing = True
        if not _shutdown(fd, conn.peer):
            self.open.pop(fd, None)  # no longer that connection: gone already
            return 1
        peer = f"{conn.peer[0]}:{conn.peer[1]}"
        if conn.last_s <= now_s - self.evict_after_s:
            self.evicted += 1
            self.logs.log(logging.WARNING, "connection_evicted", socket=self.name, peer=peer,
                          silent_s=now_s - conn.last_s, spoke=conn.spoke, open=len(self.open), cap=self.cap,
                          total=self.evicted)
        else:
            self.refused += 1
            self.logs.log(logging.WARNING, "connection_refused", socket=self.name, peer=peer, spoke=conn.spoke,
                          open=len(self.open), cap=self.cap, total=self.refused)
        return 1

    def seen(self, fd: int, now_s: float) -> tuple[int, tuple] | None:
        """A message came on descriptor ``fd``; returns its connection as (fd, peer address),
        None if untracked."""
        conn = self.open.get(fd)
        if conn is None:
            # the loop reads messages before it takes the monitor's events, so a client's
            # first message can come before its accept is taken: take them now, or its
            # connection would be tracked later as one that never spoke, and closed first
            # over the cap (with its client's requests)
            self.events(now_s)
            conn = self.open.get(fd)
            if conn is None:
                return None
        conn.last_s = now_s
        if not conn.spoke:
            conn.spoke = True
            self.unspoken.pop(fd, None)
        return fd, conn.peer

    def is_open(self, source: tuple[int, tuple]) -> bool:
        """Whether the connection :meth:`seen` returned is still open (its descriptor not
        closed, nor reused for another peer)."""
        conn = self.open.get(source[0])
        return conn is not None and conn.peer == source[1]

    def expire(self, now_s: float) -> int:
        """Close the connections silent for ``idle_s``; returns how many.

        Looks at most every twentieth of ``idle_s`` (and 50 ms), so a connection
        is closed within ``1.05 * idle_s`` of its last message.
        """
        # A scan of 10,000 agents' connections takes 2.2 ms; on every 50 ms housekeeping
        # tick that was 4 % of the daemon's loop thread with a 300 s timeout to keep.
        if now_s < self._next_expire_s:
            return 0
        self._next_expire_s = now_s + max(EXPIRE_MIN_S, self.idle_s / 20.0)
        n = 0
        limit = now_s - self.idle_s
        for fd, conn in list(self.open.items()):
            if conn.last_s <= limit and not conn.closing:
                conn.closing = True
                self.unspoken.pop(fd, None)
                if _shutdown(fd, conn.peer):
                    n += 1
                else:
                    self.open.pop(fd, None)
        if n:
            self.idle_closed += n
            self.logs.log(logging.INFO, "connections_idle_closed", socket=self.name, count=n,
                          idle_s=float(self.idle_s), total=self.idle_closed)
        return n


class ReplyQueues:
    """Bytes of big replies each peer has not yet taken off the daemon, capped per peer.

    A reply of at least ``TRACK_BYTES`` is sent zero-copy with a tracker that
    says when libzmq has handed the bytes to the kernel; until then they
    count against the peer (its routing identity) and against the client it
    is sent to (a key's name, over all its connections). A reply that would
    take a peer past ``cap`` bytes, or its client past the cap given with it,
    is not sent (the caller answers ``overloaded``).

    Parameters
    ----------
    cap : int
        Bytes per peer.
    """

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.queued: dict[bytes, deque[tuple[zmq.MessageTracker, int]]] = {}
        self.refused = 0  # replies not sent for the cap
        self.client_of: dict[bytes, str] = {}  # identities with queued replies -> their client
        self.identities: dict[str, set[bytes]] = {}  # client -> its identities with queued replies

    def pending(self, identity: bytes) -> int:
        """Bytes of tracked replies to ``identity`` still inside libzmq."""
        q = self.queued.get(identity)
        if q is None:
            return 0
        while q and q[0][0].done:
            q.popleft()
        if not q:
            del self.queued[identity]
            client = self.client_of.pop(identity, None)
            if client is not None:
                ids = self.identities[client]
                ids.discard(identity)
                if not ids:
                    del self.identities[client]
            return 0
        return sum(n for _, n in q)

    def client_pending(self, client: str) -> int:
        """Bytes of tracked replies to every connection of ``client`` still inside libzmq."""
        return sum(self.pending(i) for i in list(self.identities.get(client, ())))

    def send(self, sock: zmq.Socket, identity: bytes, reply: bytes, client: str | None = None,
             client_room: int | None = None) -> bool:
        """Send ``reply`` to ``identity`` unless that passes the cap, or ``client``'s
        tracked replies would pass ``client_room`` bytes; whether it was sent.

        Raises
        ------
        zmq.ZMQError
            The peer is gone or its queue full (ROUTER_MANDATORY).
        """
        if len(reply) < TRACK_BYTES:
            sock.send_multipart([identity, reply], zmq.NOBLOCK)
            return True
        if self.pending(identity) + len(reply) > self.cap or (
                client is not None and client_room is not None
                and self.client_pending(client) + len(reply) > client_room):
            self.refused += 1
            return False
        tracker = sock.send_multipart([identity, reply], zmq.NOBLOCK, copy=False, track=True)
        self.queued.setdefault(identity, deque()).append((tracker, len(reply)))
        if client is not None and identity not in self.client_of:
            self.client_of[identity] = client
            self.identities.setdefault(client, set()).add(identity)
        return True

    def sweep(self) -> int:
        """Forget delivered replies of every peer; returns the bytes still queued."""
        return sum(self.pending(i) for i in list(self.queued))


def raise_fd_limit(need: int) -> tuple[int, int]:
    """Raise this process's soft descriptor limit toward its hard limit, up to what ``need``
    asks plus room; returns (soft, hard) after."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = need if hard == resource.RLIM_INFINITY else min(need, hard)
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    return soft, hard


def open_fds() -> int:
    """Descriptors this process holds (Linux /proc; 0 where unknown)."""
    try:
        return len(os.listdir("/proc/self/fd"))
    except OSError:
        return 0


__all__ = ["TRACK_BYTES", "Conn", "Connections", "ReplyQueues", "open_fds", "raise_fd_limit"]
