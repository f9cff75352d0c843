"""Bulk TCP traffic jitsched does not schedule: a sender, a receiver that timestamps every read, and a flow generator."""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from jitsched.errors import RemoteError
from jitsched.localreg import register_flow, unregister_flow
from jitsched.netns import socket_in
from jitsched.protocol import background_flow_id

CHUNK_B = 256 * 1024
PROGRESS_S = 1.0  # an announced file tells the daemon its bytes left this often (seconds)
RCVLOWAT_B = 64 * 1024  # least bytes a receiver without per-read timestamps wakes for
_HDR = struct.Struct("!I")


@dataclass
class FlowRecord:
    """What the receiver saw of one connection.

    ``t`` are CLOCK_MONOTONIC seconds of each read and ``n`` the bytes it
    returned (with timestamps); ``start_s``/``end_s`` are accept and
    end-of-stream times; ``last_s`` the last read (or the accept) and
    ``max_stall_s`` the longest time between two reads so far, with the
    accept as the first (:meth:`progressed`, whatever ``timestamps``).
    """

    flow_id: str
    peer: tuple[str, int]
    start_s: float
    end_s: float = float("nan")
    bytes: int = 0
    t: list[float] = field(default_factory=list)
    n: list[int] = field(default_factory=list)
    last_s: float = float("nan")
    max_stall_s: float = 0.0

    def __post_init__(self) -> None:
        if self.last_s != self.last_s:
            self.last_s = self.start_s

    def progressed(self, t: float) -> None:
        """A read returned data at ``t`` (monotonic seconds): the stall since the last one ended."""
        self.max_stall_s = max(self.max_stall_s, t - self.last_s)
        self.last_s = t

    def stall_s(self, now: float) -> float:
        """The longest stall so far, counting one still going on at ``now`` while the stream is open."""
        ongoing = now - self.last_s if self.end_s != self.end_s else 0.0
        return max(self.max_stall_s, ongoing)

    def bytes_between(self, t0: float, t1: float) -> int:
        """Payload bytes read in ``[t0, t1)`` (monotonic seconds)."""
        # the reader thread appends t, then n: a read caught between the two is left
        # for the next call (it once raised IndexError in a testbed run, 754 vs 752)
        k = min(len(self.t), len(self.n))
        t = np.asarray(self.t[:k])
        n = np.asarray(self.n[:k])
        return int(n[(t >= t0) & (t < t1)].sum())

    def to_json(self) -> dict:
        return {"flow_id": self.flow_id, "peer": list(self.peer), "start_s": self.start_s,
                "end_s": self.end_s, "bytes": self.bytes}


