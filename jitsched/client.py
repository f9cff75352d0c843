"""The client library: submit jobs, report progress, and move paced bytes between hosts."""

from __future__ import annotations

import contextlib
import math
import queue
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import msgpack
import zmq

from jitsched.errors import ValidationError
from jitsched.keys import (
    CLIENTS,
    DEFAULT_CLIENT,
    CurveKeys,
    curve_keys,
    handshake_failure,
    handshake_monitor,
)
from jitsched.localreg import register_flow, unregister_flow
from jitsched.model import Job
from jitsched.protocol import (
    MAX_MESSAGE_BYTES,
    MsgType,
    RemoteError,
    background_flow_id,
    decode_reply,
    encode_request,
    next_id,
)

CHUNK = 256 * 1024


class Client:
    """A connection to the daemon's job socket (one per thread).

    Parameters
    ----------
    endpoint : str
        The daemon's job endpoint, e.g. ``tcp://127.0.0.1:5555``.
    timeout_s : float
        How long to wait for a reply, seconds.
    keys : CurveKeys or path, optional
        Connect as a CURVE client: these keys, or those of client ``key_name`` in
        a key directory (``jitsched keys init``). The daemon then lets this
        client act only on the jobs it submitted. None: plaintext.
    key_name : str
        The client's name in the key directory.

    Raises
    ------
    KeyFileError
        ``keys`` is a directory without this client's keys.
    ValidationError
        ``endpoint`` is no ZeroMQ endpoint, or ``timeout_s`` is not a positive finite number.
    """

    def __init__(self, endpoint: str, timeout_s: float = 10.0, ctx: zmq.Context | None = None, *,
                 keys: CurveKeys | str | Path | None = None, key_name: str = DEFAULT_CLIENT) -> None:
        if isinstance(timeout_s, bool) or not (isinstance(timeout_s, (int, float))
                                               and 0 < timeout_s < math.inf):
            raise ValidationError(f"timeout_s: must be a positive finite number of seconds, got {timeout_s!r}")
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self.keys = curve_keys(keys, CLIENTS, key_name)
        self._own_ctx = ctx is None
        self.ctx = ctx or zmq.Context()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.MAXMSGSIZE, 4 * MAX_MESSAGE_BYTES)
        if self.keys is not None:
            self.keys.apply(self.sock)
        # a refused handshake looks like silence: the monitor says why a request timed out
        self._monitor = handshake_monitor(self.sock)
        try:
            self.sock.connect(endpoint)
        except zmq.ZMQError as exc:
            self.close()
            raise ValidationError(f"{endpoint!r}: cannot connect ({zmq.strerror(exc.errno)}): not an endpoint such as "
                                  "tcp://127.0.0.1:5555 or ipc:///run/jitsched.sock") from None

    def close(self) -> None:
        """Close the socket (and the context if this client made it)."""
        self.sock.disable_monitor()
        self._monitor.close(0)
        self.sock.close(0)
        if self._own_ctx:
            self.ctx.term()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def request_raw(self, data: bytes, req_id: int) -> dict:
        """Send one already-encoded request and wait for the reply with ``req_id``.

        Raises
        ------
        RemoteError
            The daemon answered with an error (``code``, ``message``).
        TimeoutError
            No reply within ``timeout_s``.
        """
        deadline = time.monotonic() + self.timeout_s
        # a DEALER with no connected peer (none yet, or a refused CURVE handshake) blocks
        # a plain send forever: the send waits for room within the same deadline
        if not self.sock.poll(max(1, int(self.timeout_s * 1000)), zmq.POLLOUT):
            why = handshake_failure(self._monitor, self.keys is not None)
            raise TimeoutError(f"no connection to {self.endpoint} within {self.timeout_s} s"
                               + (f": {why}" if why else ""))
        self.sock.send(data, zmq.NOBLOCK)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not self.sock.poll(int(left * 1000) + 1):
                why = handshake_failure(self._monitor, self.keys is not None)
                raise TimeoutError(f"no reply from {self.endpoint} within {self.timeout_s} s"
                                   + (f": {why}" if why else ""))
            rep = decode_reply(self.sock.recv())
            if rep.id != req_id and rep.id != 0:
                continue  # a late reply to an earlier, timed-out request
            if not rep.ok:
                raise RemoteError(rep.code, rep.message, rep.detail)
            return rep.body

    def request(self, type_: str, body: dict | None = None) -> dict:
        """Send a request of ``type_`` and return the reply body."""
        rid = next_id()
        return self.request_raw(encode_request(type_, body or {}, rid), rid)

    # ------------------------------------------------------------------ job side

    def submit_job(self, job: Job | Mapping[str, Any], cluster: Mapping[str, Any] | None = None) -> str:
        """Submit a native-format job map (or a :class:`Job`); returns the job id."""
        return self.submit(job, cluster)["job_id"]

    def submit(self, job: Job | Mapping[str, Any], cluster: Mapping[str, Any] | None = None,
               if_unguaranteed: str | None = None) -> dict:
        """:meth:`submit_job`, returning the whole reply: ``job_id``, and with keys
        ``flow_job``, the job id its flows go by in the agents' schedules
        (``"<client>:<job id>"``: each client's job ids are its own).

        ``if_unguaranteed`` ("refuse", the daemon's default, or "normal"): what a critical
        job no reservation can hold becomes. Refused, :class:`RemoteError`'s ``detail``
        names the bottleneck port and the earliest start; admitted as normal, the reply's
        ``class`` is "normal" and its ``unguaranteed`` says the same."""
        body: dict[str, Any] = {"job": job.to_dict() if isinstance(job, Job) else dict(job)}
        if cluster is not None:
            body["cluster"] = dict(cluster)
        if if_unguaranteed is not None:
            body["if_unguaranteed"] = if_unguaranteed
        return self.request(MsgType.SUBMIT_JOB, body)

    def submit_graph(self, graph_path: str | Path, *, ps_host: str, worker_host: str,
                     job_id: str | None = None) -> str:
        """Import a TensorFlow GraphDef file as a native job and submit it."""
        job = load_graph_job(graph_path, ps_host=ps_host, worker_host=worker_host, job_id=job_id)
        return self.submit_job(job)

    def transfer_started(self, job_id: str, transfer: str) -> None:
        """Report that ``transfer`` started sending."""
        self.request(MsgType.TRANSFER_STARTED, {"job_id": job_id, "transfer": transfer,
                                                "t_ns": time.time_ns()})

    def transfer_finished(self, job_id: str, transfer: str, nbytes: float | None = None) -> dict:
        """Report that ``transfer`` arrived; the reply says whether it met its LAT."""
        body: dict[str, Any] = {"job_id": job_id, "transfer": transfer, "t_ns": time.time_ns()}
        if nbytes is not None:
            body["bytes"] = nbytes
        return self.request(MsgType.TRANSFER_FINISHED, body)

    def compute_finished(self, job_id: str, compute: str, duration_s: float) -> None:
        """Report a compute op's measured duration (seconds)."""
        self.request(MsgType.COMPUTE_FINISHED, {"job_id": job_id, "compute": compute,
                                                "duration_s": float(duration_s),
                                                "t_ns": time.time_ns()})

    def report(self, job_id: str, events: list) -> list[dict]:
        """Several progress reports of one job in one round trip, applied in order.

        Parameters
        ----------
        events : list of [kind, node id, value]
            ``["started", transfer, None]``, ``["finished", transfer, bytes or
            None]``, ``["compute", compute, duration_s]``: what
            :meth:`transfer_started`, :meth:`transfer_finished` and
            :meth:`compute_finished` report one at a time.

        Returns
        -------
        list of dict
            Each event's reply (a ``finished`` one says whether the LAT was met).

        Raises
        ------
        RemoteError
            The first event the daemon refused (``events[i]: ...``); the ones
            before it were applied, and sending them again changes nothing.
        """
        return self.request(MsgType.REPORT, {"job_id": job_id, "events": [list(e) for e in events]})["results"]

    def job_finished(self, job_id: str, jct_s: float | None = None) -> dict:
        """Report the job done (JCT in seconds, measured by the job)."""
        body: dict[str, Any] = {"job_id": job_id, "t_ns": time.time_ns()}
        if jct_s is not None:
            body["jct_s"] = float(jct_s)
        return self.request(MsgType.JOB_FINISHED, body)

    def renew_lease(self, job_ids: Sequence[str]) -> dict:
        """Renew the leases of running jobs (``[daemon] job_lease_s``); returns ``{"renewed",
        "not_running"}``."""
        return self.request(MsgType.RENEW_LEASE, {"job_ids": list(job_ids)})

    def cancel_job(self, job_id: str) -> dict:
        """Cancel a job."""
        return self.request(MsgType.CANCEL_JOB, {"job_id": job_id})

    def register_template(self, job: Job | Mapping[str, Any], cluster: Mapping[str, Any] | None = None) -> str:
        """Register a recurring job's DAG once (a native job map or a :class:`Job`); returns its job id.

        Its iterations are then reported with :meth:`iteration`; it ends with
        :meth:`job_finished` or :meth:`cancel_job`.
        """
        body: dict[str, Any] = {"job": job.to_dict() if isinstance(job, Job) else dict(job)}
        if cluster is not None:
            body["cluster"] = dict(cluster)
        return self.request(MsgType.REGISTER_TEMPLATE, body)["job_id"]

    def iteration(self, job_id: str, n: int, *, step_s: float | None = None,
                  compute_s: Sequence[float] | None = None, transfer_s: Sequence[float] | None = None,
                  nbytes: Sequence[float] | None = None) -> dict:
        """Report that iteration ``n`` (from 1) of recurring job ``job_id`` ended, with what it measured.

        Parameters
        ----------
        job_id : str
        n : int
        step_s : float, optional
            The iteration's time, seconds (default: the daemon times the gap between reports).
        compute_s : sequence of float, optional
            Each compute's duration, seconds, in the template's compute order.
        transfer_s, nbytes : sequence of float, optional
            Each transfer's time (seconds) and size (bytes), in the template's transfer order.

        Returns
        -------
        dict
            ``{"n", "counted", "ranked", "seq"}``: the count, whether this report was new,
            whether the schedule in force (``seq``) ranks the job.
        """
        body: dict[str, Any] = {"job_id": job_id, "n": int(n)}
        for key, val in (("compute_s", compute_s), ("transfer_s", transfer_s), ("bytes", nbytes)):
            if val is not None:
                body[key] = [float(v) for v in val]
        if step_s is not None:
            body["step_s"] = float(step_s)
        return self.request(MsgType.ITERATION, body)

    def background_started(self, flow: str, src: str, dst: str, nbytes: float, left: float | None = None) -> dict:
        """Announce a bulk transfer outside every DAG, ``nbytes`` bytes from host ``src`` to ``dst``.

        The default ``jit`` policy then ranks it among the jobs' transfers
        (small flows before large jobs, large ones after; Smith's rule) instead
        of after all of them, provided its sender's agent knows its socket as
        :func:`jitsched.protocol.background_flow_id` ``(flow)``. Announcing the
        same name again with ``left``, the bytes it still has, keeps its rank
        current as it goes (the daemon does not see its progress otherwise;
        its key shrinks with what it has left). Returns ``{"flows": n}``, the
        announced flows the daemon holds.
        """
        body = {"flow": flow, "src": src, "dst": dst, "bytes": float(nbytes)}
        if left is not None:
            body["left"] = float(left)
        return self.request(MsgType.BACKGROUND_STARTED, body)

    def background_finished(self, flow: str) -> dict:
        """The announced flow ``flow`` ended; ``{"held": bool}`` (False: the daemon no longer had it)."""
        return self.request(MsgType.BACKGROUND_FINISHED, {"flow": flow})

    def attach_job(self, job_id: str, host: str) -> dict:
        """Ask whether this client may attach job ``job_id``'s connections on ``host``.

        Returns ``{"job_id", "host", "peers": {address: host}}``, the addresses
        of the job's hosts the daemon's cluster knows (for :func:`jitsched.localreg.attach`).

        Raises
        ------
        RemoteError
            ``unknown_job`` (no such job, or it ended), ``forbidden`` (another
            client's key submitted it) or ``unknown_host``.
        """
        return self.request(MsgType.ATTACH_JOB, {"job_id": job_id, "host": host})

    def status(self, *, after: int | None = None, limit: int | None = None) -> dict:
        """Jobs, agents and the last plan summary.

        The daemon lists jobs a page at a time (``[limits] status_page_jobs``).
        By default every page is fetched and the jobs merged into the first
        reply (``pages`` says how many it took; ``next_after`` is None). With
        ``after`` or ``limit``, one page: the jobs submitted after seq
        ``after``, at most ``limit``, and ``next_after``, the cursor of the
        next page (None on the last).
        """
        if after is not None or limit is not None:
            body = {k: v for k, v in (("after", after), ("limit", limit)) if v is not None}
            return self.request(MsgType.STATUS, body)
        first = self.request(MsgType.STATUS, {})
        pages = 1
        cursor = first.get("next_after")
        while cursor is not None:
            page = self.request(MsgType.STATUS, {"after": cursor})
            first["jobs"].update(page["jobs"])
            pages += 1
            cursor = page.get("next_after")
        if "next_after" in first:
            first["next_after"] = None
            first["jobs_omitted"] = first.get("jobs_total", len(first["jobs"])) - len(first["jobs"])
        first["pages"] = pages
        return first


