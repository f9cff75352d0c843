"""The jitsched wire protocol: msgpack envelopes, every message type and every error code."""

# One module although past 500 lines: the wire contract is declared once, here, for
# the daemon, the clients and the agents alike (every message type, its fields and
# every error code).

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field
from typing import Any

import msgpack

from jitsched.errors import ProtocolError
from jitsched.errors import RemoteError as RemoteError  # re-exported: clients catch it from here

VERSION = 1
# Large enough for a ResNet152-sized native job (~3.5k nodes, ~1 MB of msgpack) with
# headroom; anything bigger is refused before it is unpacked.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024


# Sockets a message travels on. JOB and AGENT messages are requests the daemon
# answers on its two ROUTER sockets; TO_AGENT is the one request the daemon
# originates; LOCAL goes from the client library to a host agent over a Unix socket
# (it carries a file descriptor).
JOB, AGENT, TO_AGENT, LOCAL = "job", "agent", "to_agent", "local"
NUM = "num"  # a schema kind: int or float, never bool
NUMS = "nums"  # a schema kind: a list of NUMs


class Entries:
    """A schema kind: a list of maps, each checked against ``fields`` (field -> (kind, required),
    as a message's body is)."""

    __slots__ = ("fields",)

    def __init__(self, fields: dict[str, tuple[Any, bool]]) -> None:
        self.fields = fields

    def __repr__(self) -> str:
        return f"Entries({self.fields!r})"


class Fields:
    """A schema kind: one map checked against ``fields`` (field -> (kind, required), as a
    message's body is)."""

    __slots__ = ("fields",)

    def __init__(self, fields: dict[str, tuple[Any, bool]]) -> None:
        self.fields = fields

    def __repr__(self) -> str:
        return f"Fields({self.fields!r})"


# A schedule body's flow entry: ``flow`` (flow_id), its bytes/s per slot ``rates_Bps``
# from slot ``start_slot`` on (empty: no rates), and, for a flow with a strict-priority
# rank, ``prio`` (0 first; the agent keeps a ranked flow past its rates, at zero, borrowing
# by rank). A host's "flows" (those it sends) name their receiver ``dst``, its "in_flows"
# (those it receives) their sender ``src``; the daemon builds them with flow_entry.
FLOW_ENTRY: dict[str, tuple[Any, bool]] = {"flow": (str, True), "start_slot": (int, True),
                                           "rates_Bps": (NUMS, True), "prio": (int, False)}
OUT_FLOW_ENTRY = {**FLOW_ENTRY, "dst": (str, True)}
IN_FLOW_ENTRY = {**FLOW_ENTRY, "src": (str, True)}
# An agent heartbeat's counts since the agent started: schedule bodies (and register replies)
# of a deposed leader refused ("fenced"), bodies older than the one held ignored ("stale"),
# schedules dropped because the daemon went silent ("dropped"), daemon messages refused as
# malformed ("bad_messages"), daemon processes it has met ("daemons"), local requests
# refused for their attach ticket ("tickets_refused": none, forged, expired, another job's,
# host's or user's, or no ticket key yet).
AGENT_COUNTS = ("fenced", "stale", "dropped", "bad_messages", "daemons", "tickets_refused")
# Heartbeat fields an agent sends only to a daemon whose register reply lists them in its
# "takes": a daemon refuses a field it does not know, so an agent newer than its daemon
# leaves them out instead of having every heartbeat refused (and its host marked down).
HEARTBEAT_TAKES = ("counts",)
# A schedule body's cap entry: what critical jobs' reserved transfers into or out of host
# ``host`` leave of its ingress on the wire (address ``addr``), payload bytes/s per ``slot_s``
# from wall time ``epoch_ns`` on; the agent holds the traffic it does not rank towards
# ``addr`` to that in those slots, so that it meets the reserved flows there in no switch
# queue.
CAP_ENTRY: dict[str, tuple[Any, bool]] = {"host": (str, True), "addr": (str, True), "epoch_ns": (int, True),
                                          "slot_s": (NUM, True), "left_Bps": (NUMS, True)}
# A schedule body's floor entry: from wall time ``epoch_ns`` on, while the body is in force,
# the agent keeps ``share`` of its host's ports (or its own background floor, the smaller)
# for the traffic it does not rank, and gives that traffic no more: a critical job's reserved
# transfers go into or out of the host ([daemon] critical_floor).
FLOOR_ENTRY: dict[str, tuple[Any, bool]] = {"epoch_ns": (int, True), "share": (NUM, True)}
# An attach ticket (jitsched.tickets): the daemon's HMAC-SHA256 (hex ``mac``), under host
# ``host``'s ticket key, letting local user ``uid`` name client-scoped job ``job`` to that
# host's agent until the daemon's wall time ``expires_ns``. An ``attach_job`` reply carries
# one when the request names a ``uid``; an agent's register reply carries its host's key
# (``ticket_key``, hex) with which the agent checks the ``ticket`` of an ``attach``.
TICKET: dict[str, tuple[Any, bool]] = {"job": (str, True), "host": (str, True), "uid": (int, True),
                                       "expires_ns": (int, True), "mac": (str, True)}