class Receiver:
    """Accepts connections on ``(addr, port)`` inside ``netns`` and drains them, recording every read.

    Each connection starts with a 4-byte length and a JSON header
    ``{"id": flow_id}``; everything after it is counted as payload.

    Parameters
    ----------
    addr : str
        Address to listen on (inside ``netns``).
    port : int
        TCP port (0: any; see ``self.port``).
    netns : str or None
        Named network namespace (None: the caller's).
    timestamps : bool
        Keep per-read timestamps (needed for per-slot rates).
    agent : str or None
        Local name of this host's agent: each connection is registered with
        it as an inbound announced background flow (``/<id>``), so that an
        agent ordering its ingress ranks it as the daemon does.
    """

    def __init__(self, addr: str, port: int = 0, *, netns: str | None = None, timestamps: bool = True,
                 agent: str | None = None) -> None:
        self.agent = agent
        self.sock = socket_in(netns)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((addr, port))
        self.sock.listen(64)
        self.addr, self.port = self.sock.getsockname()[:2]
        self.timestamps = timestamps
        self.flows: dict[str, FlowRecord] = {}
        self.done = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._stop = False
        self._acceptor = threading.Thread(target=self._accept, daemon=True)
        self._acceptor.start()

    def _accept(self) -> None:
        while not self._stop:
            try:
                conn, peer = self.sock.accept()
            except OSError:
                return
            th = threading.Thread(target=self._drain, args=(conn, peer), daemon=True)
            th.start()
            self._threads.append(th)

    def _drain(self, conn: socket.socket, peer) -> None:
        with conn:
            start = time.monotonic()
            f = conn.makefile("rb", buffering=0)
            (hlen,) = _HDR.unpack(_read_exact(f, _HDR.size))
            hdr = json.loads(_read_exact(f, hlen))
            rec = FlowRecord(str(hdr["id"]), tuple(peer), start)
            with self.done:
                self.flows[rec.flow_id] = rec
            # the sender names the agents' id of an announced flow and brings the daemon's
            # ticket for this host: the agent registers the flow only with it
            agent_flow = str(hdr.get("agent_flow") or background_flow_id(rec.flow_id))
            ticket = hdr.get("ticket") if isinstance(hdr.get("ticket"), dict) else None
            ctrl = register_flow(self.agent, agent_flow, conn, direction="in", ticket=ticket) \
                if self.agent else None
            buf = bytearray(CHUNK_B)
            if not self.timestamps:
                # Wake on 64 kB, not on every few-kB arrival: a file's receiving loop
                # was 37 % of the busy samples (py-spy) of the process that also runs
                # the testbed's jobs, and its GIL churn slowed their small transfers.
                # The stream's end still wakes it with whatever is left.
                conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, RCVLOWAT_B)
            try:
                while True:
                    k = conn.recv_into(buf)
                    if k == 0:
                        break
                    rec.bytes += k
                    now = time.monotonic()
                    rec.progressed(now)
                    if self.timestamps:
                        rec.t.append(now)
                        rec.n.append(k)
            finally:  # a reset connection leaves its agent too
                unregister_flow(ctrl, agent_flow, direction="in")
            rec.end_s = time.monotonic()
            rec.progressed(rec.end_s)  # the end of stream is progress too (a short tail's last read)
            with self.done:
                self.done.notify_all()

    def wait(self, flow_ids: Sequence[str], timeout_s: float) -> bool:
        """Wait until every flow in ``flow_ids`` reached end of stream; False on timeout."""
        deadline = time.monotonic() + timeout_s
        with self.done:
            while True:
                pending = [f for f in flow_ids if f not in self.flows or self.flows[f].end_s != self.flows[f].end_s]
                if not pending:
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.done.wait(left)

    def close(self) -> None:
        self._stop = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()


def longest_stall_s(read_s: Sequence[float], start_s: float, end_s: float | None = None) -> float:
    """The longest time a stream made no progress: the largest gap between consecutive reads.

    Parameters
    ----------
    read_s : sequence of float
        Times of the reads that returned data, seconds, ascending.
    start_s : float
        When the stream opened (the first gap runs from it).
    end_s : float or None
        When it ended or was last looked at (the last gap runs to it); None: the last read.

    Notes
    -----
    The testbed's file receivers wake for at least :data:`RCVLOWAT_B` (64 kB)
    or the stream's end, so a gap over 1 s there means the file moved less
    than 64 kB in that second (0.5 Mbit/s): 5 ms of a 100 Mbit/s link.
    """
    t = np.concatenate(([start_s], np.asarray(read_s, dtype=float), [] if end_s is None else [end_s]))
    return float(np.max(np.diff(t))) if len(t) > 1 else 0.0


