"""The daemon's socket loop: job and agent ROUTER sockets, one dispatch table, one error table."""

# One module although past 500 lines: it is the loop thread, the one owner of both
# ROUTER sockets, the wake socket and the outbox (ZeroMQ sockets are not to be shared
# between threads), with the small pieces only it uses (dispatch and error tables, the
# ZAP key check). Its parts that need no socket already live beside it: the state
# (state.py and its registries), connections (conns.py), planning (solver.py, plans.py).
from __future__ import annotations

import contextlib
import errno
import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import zmq
from zmq.auth.thread import ThreadAuthenticator

from jitsched import tickets
from jitsched.config import ANONYMOUS, INCREMENTAL, DaemonConfig, check_endpoints, check_exposure
from jitsched.daemon.conns import TRACK_BYTES, Connections, ReplyQueues, open_fds, raise_fd_limit
from jitsched.daemon.jobs import Prepared
from jitsched.daemon.journal import Journal
from jitsched.daemon.logs import LogLimiter, kv
from jitsched.daemon.metrics import Metrics
from jitsched.daemon.plans import PlanRequest, PlanResult
from jitsched.daemon.reject import Reject
from jitsched.daemon.solver import PlannerProcess, copies_of, describe, run_increment, run_plan
from jitsched.daemon.state import SchedulerState
from jitsched.daemon.store import Store
from jitsched.errors import JitschedError, ValidationError
from jitsched.keys import (
    AGENT_DOMAIN,
    CLIENT_DOMAIN,
    DaemonKeys,
    host_public_keys,
    load_daemon_keys,
)
from jitsched.policies import POLICIES, Policy, make_policy
from jitsched.policies.base import option_names
from jitsched.protocol import (
    AGENT,
    AGENT_TYPES,
    JOB,
    JOB_TYPES,
    MESSAGES,
    ErrorCode,
    MsgType,
    ProtocolError,
    decode_reply,
    decode_request,
    encode_error,
    encode_ok,
    encode_packed_request,
    is_reply,
    not_leader_message,
    peek_id,
)

log = logging.getLogger("jitsched.daemon")

# The one dispatch table, derived from the protocol's declarations: message type ->
# (SchedulerState method, whether it takes the sender's routing identity, whether it
# takes the sender's key name as ``peer``). The method has the message's name; agent
# messages carry the identity so that the agent table can answer on it.
DISPATCH: dict[str, tuple[str, bool, bool]] = {
    str(m): (str(m), m.socket == AGENT, m.keyed) for m in MESSAGES if m.socket in (JOB, AGENT)
}

# The one table from exceptions to error codes, most specific first.
ERROR_TABLE: tuple[tuple[type[BaseException], Callable[[BaseException], str]], ...] = (
    (ProtocolError, lambda e: e.code),
    (ValidationError, lambda e: ErrorCode.INVALID_JOB),
    (JitschedError, lambda e: ErrorCode.INVALID_BODY),
    (Exception, lambda e: ErrorCode.INTERNAL),
)


# libzmq's I/O threads of the daemon's context: a plan's fan-out is one message on each
# agent's connection, and libzmq spreads the connections over its I/O threads, so the
# writes of 10,000 agents' schedules go out on two cores rather than one.
IO_THREADS = 2


def error_code(exc: BaseException) -> str:
    """The error code for an exception raised while handling a request."""
    for kind, code in ERROR_TABLE:
        if isinstance(exc, kind):
            return code(exc)
    return ErrorCode.INTERNAL


DROPPED_LOG_S = 10.0  # at most one reply_dropped warning this often, seconds
# Messages of one peer held while an earlier one of its is decoded off the loop (its
# replies keep their order); beyond this, they are answered ``overloaded`` at once.
MAX_DEFERRED = 256
# Bytes of big requests awaiting the decoding worker, as multiples of max_message_bytes;
# beyond, a big request is answered ``overloaded`` at once (the client may resend).
OFFLOAD_QUEUE_MESSAGES = 4
# Per-peer queues inside libzmq, in messages (the default 1000 made explicit; it was
# 100,000). Small replies are bounded by this, big ones by [limits] max_peer_queued_bytes.
SNDHWM = 1000
# A TCP connection that has not finished its ZMTP (and CURVE) handshake in this long is
# dropped: raw connections that never speak held a descriptor for libzmq's default 30 s.
HANDSHAKE_IVL_MS = 10_000
# ZMTP heartbeats: a PING every 10 s, the connection dropped after 30 s without any
# traffic back, so the descriptor of a peer whose host vanished (no FIN) is freed well
# before idle_timeout_s. Live zmq peers answer PINGs by themselves.
HEARTBEAT_IVL_MS = 10_000
HEARTBEAT_TIMEOUT_MS = 30_000
# descriptors the daemon needs besides connections: journal, planner pipes, metrics, logs
FD_SPARE = 64
# A big request decoded and parsed takes about this many times its bytes in memory: a
# 49.8k-node job of 2.6 MB packed holds ~30 MB as a JobState (limits.JOB_BYTES_PER_NODE),
# so one is refused while the RSS is within this of the ceiling (max_memory_bytes).
DECODED_PER_BYTE = 10
# The agents' socket is served before the job socket on every loop turn and again after
# every job message that left agent messages waiting, so that heartbeats, acks and
# registrations never queue behind job traffic: with 256 job messages read before the
# agents' socket, a client pipelining 4,096-event reports (75 kB, ~10 ms each) marked
# 30 of 30 agents down in 8 s (python bench/bench_flood.py --flood-s 8 --agents 30).
# the job messages whose replies say their progress events are recorded (``report`` and the
# single events it stands for): on a store that holds batches, their replies wait for its write
PROGRESS_TYPES = frozenset({MsgType.REPORT, MsgType.TRANSFER_STARTED, MsgType.TRANSFER_FINISHED,
                            MsgType.COMPUTE_FINISHED})
AGENT_BATCH = 1024  # agent messages per read of their socket at most
JOB_BATCH = 256  # job messages per loop turn at most ...
JOB_TURN_S = 0.02  # ... and for about this long: timers and planning run between turns


@dataclass
class Decoded:
    """A request decoded off the loop: its frames, the decoded request (or the exception
    decoding raised) and, for a submission, the prepared job (or its Reject)."""

    key: tuple[str, bytes]  # (socket name, routing identity)
    data: bytes
    peer: str | None
    allowed: frozenset[str]
    req: object = None
    prepared: Prepared | Reject | None = None
    error: BaseException | None = None
    silent: bool = False  # a reply frame on the agent socket: answered by nothing
REFUSED_KEYS_LOGGED = 1000  # unknown keys remembered so that each is logged once