@contextlib.contextmanager
def announced_flow(client: Client, flow: str, src: str, dst: str, nbytes: float,
                   sock: socket.socket | None = None, agent: str | None = None
                   ) -> Iterator[Callable[[float], None]]:
    """A bulk transfer outside every DAG, announced to the daemon for the duration of the block.

    ``with announced_flow(c, "ckpt-7", "h3", "h9", size, sock, agent=...) as left: ...``
    announces ``nbytes`` bytes from host ``src`` to ``dst``
    (:meth:`Client.background_started`), registers ``sock`` with the local
    agent at ``agent`` as :func:`jitsched.protocol.background_flow_id`
    ``(flow)`` so that it enforces the flow's rank, and on leaving (also on an
    error) unregisters it and says the flow finished. ``left(n)`` tells the
    daemon the flow has ``n`` bytes left (about once a second keeps its key
    current; the daemon re-solves on such reports at most once a second; one
    that fails is skipped). Leave the block only once the
    receiver has every byte: a socket closed with its tail in flight is an
    orphan, which the kernel may reset under the agent's short
    retransmission timeouts.
    """
    client.background_started(flow, src, dst, nbytes)
    ctrl = None

    def left(n: float) -> None:
        with contextlib.suppress(OSError, RemoteError):
            client.background_started(flow, src, dst, nbytes, left=max(0.0, min(float(n), float(nbytes))))

    try:
        if sock is not None and agent:
            ctrl = register_flow(agent, background_flow_id(flow), sock)
        yield left
    finally:
        unregister_flow(ctrl, background_flow_id(flow))
        with contextlib.suppress(OSError, RemoteError):
            client.background_finished(flow)