class Message(str):
    """One wire message type, declared once: the name (the envelope's ``type``), its socket and body.

    A ``Message`` is the type string itself (``MsgType.STATUS == "status"``), so
    call sites compare and pack it as a string. Every table of message types --
    :class:`MsgType`, the schemas, the per-socket sets and the daemon's dispatch
    table -- is derived from :data:`MESSAGES`; adding a message type is one
    declaration there, a :class:`~jitsched.daemon.state.SchedulerState` method of
    the same name (for ``JOB``/``AGENT`` messages) and, for ``JOB`` messages, a
    :class:`~jitsched.client.Client` method of the same name (a test checks both).

    Parameters
    ----------
    name : str
        The envelope's ``type`` value; also the handler's method name.
    socket : str
        ``JOB``, ``AGENT``, ``TO_AGENT`` or ``LOCAL``.
    fields : dict
        Body field -> (accepted type or ``NUM``, required). Unknown fields are
        refused so that typos surface at once.
    keyed : bool
        The daemon's handler takes the sender's key name (``peer``), for
        authorisation; ``False`` for requests anyone connected may make.
    """

    socket: str
    fields: dict[str, tuple[Any, bool]]
    keyed: bool

    def __new__(cls, name: str, socket: str, fields: dict[str, tuple[Any, bool]], *,
                keyed: bool = True) -> Message:
        if socket not in (JOB, AGENT, TO_AGENT, LOCAL):
            raise ValueError(f"message {name!r}: unknown socket {socket!r}")
        self = super().__new__(cls, name)
        self.socket, self.fields, self.keyed = socket, fields, keyed
        return self

    def __reduce__(self):
        # pickled (e.g. to the planner process) as the plain type string it stands for
        return (str, (str(self),))


