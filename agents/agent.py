"""The host agent: registers with the daemon, heartbeats, and applies each slot's rates through a backend."""

# One module although past 500 lines: the agent is one loop thread owning the
# daemon link (register, heartbeat, acks), the schedule in force and its slot
# clock, the backend, and the local registration socket; each part reads and
# writes the others' state between two polls, so a split would only move
# methods of one class apart. Backends and local registration framing already
# live in agents/backends and jitsched.localreg.
from __future__ import annotations

import importlib
import logging
import math
import os
import random
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import zmq

from jitsched import tickets
from jitsched.agents.attach import AttachTable, ipv4_of
from jitsched.agents.backends.base import BACKENDS, FLOW_LEVELS, Backend, FlowRate, payload_share
from jitsched.agents.capacity import UnscheduledMeter, bytes_received, tcp_info_u64
from jitsched.agents.options import AgentOptions
from jitsched.errors import JitschedError
from jitsched.keys import HOSTS, CurveKeys, curve_keys, handshake_failure, handshake_monitor
from jitsched.localreg import (
    listen_local,
    local_address,
    peer_uid,
    register_flow,
    unregister_flow,
)
from jitsched.protocol import (
    AGENT_COUNTS,
    LOCAL_TYPES,
    MAX_MESSAGE_BYTES,
    ErrorCode,
    MsgType,
    ProtocolError,
    Reply,
    Request,
    decode_any,
    decode_request,
    encode_error,
    encode_ok,
    encode_request,
    leader_named,
    next_id,
    split_endpoints,
    validate_body,
)

log = logging.getLogger("jitsched.agent")

# TCP_RTO_MAX_MS (Linux >= 6.15, <linux/tcp.h>): the longest a socket waits between
# two retransmissions, ms; the kernel accepts 1000..120000 (default 120000).
TCP_RTO_MAX_MS = getattr(socket, "TCP_RTO_MAX_MS", 44)
# TCP_RTO_MIN_US (Linux >= 6.15): the least retransmission timeout, us (AgentOptions.rto_min_ms).
TCP_RTO_MIN_US = getattr(socket, "TCP_RTO_MIN_US", 45)

# Registration: a refused one is tried again after a wait that doubles from
# REGISTER_RETRY_S up to REGISTER_RETRY_MAX_S, each drawn from its upper half so that
# agents refused together do not come back together. A refusal that no retry changes
# (a host the daemon does not know, another host's key, a key or handshake the daemon
# refuses) ends the agent after REGISTER_TRIES in a row; a host served by another live
# agent is tried on (that agent may stop: a restarted agent gets its host back).
REGISTER_TRIES = 4
REGISTER_RETRY_S = 0.25
# A replica answered not_leader without naming another leader: ask it again after this long
NOT_LEADER_RETRY_S = 0.1
# With replicas: a registration unanswered this long is sent once more on the same connection
REGISTER_RESEND_S = 0.5
REGISTER_RETRY_MAX_S = 10.0
FINAL_REFUSALS = frozenset({ErrorCode.UNKNOWN_HOST, ErrorCode.FORBIDDEN})
# The daemon's clock as this host sees it, NTP-style: each heartbeat carries the agent's
# send time, the reply the daemon's time; the offset of the round trip with the least
# delay among the last CLOCK_SAMPLES is the estimate, applied to slot times once it is
# larger than half that delay (what one round trip cannot tell apart).
CLOCK_SAMPLES = 8

TCPI_BYTES_ACKED = 120  # offset of tcpi_bytes_acked (u64) in struct tcp_info
MAX_LOGGED_JOB_CHARS = 256  # of a job id a refused local request named, in the log line


def load_backend(name: str, line_rate_Bps: float, **options) -> Backend:
    """Instantiate the enforcement backend registered as ``name``."""
    return backend_class(name)(line_rate_Bps, **options)


def backend_class(name: str) -> type[Backend]:
    """The enforcement backend registered as ``name`` (its module imported on first use).

    Raises
    ------
    ValueError
        No backend of that name.
    """
    if name not in BACKENDS:
        try:
            importlib.import_module(f"jitsched.agents.backends.{name}")
        except ImportError as exc:
            raise ValueError(f"unknown backend {name!r} ({exc})") from None
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown backend {name!r}; known: {', '.join(sorted(BACKENDS))}") from None


def bytes_acked(sock: socket.socket) -> int:
    """Bytes the peer acknowledged on ``sock`` (TCP_INFO), 0 if unavailable."""
    return tcp_info_u64(sock, TCPI_BYTES_ACKED)


class RegistrationRefused(JitschedError):
    """The daemon refused this agent's registration for a reason no retry changes."""


@dataclass
class LocalFlow:
    """A TCP socket a local job registered for pacing, with its rate meter."""

    flow_id: str
    sock: socket.socket
    src_addr: str
    src_port: int
    dst_addr: str
    dst_port: int
    last_bytes: int = 0
    last_t: float = 0.0
    rate_Bps: float = 0.0
    base_bytes: int = 0  # bytes acked (outbound) or received (inbound) when it was registered
    uid: int = 0  # the local user that registered it: only it (or root) replaces or unregisters it