class KnownKeys:
    """The ZAP credentials check of one socket: only ``keys`` (Z85 public key -> name) get in.

    Called on the authenticator's thread for every CURVE handshake; each
    unknown key is logged once (a refused peer retries its handshake).
    """

    def __init__(self, keys: dict[str, str], domain: str,
                 reload: Callable[[], dict[str, str]] | None = None,
                 others: dict[str, str] | None = None) -> None:
        self.keys = keys
        # the other socket's keys (Z85 -> name): a key read again that is one of them is
        # refused, as one key for a host and a client is at start (keys.load_daemon_keys)
        self._others = others if others is not None else {}
        self.domain = domain
        self.refused = 0  # handshakes refused since start
        self._logged: set[str] = set()
        # read the keys again on an unknown one (at most once a second): a host whose key was
        # added (`jitsched keys add`) joins without a restart; keys are only ever added here
        self._reload = reload
        self._reloaded_s = -math.inf

    def callback(self, domain: str, key: bytes) -> bool:
        text = key.decode("ascii", "replace")
        if domain == self.domain and text in self.keys:
            return True
        if domain == self.domain and self._reload is not None and time.monotonic() - self._reloaded_s >= 1.0:
            self._reloaded_s = time.monotonic()
            try:
                fresh = self._reload()
            except JitschedError as exc:
                log.error(kv("keys_reload_failed", domain=domain, error=str(exc)))
                fresh = {}
            for k, name in fresh.items():
                if k in self._others:
                    if k not in self._logged and len(self._logged) < REFUSED_KEYS_LOGGED:
                        self._logged.add(k)
                        log.error(kv("key_refused", domain=domain, name=name,
                                     reason=f"the same key as {self._others[k]!r} of the other socket"))
                    continue
                if k not in self.keys and name not in self.keys.values():
                    self.keys[k] = name  # the dict the loop names peers by
                    log.info(kv("key_added", domain=domain, name=name))
            if text in self.keys:
                return True
        self.refused += 1
        if text not in self._logged and len(self._logged) < REFUSED_KEYS_LOGGED:
            self._logged.add(text)
            log.warning(kv("handshake_refused", domain=domain, key=text))
        return False


def bind_error(name: str, endpoint: str, exc: zmq.ZMQError) -> ValidationError:
    """The one-line error of a socket that cannot bind ``endpoint`` (the setting ``name``)."""
    hint = (": not an endpoint such as tcp://127.0.0.1:5555, tcp://*:5555 or ipc:///run/jitsched.sock"
            if exc.errno in (errno.EINVAL, errno.EPROTONOSUPPORT) else "")
    return ValidationError(f"{name} {endpoint!r}: cannot bind ({zmq.strerror(exc.errno)}){hint}")


def create_policy(cfg: DaemonConfig) -> Policy:
    """The configured policy object: ``cfg.policy_options``, plus the daemon's slot length,
    alpha and objective for each of them the policy's ``Options`` declares and the options
    leave unset.

    Raises
    ------
    ValidationError
        An unknown policy, an option it does not declare, or a value it refuses.
    """
    opts = dict(cfg.policy_options)
    cls = POLICIES.get(cfg.policy)
    if cls is not None:
        declared = option_names(cls)
        for key in ("slot_s", "alpha", "objective"):
            if key in declared and key not in opts and getattr(cfg, key) is not None:
                opts[key] = getattr(cfg, key)
        # The daemon decides when to re-solve (docs/architecture.md §7) and asks for a
        # schedule only then, so a policy with a re-plan period re-plans on every ask.
        if "resolve_period_s" in declared and "resolve_period_s" not in opts:
            opts["resolve_period_s"] = 1e-6
    policy = make_policy(cfg.policy, **opts)
    policy.reset(cfg.cluster)
    return policy