MESSAGES: tuple[Message, ...] = (
    # progress: {"done": [node ids], "started": [transfer ids]}, from a job runner that
    # resubmits its job to a daemon that restarted without a journal
    # if_unguaranteed: "refuse" (default) or "normal", what a critical job that cannot be
    # guaranteed becomes (jitsched.daemon.jobs.JobRegistry.admit)
    # uid: the local user (>= 0) that will register the job's sockets with its hosts' agents; the
    # reply then carries "tickets", {host: TICKET} for every host of the job's transfers,
    # and "ticket_s", how long they are valid
    Message("submit_job", JOB, {"job": (dict, True), "cluster": (dict, False),
                                "progress": (dict, False), "if_unguaranteed": (str, False),
                                "uid": (int, False)}),
    Message("transfer_started", JOB, {"job_id": (str, True), "transfer": (str, True),
                                      "t_ns": (int, False)}),
    Message("transfer_finished", JOB, {"job_id": (str, True), "transfer": (str, True),
                                       "bytes": (NUM, False), "t_ns": (int, False)}),
    Message("compute_finished", JOB, {"job_id": (str, True), "compute": (str, True),
                                      "duration_s": (NUM, True), "t_ns": (int, False)}),
    # a job's progress reports in one message: events [kind, node id, value] in order,
    # kind one of REPORT_EVENTS (value: transfer_finished's bytes or None,
    # compute_finished's duration_s, transfer_started's None)
    Message("report", JOB, {"job_id": (str, True), "events": (list, True)}),
    Message("job_finished", JOB, {"job_id": (str, True), "jct_s": (NUM, False),
                                  "t_ns": (int, False)}),
    Message("cancel_job", JOB, {"job_id": (str, True)}),
    # the client of these running jobs is alive: every request naming a job renews its
    # lease, this one renews several while none is due ([daemon] job_lease_s)
    Message("renew_lease", JOB, {"job_ids": (list, True)}),
    # a recurring job registers its DAG once (a template: a job that runs until job_finished
    # or cancel_job), then reports each iteration's end with `iteration`; the plan keeps
    # its transfers ranked across iterations
    # uid: as submit_job's (the reply then carries the template's flow tickets)
    Message("register_template", JOB, {"job": (dict, True), "cluster": (dict, False), "uid": (int, False)}),
    # iteration n (from 1; a repeat is answered without being counted again) of template
    # job_id ended; what it measured, each optional: step_s, the iteration's time; compute_s,
    # each compute's duration in the template's order; transfer_s and bytes, each transfer's
    # time and size in the template's order. The daemon learns its estimates from them.
    Message("iteration", JOB, {"job_id": (str, True), "n": (int, True), "step_s": (NUM, False),
                               "compute_s": (list, False), "transfer_s": (list, False),
                               "bytes": (list, False)}),
    # a bulk transfer outside every DAG (a file copy, a checkpoint upload) announces its
    # size so that policies that rank background flows (jit) can; its agents know it as
    # background_flow_id of its client-scoped name, the reply's "flow_id"
    # (again, with ``left``: the bytes it still has, as a DAG transfer's end is reported)
    # uid: the local user that will register its socket with its hosts' agents; the reply
    # then carries "tickets", {host: TICKET} for its src and dst (the ticket's job: the
    # flow_id), and "ticket_s", how long they are valid
    Message("background_started", JOB, {"flow": (str, True), "src": (str, True), "dst": (str, True),
                                        "bytes": (NUM, True), "left": (NUM, False), "uid": (int, False)}),
    Message("background_finished", JOB, {"flow": (str, True)}),
    # before a job's connections are attached on ``host`` (``attach`` below): the daemon
    # checks the job is the sender's and answers with the addresses of the job's hosts
    # that its cluster knows, {address: host}, for the agent to name each peer by; with
    # ``uid``, the local user that will ask the agent, also a ``ticket`` (TICKET) for it
    Message("attach_job", JOB, {"job_id": (str, True), "host": (str, True), "uid": (int, False)}),
    # a page of jobs: those submitted after seq ``after`` (default 0), at most ``limit``
    # (default and most: the daemon's status_page_jobs); the reply's next_after goes on.
    # replica: the answering process's own role, even a follower's (which answers every
    # other request not_leader): role, epoch, the leader it sees, etcd's reachability
    Message("status", JOB, {"verbose": (bool, False), "after": (int, False), "limit": (int, False),
                            "replica": (bool, False)}, keyed=False),
    # agent_id: the agent process (random, its own): while one agent of a host is alive,
    # another is refused (host_in_use); the same one may register again on a new connection
    # egress_bps, ingress_bps (bits/s) and address: a host not in the daemon's configuration
    # joins the cluster with them ([daemon] host_join); background_floor: the share of each
    # of the host's ports its agent keeps for traffic it does not rank, in [0, 1) (0 if
    # absent); payload_share: the share of the line a flow's payload takes, in (0, 1] (1 if
    # absent): critical jobs' reservations there are planned on the payload rate the floor leaves
    Message("register", AGENT, {"host": (str, True), "backend": (str, False),
                                "egress_bps": (NUM, False), "ingress_bps": (NUM, False),
                                "address": (str, False), "background_floor": (NUM, False),
                                "payload_share": (NUM, False),
                                # whether it keeps [daemon] critical_floor on a critical job's
                                # ports (false if absent: its own floor there too)
                                "holds_floor": (bool, False),
                                "applied_seq": (int, False), "agent_id": (str, False)}),
    # the registered agent's host leaves the cluster: its jobs with work left on it end
    # failed, the rest are re-planned; registering again brings it back
    Message("leave", AGENT, {"host": (str, True)}),
    # sent_ns: the agent's wall clock as it sent this (ns), echoed in the reply beside the
    # daemon's (t_ns): the round trip gives the offset between the two clocks, which the
    # agent reports with the next one (clock_offset_s: its clock minus the daemon's)
    Message("heartbeat", AGENT, {"host": (str, True), "applied_seq": (int, False),
                                 "flow_rates_Bps": (dict, False), "total_Bps": (NUM, False),
                                 # per attached job: {"bytes_sent", "bytes_classified", "rank", ...}
                                 "attached": (dict, False),
                                 # the port's traffic no schedule covers, bytes/s per direction:
                                 # {"out": Bps, "in": Bps} (the daemon plans on what it leaves)
                                 "unscheduled_Bps": (dict, False),
                                 "sent_ns": (int, False), "clock_offset_s": (NUM, False),
                                 "clock_rtt_s": (NUM, False),
                                 # the destinations whose unranked traffic the agent holds now
                                 # (its body's caps_into), and whether its backend cannot
                                 "caps_held": (int, False), "caps_unenforced": (bool, False),
                                 # the share of its ports it keeps for unranked traffic while a
                                 # critical job holds them (its body's floor_from), if any
                                 "floor_held": (NUM, False),
                                 # what the agent refused or dropped since it started, by
                                 # AGENT_COUNTS name: {"stale": 2, ...}
                                 "counts": (dict, False)}),
    Message("ack", AGENT, {"host": (str, True), "seq": (int, True), "incarnation": (int, False)}),
    Message("get_schedule", AGENT, {"host": (str, True)}),
    Message("schedule", TO_AGENT, {"seq": (int, True), "slot_s": (NUM, True),
                                   "epoch_ns": (int, True), "flows": (Entries(OUT_FLOW_ENTRY), True),
                                   "leftover_Bps": (list, True), "line_Bps": (NUM, False),
                                   "in_flows": (Entries(IN_FLOW_ENTRY), False),
                                   "in_leftover_Bps": (list, False),
                                   "in_line_Bps": (NUM, False),
                                   "caps_into": (Entries(CAP_ENTRY), False),
                                   "floor_from": (Entries(FLOOR_ENTRY), False),
                                   # the daemon process that planned it: seqs count anew in each
                                   "incarnation": (int, False),
                                   # the leader's epoch among daemon replicas (0: one daemon):
                                   # an agent drops a schedule of an epoch below one it has seen
                                   "epoch": (int, False)}),
    # ``ticket``: the daemon's (TICKET, from submit_job or attach_job) for the flow's job
    # (the flow id's part before the transfer's), this host and the requester's uid; for an
    # announced background flow ("/<name>"), background_started's, for that flow id. A flow
    # without it is refused (ticket_refused). unregister_flow takes none: it ends only the
    # requester's own flow.
    Message("register_flow", LOCAL, {"flow": (str, True), "direction": (str, False),
                                     "ticket": (Fields(TICKET), False)}),
    Message("unregister_flow", LOCAL, {"flow": (str, True), "direction": (str, False)}),
    # a job's own processes (pids and their descendants), cgroup v2 directory or TCP
    # ports on the agent's host: exactly one of the three; ``peers`` maps a remote
    # "address" or "address:port" to the host name its connections go to; ``ticket``: the
    # daemon's (TICKET, from attach_job) for this job, host and the requester's uid, without
    # which the agent refuses (ticket_refused)
    Message("attach", LOCAL, {"job": (str, True), "pids": (list, False), "cgroup": (str, False),
                              "ports": (list, False), "peers": (dict, False),
                              "ticket": (Fields(TICKET), False)}),
    Message("detach", LOCAL, {"job": (str, True)}),
)
if len({m for m in MESSAGES}) != len(MESSAGES):
    raise RuntimeError("a message type is declared twice in MESSAGES")