def _read_exact(f, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = f.read(n - len(out))
        if not chunk:
            raise ConnectionError("peer closed during the header")
        out += chunk
    return out


def connect(dst: str, port: int, flow_id: str, *, netns: str | None = None, src: str = "",
            timeout_s: float = 10.0, announced: dict | None = None) -> socket.socket:
    """Open a flow to a :class:`Receiver` and send its header; returns the connected socket.

    ``sock.getsockname()`` then gives the source address and port a tc filter can match.
    ``announced``: for an announced flow, ``{"agent_flow", "ticket"}``, the id its agents
    know it by and the daemon's ticket for the receiving host, with which the receiver
    registers the inbound side with its agent.
    """
    s = socket_in(netns)
    s.settimeout(timeout_s)
    if src:
        s.bind((src, 0))
    s.connect((dst, port))
    s.settimeout(None)
    hdr = json.dumps({"id": flow_id} | (announced or {})).encode()
    s.sendall(_HDR.pack(len(hdr)) + hdr)
    return s


def send_bytes(s: socket.socket, nbytes: float, stop: threading.Event | None = None, close: bool = True,
               progress: Callable[[int], None] | None = None) -> int:
    """Send ``nbytes`` bytes (rounded up; ``inf``: until ``stop`` is set) on ``s`` and close it (``close``; else
    only shut its sending side); returns bytes sent. ``progress(sent)`` is called after each chunk."""
    payload = memoryview(b"\0" * CHUNK_B)
    sent = 0
    try:
        while sent < nbytes and not (stop is not None and stop.is_set()):
            # a fractional count (a size scaled to the link rate) ends with its last partial byte:
            # rounded down, that byte was 0 bytes to send, forever
            k = min(CHUNK_B, math.ceil(nbytes - sent)) if nbytes != float("inf") else CHUNK_B
            s.sendall(payload[:k])
            sent += k
            if progress is not None:
                progress(sent)
        s.shutdown(socket.SHUT_WR)
    finally:
        if close:
            s.close()
    return sent


@dataclass
class BackgroundFlow:
    """One unscheduled transfer: ``bytes`` from ``src`` to ``dst`` starting ``arrival_s`` after the run starts."""

    id: str
    src: str
    dst: str
    bytes: float
    arrival_s: float


class Generator:
    """Runs background flows between testbed hosts at their arrival times and records their completion.

    Parameters
    ----------
    flows : sequence of BackgroundFlow
    netns_of, addr_of : dict
        Host name to namespace / address.
    port : int
        Receivers' port on every destination host.
    announce : tuple of (str, dict) or None
        ``(daemon job endpoint, host -> agent local name)``: every flow is
        announced to the daemon (``background_started``, then
        ``background_finished``) and its sockets registered with its hosts'
        agents as ``/<id>``, as an application that tells jitsched its
        transfers would. None: the flows are background jitsched does not know.
    """

    def __init__(self, flows: Sequence[BackgroundFlow], netns_of: dict[str, str], addr_of: dict[str, str],
                 port: int = 5201, announce: tuple[str, dict[str, str]] | None = None) -> None:
        self.flows = list(flows)
        self.announce = announce
        agents = announce[1] if announce else {}
        self.receivers = {h: Receiver(addr_of[h], port, netns=netns_of[h], timestamps=False, agent=agents.get(h))
                          for h in sorted({f.dst for f in flows})}
        self.netns_of, self.addr_of, self.port = netns_of, addr_of, port
        self.stop = threading.Event()
        self.results: dict[str, dict] = {}
        self._threads: list[threading.Thread] = []
        self.t0 = float("nan")

    def start(self, t0: float | None = None) -> None:
        """Start every flow at ``t0 + arrival_s`` (``t0`` monotonic seconds, default now)."""
        self.t0 = time.monotonic() if t0 is None else t0
        for f in self.flows:
            th = threading.Thread(target=self._run, args=(f,), daemon=True)
            th.start()
            self._threads.append(th)

    def _run(self, f: BackgroundFlow) -> None:
        delay = self.t0 + f.arrival_s - time.monotonic()
        if self.stop.wait(max(0.0, delay)):
            return
        start = time.monotonic()
        rx = self.receivers[f.dst]
        try:
            if self.announce:
                sent = self._send_announced(f, rx)
            else:
                s = connect(self.addr_of[f.dst], self.port, f.id, netns=self.netns_of[f.src])
                sent = send_bytes(s, f.bytes, self.stop)
                rx.wait([f.id], 30.0)
        except (OSError, RemoteError) as exc:
            self.results[f.id] = {"id": f.id, "error": str(exc)}
            return
        rec = rx.flows.get(f.id)
        end = rec.end_s if rec is not None else time.monotonic()
        self.results[f.id] = {"id": f.id, "bytes": sent, "start_s": start - self.t0, "end_s": end - self.t0,
                              "complete": sent >= f.bytes,
                              "mbit": sent * 8 / 1e6 / max(end - start, 1e-9)}

    def _send_announced(self, f: BackgroundFlow, rx: Receiver) -> int:
        """``f`` announced to the daemon and registered with its sender's agent; bytes sent."""
        from jitsched.client import Client, announced_flow  # zmq only for announced flows

        endpoint, agents = self.announce
        with Client(endpoint) as client:
            # announced first: the reply's flow id and the receiving host's ticket go in the
            # header, for the receiver's registration (announced_flow repeats the announcement)
            rep = client.background_started(f.id, f.src, f.dst, f.bytes, uid=os.geteuid())
            ticket = rep.get("tickets", {}).get(f.dst)
            announced = {"agent_flow": rep.get("flow_id", background_flow_id(f.id))} | \
                ({"ticket": ticket} if ticket is not None else {})
            try:
                s = connect(self.addr_of[f.dst], self.port, f.id, netns=self.netns_of[f.src], announced=announced)
            except OSError:
                with contextlib.suppress(OSError, RemoteError):
                    client.background_finished(f.id)  # no flow after all: not held until its TTL
                raise
            try:
                # the socket stays open, registered and announced until the receiver has
                # every byte: closed with its tail in flight it was an orphan under the
                # agent's 10-ms RTO floor, and the kernel reset it while the tail waited
                # behind ranked flows (a quick run lost a file's last 0.3 MB)
                with announced_flow(client, f.id, f.src, f.dst, f.bytes, s, agents.get(f.src)) as left:
                    next_s = [time.monotonic() + PROGRESS_S]

                    def progress(sent: int) -> None:
                        # the bytes it has left, once a second: its rank follows them, as a
                        # job's does its transfers' ends (sent = handed to the kernel)
                        if time.monotonic() >= next_s[0]:
                            next_s[0] = time.monotonic() + PROGRESS_S
                            left(f.bytes - sent)

                    sent = send_bytes(s, f.bytes, self.stop, close=False, progress=progress)
                    rx.wait([f.id], 30.0)
            finally:
                s.close()
        return sent

    def snapshot(self) -> dict[str, dict]:
        """Every flow the receivers have seen, as of now, finished or not.

        Returns
        -------
        dict
            Flow id -> ``bytes`` received, ``start_s``/``end_s`` (seconds from
            ``t0``; ``end_s`` is now while the flow runs), ``complete``,
            ``mbit`` (goodput over its own active time, Mbit/s) and
            ``max_stall_s`` (the longest time its receiver read nothing,
            :meth:`FlowRecord.stall_s`; reads wake for :data:`RCVLOWAT_B`).
        """
        now = time.monotonic()
        out = {}
        for f in self.flows:
            rec = self.receivers[f.dst].flows.get(f.id)
            if rec is None:
                continue
            n = rec.bytes
            end = rec.end_s if rec.end_s == rec.end_s else now
            out[f.id] = {"bytes": n, "start_s": rec.start_s - self.t0, "end_s": end - self.t0,
                         "complete": n >= f.bytes, "mbit": n * 8 / 1e6 / max(end - rec.start_s, 1e-9),
                         "max_stall_s": rec.stall_s(now)}
        return out

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop unfinished flows and the receivers."""
        self.stop.set()
        for th in self._threads:
            th.join(timeout_s)
        for rx in self.receivers.values():
            rx.close()

    def throughput_mbit(self, t_end: float) -> float:
        """Mean background goodput in Mbit/s: bytes all flows moved divided by the ``[0, t_end]`` window.

        Counts every flow's received bytes, finished or cut off at ``close``.
        """
        total = sum(rec.bytes for rx in self.receivers.values() for rec in rx.flows.values())
        return total * 8 / 1e6 / max(t_end, 1e-9)


def main(argv: list[str] | None = None) -> int:
    """``python -m jitsched.testbed.bgtraffic recv|send``: the traffic tool as a standalone process."""
    p = argparse.ArgumentParser(prog="python -m jitsched.testbed.bgtraffic", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("recv", help="receive flows and print one JSON line per finished flow")
    r.add_argument("--listen", default="0.0.0.0:5201", metavar="ADDR:PORT")
    s = sub.add_parser("send", help="send one flow")
    s.add_argument("--to", required=True, metavar="ADDR:PORT")
    s.add_argument("--bytes", type=float, required=True)
    s.add_argument("--id", default="bg")
    a = p.parse_args(argv)
    if a.cmd == "recv":
        addr, port = a.listen.rsplit(":", 1)
        rx = Receiver(addr, int(port), timestamps=False)
        seen: set[str] = set()
        try:
            while True:
                with rx.done:
                    rx.done.wait(1.0)
                    fin = [f for f in rx.flows.values() if f.end_s == f.end_s and f.flow_id not in seen]
                for f in fin:
                    seen.add(f.flow_id)
                    print(json.dumps(f.to_json()), flush=True)
        except KeyboardInterrupt:
            return 0
    addr, port = a.to.rsplit(":", 1)
    t0 = time.monotonic()
    sent = send_bytes(connect(addr, int(port), a.id), a.bytes)
    dt = time.monotonic() - t0
    print(json.dumps({"id": a.id, "bytes": sent, "seconds": dt, "mbit": sent * 8 / 1e6 / dt}))
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