class Daemon:
    """The jitsched daemon: owns the sockets; all state lives in :class:`SchedulerState`.

    Parameters
    ----------
    config : DaemonConfig
        Endpoints may use port ``*`` (a free port); :attr:`job_endpoint` and
        :attr:`agent_endpoint` then hold the bound addresses after :meth:`start`.
    policy : Policy, optional
        Default: ``make_policy(config.policy)``.
    store : Store, optional
        Where the state keeps its jobs instead of ``config.journal``: a leading
        replica's etcd store (jitsched/daemon/replica.py).
    epoch : int
        The leader's epoch among replicas (0: one daemon), carried by every schedule.
    leading : callable, optional
        Whether this daemon still leads; while it says False no schedule is sent.

    With ``config.keys_dir`` both sockets are CURVE servers: a ZAP handler lets
    in the hosts' keys on the agent socket and the clients' keys on the job
    socket, and each request is handled as its key's host or client (``peer``
    of the state's handlers). Without keys only local endpoints are served,
    unless ``config.insecure``.

    Raises
    ------
    ValidationError
        A plaintext endpoint faces the network (no keys, not ``insecure``), a
        ``[limits.clients.NAME]`` names no client key, or the policy does not take
        one of ``policy_options``; from :meth:`start`, an endpoint or the metrics
        port cannot be bound (the setting named).
    KeyFileError
        The key directory cannot be read or another user could change it.
    JournalError
        The journal cannot be opened or used.
    """

    def __init__(self, config: DaemonConfig, policy: Policy | None = None, *, store: Store | None = None,
                 epoch: int = 0, leading: Callable[[], bool] | None = None) -> None:
        check_endpoints(config)  # configs built in code skip parse_config's checks
        check_exposure(config)
        self.keys: DaemonKeys | None = load_daemon_keys(config.keys_dir) if config.keys_dir else None
        if self.keys is not None:
            unknown = sorted(set(config.clients) - set(self.keys.clients.values()))
            if unknown:
                # a quota for a name no key has is a typo that would hold no one
                raise ValidationError(f"[limits.clients.{unknown[0]}]: no client key {unknown[0]!r} in "
                                      f"{config.keys_dir} (clients: {', '.join(sorted(self.keys.clients.values()))})")
        self.config = config
        self.policy = policy if policy is not None else create_policy(config)
        # with a journal, the jobs a killed daemon ran come back with their progress
        self.journal = store if store is not None else Journal(config.journal) if config.journal else None
        self.state = SchedulerState(config, journal=self.journal, epoch=epoch)
        if self.keys is not None:
            # every replica and restart holding this key signs attach tickets alike
            self.state.ticket_secret = tickets.daemon_secret(self.keys.secret)
        self.leading = leading
        self.config = self.state.config  # with the hosts that had joined, from the journal
        self.state.on_cluster = self._cluster_changed
        self._mono0_s = time.monotonic()
        self._clock0_s = time.time() - self.state.t0_wall_s  # the daemon clock now (see now())
        # copies of the policy as it starts, to probe failed plans with (solver.isolate)
        self._fresh_policy = copies_of(self.policy)
        # a policy that only plans jointly gets full re-solves from the start, not a
        # refused increment (and a warning) on the first arrival
        self.state.incremental_ok = self.policy.plans_increments()
        self.state.templates.ranks_only = self.policy.ranks_only()
        self.metrics = Metrics()
        # plan failures and the jobs they fail may come every loop turn: bounded lines
        self.logs = LogLimiter(log)
        self.replies_dropped = 0  # replies to peers that had gone, since start
        self._dropped_logged = 0  # of which the log has reported
        self._dropped_log_s = -math.inf  # monotonic time of the last such log line
        # requests of one peer waiting behind one of its being decoded off the loop,
        # by (socket name, routing identity)
        self._deferred: dict[tuple[str, bytes], deque[tuple[list[bytes], str | None]]] = {}
        # while a turn of job messages writes its progress events to the store as one write
        # (_serve_jobs): that socket and the replies held until the write is done
        self._held_replies: tuple[zmq.Socket, list[tuple]] | None = None
        self._handled_type = ""  # the type of the request handle() last decoded
        self._offload_q: queue.Queue[Decoded | None] = queue.Queue()
        self._offload_bytes = 0  # of the requests handed to the decoding worker, not yet back
        # each job client's requests held in the loop (handed to the decoding worker or
        # waiting behind one of its own): client -> [requests, bytes] ([limits.per_client])
        self._held: dict[str, list[int]] = {}
        self._decoded_q: queue.Queue[Decoded] = queue.Queue()
        self.replies = ReplyQueues(config.max_peer_queued_bytes)
        self.conns: dict[str, Connections] = {}  # by socket name, once bound
        self.counts = {"replies_dropped": 0, "replies_refused_queued": 0, "requests_deferred": 0,
                       "requests_refused_deferred": 0, "requests_offloaded": 0,
                       "requests_refused_offload": 0, "requests_refused_quota": 0,
                       "requests_refused_memory": 0, "srcfd_unreadable": 0, "user_id_unreadable": 0,
                       "loop_errors": 0}
        self.fd_limit = (0, 0)
        self.ctx = zmq.Context(io_threads=IO_THREADS)
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._workers: list[threading.Thread] = []
        # Full re-solves and incremental plans have a worker each, so that an
        # arrival never waits behind a joint re-solve of every job.
        self._full_q: queue.Queue[PlanRequest | None] = queue.Queue()
        self._inc_q: queue.Queue[PlanRequest | None] = queue.Queue()
        self._result_q: queue.Queue[PlanResult] = queue.Queue()
        self._wake_addr = f"inproc://jitsched-plan-{id(self)}"
        self.job_endpoint = config.job_endpoint
        self.agent_endpoint = config.agent_endpoint
        self.metrics_port = 0
        self.planner: PlannerProcess | None = None  # the child running full re-solves, if any
        self._error: BaseException | None = None  # what kept the sockets from binding
        self.failure: BaseException | None = None  # what ended the loop or a thread it needs
        self._conn_seen_s = time.monotonic()
        # the connection of the message being served, (fd, peer address) or None: an agent's
        # registration keeps it, and a second agent of its host is refused while it is open
        self._source: tuple[int, tuple] | None = None
        self.state.agent_table.source = lambda: self._source
        self.state.agent_table.source_open = self._agent_connection_open
        self._auth: ThreadAuthenticator | None = None
        self.key_checks: dict[str, KnownKeys] = {}  # by ZAP domain, with keys

    # ------------------------------------------------------------------ lifecycle

    def start(self, timeout_s: float = 10.0) -> Daemon:
        """Bind and serve in a background thread; returns once the sockets are bound."""
        self._thread = threading.Thread(target=self.serve, name="jitsched-daemon", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout_s):
            raise RuntimeError("daemon did not start")
        if self._error is not None:
            raise self._error
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop serving, join the threads, close every socket."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
        self.ctx.term()
        if self.journal is not None and (self._thread is None or not self._thread.is_alive()):
            self.journal.close()

    def __enter__(self) -> Daemon:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def _bind(self) -> tuple[zmq.Socket, zmq.Socket, zmq.Socket]:
        cfg = self.config
        # zmq drops (and disconnects) only messages far above the limit; those between
        # the limit and this cap still get a too_large reply from the explicit check.
        cap = 4 * cfg.max_message_bytes
        jobs = self.ctx.socket(zmq.ROUTER)
        agents = self.ctx.socket(zmq.ROUTER)
        for s in (jobs, agents):
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.MAXMSGSIZE, cap)
            s.setsockopt(zmq.ROUTER_MANDATORY, 1)
            s.setsockopt(zmq.SNDHWM, SNDHWM)
            # inbound messages are taken off the socket every loop turn (and big ones
            # queue for the decoding worker at most OFFLOAD_QUEUE_MESSAGES deep)
            s.setsockopt(zmq.RCVHWM, SNDHWM)
            s.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_IVL_MS)
            s.setsockopt(zmq.HEARTBEAT_IVL, HEARTBEAT_IVL_MS)
            s.setsockopt(zmq.HEARTBEAT_TIMEOUT, HEARTBEAT_TIMEOUT_MS)
        # big replies go zero-copy so that a tracker says when they left (ReplyQueues)
        jobs.copy_threshold = TRACK_BYTES
        if self.keys is None:
            # a reconnecting agent with the same routing id takes over its old pipe
            agents.setsockopt(zmq.ROUTER_HANDOVER, 1)
        else:
            # With keys, agents leave their routing ids to the socket (unique, and no peer
            # may choose one like them), and no connection takes over another's id: a
            # schedule pushed to an id reaches the key that registered it.
            self._start_auth()
            self.keys.apply(jobs, CLIENT_DOMAIN)
            self.keys.apply(agents, AGENT_DOMAIN)
        for sock, name in ((jobs, "job_endpoint"), (agents, "agent_endpoint")):
            try:
                sock.bind(getattr(cfg, name))
            except zmq.ZMQError as exc:
                jobs.close(0)
                agents.close(0)
                raise bind_error(name, getattr(cfg, name), exc) from None
        self.job_endpoint = jobs.getsockopt_string(zmq.LAST_ENDPOINT)
        self.agent_endpoint = agents.getsockopt_string(zmq.LAST_ENDPOINT)
        agent_cap = self.agent_connections()
        self.fd_limit = raise_fd_limit(cfg.max_connections + agent_cap + FD_SPARE + open_fds())
        room = self.fd_limit[0] - agent_cap - FD_SPARE - open_fds()
        job_cap = cfg.max_connections
        if room < job_cap:
            # said at start, and status shows the caps in force; clients keep at least 64
            # (agents beyond the descriptors left then fail to connect, logged as EMFILE)
            job_cap = min(job_cap, max(room, 64))
            log.warning(kv("fd_limit_low", soft=self.fd_limit[0], hard=self.fd_limit[1],
                           max_connections=cfg.max_connections, cap=job_cap,
                           agent_connections=agent_cap))
        now_s = time.monotonic()
        self.conns = {"jobs": Connections(jobs, "jobs", job_cap, cfg.idle_timeout_s, self.logs),
                      "agents": Connections(agents, "agents", agent_cap, cfg.idle_timeout_s, self.logs,
                                            evict_after_s=cfg.heartbeat_timeout_s)}
        self._conn_seen_s = now_s
        wake = self.ctx.socket(zmq.PULL)
        wake.setsockopt(zmq.LINGER, 0)
        wake.bind(self._wake_addr)
        return jobs, agents, wake

    def _agent_connection_open(self, source: tuple[int, tuple]) -> bool:
        conns = self.conns.get("agents")
        return conns is None or conns.is_open(source)

    def _cluster_changed(self, config: DaemonConfig) -> None:
        """Hosts joined: the daemon's config has them, and the agent socket room for their agents."""
        self.config = config
        conns = self.conns.get("agents")
        if conns is not None:
            conns.cap = max(conns.cap, self.agent_connections())

    def agent_connections(self) -> int:
        """The agent socket's connection cap: one per host and a tenth more (at least 64)
        for reconnecting agents whose old connection lingers a moment."""
        n = len(self.config.cluster)
        return n + max(64, n // 10)

    def _start_auth(self) -> None:
        """The ZAP handler of this context: each socket's domain lets in its own keys only."""
        assert self.keys is not None
        keys_dir = self.config.keys_dir
        self.key_checks = {AGENT_DOMAIN: KnownKeys(self.keys.hosts, AGENT_DOMAIN,
                                                   reload=lambda: host_public_keys(keys_dir),
                                                   others=self.keys.clients),
                           CLIENT_DOMAIN: KnownKeys(self.keys.clients, CLIENT_DOMAIN)}
        self._auth = ThreadAuthenticator(self.ctx, log=logging.getLogger("jitsched.daemon.zap"))
        self._auth.start()
        for domain, check in self.key_checks.items():
            self._auth.configure_curve_callback(domain, credentials_provider=check)

    def _stop_auth(self) -> None:
        if self._auth is not None:
            self._auth.stop()
            self._auth = None

    def _recv(self, sock: zmq.Socket, names: dict[str, str] | None,
              conns: Connections | None = None) -> tuple[list[bytes], str | None]:
        """One message's frames and the name of the key it came with (None: no keys,
        or a key not among ``names``); the connection it came on is marked as heard
        from. Raises zmq.Again when none is waiting."""
        frames = sock.recv_multipart(zmq.NOBLOCK, copy=False)
        self._source = None
        if conns is not None:
            try:
                fd = frames[-1].get(zmq.SRCFD)
            except zmq.ZMQError:
                # libzmq no longer knows the descriptor (its connection was torn down
                # before the message was read): the message is served, its connection
                # just not dated
                self.counts["srcfd_unreadable"] += 1
            else:
                self._source = conns.seen(fd, self._conn_seen_s)
        # the ZAP handler set the connection's user id to the peer's Z85 public key
        peer = None
        if names is not None:
            try:
                peer = names.get(frames[-1].get("User-Id"))
            except zmq.ZMQError:
                self.counts["user_id_unreadable"] += 1  # served as keyless: forbidden with keys
        return [f.bytes for f in frames], peer

    def serve(self) -> None:
        """Run the loop in the calling thread until :meth:`stop`."""
        socks: tuple[zmq.Socket, ...] = ()
        try:
            socks = jobs, agents, wake = self._bind()
            if self.config.metrics_port:
                self.metrics_port = self.metrics.serve(self.config.metrics_port, self.config.metrics_address)
        except BaseException as exc:  # noqa: BLE001 - surfaced by start()
            # every socket of the context closed, the monitors first: stop() terms it
            for c in self.conns.values():
                c.close()
            for s in socks:
                s.close(0)
            self._stop_auth()
            self._error = exc
            self._ready.set()
            return
        self._workers = [
            threading.Thread(target=self._guarded, args=(self._plan_worker, self._full_q, True),
                             name="jitsched-planner", daemon=True),
            threading.Thread(target=self._guarded, args=(self._plan_worker, self._inc_q, False),
                             name="jitsched-planner-inc", daemon=True),
            threading.Thread(target=self._guarded, args=(self._decode_worker,),
                             name="jitsched-decoder", daemon=True),
        ]
        for w in self._workers:
            w.start()
        log.info(kv("daemon_started", jobs=self.job_endpoint, agents=self.agent_endpoint,
                    curve=self.keys is not None, policy=self.config.policy, hosts=len(self.config.cluster),
                    slot_s=self.config.slot_s, alpha=self.config.alpha,
                    planning=self.config.planning, incarnation=self.state.incarnation,
                    journal=self.config.journal or "", resumed=len(self.state.restored)))
        for jid, why in self.state.not_restored:
            log.error(kv("job_not_resumed", job=jid, error=why))
        self._ready.set()
        poller = zmq.Poller()
        poller.register(jobs, zmq.POLLIN)
        poller.register(agents, zmq.POLLIN)
        poller.register(wake, zmq.POLLIN)
        monitors = {c.monitor: c for c in self.conns.values()}
        for m in monitors:
            poller.register(m, zmq.POLLIN)
        next_house = 0.0
        client_names = self.keys.clients if self.keys is not None else None
        host_names = self.keys.hosts if self.keys is not None else None
        try:
            while not self._stop.is_set():
                events = dict(poller.poll(timeout=20))
                if self.failure is not None:  # a worker died: nothing more is answered
                    self._check_threads()
                self._conn_seen_s = time.monotonic()
                for m, c in monitors.items():
                    if m in events:
                        try:
                            c.events(self._conn_seen_s)
                        except Exception as exc:  # noqa: BLE001 - one connection's event
                            self._contained("monitor", exc)
                # the agents' socket first, and between job messages (_serve_jobs)
                if agents in events:
                    self._serve_batch(agents, AGENT_BATCH, host_names, AGENT_TYPES, "agents")
                if wake in events:
                    self._drain_results(wake)
                    self._drain_decoded({"jobs": jobs, "agents": agents})
                if jobs in events:
                    self._serve_jobs(jobs, agents, client_names, host_names)
                now = self.now()
                if now >= next_house:
                    next_house = now + 0.05
                    self._check_threads()
                    # silence is judged once every message agents sent is read: a heartbeat
                    # waiting in the socket is not an agent's silence
                    if self._serve_batch(agents, AGENT_BATCH, host_names, AGENT_TYPES, "agents"):
                        for h in self.state.check_agents(self.now()):
                            log.warning(kv("agent_down", host=h))
                    self._housekeeping(now)
                    self.metrics.update(self.state, self.now())
                    self.logs.flush()
                # bodies of plans installed above go out before the next plan's request is
                # made: an increment's "order" trigger starts a joint re-solve right here,
                # and its bodies should not wait behind that request's snapshot
                self._flush_outbox(agents, now)
                self._maybe_plan(now)
                self.state.flush_journal()
            # a clean stop: what the journal holds only every few iterations goes now
            self.state.flush_iterations()
        except BaseException as exc:
            # the loop is the daemon: without it nothing is served. Record why and end,
            # so that the process exits non-zero (``running`` turns False) and is restarted
            self.failure = exc
            log.critical(kv("daemon_loop_died", error=describe(exc)), exc_info=exc)
        finally:
            self._full_q.put(None)
            self._inc_q.put(None)
            self._offload_q.put(None)
            for w in self._workers:
                w.join(5.0)
            for c in self.conns.values():
                c.close()
            for s in (jobs, agents, wake):
                s.close(0)
            self._stop_auth()
            if self.metrics_port:
                self.metrics.shutdown()
            log.info(kv("daemon_stopped"))

    @property
    def running(self) -> bool:
        """Whether the daemon serves: its loop thread runs and nothing it depends on died
        (False once stopped or failed; see :attr:`failure`)."""
        return self._thread is not None and self._thread.is_alive() and self.failure is None

    def _guarded(self, target: Callable, *args) -> None:
        """Run a worker thread's ``target``; if it dies, record why for the loop to end on."""
        try:
            target(*args)
        except BaseException as exc:
            if self.failure is None:
                self.failure = exc
            log.critical(kv("daemon_thread_died", thread=threading.current_thread().name,
                            error=describe(exc)), exc_info=exc)

    def _check_threads(self) -> None:
        """Raise if a thread the loop depends on has died (checked every housekeeping tick)."""
        if self.failure is not None:
            raise RuntimeError(f"a daemon thread died: {describe(self.failure)}")
        for w in self._workers:
            if not w.is_alive():
                raise RuntimeError(f"daemon thread {w.name} ended")
        if self._auth is not None and not self._auth.is_alive():
            raise RuntimeError("the CURVE authenticator thread ended")

    def _serve_batch(self, sock: zmq.Socket, most: int, names: dict[str, str] | None,
                     allowed: frozenset[str], name: str) -> bool:
        """Serve up to ``most`` waiting messages of one socket; a failure is one message's.
        Returns whether the socket has no message left waiting (False: ``most`` were served)."""
        conns = self.conns[name]
        for _ in range(most):
            try:
                frames, peer = self._recv(sock, names, conns)
            except zmq.Again:
                return True
            except zmq.ZMQError as exc:
                self._contained(f"{name}_recv", exc)
                return True
            try:
                self._serve_one(sock, frames, allowed, peer, name)
            except Exception as exc:  # noqa: BLE001 - one message's failure, not the loop's
                self._contained(name, exc)
        return False

    def _serve_jobs(self, jobs: zmq.Socket, agents: zmq.Socket, client_names: dict[str, str] | None,
                    host_names: dict[str, str] | None) -> None:
        """Serve job messages for up to JOB_TURN_S (at most JOB_BATCH), the agents' socket
        after each one that left agent messages waiting.

        On a store that holds batches (etcd) the turn's progress events go in one write
        as it ends, and the replies of job messages from the first progress message
        (:data:`PROGRESS_TYPES`) that found events held on, after that write: each reply
        still follows what it acknowledges, in order, and a report of one event costs a
        share of one transaction instead of a whole one (about 2 ms on a one-member etcd
        on loopback). Replies before it go at once. If events are still held as the turn
        ends, the progress messages' replies that said "recorded" become ``not_leader``
        when the replica no longer leads (its clients go to the leader) and
        ``unavailable`` otherwise (etcd did not take them; the store tries them again
        with its next write, and the clients send them again, idempotent).
        """
        with self._journal_turn(jobs):
            end = time.perf_counter() + JOB_TURN_S
            for _ in range(JOB_BATCH):
                if self._serve_batch(jobs, 1, client_names, JOB_TYPES, "jobs"):
                    break
                if agents.get(zmq.EVENTS) & zmq.POLLIN:
                    self._serve_batch(agents, AGENT_BATCH, host_names, AGENT_TYPES, "agents")
                if time.perf_counter() >= end:
                    break

    @contextlib.contextmanager
    def _journal_turn(self, sock: zmq.Socket) -> Iterator[None]:
        """Requests served inside the block write their progress events as one store batch
        as it ends, and their replies on ``sock`` that promise them recorded wait for that
        write (:meth:`_serve_jobs`); also the requests decoded off the loop."""
        held: list[tuple] = []
        store = self.state.journal
        if store is not None and store.holds_batches:
            self._held_replies = (sock, held)
        try:
            with self.state.journal_turn():
                yield
        finally:
            self._held_replies = None
            unwritten = bool(held) and store.holding
            deposed = unwritten and self.leading is not None and not self.leading()
            for to, identity, reply, client, promises in held:
                # a refusal stays what it is: only a reply that said "recorded" was not so
                if unwritten and promises and decode_reply(reply).ok:
                    reply = encode_error(peek_id(reply), ErrorCode.NOT_LEADER, not_leader_message()) if deposed \
                        else encode_error(peek_id(reply), ErrorCode.UNAVAILABLE,
                                          f"its events are not recorded yet ({self.state.journal_last_error}); "
                                          "send them again")
                self._send_reply(to, identity, reply, client)

    def _contained(self, where: str, exc: BaseException) -> None:
        """Count and log (rate-limited, with the traceback) a failure kept to one message."""
        self.counts["loop_errors"] += 1
        self.logs.log(logging.ERROR, "loop_error", exc_info=exc, where=where, error=describe(exc),
                      total=self.counts["loop_errors"])

    def now(self) -> float:
        """The daemon clock, seconds since the state's wall-clock origin: read off the wall
        clock once at start, then advanced by the monotonic clock, so that a step of the
        wall clock neither freezes nor expires agents' liveness, leases and retention."""
        return self._clock0_s + (time.monotonic() - self._mono0_s)

    # ------------------------------------------------------------------ requests

    def _serve_one(self, sock: zmq.Socket, frames: list[bytes], allowed: frozenset[str],
                   peer: str | None = None, name: str = "jobs") -> None:
        if len(frames) < 2:
            return
        identity, data = frames[0], frames[-1]
        if sock is not None and allowed is AGENT_TYPES and len(data) < self.config.offload_bytes \
                and is_reply(data):
            return  # agents may answer pushed schedules; acks arrive as requests
        key = (name, identity)
        client = self._client(name, peer)
        waiting = self._deferred.get(key)
        if waiting is not None:
            # an earlier request of this peer is being decoded: its reply goes first
            why = self._no_room(client, len(data))
            if why is None and len(waiting) >= MAX_DEFERRED:
                why = f"{MAX_DEFERRED} requests of yours already wait behind a big one; resend later"
            if why is not None:
                self.counts["requests_refused_deferred"] += 1
                self._send_reply(sock, identity, encode_error(peek_id(data), ErrorCode.OVERLOADED, why), client)
            else:
                self.counts["requests_deferred"] += 1
                self._hold(client, len(data), 1)
                waiting.append((frames, peer))
            return
        if len(data) > self.config.offload_bytes:
            self._offload(sock, key, data, allowed, peer)
            return
        reply = self.handle(identity, data, allowed, peer)
        self._send_reply(sock, identity, reply, client, promises=self._handled_type in PROGRESS_TYPES)

    @staticmethod
    def _client(name: str, peer: str | None) -> str | None:
        """The quota unit of a request on socket ``name``: its key's client, or the one
        ``anonymous`` client without keys; None on the agent socket (hosts have none)."""
        if name != "jobs":
            return None
        return ANONYMOUS if peer is None else peer

    def _hold(self, client: str | None, n_bytes: int, sign: int) -> None:
        """Count (``sign`` 1) or release (-1) one request of ``client`` held in the loop."""
        if client is None:
            return
        held = self._held.setdefault(client, [0, 0])
        held[0] += sign
        held[1] += sign * n_bytes
        if held[0] <= 0:
            del self._held[client]

    def _no_room(self, client: str | None, n_bytes: int) -> str | None:
        """Why ``client`` may not have one more request of ``n_bytes`` held: past its
        max_pending_requests or max_bytes_in_flight; None if it may."""
        if client is None:
            return None
        q = self.config.quota(client)
        n, held = self._held.get(client, (0, 0))
        if n >= q.max_pending_requests:
            self.counts["requests_refused_quota"] += 1
            return (f"{n} requests of client {client!r} are held; resend later "
                    f"([limits.per_client] max_pending_requests {q.max_pending_requests})")
        in_flight = held + self.replies.client_pending(client)
        if in_flight + n_bytes > q.max_bytes_in_flight:
            self.counts["requests_refused_quota"] += 1
            return (f"{in_flight} bytes of client {client!r} are in flight; with these {n_bytes} that passes "
                    f"[limits.per_client] max_bytes_in_flight ({q.max_bytes_in_flight}); resend later")
        return None

    def _offload(self, sock: zmq.Socket, key: tuple[str, bytes], data: bytes, allowed: frozenset[str],
                 peer: str | None) -> None:
        """Hand a big request to the decoding worker; the peer's later ones wait for it."""
        cap = OFFLOAD_QUEUE_MESSAGES * self.config.max_message_bytes
        client = self._client(key[0], peer)
        why = self._no_room(client, len(data))
        if why is None and self._offload_bytes + len(data) > cap:
            self.counts["requests_refused_offload"] += 1
            self.logs.log(logging.WARNING, "request_refused", reason="decoding queue full",
                          bytes=len(data), queued=self._offload_bytes)
            why = f"{self._offload_bytes} bytes of big requests are being decoded; resend later"
        reg = self.state.job_registry
        if why is None and reg.rss() + DECODED_PER_BYTE * len(data) > reg.memory_ceiling:
            self.counts["requests_refused_memory"] += 1
            why = (f"the daemon's memory ({reg.rss()} bytes resident) leaves no room to decode a request of "
                   f"{len(data)} bytes under {reg.memory_ceiling} ([limits] max_memory_bytes)")
        if why is not None:
            self._send_reply(sock, key[1], encode_error(peek_id(data), ErrorCode.OVERLOADED, why), client)
            return
        self.counts["requests_offloaded"] += 1
        self._offload_bytes += len(data)
        self._hold(client, len(data), 1)
        self._deferred[key] = deque()
        self._offload_q.put(Decoded(key, data, peer, allowed))

    def _decode_worker(self) -> None:
        """Decode big requests, and check and parse big job submissions, off the loop.

        Runs beside the loop under the GIL: the chunked msgpack decoder and the
        pure-Python parsing yield it every few milliseconds (one ``unpackb`` of a
        7.8 MB job held it 0.44 s), so the loop keeps answering meanwhile.
        """
        wake = self.ctx.socket(zmq.PUSH)
        wake.setsockopt(zmq.LINGER, 0)
        wake.connect(self._wake_addr)
        try:
            while True:
                job = self._offload_q.get()
                if job is None:
                    return
                try:
                    if job.allowed is AGENT_TYPES and is_reply(job.data, chunked=True):
                        job.silent = True
                        raise ProtocolError(ErrorCode.BAD_MESSAGE, "a reply")
                    job.req = req = decode_request(job.data, max_bytes=self.config.max_message_bytes,
                                                   allowed=job.allowed, chunked=True)
                    if req.type == MsgType.SUBMIT_JOB:
                        job.prepared = self.state.job_registry.prepare(req.body)
                except Exception as exc:  # noqa: BLE001 - answered by handle() on the loop
                    job.error = exc
                self._decoded_q.put(job)
                try:
                    wake.send(b"", zmq.NOBLOCK)
                except zmq.ContextTerminated:
                    return
        finally:
            wake.close(0)

    def _drain_decoded(self, socks: dict[str, zmq.Socket]) -> None:
        """Answer the requests the worker decoded, then the ones their peers sent meanwhile."""
        while True:
            try:
                job = self._decoded_q.get_nowait()
            except queue.Empty:
                return
            self._offload_bytes -= len(job.data)
            name, identity = job.key
            sock = socks[name]
            self._source = None  # read a while ago: its connection is not known now
            client = self._client(name, job.peer)
            self._hold(client, len(job.data), -1)
            # outside _serve_jobs' turn: one of its own, so that a reply saying events are
            # recorded still waits for their write (and says unavailable if it failed)
            with self._journal_turn(sock):
                if not job.silent:  # agents may answer pushed schedules; acks arrive as requests
                    self._send_reply(sock, identity, self.handle(identity, job.data, job.allowed, job.peer, job),
                                     client, promises=self._handled_type in PROGRESS_TYPES)
                waiting = self._deferred.pop(job.key, deque())
                while waiting:
                    frames, peer = waiting.popleft()
                    self._hold(self._client(name, peer), len(frames[-1]), -1)
                    self._serve_one(sock, frames, job.allowed, peer, name)
                    if job.key in self._deferred:  # another big one went to the worker: the rest wait
                        self._deferred[job.key].extend(waiting)
                        break

    def _send_reply(self, sock: zmq.Socket, identity: bytes, reply: bytes, client: str | None = None,
                    promises: bool = False) -> None:
        """Send ``reply`` to ``identity`` (of job client ``client``), or a short ``overloaded``
        error if the bytes of replies that peer or client has not taken would pass its cap.
        Held until the store's write is done while a turn of job messages batches it
        (:meth:`_serve_jobs`); ``promises``: it says the request's progress events are
        recorded."""
        held = self._held_replies
        if held is not None and sock is held[0] and (held[1] or (promises and self.state.journal.holding)):
            held[1].append((sock, identity, reply, client, promises))
            return
        try:
            if sock is None or not hasattr(sock, "copy_threshold") or sock.copy_threshold != TRACK_BYTES:
                sock.send_multipart([identity, reply], zmq.NOBLOCK)
                return
            room = None
            if client is not None:
                room = self.config.quota(client).max_bytes_in_flight
                room -= self._held.get(client, (0, 0))[1]
            if not self.replies.send(sock, identity, reply, client, room):
                # this peer leaves big replies unread: a short error instead, counted
                self.counts["replies_refused_queued"] = self.replies.refused
                queued = self.replies.pending(identity)
                self.logs.log(logging.WARNING, "reply_refused", reason="peer_queue_full",
                              bytes=len(reply), queued=queued, client=client,
                              cap=self.replies.cap, total=self.replies.refused)
                if queued + len(reply) > self.replies.cap:
                    why = (f"{queued} bytes of replies to you are unread, over the limit of "
                           f"{self.replies.cap} ([limits] max_peer_queued_bytes)")
                else:
                    why = (f"{self.replies.client_pending(client or '')} bytes of replies to client {client!r} "
                           "are unread; with this one that passes [limits.per_client] max_bytes_in_flight")
                sock.send_multipart([identity, encode_error(peek_id(reply), ErrorCode.OVERLOADED, why)],
                                    zmq.NOBLOCK)
        except zmq.ZMQError as exc:  # peer gone (ROUTER_MANDATORY) or its queue full
            self._reply_dropped(exc.errno, exc.strerror)

    def _housekeeping(self, now: float) -> None:
        """Every 50 ms: prune ended jobs, close idle connections, count for status."""
        for jid in self.state.expire_leases(now):
            self.logs.log(logging.WARNING, "job_abandoned", job=jid, lease_s=self.config.job_lease_s)
        pruned = self.state.prune(now)
        if pruned:
            self.logs.log(logging.INFO, "jobs_pruned", count=pruned, total=self.state.job_registry.pruned)
        for c in self.conns.values():
            c.expire(self._conn_seen_s)
        self.replies.sweep()
        self.counts["replies_dropped"] = self.replies_dropped
        self.counts["replies_refused_queued"] = self.replies.refused
        loop = dict(self.counts)
        for name, c in self.conns.items():
            loop[f"{name}_connections"] = len(c.open)
            loop[f"{name}_connections_cap"] = c.cap
            loop[f"{name}_connections_refused"] = c.refused
            loop[f"{name}_connections_evicted"] = c.evicted
            loop[f"{name}_connections_idle_closed"] = c.idle_closed
            loop[f"{name}_accept_failed"] = c.accept_failed
        loop["fd_limit"] = self.fd_limit[0]
        self.state.loop = loop
        inflight = {c: {"pending_requests": n, "bytes_in_flight": b} for c, (n, b) in self._held.items()}
        # a copy: client_pending forgets a client whose last tracked reply has left
        for c in list(self.replies.identities):
            got = inflight.setdefault(c, {"pending_requests": 0, "bytes_in_flight": 0})
            got["bytes_in_flight"] += self.replies.client_pending(c)
        self.state.client_inflight = inflight

    def _reply_dropped(self, errno: int, error: str) -> None:
        # A client that submits and leaves without waiting drops every later
        # reply: one line per DROPPED_LOG_S with the count, not one per reply. A peer
        # that is gone (EHOSTUNREACH) is a client's choice, not a fault: info, where a
        # testbed run's last reply to its departed runners read like an error; a peer
        # whose queue is full (EAGAIN) is a warning.
        self.replies_dropped += 1
        now = time.monotonic()
        if now - self._dropped_log_s >= DROPPED_LOG_S:
            level = logging.INFO if errno == zmq.EHOSTUNREACH else logging.WARNING
            log.log(level, kv("reply_dropped", error=error,
                              count=self.replies_dropped - self._dropped_logged, total=self.replies_dropped))
            self._dropped_logged = self.replies_dropped
            self._dropped_log_s = now

    def handle(self, identity: bytes, data: bytes, allowed: frozenset[str], peer: str | None = None,
               decoded: Decoded | None = None) -> bytes:
        """Decode one request, dispatch it, and return the encoded reply (never raises).

        ``peer``: the host or client name of the key the request came with; with
        keys, a request without one is refused (``forbidden``). ``decoded``: the
        request as the decoding worker left it (a big one), not decoded again.
        """
        t0 = time.perf_counter()
        rid = 0
        type_ = self._handled_type = "?"
        try:
            if decoded is not None and decoded.error is not None:
                raise decoded.error
            req = decoded.req if decoded is not None else decode_request(
                data, max_bytes=self.config.max_message_bytes, allowed=allowed)
            rid, type_ = req.id, req.type
            self._handled_type = type_
            method, with_identity, with_peer = DISPATCH[req.type]
            if self.keys is not None and peer is None:
                # ZAP lets in known keys only: this is a key the tables lost, never a guest
                result = Reject(ErrorCode.FORBIDDEN, "the request's key is not known to the daemon")
            elif decoded is not None and decoded.prepared is not None:
                result = self.state.submit_prepared(decoded.prepared, req.body, self.now(), peer=peer)
            else:
                fn = getattr(self.state, method)
                now = self.now()
                args = (identity, req.body, now) if with_identity else (req.body, now)
                result = fn(*args, peer=peer) if with_peer else fn(*args)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an error reply
            code = error_code(exc)
            rid = rid or peek_id(data)
            if code == ErrorCode.INTERNAL:
                log.exception(kv("request_failed", type=type_, id=rid))
            msg = exc.message if isinstance(exc, ProtocolError) else str(exc)
            self.metrics.request(type_, code)
            # every rejection is counted (metrics); its lines are bounded: one peer may send
            # nothing but bad requests
            self.logs.log(logging.INFO, "rejected", type=type_, id=rid, code=code, reason=msg[:200])
            return encode_error(rid, code, msg)
        if isinstance(result, Reject):
            self.metrics.request(type_, result.code)
            if result.code == ErrorCode.FORBIDDEN:
                # a known key overstepping: worth a warning, bounded if it keeps trying
                self.logs.log(logging.WARNING, "forbidden", type=type_, id=rid, peer=peer,
                              reason=result.message[:200])
            else:
                self.logs.log(logging.INFO, "rejected", type=type_, id=rid, code=result.code,
                              reason=result.message[:200])
            return encode_error(rid, result.code, result.message, result.detail)
        self.metrics.request(type_, "ok", time.perf_counter() - t0)
        if type_ == MsgType.SUBMIT_JOB:
            log.info(kv("job_submitted", job=result["job_id"]))
        reply = encode_ok(rid, result)
        if len(reply) > self.config.max_message_bytes:
            # the peer would refuse it: say so instead (for status, which lists running
            # jobs, only a daemon near max_jobs with long ids gets here)
            msg = (f"reply of {len(reply)} bytes exceeds the limit of "
                   f"{self.config.max_message_bytes} bytes ([limits] max_message_bytes)")
            log.warning(kv("reply_too_large", type=type_, id=rid, bytes=len(reply)))
            return encode_error(rid, ErrorCode.TOO_LARGE, msg)
        return reply

    # ------------------------------------------------------------------ planning

    def _maybe_plan(self, now: float) -> None:
        for req in self.state.plan_requests(now):
            (self._inc_q if req.mode == INCREMENTAL else self._full_q).put(req)

    def _plan_worker(self, q: queue.Queue, full: bool) -> None:
        """Serve one queue of plan requests: full re-solves or incremental plans."""
        # PUSH/PULL: both workers wake the one loop socket
        wake = self.ctx.socket(zmq.PUSH)
        wake.setsockopt(zmq.LINGER, 0)
        wake.connect(self._wake_addr)
        child: PlannerProcess | None = None
        cluster, t0 = self.config.cluster, self.state.t0_wall_s
        # the full re-solves that run here (while the child starts, or after it failed) and
        # the incremental plans run at once on two threads: each on a policy of its own, as
        # the child has its own
        policy = self._fresh_policy() if full else self.policy
        if full and self.config.planner_process:
            try:
                child = self.planner = PlannerProcess(self.policy, cluster, t0).start()
                self.state.planner = "process (starting; a thread plans meanwhile)"
            except Exception as exc:  # noqa: BLE001 - solve in this thread instead
                self._drop_child(None, exc)
        try:
            while True:
                try:
                    # while the child starts, look at it now and then so that
                    # `planner.started` tells when the daemon is warm
                    req = q.get(timeout=0.1 if child is not None and not child.started else None)
                except queue.Empty:
                    child = self._look_at(child)
                    continue
                if req is None:
                    return
                res = None
                # until the child has imported everything and passed its self-test,
                # plans are solved here
                child = self._look_at(child)
                if child is not None and child.started:
                    try:
                        res = child.solve(req, self.config.planner_timeout_s)
                    except Exception as exc:  # noqa: BLE001 - solve here from now on
                        self._drop_child(child, exc)
                        child = None
                if res is None:
                    # HiGHS releases the GIL while it solves, so the loop keeps serving.
                    if full:
                        res = run_plan(policy, req, req.cluster or cluster, t0_wall_s=t0,
                                       fresh=self._fresh_policy)
                    else:
                        res = run_increment(policy, req, req.cluster or cluster, t0_wall_s=t0)
                self._result_q.put(res)
                try:
                    wake.send(b"", zmq.NOBLOCK)
                except zmq.ContextTerminated:  # stop() gave up waiting for this plan
                    return
        finally:
            if child is not None:
                child.close()
            wake.close(0)

    def _look_at(self, child: PlannerProcess | None) -> PlannerProcess | None:
        """``child``, or None once it turned out it cannot plan (then the thread does)."""
        if child is None or child.started:
            return child
        try:
            if child.ready():
                self.state.planner = "process"
                log.info(kv("planner_process_ready", pid=child.pid, jitsched=child.jitsched_file))
        except Exception as exc:  # noqa: BLE001 - whatever it is, plan here instead
            self._drop_child(child, exc)
            return None
        return child

    def _drop_child(self, child: PlannerProcess | None, exc: BaseException) -> None:
        """The planner child cannot plan: full re-solves run in a thread from now on, and
        status and metrics say why."""
        why = describe(exc)
        log.error(kv("planner_process_failed", error=why, fallback="thread"))
        if child is not None:
            child.close(timeout_s=1.0)
        self.planner = None
        self.state.planner = f"thread (child failed: {why})"

    def _drain_results(self, wake: zmq.Socket) -> None:
        while True:
            try:
                wake.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
        while True:
            try:
                res = self._result_q.get_nowait()
            except queue.Empty:
                return
            now = self.now()
            before = self.state.schedule_seq
            ok = self.state.install(res, now)
            for jid, why in self.state.quarantined:
                self.logs.log(logging.ERROR, "job_failed", job=jid, error=why)
            if res.error:
                self.metrics.plan_failed(res.mode)
            elif not res.unsupported:
                self.metrics.solve(res.solve_s, res.mode)
            if ok and self.state.schedule_seq != before:
                p = self.state.plan_summary
                log.info(kv("plan", seq=res.seq, mode=res.mode, reasons=",".join(res.reasons),
                            jobs=p["jobs"], flows=p["flows"], late=p["late"],
                            hosts_changed=p["hosts_changed"], hosts_sent=p.get("hosts_sent"),
                            solve_s=res.solve_s, bodies_s=round(res.bodies_s, 4)))
            elif ok:
                log.info(kv("plan_held", seq=res.seq, mode=res.mode, solve_s=res.solve_s))
            elif res.unsupported:
                log.warning(kv("incremental_unsupported", policy=self.config.policy))
            else:
                self.logs.log(logging.ERROR, "plan_failed", seq=res.seq, mode=res.mode, error=res.error,
                              retry_in_s=max(0.0, self.state.plan_book.retry_at_s[res.mode] - now))

    def _flush_outbox(self, agents: zmq.Socket, now: float) -> None:
        # Bodies were packed by the planning worker; only the envelope is written here,
        # and every due agent gets its message in this one non-blocking pass.
        # Two sends per agent: measured about half the cost of send_multipart at 1000 agents.
        if self.leading is not None and not self.leading():
            return  # deposed: another replica schedules now
        # A frame shared by many hosts (idle ones share one) is put in its envelope once.
        send = agents.send
        more = zmq.SNDMORE | zmq.NOBLOCK
        sealed: dict[int, bytes] = {}
        for a, frame in self.state.outbox(now):
            msg = sealed.get(id(frame))
            if msg is None:
                msg = sealed[id(frame)] = encode_packed_request(MsgType.SCHEDULE, frame)
            try:
                send(a.identity, more)
                send(msg, zmq.NOBLOCK)
            except zmq.ZMQError:
                # not connected right now: the re-send timer tries again
                a.sent_at_s = now
                continue


def wait_until(pred: Callable[[], bool], timeout_s: float, step_s: float = 0.005) -> bool:
    """Poll ``pred`` until true or ``timeout_s`` elapses; returns the last value."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step_s)
    return bool(pred())


__all__ = ["DISPATCH", "ERROR_TABLE", "Daemon", "KnownKeys", "create_policy", "error_code", "kv", "wait_until"]