class MsgType:
    """Every message type by its upper-case name (``MsgType.SUBMIT_JOB``), from :data:`MESSAGES`."""


for _m in MESSAGES:
    setattr(MsgType, _m.upper(), _m)
del _m


def _types_on(socket: str) -> frozenset[str]:
    return frozenset(str(m) for m in MESSAGES if m.socket == socket)


MESSAGE_TYPES = frozenset(str(m) for m in MESSAGES)
JOB_TYPES, AGENT_TYPES, LOCAL_TYPES = _types_on(JOB), _types_on(AGENT), _types_on(LOCAL)
# Body schemas by type (bench_faults' mutator starts from this table).
_SCHEMAS: dict[str, dict[str, tuple[Any, bool]]] = {str(m): m.fields for m in MESSAGES}


class ErrorCode:
    """Every error code a reply may carry."""

    BAD_MESSAGE = "bad_message"  # not msgpack, truncated, or not a map
    BAD_ENVELOPE = "bad_envelope"  # envelope fields missing or of the wrong type
    UNSUPPORTED_VERSION = "unsupported_version"
    UNKNOWN_TYPE = "unknown_type"
    TOO_LARGE = "too_large"
    INVALID_BODY = "invalid_body"  # body fields missing, unknown or of the wrong type
    INVALID_JOB = "invalid_job"  # the job map fails model validation
    DUPLICATE_JOB = "duplicate_job"
    UNKNOWN_JOB = "unknown_job"
    JOB_ENDED = "job_ended"  # an iteration of a recurring job that finished or was cancelled
    UNKNOWN_NODE = "unknown_node"
    UNKNOWN_HOST = "unknown_host"
    NOT_REGISTERED = "not_registered"
    FORBIDDEN = "forbidden"  # the sender's key may not do this (another host's, another client's job)
    HOST_IN_USE = "host_in_use"  # another agent of this host is alive (a retry may succeed)
    OVERLOADED = "overloaded"
    UNAVAILABLE = "unavailable"  # the daemon cannot record it now (its journal cannot be written)
    # a replica that is not the leader (or a leader deposed): the message names the leader's
    # endpoints (:func:`leader_named`), or says no leader is elected yet
    NOT_LEADER = "not_leader"
    # a local request to an agent naming a job without a valid attach ticket (none, forged,
    # expired, another job's, host's or user's), or before the agent has its ticket key
    TICKET_REFUSED = "ticket_refused"
    INTERNAL = "internal"


ERROR_CODES = frozenset(v for k, v in vars(ErrorCode).items() if k.isupper())


# a daemon process's role (status with ``replica``): the one daemon without etcd, or a
# replica leading or following
SINGLE, LEADER, FOLLOWER = "single", "leader", "follower"