def load_graph_job(graph_path: str | Path, *, ps_host: str, worker_host: str,
                   job_id: str | None = None) -> Job:
    """A native job from a TensorFlow GraphDef file (JSON or text) via :mod:`jitsched.tfgraph`.

    The graph's ``ps`` task maps to ``ps_host`` and its ``worker`` task to ``worker_host``.
    """
    from jitsched.tfgraph import import_tf_graph

    name = Path(graph_path).name.split(".")[0]
    return import_tf_graph(graph_path, hosts={"ps": ps_host, "worker": worker_host},
                           job_id=job_id or name)


# --------------------------------------------------------------------------- transfers

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


def _send_flow(sock: socket.socket, nbytes: int, flow: str, tos: int | None, keep: bool) -> None:
    head: dict[str, Any] = {"flow": flow, "bytes": int(nbytes)}
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
               channels: Channels | None = None) -> float:
    """Move ``nbytes`` bytes to a :class:`TransferSink` at ``addr`` over TCP.

    The connected socket is registered with the local agent listening at
    ``agent`` (see :func:`jitsched.localreg.local_address`) so that it paces
    it; the call returns once the receiver confirms every byte arrived.
    ``mss`` (bytes) caps the segment size as a 1500-byte MTU would; ``tos``
    sets the IPv4 TOS byte (DSCP class) of the connection's packets. With
    ``channels`` and no ``agent``, an idle connection to the same receiver and
    class is used if there is one, and the connection is kept there after
    (one the receiver closed meanwhile is replaced once, transparently).

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
            _send_flow(sock, nbytes, flow, tos, True)
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
            ctrl = register_flow(agent, flow, sock)
        _send_flow(sock, nbytes, flow, tos, keep)
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

    __slots__ = ("conn", "head", "flow", "left", "total", "ctrl", "done", "keep")

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
        (called on the sink's thread: keep it short).
    agent : str, optional
        Local socket name of this host's agent: each inbound flow of more than
        ``register_min_bytes`` is registered with it (``direction="in"``) for
        as long as it lasts, so an agent enforcing its ingress can give it its
        planned rate.
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
                        c.ctrl = register_flow(self.agent, c.flow, dup, direction="in")
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
        except (OSError, ValueError, KeyError, TypeError, msgpack.UnpackException):
            self._drop(c)

    def _start(self, c: _Inbound, hdr: dict) -> None:
        c.flow, c.left = str(hdr["flow"]), int(hdr["bytes"])
        c.total = c.left
        c.keep = bool(hdr.get("keep", False))
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
            self.on_arrival(c.flow, c.total)
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


__all__ = ["Channels", "Client", "RemoteError", "TransferSink", "load_graph_job", "send_bytes"]