class Agent:
    """One host's agent.

    Parameters
    ----------
    host : str
        Host name in the daemon's cluster.
    daemon_endpoint : str
        The daemon's agent ROUTER endpoint, e.g. ``tcp://127.0.0.1:5556``; or the
        endpoints of daemon replicas separated by commas: the agent follows the
        leader (a replica that does not lead answers ``not_leader`` naming it), and
        drops any schedule of an epoch lower than one it has seen (a deposed leader's).
    options : AgentOptions, optional
        How it enforces its schedules (backend, its device, the sockets'
        retransmission timers, ingress, reconnection, leaving on exit, the
        measured port); None: :class:`AgentOptions`' defaults, the ``pacing``
        backend among them (it says why).
    backend_options : dict, optional
        The backend's plumbing beyond ``options`` (``netns``, ``spare``,
        ``dl_tos``...), passed to its constructor and to the ``tc-ingress``
        backend's with the options' own.
    line_rate_Bps : float, optional
        Line rate in bytes/s; default: what the daemon's cluster says.
    local_namespace : str
        Distinguishes the local registration socket of agents of the same host name.
    local_dir : str or Path, optional
        Directory of the local registration socket (made 0700; default
        :func:`jitsched.localreg.run_dir`).
    allowed_uids : iterable of int
        Users besides root and the agent's own whose processes may register
        flows (their uid is checked with ``SO_PEERCRED``); with any, the
        directory becomes 0711 and the socket 0666 so that they can reach it.
    keys : CurveKeys or path, optional
        Connect to the daemon as a CURVE client: these keys, or host ``host``'s
        in a key directory (``jitsched keys init``). None: plaintext.
    clock_ns : callable, optional
        This host's wall clock, ns (default ``time.time_ns``; tests pass a skewed
        one). Slot times are taken on the daemon's clock: this one corrected by
        the offset measured on heartbeat round trips (:attr:`clock_offset_s`).
    join : dict, optional
        ``{"egress_bps", "ingress_bps"[, "address"]}``: this host's capacities (bits/s)
        and address, registered so that a daemon whose configuration lacks the host
        adds it (``[daemon] host_join``). A host of the configuration keeps its own.

    The sockets registered with the agent get ``options.rto_max_ms`` as the
    cap on their retransmission timeout (``TCP_RTO_MAX_MS``) and
    ``options.rto_min_ms`` as its floor (``TCP_RTO_MIN_US``); on a kernel
    without the options they keep theirs, ``rto_cap_failed`` counts them and
    the first is logged. With ``options.leave_on_exit``, :meth:`stop` tells
    the daemon this host leaves the cluster (its jobs with work left here end
    failed and the rest are re-planned), waiting up to a second for the
    answer (:attr:`left`).

    A registration the daemon refuses for good (an unknown host, another
    host's key, a key it does not accept) ends the agent after
    :data:`REGISTER_TRIES` backed-off tries: :attr:`failure` is then a
    :class:`RegistrationRefused` saying why.
    """

    def __init__(self, host: str, daemon_endpoint: str, options: AgentOptions | None = None, *,
                 backend_options: dict | None = None, line_rate_Bps: float | None = None,
                 local_namespace: str = "", local_dir: str | Path | None = None,
                 allowed_uids: tuple[int, ...] | list[int] = (),
                 keys: CurveKeys | str | Path | None = None,
                 clock_ns: Callable[[], int] | None = None, join: dict | None = None) -> None:
        opts = AgentOptions() if options is None else options
        if not isinstance(opts, AgentOptions):
            raise TypeError(f"Agent takes an AgentOptions, got {type(opts).__name__}")
        self.options = opts
        self.rto_max_ms = int(opts.rto_max_ms or 0)
        self.rto_min_us = int(round(float(opts.rto_min_ms or 0) * 1000))
        self.rto_capped = 0  # outbound sockets whose retransmission timeouts were set (cap, floor)
        self.rto_cap_failed = 0  # ... and those the kernel refused them for
        self.host = host
        self.join = {k: v for k, v in (join or {}).items() if v is not None}
        self.leave_on_exit = opts.leave_on_exit
        self.left = False  # the daemon took this host's leave (leave_on_exit)
        self.keys = curve_keys(keys, HOSTS, host)
        self._monitor: zmq.Socket | None = None
        self._handshake_logged = ""
        self.endpoints = split_endpoints(daemon_endpoint) or [daemon_endpoint]
        self.endpoint = self.endpoints[0]
        self.epoch = 0  # the highest leader epoch seen (replicas; 0: one daemon)
        self.fenced = 0  # schedules dropped because their epoch was below it, since start
        # daemon messages refused since start: not a message, or a body its schema refuses
        # (a schedule whose flow entries do not follow jitsched.protocol.OUT_FLOW_ENTRY...)
        self.bad_messages = 0
        self.leader_moves = 0  # switches to another replica's endpoint, since start
        self._move_to: str | None = None  # the endpoint to move to at the next loop turn ("": the next)
        self._left_silent: str | None = None  # the endpoint last left for its silence
        self._resent = False  # the registration in flight was sent again (replicas)
        self.backend_name = opts.backend
        plumbing = dict(backend_options or {})
        self.backend_options = opts.backend_options() | plumbing
        self.line_rate_Bps = line_rate_Bps
        self.local_name = local_address(host, local_namespace, local_dir)
        self.extra_uids = frozenset(int(u) for u in allowed_uids)
        self.allowed_uids = frozenset({0, os.geteuid()}) | self.extra_uids
        self.refused_local = 0  # local connections refused (peer of another user), since start
        # this host's attach ticket key, from the daemon's register reply (None: none yet)
        self.ticket_key: bytes | None = None
        self.tickets_refused = 0  # local requests refused for their ticket, since start
        self.reconnect_s = opts.reconnect_s
        self.backend: Backend | None = None
        ingress = opts.ingress_options()
        self.ingress_options = None if ingress is None else ingress | plumbing
        self.failure: BaseException | None = None  # what ended the agent loop, if it failed
        self.in_backend: Backend | None = None
        self.in_line_Bps: float | None = None
        self.schedule: dict | None = None
        self._indexed: dict | None = None  # the schedule _index was built for
        # per direction (inbound?): (slot, schedule, its flows' rates in that slot)
        self._walk_cache: dict[bool, tuple] = {}
        self.schedule_walks = 0  # times _walked_rates built a slot's rates from the schedule
        self._index: dict[str, tuple[dict[str, dict], bool]] = {}
        self.seq = 0  # seq of the schedule held
        self.incarnation: int | None = None  # of the daemon process whose seqs self.seq counts
        self.applied_seq = 0
        self.acked: list[int] = []
        self.registered = threading.Event()
        self.heartbeat_s = 0.5
        # silence after which the schedule held is dropped (the register reply says)
        self.heartbeat_timeout_s = 2.0
        self.dropped = 0  # schedules dropped because the daemon went silent, since start
        self.stale = 0  # schedule bodies ignored as older than the one held, since start
        # the optional heartbeat fields the daemon registered with takes (HEARTBEAT_TAKES)
        self._daemon_takes: frozenset[str] = frozenset()
        self.daemons = 0  # daemon incarnations seen, since start
        self._register_id = 0  # request id of the register in flight (0: none)
        self._register_at = -math.inf  # when it was sent (monotonic)
        self._next_register_at = 0.0  # no registration before this (monotonic): a backoff
        self.register_refused = 0  # registrations refused in a row (any reason)
        self._final_refusals = 0  # ... of which for a reason no retry changes
        self.registered_count = 0  # registrations the daemon accepted, since start
        # this agent object among others with its host's name or key: the daemon refuses
        # a second one while the first is alive, and lets this one take its host back
        self.agent_id = uuid.uuid4().hex
        self._clock_ns = clock_ns or time.time_ns
        self._clock: deque[tuple[int, int]] = deque(maxlen=CLOCK_SAMPLES)  # (delay, offset) ns
        self.clock_offset_s: float | None = None  # this clock minus the daemon's, best estimate
        self.clock_rtt_s: float | None = None  # the round trip that estimate came from
        self._clock_correction_ns = 0  # subtracted from this clock for slot times
        self._behind_seq = 0  # a heartbeat reply's seq newer than the one held (a lost push)
        self._refetch = False  # the schedule was dropped: ask for it when the daemon speaks
        self.flows: dict[str, LocalFlow] = {}
        self.in_flows: dict[str, LocalFlow] = {}  # inbound sockets, for the ingress backend
        self.registrations = {"out": 0, "in": 0}  # flows registered so far, per direction
        # jobs attached by pid, cgroup or port: their connections, found in the backend's namespace
        self.attached = AttachTable(netns=self.backend_options.get("netns"))
        self.current_slot: int | None = None
        self.current_caps: dict[str, float] = {}  # the caps on unranked traffic in force, by address
        self.current_floor: float | None = None  # the floor held for a critical job, in force (None: own)
        self.caps_unenforced = False  # caps came that this agent's backend cannot hold (logged once)
        self.applied_at_ns = 0
        self.port_dev = opts.port_dev or self.backend_options.get("dev")
        self.meter: UnscheduledMeter | None = None  # made with the backends (their class counters)
        self.unscheduled_Bps: dict[str, float] = {}  # as last measured
        # payload of the flows registered here that have ended, per direction (their bytes
        # are the port's scheduled traffic, as their live sockets' are)
        self._ended_bytes = {"out": 0, "in": 0}
        self._ctx = zmq.Context()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._last_rx = 0.0
        self._last_heard = time.monotonic()  # the last message from any daemon (not reset on reconnect)
        self._kill = False

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout_s: float = 10.0) -> Agent:
        """Run in a background thread; returns once the local socket is listening."""
        self._thread = threading.Thread(target=self.run, name=f"jitsched-agent-{self.host}",
                                        daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise RuntimeError(f"agent {self.host} did not start")
        if self._error is not None:
            raise self._error
        return self

    @property
    def running(self) -> bool:
        """Whether the agent loop is running (False once stopped or failed; see :attr:`failure`)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop, remove the backend's state, close every socket."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self._ctx.term()

    def kill(self) -> None:
        """Stop abruptly (tests: a crashed agent): no goodbye, backend left as is."""
        self._kill = True
        self.stop()

    def _connect(self) -> zmq.Socket:
        s = self._ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.MAXMSGSIZE, 4 * MAX_MESSAGE_BYTES)
        if self.keys is not None:
            # the daemon's socket names the connection (no peer can choose such an id)
            self.keys.apply(s)
        else:
            # a fresh identity per connection: the daemon maps it to the host on register
            s.setsockopt(zmq.ROUTING_ID, f"{self.host}/{uuid.uuid4().hex[:12]}".encode())
        self._monitor = handshake_monitor(s)
        s.connect(self.endpoint)
        self._last_rx = time.monotonic()
        return s

    def _close(self, s: zmq.Socket) -> None:
        s.disable_monitor()
        if self._monitor is not None:
            self._monitor.close(0)
            self._monitor = None
        s.close(0)

    def _check_handshake(self) -> str:
        """Why the connection's handshakes failed since the last look ("" if none did)."""
        # a refused handshake is silence to the loop: say why once, not every reconnect
        why = handshake_failure(self._monitor, self.keys is not None)
        if why and why != self._handshake_logged:
            self._handshake_logged = why
            log.warning("event=agent_handshake_failed host=%s endpoint=%s reason=%r", self.host, self.endpoint, why)
        return why

    def _register(self, s: zmq.Socket, again: bool = False) -> None:
        # the daemon's status shows it: whether this host's ingress is ordered too
        backend = self.backend_name + ("+tc-ingress" if self.ingress_options is not None else "")
        # what the daemon reserves for critical jobs on: the share of each port the backend
        # keeps for unranked traffic, and the share of the line a flow's payload takes
        # (the tc backend shapes whole frames and keeps a floor; the others neither)
        tc = self.backend_name == "tc"
        body = {"host": self.host, "backend": backend, "applied_seq": self.applied_seq,
                "agent_id": self.agent_id, "background_floor": self.options.background_floor if tc else 0.0,
                "payload_share": payload_share() if tc else 1.0} | self.join
        # whether it lowers its floor on a critical job's ports (the body's floor_from): the tc
        # backends do only where they can keep DL packets out of the background class
        # (their dl_tos: TcBackend.holds_floor)
        if tc and self.backend_options.get("dl_tos"):
            body["holds_floor"] = True
        self._register_id = next_id()
        if not again:
            self._register_at = time.monotonic()
            self._resent = False
        try:
            s.send(encode_request(MsgType.REGISTER, body, self._register_id), zmq.NOBLOCK)
            s.send(encode_request(MsgType.GET_SCHEDULE, {"host": self.host}), zmq.NOBLOCK)
        except zmq.Again:
            # not connected yet: the reply timeout (reconnect_s) tries again
            pass

    def _refused(self, reason: str, final: bool) -> None:
        """A registration was refused (or never answered, its handshake refused): wait
        before the next, longer each time; raise after REGISTER_TRIES final refusals.

        Raises
        ------
        RegistrationRefused
            The ``REGISTER_TRIES``-th final refusal in a row.
        """
        self.register_refused += 1
        self._final_refusals = self._final_refusals + 1 if final else 0
        if self._final_refusals >= REGISTER_TRIES:
            raise RegistrationRefused(f"the daemon at {self.endpoint} refused host {self.host!r} "
                                      f"{self._final_refusals} times: {reason}")
        wait = min(REGISTER_RETRY_MAX_S, REGISTER_RETRY_S * 2 ** (self.register_refused - 1))
        wait *= random.uniform(0.5, 1.0)
        self._next_register_at = time.monotonic() + wait
        # one warning for a host another agent serves (it may go on for long), details below
        level = logging.WARNING if self.register_refused == 1 and not final else logging.INFO
        log.log(level, "event=agent_register_refused host=%s reason=%r tries=%d retry_in_s=%.2f",
                self.host, reason, self.register_refused, wait)

    def _silence_s(self) -> float:
        """Silence after which the agent reconnects: with replicas, three heartbeats at most
        (a dead leader is left as soon as its lease can lapse)."""
        if len(self.endpoints) > 1:
            return min(self.reconnect_s, 3 * self.heartbeat_s)
        return self.reconnect_s

    def _reconnect(self, poller: zmq.Poller, dealer: zmq.Socket, unanswered: bool,
                   to: str | None = None) -> zmq.Socket:
        """A fresh connection to the daemon (the old one silent); ``unanswered``: its
        registration got no reply, a failed try (a final one if the handshake was refused).
        With replicas, to ``to`` (the leader a follower named) or else the next endpoint."""
        if to is not None or len(self.endpoints) > 1:
            i = self.endpoints.index(self.endpoint) if self.endpoint in self.endpoints else -1
            if to is None:
                self._left_silent = self.endpoint
            self.endpoint = to or self.endpoints[(i + 1) % len(self.endpoints)]
            self.leader_moves += 1
            unanswered = unanswered and to is None
        why = self._check_handshake()
        if unanswered:
            self._register_id = 0
            if why:
                self._refused(why, final=True)
            else:
                self._next_register_at = time.monotonic() + random.uniform(0.0, REGISTER_RETRY_S)
        log.warning("event=agent_reconnect host=%s", self.host)
        poller.unregister(dealer)
        self._close(dealer)
        dealer = self._connect()
        poller.register(dealer, zmq.POLLIN)
        self.registered.clear()
        return dealer

    def run(self) -> None:
        """The agent loop (blocks until :meth:`stop`)."""
        listener = None
        try:
            listener = listen_local(self.local_name, shared=bool(self.extra_uids))
            dealer = self._connect()
        except BaseException as exc:  # noqa: BLE001 - surfaced by start()
            if listener is not None:
                listener.close()
            self._error = exc
            self._ready.set()
            return
        self._ready.set()
        conns: dict[int, socket.socket] = {}
        poller = zmq.Poller()
        poller.register(dealer, zmq.POLLIN)
        poller.register(listener.sock, zmq.POLLIN)
        next_hb = 0.0
        try:
            while not self._stop.is_set():
                timeout_ms = self._poll_timeout_ms(next_hb)
                events = dict(poller.poll(timeout=timeout_ms))
                if dealer in events:
                    self._drain(dealer)
                # zmq's poller reports plain sockets by file descriptor
                if listener.sock.fileno() in events:
                    try:
                        c, _ = listener.sock.accept()
                    except BlockingIOError:
                        c = None
                    if c is not None and self._trusted(c):
                        c.setblocking(False)
                        conns[c.fileno()] = c
                        poller.register(c, zmq.POLLIN)
                for fd in [fd for fd in events if isinstance(fd, int) and fd in conns]:
                    c = conns[fd]
                    if not self._serve_local(c):
                        poller.unregister(c)
                        del conns[fd]
                        c.close()
                mono = time.monotonic()
                if self.attached.due(mono) and self.attached.scan():
                    self._tick(force=True)  # connections came or went: classify them now
                if self.schedule is not None and mono - self._last_heard > self.heartbeat_timeout_s:
                    self._drop_schedule()
                if self._move_to is not None:
                    # a replica that does not lead answered: to the leader it named, or the next
                    dealer = self._reconnect(poller, dealer, unanswered=False, to=self._move_to)
                    self._register_id, self._move_to = 0, None
                elif (self._register_id and len(self.endpoints) > 1 and mono - self._register_at > REGISTER_RESEND_S
                      and mono - self._register_at < self._silence_s() and not self._resent):
                    # a replica taking the lead re-binds its sockets: a request sent in that
                    # moment is lost, the connection itself comes back
                    self._resent = True
                    self._register(dealer, again=True)
                elif self._register_id and mono - self._register_at > self._silence_s():
                    # no answer to the registration: the daemon is away or refused the handshake
                    dealer = self._reconnect(poller, dealer, unanswered=True)
                elif self.registered.is_set() and mono - self._last_rx > self._silence_s():
                    # the daemon went quiet (restart, network): start a fresh connection
                    dealer = self._reconnect(poller, dealer, unanswered=False)
                if not self.registered.is_set() and not self._register_id and mono >= self._next_register_at:
                    self._register(dealer)
                if self.registered.is_set() and mono >= next_hb:
                    next_hb = mono + self.heartbeat_s
                    self._heartbeat(dealer)
                self._tick()
        except RegistrationRefused as exc:
            # a refusal no retry changes: kept for whoever runs the agent (the CLI says it in
            # one line and exits 2); the tries were logged
            self.failure = exc
            log.info("event=agent_stopped host=%s reason=%r", self.host, str(exc))
        except BaseException as exc:
            # e.g. a backend that cannot be installed once the daemon gives the rates:
            # kept for whoever runs the agent (the CLI exits non-zero on it)
            self.failure = exc
            log.error("event=agent_failed host=%s error=%r", self.host, f"{type(exc).__name__}: {exc}",
                      exc_info=True)
        finally:
            for c in conns.values():
                c.close()
            listener.close()
            if self.leave_on_exit and not self._kill and self.registered.is_set():
                self._leave(dealer)
            self._close(dealer)
            if not self._kill:
                for be in (self.backend, self.in_backend):
                    if be is None:
                        continue
                    try:
                        be.close()
                    except Exception as exc:  # noqa: BLE001 - every backend is closed, each failure kept
                        # what the backend installed may be left on the device: the agent failed
                        log.error("event=agent_cleanup_failed host=%s backend=%s error=%r", self.host,
                                  be.name, f"{type(exc).__name__}: {exc}")
                        if self.failure is None:
                            self.failure = exc
            for f in [*self.flows.values(), *self.in_flows.values()]:
                f.sock.close()
            self.attached.close()

    def _leave(self, dealer: zmq.Socket, timeout_s: float = 1.0) -> None:
        """Tell the daemon this host leaves; :attr:`left` says whether it answered so."""
        rid = next_id()
        try:
            dealer.send(encode_request(MsgType.LEAVE, {"host": self.host}, rid), zmq.NOBLOCK)
        except zmq.ZMQError:
            return
        end = time.monotonic() + timeout_s
        while (wait := end - time.monotonic()) > 0 and dealer.poll(int(wait * 1000) + 1):
            try:
                msg = decode_any(dealer.recv(zmq.NOBLOCK))
            except (zmq.Again, ProtocolError):
                continue
            if isinstance(msg, Reply) and msg.id == rid:
                self.left = msg.ok
                log.log(logging.INFO if msg.ok else logging.WARNING, "event=agent_left host=%s ok=%s reason=%r",
                        self.host, msg.ok, msg.message)
                return
        log.warning("event=agent_leave_unanswered host=%s", self.host)

    def _poll_timeout_ms(self, next_hb: float) -> int:
        wait = max(next_hb - time.monotonic(), 0.0)
        s = self.schedule
        if s and s["slot_s"] > 0:
            slot_ns = int(s["slot_s"] * 1e9)
            rel = self.daemon_ns() - s["epoch_ns"]
            to_boundary = (slot_ns - rel % slot_ns) / 1e9 if rel >= 0 else -rel / 1e9
            wait = min(wait, to_boundary)
        return max(1, min(int(math.ceil(wait * 1000)), 50))

    # ------------------------------------------------------------------ daemon messages

    def _drain(self, dealer: zmq.Socket) -> None:
        while True:
            try:
                data = dealer.recv(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._last_rx = self._last_heard = time.monotonic()
            if self._refetch:
                # the schedule was dropped in the silence: the daemon has not re-sent it
                # if it saw it acked, so ask
                self._refetch = False
                self._send(dealer, MsgType.GET_SCHEDULE, {"host": self.host})
            try:
                msg = decode_any(data)
            except ProtocolError as exc:
                self._bad_message(exc)
                continue
            if isinstance(msg, Request) and msg.type == MsgType.SCHEDULE:
                # acked only if held: an ack tells the daemon to stop re-sending it
                if self._install(msg.body):
                    self._ack(dealer, msg.body["seq"])
            elif isinstance(msg, Reply):
                self._on_reply(msg, dealer)

    def _send(self, dealer: zmq.Socket, type_: str, body: dict) -> None:
        try:
            dealer.send(encode_request(type_, body), zmq.NOBLOCK)
        except zmq.Again:
            pass  # not connected: the re-send timer or the next request makes up for it

    def _on_reply(self, rep: Reply, dealer: zmq.Socket) -> None:
        to_register = rep.id == self._register_id
        if to_register:
            self._register_id = 0
        if not rep.ok:
            if rep.code == ErrorCode.NOT_LEADER:
                self._not_leader(rep.message)
                return
            if to_register:
                self.registered.clear()
                self._refused(f"{rep.code}: {rep.message}", final=rep.code in FINAL_REFUSALS)
            elif rep.code == ErrorCode.NOT_REGISTERED:
                if self.registered.is_set():
                    # a restarted daemon does not know this agent: the loop registers it
                    # again at once (after a silence its error replies keep from coming)
                    log.warning("event=agent_reregister host=%s", self.host)
                self.registered.clear()
            else:
                log.warning("event=agent_error host=%s code=%s message=%r", self.host, rep.code, rep.message)
            return
        b = rep.body
        if "t_ns" in b:  # a heartbeat reply
            self._clock_sample(b)
            self._check_seq(int(b.get("seq", 0)), dealer)
        elif "t0_wall_ns" in b:  # the register reply
            self.register_refused = self._final_refusals = 0
            self.registered_count += 1
            self.heartbeat_s = float(b.get("heartbeat_s", self.heartbeat_s))
            self.heartbeat_timeout_s = float(b.get("heartbeat_timeout_s", self.heartbeat_timeout_s))
            if int(b.get("epoch", 0)) < self.epoch:
                # a deposed leader answered (stopped, then went on): leave it for the next
                self.fenced += 1
                self.registered.clear()
                self._move_to = ""
                log.warning("event=agent_daemon_fenced host=%s epoch=%d seen_epoch=%d", self.host,
                            int(b.get("epoch", 0)), self.epoch)
                return
            self.epoch = max(self.epoch, int(b.get("epoch", 0)))
            self._left_silent = None
            self._daemon_takes = frozenset(t for t in b.get("takes", ()) if isinstance(t, str))
            self._take_ticket_key(b.get("ticket_key"))
            if "incarnation" in b:
                self._daemon_is(int(b["incarnation"]))
            if self.backend is None:
                line = self.line_rate_Bps or float(b["line_Bps"])
                self.line_rate_Bps = line
                self.backend = load_backend(self.backend_name, line, **self.backend_options)
                for f in self.flows.values():
                    self.backend.attach(f.flow_id, f.sock)
            if self.in_backend is None and self.ingress_options is not None:
                self.in_line_Bps = float(b.get("ingress_Bps", self.line_rate_Bps))
                self.in_backend = load_backend("tc-ingress", self.in_line_Bps, **self.ingress_options)
                for f in self.in_flows.values():
                    self.in_backend.attach(f.flow_id, f.sock)
            if self.meter is None and self.port_dev:
                self.meter = UnscheduledMeter(self.port_dev, self.backend_options.get("netns"), {
                    "out": self.backend.scheduled_bytes,
                    "in": self.in_backend.scheduled_bytes if self.in_backend is not None else lambda: None})
            self.registered.set()
        elif "flows" in b and "epoch_ns" in b:  # the get_schedule reply: a schedule body
            try:
                validate_body(MsgType.SCHEDULE, b)
            except ProtocolError as exc:
                self._bad_message(exc)
                return
            if self._install(b):
                self._ack(dealer, b["seq"])

    def _take_ticket_key(self, key: object) -> None:
        """Hold the attach ticket key of a register reply (hex); a daemon that sends none, or
        a malformed one, leaves the agent with none: it refuses every ticket then."""
        try:
            got = bytes.fromhex(key) if isinstance(key, str) else None
        except ValueError:
            got = None
        if got is not None and len(got) != tickets.KEY_BYTES:
            got = None
        if got is None and key is not None:
            log.warning("event=agent_bad_ticket_key host=%s", self.host)
        self.ticket_key = got

    def _bad_message(self, exc: ProtocolError) -> None:
        """A daemon message refused: counted in ``bad_messages``, logged naming the problem."""
        self.bad_messages += 1
        log.warning("event=agent_bad_message host=%s code=%s message=%r", self.host, exc.code, exc.message)

    def _ack(self, dealer: zmq.Socket, seq: int) -> None:
        ack = {"host": self.host, "seq": seq}
        if self.incarnation is not None:
            ack["incarnation"] = self.incarnation
        self._send(dealer, MsgType.ACK, ack)

    def _check_seq(self, seq: int, dealer: zmq.Socket) -> None:
        """A heartbeat reply names the seq the daemon holds for this host: newer than the
        one held on two replies in a row, its push was lost (the daemon stops re-sending
        to an agent that never acks): ask for it."""
        if seq <= self.seq:
            self._behind_seq = 0
            return
        if self._behind_seq == seq:
            self._send(dealer, MsgType.GET_SCHEDULE, {"host": self.host})
        self._behind_seq = seq

    def _clock_sample(self, b: dict) -> None:
        """One heartbeat round trip: ``b`` holds the daemon's time and the echoed send time (ns)."""
        t4 = self._clock_ns()
        t1 = b.get("sent_ns")
        if not isinstance(t1, int) or t4 < t1:
            return
        # this clock minus the daemon's, were both ways equally long
        self._clock.append((t4 - t1, (t1 + t4) // 2 - int(b["t_ns"])))
        delay, offset = min(self._clock)
        self.clock_offset_s, self.clock_rtt_s = offset / 1e9, delay / 1e9
        self._clock_correction_ns = offset if abs(offset) > delay / 2 else 0

    def daemon_ns(self) -> int:
        """The daemon's wall clock as this host tells it, ns: its own corrected by the
        measured offset (once that exceeds what a round trip cannot tell apart)."""
        return self._clock_ns() - self._clock_correction_ns

    def _daemon_is(self, incarnation: int) -> None:
        """The daemon answering is process ``incarnation``: a new one counts seqs from 1 and
        knows nothing of the schedule held, which goes (its own comes when planned)."""
        if incarnation == self.incarnation:
            return
        if self.incarnation is not None:
            log.warning("event=agent_new_daemon host=%s dropped_seq=%d", self.host, self.seq)
        self.daemons += 1
        self.incarnation = incarnation
        # another process, maybe on another node: its clock is measured anew (a round trip to
        # the last one, quicker, would otherwise stand for it for CLOCK_SAMPLES heartbeats)
        self._clock.clear()
        self.seq = 0
        self.acked.clear()
        if self.schedule is not None:
            self.schedule = None
            self.current_slot = None  # no enforcement from the next tick

    def _drop_schedule(self) -> None:
        """The daemon stayed silent past its heartbeat timeout: stop enforcing a plan that
        nobody updates (finished flows paced, new ones unknown); traffic shares the line."""
        log.warning("event=agent_schedule_dropped host=%s seq=%d silent_s=%.1f", self.host, self.seq,
                    time.monotonic() - self._last_heard)
        self.dropped += 1
        self.schedule = None
        self.seq = 0  # the same daemon's body of that seq installs again
        self.current_slot = None
        self._refetch = True

    def _not_leader(self, message: str) -> None:
        """The replica answering does not lead: move to the leader its ``message`` names,
        or (none named) to the next endpoint after a moment."""
        named = leader_named(message)
        if named is not None and named[1] != self.endpoint and (named[1] != self._left_silent
                                                                or named[2] > self.epoch):
            self._move_to = named[1]
        else:
            # no leader yet, or the one named is the one that went silent, of the epoch this
            # agent knew (its lease has not lapsed yet): ask this replica again shortly, it
            # knows the next leader first
            self._next_register_at = time.monotonic() + NOT_LEADER_RETRY_S
        self.registered.clear()

    def _install(self, body: dict) -> bool:
        """Hold ``body`` if it is newer than the schedule held; returns whether the agent
        holds it now (installed now or before), i.e. whether to ack it. A body of a lower
        leader epoch than one seen (a deposed replica's) is dropped, counted in ``fenced``."""
        epoch = int(body.get("epoch", 0))
        if epoch < self.epoch:
            self.fenced += 1
            log.warning("event=agent_schedule_fenced host=%s epoch=%d seen_epoch=%d", self.host, epoch, self.epoch)
            return False
        self.epoch = epoch
        inc = body.get("incarnation")
        if inc is not None:
            self._daemon_is(int(inc))
        if body["seq"] == 0:
            return False  # the daemon has planned nothing for this host yet
        if body["seq"] < self.seq:
            # pushed schedules are idempotent by sequence number; an older one comes
            # legitimately when a get_schedule reply is overtaken by a push, and otherwise
            # only from a daemon that sent a host's seqs out of order: counted for status
            self.stale += 1
            log.info("event=agent_schedule_stale host=%s seq=%d held_seq=%d", self.host, body["seq"], self.seq)
            return False
        if body["seq"] == self.seq and self.schedule is not None:
            if body["seq"] not in self.acked:
                self.acked.append(body["seq"])
            return True
        self.schedule = body
        self.seq = body["seq"]
        self.acked.append(body["seq"])
        del self.acked[:-64]
        self.current_slot = None  # re-apply at once
        return True

    def _heartbeat(self, dealer: zmq.Socket) -> None:
        now = time.monotonic()
        rates = {}
        for f in self.flows.values():
            b = bytes_acked(f.sock)
            dt = now - f.last_t
            if f.last_t and dt > 0:
                f.rate_Bps = max(b - f.last_bytes, 0) / dt
            f.last_bytes, f.last_t = b, now
            rates[f.flow_id] = f.rate_Bps
        body = {"host": self.host, "applied_seq": self.applied_seq, "flow_rates_Bps": rates,
                "total_Bps": float(sum(rates.values())), "sent_ns": self._clock_ns()}
        if "counts" in self._daemon_takes:
            body["counts"] = self.counts()
        if self.clock_offset_s is not None:
            body["clock_offset_s"] = self.clock_offset_s
            body["clock_rtt_s"] = self.clock_rtt_s
        if self.attached.jobs or self.attached.scans:
            body["attached"] = self.attached.summary()
        if self.current_caps or self.caps_unenforced:
            body["caps_held"] = len(self.current_caps)
            body["caps_unenforced"] = self.caps_unenforced
        if self.current_floor is not None and self.backend is not None and self.backend.holds_floor:
            body["floor_held"] = self.current_floor
        if self.meter is not None:
            errors = self.meter.errors
            self.unscheduled_Bps = self.meter.sample(lambda: self.scheduled_bytes(body.get("attached")))
            if self.meter.errors > errors and (errors == 0 or self.meter.errors % 1000 == 0):
                # no sample goes: the daemon's status shows the agent's unscheduled_Bps empty
                log.warning("event=agent_port_unmeasured dev=%s errors=%d error=%r", self.port_dev,
                            self.meter.errors, self.meter.last_error)
            if self.unscheduled_Bps:
                body["unscheduled_Bps"] = self.unscheduled_Bps
        try:
            dealer.send(encode_request(MsgType.HEARTBEAT, body), zmq.NOBLOCK)
        except zmq.Again:
            pass

    def counts(self) -> dict[str, int]:
        """What the agent refused or dropped since start, by :data:`jitsched.protocol.AGENT_COUNTS`
        name (its heartbeat carries them to the daemon's ``status``)."""
        return {name: getattr(self, name) for name in AGENT_COUNTS}  # each an attribute of that name

    def scheduled_bytes(self, attached: dict | None = None) -> dict[str, int]:
        """Payload bytes so far of the flows this agent schedules, per direction: registered
        sockets (live and ended) and attached jobs' connections (``attached``: their summary)."""
        out = dict(self._ended_bytes)
        for d, flows in (("out", self.flows), ("in", self.in_flows)):
            out[d] += sum(max(_flow_bytes(f, d == "in") - f.base_bytes, 0) for f in flows.values())
        for acct in (attached or {}).get("jobs", {}).values():
            out["out"] += int(acct.get("bytes_sent", 0))
            out["in"] += int(acct.get("bytes_received", 0))
        return out

    def _ended(self, f: LocalFlow, direction: str) -> None:
        """Flow ``f`` leaves: its bytes stay counted as scheduled."""
        self._ended_bytes[direction] += max(_flow_bytes(f, direction == "in") - f.base_bytes, 0)

    # ------------------------------------------------------------------ enforcement

    def slot_rates(self, now_ns: int | None = None, inbound: bool = False
                   ) -> tuple[int, list[FlowRate], float]:
        """The current slot index, the flows' rates (bytes/s) and the leftover (bytes/s).

        Before a flow's first planned slot it is held at zero; after its last one it
        leaves the list and shares the leftover like unscheduled traffic, unless it
        has a strict-priority level (``prio``): then it stays, at zero, borrowing
        by its level, and the leftover guaranteed to background is zero.
        ``inbound``: the flows this host receives and its ingress leftover.
        """
        s = self.schedule
        if inbound:
            line = float(self.in_line_Bps or (s or {}).get("in_line_Bps", 0.0))
            backend, local = self.in_backend, self.in_flows
        else:
            line = float(self.line_rate_Bps or (s or {}).get("line_Bps", 0.0))
            backend, local = self.backend, self.flows
        if not s:
            return -1, [], line
        now_ns = self.daemon_ns() if now_ns is None else now_ns
        k = (now_ns - s["epoch_ns"]) // int(s["slot_s"] * 1e9)
        left = s.get("in_leftover_Bps", []) if inbound else s["leftover_Bps"]
        leftover = float(left[k]) if 0 <= k < len(left) else line
        need_ep = backend.needs_endpoints if backend is not None else False
        index, ranked = self._flow_index(s, inbound)
        if not need_ep:
            walked = self._walked_rates(s, inbound, int(k), ranked, local)
            if self.attached.jobs:
                walked += self.attached.rates(s, int(k), inbound, self._walk_cache[inbound][3] if ranked else None,
                                              _registered(local, inbound))
            return int(k), walked, 0.0 if ranked else leftover
        out = []
        # A backend that needs endpoints only installs the flows registered here: look
        # those up rather than walk the schedule, which lists every transfer the host
        # will carry (a ResNet152 job alone has 2020); the walk ran on every slot and
        # registration and was most of the agents' CPU on the testbed.
        entries = [index[fid] for fid in local if fid in index]
        for f in entries:
            got = _rate_in_slot(f, k)
            if got is None:
                continue
            lf = local[f["flow"]]
            out.append(FlowRate(f["flow"], got[0], lf.src_addr, lf.src_port, lf.dst_addr, lf.dst_port,
                                prio=got[1]))
        if self.attached.jobs:
            out += self.attached.rates(s, int(k), inbound, skip=_registered(local, inbound))
        if ranked:
            out = dense_levels(out)
            # strict priority: background is guaranteed nothing and borrows after every
            # ranked flow, so what the DL flows leave is all it gets (and all of it)
            leftover = 0.0
        return int(k), out, leftover

    def _walked_rates(self, s: dict, inbound: bool, k: int, ranked: bool, local: dict) -> list[FlowRate]:
        """Every flow of the schedule carried in slot ``k`` with its rate (and dense level),
        those registered here with their endpoints: :meth:`slot_rates` for a backend that
        takes the whole schedule (``needs_endpoints`` False: ``record``).

        The schedule's part is built once per slot, schedule and direction: rebuilt on
        every registration, the walk (a FlowRate per transfer the host will carry, re-made
        again for its level) was 79 % of the GIL in the demo's process while an
        Inception-v3 job (851 transfers) ran alone under ``pacing`` agents (which took
        this path then), and that job took 10.7 s against 1.4 s with no agent.
        """
        cached = self._walk_cache.get(inbound)
        if cached is None or cached[0] != k or cached[1] is not s:
            rows = []
            for f in (s.get("in_flows", []) if inbound else s["flows"]):
                got = _rate_in_slot(f, k)
                if got is not None:
                    rows.append((f["flow"], *got))
            level_of = {}
            if ranked:
                level_of = _dense_level_map(p for _, _, p in rows)
                rows = [(fid, rate, None if p is None else level_of[p]) for fid, rate, p in rows]
            cached = (k, s, [FlowRate(fid, rate, prio=p) for fid, rate, p in rows], level_of)
            self._walk_cache[inbound] = cached
            self.schedule_walks += 1
        flows = cached[2]
        if not local:
            return list(flows)
        out = []
        for fr in flows:
            lf = local.get(fr.flow_id)
            out.append(fr if lf is None else FlowRate(fr.flow_id, fr.rate_Bps, lf.src_addr, lf.src_port,
                                                      lf.dst_addr, lf.dst_port, prio=fr.prio))
        return out

    def _flow_index(self, s: dict, inbound: bool) -> tuple[dict[str, dict], bool]:
        """The schedule's flows of one direction by id, and whether any of them is ranked."""
        if self._indexed is not s:
            self._indexed = s
            self._index = {}
            for d, key in (("in", "in_flows"), ("out", "flows")):
                entries = s.get(key, [])
                self._index[d] = ({f["flow"]: f for f in entries}, any(f.get("prio") is not None for f in entries))
        return self._index["in" if inbound else "out"]

    def dst_caps(self, now_ns: int | None = None) -> dict[str, float]:
        """The caps on this host's unranked traffic now, bytes/s by destination address: what
        the critical jobs' reservations leave of each held ingress (the body's ``caps_into``)."""
        s = self.schedule
        if not s or not s.get("caps_into"):
            return {}
        now_ns = self.daemon_ns() if now_ns is None else now_ns
        out = {}
        for c in s["caps_into"]:
            k = (now_ns - c["epoch_ns"]) // int(c["slot_s"] * 1e9)
            if 0 <= k < len(c["left_Bps"]):
                out[c["addr"]] = float(c["left_Bps"][k])
        return out

    def held_floor(self, now_ns: int | None = None) -> float | None:
        """The share of the ports the schedule has this host keep for unranked traffic now
        instead of its own floor, while a critical job's reserved transfers go into or out of
        it (the body's ``floor_from``: the latest entry begun); None: its own floor."""
        s = self.schedule
        if not s or not s.get("floor_from"):
            return None
        now_ns = self.daemon_ns() if now_ns is None else now_ns
        begun = [f for f in s["floor_from"] if f["epoch_ns"] <= now_ns]
        return float(max(begun, key=lambda f: f["epoch_ns"])["share"]) if begun else None

    def _tick(self, force: bool = False, only: str | None = None) -> None:
        # only="out"/"in": a registration changed that direction's flows, within the slot
        if self.backend is None:
            return
        # without a schedule yet, registered flows share the whole line (slot -1)
        k, flows, leftover = self.slot_rates()
        caps = self.dst_caps()
        floor = self.held_floor()
        if k == self.current_slot and caps == self.current_caps and floor == self.current_floor and not force:
            return
        if k != self.current_slot or caps != self.current_caps or floor != self.current_floor:
            only = None  # a new slot changes both directions
        if floor != self.current_floor:
            self.backend.hold_floor(floor)
            if self.in_backend is not None:
                self.in_backend.hold_floor(floor)
            if self.backend.holds_floor:
                log.info("event=agent_floor host=%s floor=%s", self.host, "own" if floor is None else f"{floor:g}")
        self.current_slot, self.current_caps, self.current_floor = k, caps, floor
        if only != "in":
            self.backend.cap_destinations(caps)
        refused = self.backend.caps_refused if caps else ()
        if caps and (not self.backend.caps_destinations or refused) and not self.caps_unenforced:
            self.caps_unenforced = True
            log.warning("event=agent_caps_unenforced host=%s backend=%s caps=%d refused=%s", self.host,
                        self.backend_name, len(caps), ",".join(refused) or "all")
        if only != "in":
            self.backend.apply(flows, leftover)
        if self.in_backend is not None and only != "out":
            _, in_flows, in_left = self.slot_rates(inbound=True)
            self.in_backend.apply(in_flows, in_left)
        self.applied_seq = self.seq
        self.applied_at_ns = self.daemon_ns()

    # ------------------------------------------------------------------ local registrations

    def _trusted(self, conn: socket.socket) -> bool:
        """Whether a new local connection comes from an allowed user; closes it if not,
        before anything is read from it (a descriptor it sent dies with it)."""
        try:
            uid = peer_uid(conn)
        except OSError:
            uid = -1
        if uid in self.allowed_uids:
            return True
        self.refused_local += 1
        if self.refused_local <= 10 or self.refused_local % 1000 == 0:
            log.warning("event=agent_local_refused host=%s uid=%d refused=%d", self.host, uid, self.refused_local)
        conn.close()
        return False

    def _serve_local(self, conn: socket.socket) -> bool:
        try:
            data, fds, _flags, _addr = socket.recv_fds(conn, MAX_MESSAGE_BYTES, 1)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False
        if not data:
            for fd in fds:
                os.close(fd)
            return False
        try:
            req = decode_request(data, allowed=LOCAL_TYPES)
            if req.type in (MsgType.ATTACH, MsgType.DETACH):
                for fd in fds:  # names processes, carries no socket
                    os.close(fd)
                fds = []
                reply = self._attach_request(req, peer_uid(conn))
            else:
                reply = self._local_request(req, fds, peer_uid(conn))
        except ProtocolError as exc:
            for fd in fds:
                os.close(fd)
            reply = encode_error(0, exc.code, exc.message)
        try:
            conn.send(reply)
        except OSError:
            return False
        return True

    def _cap_rto(self, sock: socket.socket) -> None:
        try:
            if self.rto_max_ms:
                sock.setsockopt(socket.IPPROTO_TCP, TCP_RTO_MAX_MS, self.rto_max_ms)
            if self.rto_min_us:
                sock.setsockopt(socket.IPPROTO_TCP, TCP_RTO_MIN_US, self.rto_min_us)
        except OSError as exc:
            self.rto_cap_failed += 1
            if self.rto_cap_failed == 1:
                log.warning("event=agent_rto_cap_unsupported host=%s error=%r (held flows may resume "
                            "late after their promotion)", self.host, str(exc))
        else:
            self.rto_capped += 1

    def _attach_request(self, req: Request, uid: int) -> bytes:
        """An ``attach`` or ``detach`` from local user ``uid`` (refusals raise ProtocolError).

        An ``attach`` needs the daemon's ticket for its job, this host and ``uid``
        (:func:`jitsched.tickets.check`); a ``detach`` needs none, as it removes only
        ``uid``'s own attachments (root's: everyone's).
        """
        if req.type == MsgType.DETACH:
            reply = self.attached.detach(req.body["job"], uid)
        else:
            self.check_ticket(req.body.get("ticket"), req.body["job"], uid)
            reply = self.attached.attach(req.body, uid)
        self._tick(force=True, only="out" if self.in_backend is None else None)
        return encode_ok(req.id, reply)

    def check_ticket(self, ticket: dict | None, job: str, uid: int) -> None:
        """Refuse (``ticket_refused``, counted in ``tickets_refused``) unless ``ticket`` is the
        daemon's, unexpired on the daemon's clock, for job ``job``, this host and local user
        ``uid`` (root: any user).

        Raises
        ------
        ProtocolError
            ``ticket_refused``, saying which check failed.
        """
        try:
            tickets.check(self.ticket_key, ticket, job=job, host=self.host, uid=uid, now_ns=self.daemon_ns())
        except ProtocolError as exc:
            self.tickets_refused += 1
            if self.tickets_refused <= 10 or self.tickets_refused % 1000 == 0:
                log.warning("event=agent_ticket_refused host=%s job=%r uid=%d refused=%d reason=%r", self.host,
                            job[:MAX_LOGGED_JOB_CHARS], uid, self.tickets_refused, exc.message)
            raise

    def _local_request(self, req: Request, fds: list[int], uid: int = 0) -> bytes:
        fid = req.body["flow"]
        direction = req.body.get("direction", "out")
        # on ProtocolError the caller closes every passed descriptor: close none here
        if direction not in ("in", "out"):
            raise ProtocolError("invalid_body", f"direction must be 'in' or 'out', not {direction!r}")
        inbound = direction == "in"
        flows, backend = (self.in_flows, self.in_backend) if inbound else (self.flows, self.backend)
        held = flows.get(fid)
        if held is not None and uid not in (0, held.uid):
            # another local user's flow of that id: not this user's to replace or unregister
            raise ProtocolError("forbidden", f"flow {fid!r} was registered by another user")
        if req.type == MsgType.REGISTER_FLOW:
            # a flow gets its planned rate and rank only with the daemon's ticket for it: a job's
            # flow ("<job>/<transfer>") with the ticket for its job, an announced background
            # flow ("/<name>", the name client-scoped) with the ticket for that flow id itself
            ticket = req.body.get("ticket")
            self.check_ticket(ticket, fid if fid.startswith("/") else flow_job(fid, ticket), uid)
            if len(fds) != 1:
                raise ProtocolError("invalid_body", "register_flow carries exactly one socket")
            try:
                sock = socket.socket(fileno=fds[0])
            except OSError:
                raise ProtocolError("invalid_body", "register_flow: the descriptor is not a socket") from None
            if sock.family not in (socket.AF_INET, socket.AF_INET6) or sock.type != socket.SOCK_STREAM:
                sock.detach()
                raise ProtocolError("invalid_body", "register_flow: the socket is not a TCP socket")
            try:
                local, peer = sock.getsockname(), sock.getpeername()
            except OSError:
                sock.detach()
                raise ProtocolError("invalid_body", "register_flow: the socket is not connected") from None
            # an IPv4 connection of a dual-stack socket: named as sock_diag and the u32 filters name it
            local, peer = (ipv4_of(local[0]) or local[0], local[1]), (ipv4_of(peer[0]) or peer[0], peer[1])
            if backend_class(self.backend_name).ipv4_only and (":" in local[0] or ":" in peer[0]):
                sock.detach()
                raise ProtocolError("invalid_body", f"register_flow: the {self.backend_name} backend "
                                                    "shapes IPv4 connections only")
            # the flow's packets go from its sender to its receiver, whichever end registers it
            src, dst = (peer, local) if inbound else (local, peer)
            old = flows.pop(fid, None)
            if old is not None:
                self._ended(old, direction)
                old.sock.close()
            start = _flow_bytes(sock, inbound)
            flows[fid] = LocalFlow(fid, sock, src[0], src[1], dst[0], dst[1],
                                   0 if inbound else start, time.monotonic(), base_bytes=start, uid=uid)
            self.registrations[direction] += 1
            if not inbound and (self.rto_max_ms or self.rto_min_us):
                self._cap_rto(sock)
            if backend is not None:
                backend.attach(fid, sock)
            self._tick(force=True, only=direction)  # the new socket gets its rate before it sends much
            return encode_ok(req.id, {"flow": fid})
        for fd in fds:
            os.close(fd)
        f = flows.pop(fid, None)
        if f is not None:
            if backend is not None:
                backend.detach(fid)
            self._ended(f, direction)
            f.sock.close()
        return encode_ok(req.id, {"flow": fid, "known": f is not None})


def flow_job(fid: str, ticket: dict | None) -> str:
    """The job flow ``fid`` (``"<job>/<transfer>"``) names, as its ``ticket`` is checked against.

    A job id may hold a ``/``: the ticket's job is the flow's when ``fid`` starts with it and a
    ``/`` (with keys every client's job ids start with its own ``"<client>:"``, so one
    client's ticket never covers another's flows); else the part before the first ``/``,
    which the ticket then does not match.
    """
    if ticket is not None and isinstance(ticket.get("job"), str) and fid.startswith(ticket["job"] + "/") \
            and len(fid) > len(ticket["job"]) + 1:
        return ticket["job"]
    return fid.partition("/")[0]


def _flow_bytes(f: LocalFlow | socket.socket, inbound: bool) -> int:
    """Bytes a registered socket received (inbound) or had acknowledged (outbound) so far."""
    sock = f.sock if isinstance(f, LocalFlow) else f
    return bytes_received(sock) if inbound else bytes_acked(sock)


def _registered(local: dict[str, LocalFlow], inbound: bool) -> set[tuple[str, int, str, int]]:
    """The (local address, port, remote address, port) of the sockets handed over in ``local``."""
    if inbound:
        return {(f.dst_addr, f.dst_port, f.src_addr, f.src_port) for f in local.values()}
    return {(f.src_addr, f.src_port, f.dst_addr, f.dst_port) for f in local.values()}


def dense_levels(flows: list[FlowRate], levels: int = FLOW_LEVELS) -> list[FlowRate]:
    """``flows`` with their ranks (``prio``) replaced by levels ``0..levels-1`` in rank order.

    The daemon ranks every transfer a host will send; the host carries a few
    of them at a time, and a backend has a handful of priorities (HTB: 8, the
    last for background): the distinct ranks of the flows carried now take the
    levels in order (equal ranks, equal levels), the last ones sharing the
    last level. A flow without a rank keeps None.
    """
    level_of = _dense_level_map((f.prio for f in flows), levels)
    return [f if f.prio is None else replace(f, prio=level_of[f.prio]) for f in flows]


def _rate_in_slot(f: dict, k: int) -> tuple[float, int | None] | None:
    """A schedule entry's (rate bytes/s, rank) in slot ``k``; None once its rates are over
    unless it is ranked (a ranked flow stays, at zero, borrowing by its level)."""
    j = k - f["start_slot"]
    rates = f["rates_Bps"]
    prio = f.get("prio")
    if j >= len(rates) and prio is None:
        return None
    return (float(rates[j]) if 0 <= j < len(rates) else 0.0), prio


def _dense_level_map(ranks, levels: int = FLOW_LEVELS) -> dict[int, int]:
    """Rank -> level for :func:`dense_levels` (None ranks ignored)."""
    return {r: min(i, levels - 1) for i, r in enumerate(sorted({r for r in ranks if r is not None}))}


__all__ = ["Agent", "LocalFlow", "bytes_acked", "load_backend", "local_address",
           "register_flow", "unregister_flow"]