def not_leader_message(job_endpoint: str = "", agent_endpoint: str = "", epoch: int = 0) -> str:
    """The message of a ``not_leader`` error: the leader's endpoints, or that none is elected."""
    if not job_endpoint:
        return "not the leader, and no leader is elected yet: try again or another endpoint"
    return f"not the leader; leader (epoch {epoch}): jobs={job_endpoint} agents={agent_endpoint}"


_LEADER_RE = re.compile(r"epoch (\d+)\): jobs=(\S+) agents=(\S+)")


def leader_named(message: str) -> tuple[str, str, int] | None:
    """The leader's (job endpoint, agent endpoint, epoch) a ``not_leader`` message names, or None."""
    m = _LEADER_RE.search(message)
    return (m.group(2), m.group(3), int(m.group(1))) if m else None


def split_endpoints(endpoints: str) -> list[str]:
    """A ``--daemon`` value's endpoints: one, or several separated by commas (daemon replicas)."""
    return [e.strip() for e in endpoints.split(",") if e.strip()]


# The transports the daemon's sockets serve on.
ENDPOINT_SCHEMES = ("tcp", "ipc", "inproc")


def endpoint_problem(endpoint: str) -> str | None:
    """What is wrong with a ZeroMQ endpoint the daemon binds or an agent or client connects
    to, or None: a scheme other than ``tcp://``, ``ipc://`` or ``inproc://``, or a TCP
    endpoint without ``HOST:PORT``, the port ``*`` or within 0-65535 (ZeroMQ itself takes
    a larger number modulo 65536, and binds a port nobody configured)."""
    scheme, sep, rest = endpoint.partition("://")
    if not sep or scheme not in ENDPOINT_SCHEMES or not rest:
        return "not an endpoint such as tcp://127.0.0.1:5555, tcp://*:5555 or ipc:///run/jitsched.sock"
    if scheme != "tcp":
        return None
    host, colon, port = rest.rpartition(":")
    if not colon or not host:
        return "a TCP endpoint needs HOST:PORT, such as tcp://127.0.0.1:5555"
    if port != "*" and not (port.isdigit() and int(port) <= 65535):
        return f"the port must be * or within 0-65535, got {port!r}"
    return None


@dataclass(frozen=True)
class Request:
    """A decoded request envelope."""

    id: int
    type: str
    body: dict


@dataclass(frozen=True)
class Reply:
    """A decoded reply envelope: ``body`` when ``ok``, else ``code``, ``message`` and ``detail``."""

    id: int
    ok: bool
    body: dict
    code: str = ""
    message: str = ""
    detail: dict = field(default_factory=dict)



_packer_ids = itertools.count(1)


def next_id() -> int:
    """A fresh request id (unique within this process)."""
    return next(_packer_ids)


def _pack(obj: dict) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def encode_request(type_: str, body: dict | None = None, req_id: int | None = None) -> bytes:
    """Pack a request envelope ``{"v", "id", "type", "body"}``."""
    if type_ not in MESSAGE_TYPES:
        raise ValueError(f"unknown message type {type_!r}")
    return _pack({"v": VERSION, "id": next_id() if req_id is None else req_id,
                  "type": str(type_), "body": body or {}})


def pack_body(body: dict) -> bytes:
    """A request body packed once, to go out (again) with :func:`encode_packed_request`."""
    return _pack(body)


def unpack_body(packed_body: bytes) -> dict:
    """The body :func:`pack_body` packed (trusted, daemon-made bytes)."""
    return msgpack.unpackb(packed_body, raw=False)


# A msgpack map is its header followed by its keys and values, each packed on
# its own: the envelope around a packed body is these constant pieces and the id.
_ENVELOPE_HEAD = b"\x84" + _pack("v") + _pack(VERSION) + _pack("id")
_ENVELOPE_TYPE = {t: _pack("type") + _pack(t) + _pack("body") for t in MESSAGE_TYPES}


def encode_packed_request(type_: str, packed_body: bytes, req_id: int | None = None) -> bytes:
    """:func:`encode_request` (byte for byte) for a body already packed by :func:`pack_body`."""
    try:
        mid = _ENVELOPE_TYPE[type_]
    except KeyError:
        raise ValueError(f"unknown message type {type_!r}") from None
    rid = next_id() if req_id is None else req_id
    return b"".join((_ENVELOPE_HEAD, _pack(rid), mid, packed_body))


def encode_ok(req_id: int, body: dict | None = None) -> bytes:
    """Pack a success reply to request ``req_id``."""
    return _pack({"v": VERSION, "id": req_id, "ok": True, "body": body or {}})


# An error message quotes what was wrong, at most this many characters of it: a message
# that echoes a client's input (an unknown type, a bad value) is not as large as the input.
MAX_ERROR_CHARS = 2000


def encode_error(req_id: int, code: str, message: str, detail: dict | None = None) -> bytes:
    """Pack an error reply; ``code`` must be one of :class:`ErrorCode`; ``detail``: fields
    a client may act on (a refused critical job's bottleneck port and earliest start).
    ``message`` is cut to :data:`MAX_ERROR_CHARS` characters."""
    if code not in ERROR_CODES:
        raise ValueError(f"unknown error code {code!r}")
    if len(message) > MAX_ERROR_CHARS:
        message = f"{message[:MAX_ERROR_CHARS]}... ({len(message)} characters)"
    err = {"code": code, "message": message} | ({"detail": detail} if detail else {})
    return _pack({"v": VERSION, "id": req_id, "ok": False, "error": err})


# msgpack's first byte of a map or an array (fix, 16- and 32-bit counts)
_MAP_HEAD = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}
_ARRAY_HEAD = frozenset(range(0x90, 0xA0)) | {0xDC, 0xDD}
_CHUNK_DEPTH = 4  # envelope, body, job map, node lists: their elements are unpacked one by one


def unpack_chunked(data: bytes) -> object:
    """``msgpack.unpackb(data, raw=False, strict_map_key=True)``, one small object at a time.

    One ``unpackb`` call holds the GIL throughout: 0.44 s for a 7.8 MB job of
    144k nodes, during which no other thread of the process runs. Here the
    top levels are walked in Python and each element of a list (a node, an
    edge) is unpacked on its own, so a thread decoding a big message yields
    the interpreter every few milliseconds (~2x the time of one call).

    Raises
    ------
    ValueError, msgpack exceptions
        As ``unpackb`` would for malformed data or trailing bytes.
    """
    u = msgpack.Unpacker(raw=False, strict_map_key=True, max_buffer_size=max(len(data), 1))
    u.feed(data)

    def one(depth: int) -> object:
        head = data[u.tell()] if u.tell() < len(data) else None
        if depth < _CHUNK_DEPTH and head in _MAP_HEAD:
            out = {}
            for _ in range(u.read_map_header()):
                key = u.unpack()
                if not isinstance(key, (str, bytes)):
                    raise ValueError(f"{type(key).__name__} is not allowed for map key")
                out[key] = one(depth + 1)
            return out
        if depth < _CHUNK_DEPTH and head in _ARRAY_HEAD:
            return [one(depth + 1) for _ in range(u.read_array_header())]
        return u.unpack()

    obj = one(0)
    if u.tell() != len(data):
        raise msgpack.ExtraData(obj, data[u.tell():])
    return obj


def _unpack(data: bytes, max_bytes: int, chunked: bool = False) -> dict:
    if len(data) > max_bytes:
        raise ProtocolError(ErrorCode.TOO_LARGE,
                            f"message of {len(data)} bytes exceeds the limit of {max_bytes} bytes")
    try:
        obj = unpack_chunked(data) if chunked else msgpack.unpackb(data, raw=False, strict_map_key=True)
    except Exception as exc:  # noqa: BLE001 - msgpack raises many types for bad input
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"not a msgpack message ({type(exc).__name__}: {exc})") from None
    if not isinstance(obj, dict):
        raise ProtocolError(ErrorCode.BAD_MESSAGE, f"expected a map, got {type(obj).__name__}")
    return obj


def peek_id(data: bytes) -> int:
    """Best-effort request id of a message that failed to decode (0 if unknown)."""
    try:
        obj = msgpack.unpackb(data, raw=False) if len(data) <= MAX_MESSAGE_BYTES else None
    except Exception:  # noqa: BLE001 - any failure means no id
        return 0
    rid = obj.get("id") if isinstance(obj, dict) else None
    return rid if isinstance(rid, int) and not isinstance(rid, bool) else 0


def decode_request(data: bytes, *, max_bytes: int = MAX_MESSAGE_BYTES,
                   allowed: frozenset[str] | None = None, chunked: bool = False) -> Request:
    """Unpack and validate a request envelope and its body.

    Parameters
    ----------
    data : bytes
        One message frame.
    max_bytes : int
        Size limit, bytes.
    allowed : frozenset of str, optional
        Message types this socket accepts.
    chunked : bool
        Unpack with :func:`unpack_chunked` (a thread decoding a big message
        lets the others run); the result is the same.

    Raises
    ------
    ProtocolError
        With the code saying what is wrong.
    """
    return _request_from(_unpack(data, max_bytes, chunked), allowed)


def _request_from(obj: dict, allowed: frozenset[str] | None = None) -> Request:
    # the checks of decode_request on an unpacked map
    rid = obj.get("id")
    if not isinstance(rid, int) or isinstance(rid, bool):
        raise ProtocolError(ErrorCode.BAD_ENVELOPE, "id: expected an integer")
    v = obj.get("v")
    if v != VERSION:
        raise ProtocolError(ErrorCode.UNSUPPORTED_VERSION,
                            f"v: protocol version {v!r} is not supported (this side speaks {VERSION})")
    extra = set(obj) - {"v", "id", "type", "body"}
    if extra:
        raise ProtocolError(ErrorCode.BAD_ENVELOPE, f"unknown envelope field(s): {sorted(extra)}")
    type_ = obj.get("type")
    if not isinstance(type_, str):
        raise ProtocolError(ErrorCode.BAD_ENVELOPE, "type: expected a string")
    body = obj.get("body", {})
    if not isinstance(body, dict):
        raise ProtocolError(ErrorCode.BAD_ENVELOPE, f"body: expected a map, got {type(body).__name__}")
    if type_ not in MESSAGE_TYPES or (allowed is not None and type_ not in allowed):
        raise ProtocolError(ErrorCode.UNKNOWN_TYPE, f"type: unknown message type {type_!r} here")
    validate_body(type_, body)
    return Request(rid, type_, body)


def validate_body(type_: str, body: dict) -> None:
    """Check ``body`` against the schema of ``type_``; raise ProtocolError(INVALID_BODY) naming
    the field (``body.flows[3].start_slot`` inside a list of entries)."""
    _check_fields(_SCHEMAS[type_], body, "body.", type_)


def _check_fields(schema: dict[str, tuple[Any, bool]], body: dict, where: str, what: str) -> None:
    for key in body:
        if key not in schema:
            raise ProtocolError(ErrorCode.INVALID_BODY, f"{where}{key}: unknown field for {what}")
    for key, (kind, required) in schema.items():
        if key not in body:
            if required:
                raise ProtocolError(ErrorCode.INVALID_BODY, f"{where}{key}: missing required field")
            continue
        val = body[key]
        if kind == NUM:
            ok = isinstance(val, (int, float)) and not isinstance(val, bool)
            name = "number"
        elif kind == NUMS:
            ok = isinstance(val, list) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                               for v in val)
            name = "list of numbers"
        elif isinstance(kind, Entries):
            ok = isinstance(val, list)
            name = "list"
        elif isinstance(kind, Fields):
            ok = isinstance(val, dict)
            name = "dict"
        else:
            ok = isinstance(val, kind) and not (kind is int and isinstance(val, bool))
            name = kind.__name__
        if not ok:
            raise ProtocolError(ErrorCode.INVALID_BODY,
                                f"{where}{key}: expected {name}, got {type(val).__name__}")
        if isinstance(kind, Entries):
            for i, entry in enumerate(val):
                if not isinstance(entry, dict):
                    raise ProtocolError(ErrorCode.INVALID_BODY,
                                        f"{where}{key}[{i}]: expected dict, got {type(entry).__name__}")
                _check_fields(kind.fields, entry, f"{where}{key}[{i}].", f"{what} {key}")
        elif isinstance(kind, Fields):
            _check_fields(kind.fields, val, f"{where}{key}.", f"{what} {key}")


def decode_reply(data: bytes, *, max_bytes: int = MAX_MESSAGE_BYTES) -> Reply:
    """Unpack a reply envelope (client side); raise ProtocolError if malformed."""
    return _reply_from(_unpack(data, max_bytes))


def _reply_from(obj: dict) -> Reply:
    rid = obj.get("id")
    if obj.get("v") != VERSION or not isinstance(rid, int) or not isinstance(obj.get("ok"), bool):
        raise ProtocolError(ErrorCode.BAD_ENVELOPE, "not a reply envelope")
    if obj["ok"]:
        body = obj.get("body", {})
        return Reply(rid, True, body if isinstance(body, dict) else {})
    err = obj.get("error") or {}
    if not isinstance(err, dict):
        raise ProtocolError(ErrorCode.BAD_ENVELOPE, f"error: expected a map, got {type(err).__name__}")
    detail = err.get("detail")
    return Reply(rid, False, {}, str(err.get("code", ErrorCode.INTERNAL)), str(err.get("message", "")),
                 detail if isinstance(detail, dict) else {})


def is_reply(data: bytes, chunked: bool = False) -> bool:
    """Whether a frame is a reply (has ``ok``) rather than a request, without full validation
    (``chunked``: unpacked by :func:`unpack_chunked`)."""
    try:
        obj = unpack_chunked(data) if chunked else msgpack.unpackb(data, raw=False)
    except Exception:  # noqa: BLE001
        return False
    return isinstance(obj, dict) and "ok" in obj


def decode_any(data: bytes, *, max_bytes: int = MAX_MESSAGE_BYTES) -> Request | Reply:
    """Decode a frame that may be a request or a reply (agents receive both)."""
    obj = _unpack(data, max_bytes)  # once: an agent's schedule bodies run to thousands of flows
    return _reply_from(obj) if "ok" in obj else _request_from(obj)


# a report event's kind -> (the message it stands for, the node's field, the value's field or
# None); whether the value is required is that message's schema's to say
REPORT_EVENTS: dict[str, tuple[str, str, str | None]] = {
    "started": ("transfer_started", "transfer", None),
    "finished": ("transfer_finished", "transfer", "bytes"),
    "compute": ("compute_finished", "compute", "duration_s"),
}
MAX_REPORT_EVENTS = 4096  # per report message


def report_bodies(body: dict) -> list[tuple[str, dict]]:
    """The ``(message type, body)`` each event of a ``report`` body stands for, in order.

    Raises
    ------
    ProtocolError
        INVALID_BODY naming the first malformed event (``events[i]``).
    """
    events, job_id = body["events"], body["job_id"]
    if len(events) > MAX_REPORT_EVENTS:
        raise ProtocolError(ErrorCode.INVALID_BODY,
                            f"body.events: {len(events)} events, more than {MAX_REPORT_EVENTS}")
    out = []
    for i, ev in enumerate(events):
        if not isinstance(ev, list) or len(ev) != 3:
            raise ProtocolError(ErrorCode.INVALID_BODY, f"body.events[{i}]: expected [kind, node, value]")
        kind, nid, val = ev
        spec = REPORT_EVENTS.get(kind) if isinstance(kind, str) else None
        if spec is None:
            raise ProtocolError(ErrorCode.INVALID_BODY, f"body.events[{i}]: unknown kind {kind!r} "
                                f"(one of {sorted(REPORT_EVENTS)})")
        type_, node_key, value_key = spec
        one = {"job_id": job_id, node_key: nid}
        if val is not None:
            if value_key is None:
                raise ProtocolError(ErrorCode.INVALID_BODY, f"body.events[{i}]: {kind} takes no value")
            one[value_key] = val
        try:  # a value its message requires, missing, is the schema's "missing required field"
            validate_body(type_, one)
        except ProtocolError as exc:
            raise ProtocolError(ErrorCode.INVALID_BODY, f"body.events[{i}]: {exc.message}") from None
        out.append((type_, one))
    return out


def flow_entry(flow: str, peer: str, start_slot: int, rates_Bps: list[float], prio: int | None = None,
               *, inbound: bool = False) -> dict:
    """One flow entry of a schedule body (:data:`OUT_FLOW_ENTRY`; ``inbound``: :data:`IN_FLOW_ENTRY`).

    Parameters
    ----------
    flow : str
        The flow's :func:`flow_id`.
    peer : str
        The host at the other end: the receiver (``dst``) of a flow the host
        sends, the sender (``src``) of one it receives (``inbound``).
    start_slot : int
        The slot of ``rates_Bps[0]``.
    rates_Bps : list of float
        Bytes/s per slot from ``start_slot`` on.
    prio : int, optional
        The flow's strict-priority rank (0 first); None: unranked.
    """
    e = {"flow": flow, "src" if inbound else "dst": peer, "start_slot": start_slot, "rates_Bps": rates_Bps}
    if prio is not None:
        e["prio"] = prio
    return e


def cap_entry(host: str, addr: str, epoch_ns: int, slot_s: float, left_Bps: list[float]) -> dict:
    """One cap entry of a schedule body (:data:`CAP_ENTRY`).

    Parameters
    ----------
    host : str
        A host that a critical job's unfinished reserved transfers go into or out of.
    addr : str
        Its IPv4 address.
    epoch_ns : int
        Wall time of ``left_Bps[0]``'s start, ns.
    slot_s : float
        Length of each of ``left_Bps``'s slots, seconds.
    left_Bps : list of float
        Bytes/s of the host's ingress the reservations leave, per slot.
    """
    return {"host": host, "addr": addr, "epoch_ns": int(epoch_ns), "slot_s": float(slot_s), "left_Bps": left_Bps}


def floor_entry(epoch_ns: int, share: float) -> dict:
    """One floor entry of a schedule body (:data:`FLOOR_ENTRY`).

    Parameters
    ----------
    epoch_ns : int
        Wall time from which the floor holds, ns.
    share : float
        Share of each of the host's ports, in [0, 1), kept for unranked traffic.
    """
    return {"epoch_ns": int(epoch_ns), "share": float(share)}


def flow_id(job_id: str, transfer_id: str) -> str:
    """The flow id agents and backends use: ``"<job_id>/<transfer_id>"``."""
    return f"{job_id}/{transfer_id}"


# The job id of announced background flows in schedules: job ids are never empty, so
# a background flow's agent id, "/<flow>", is never a job transfer's.
BACKGROUND_JOB = ""


def background_flow_id(flow: str) -> str:
    """The flow id agents and backends use for announced background flow ``flow``: ``"/<flow>"``."""
    return flow_id(BACKGROUND_JOB, flow)
