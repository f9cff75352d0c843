"""The jitsched wire protocol: msgpack envelopes, every message type and every error code."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import msgpack

from jitsched.errors import ProtocolError
from jitsched.errors import RemoteError as RemoteError  # re-exported: clients catch it from here

VERSION = 1
# Large enough for a ResNet152-sized native job (~3.5k nodes, ~1 MB of msgpack) with
# headroom; anything bigger is refused before it is unpacked.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024


class MsgType:
    """Every message type, as sent in the envelope's ``type`` field."""

    # job side (job ROUTER socket)
    SUBMIT_JOB = "submit_job"
    TRANSFER_STARTED = "transfer_started"
    TRANSFER_FINISHED = "transfer_finished"
    COMPUTE_FINISHED = "compute_finished"
    JOB_FINISHED = "job_finished"
    CANCEL_JOB = "cancel_job"
    STATUS = "status"
    # agent side (agent ROUTER socket)
    REGISTER = "register"
    HEARTBEAT = "heartbeat"
    SCHEDULE = "schedule"  # daemon -> agent, the only request the daemon originates
    ACK = "ack"
    GET_SCHEDULE = "get_schedule"
    # local, client library -> host agent over a Unix socket (carries a file descriptor)
    REGISTER_FLOW = "register_flow"
    UNREGISTER_FLOW = "unregister_flow"


JOB_TYPES = frozenset({
    MsgType.SUBMIT_JOB, MsgType.TRANSFER_STARTED, MsgType.TRANSFER_FINISHED,
    MsgType.COMPUTE_FINISHED, MsgType.JOB_FINISHED, MsgType.CANCEL_JOB, MsgType.STATUS,
})
AGENT_TYPES = frozenset({MsgType.REGISTER, MsgType.HEARTBEAT, MsgType.ACK, MsgType.GET_SCHEDULE})
LOCAL_TYPES = frozenset({MsgType.REGISTER_FLOW, MsgType.UNREGISTER_FLOW})


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
    UNKNOWN_NODE = "unknown_node"
    UNKNOWN_HOST = "unknown_host"
    NOT_REGISTERED = "not_registered"
    FORBIDDEN = "forbidden"  # the sender's key may not do this (another host's, another client's job)
    OVERLOADED = "overloaded"
    INTERNAL = "internal"


ERROR_CODES = frozenset(v for k, v in vars(ErrorCode).items() if k.isupper())


@dataclass(frozen=True)
class Request:
    """A decoded request envelope."""

    id: int
    type: str
    body: dict


@dataclass(frozen=True)
class Reply:
    """A decoded reply envelope: ``body`` when ``ok``, else ``code`` and ``message``."""

    id: int
    ok: bool
    body: dict
    code: str = ""
    message: str = ""


# Body schemas: field -> (accepted types, required). ``float`` accepts ints too; bools
# are never numbers. Unknown fields are refused so that typos surface at once.
NUM = "num"
_SCHEMAS: dict[str, dict[str, tuple[Any, bool]]] = {
    # progress: {"done": [node ids], "started": [transfer ids]}, from a job runner that
    # resubmits its job to a daemon that restarted without a journal
    MsgType.SUBMIT_JOB: {"job": (dict, True), "cluster": (dict, False), "progress": (dict, False)},
    MsgType.TRANSFER_STARTED: {"job_id": (str, True), "transfer": (str, True),
                               "t_ns": (int, False)},
    MsgType.TRANSFER_FINISHED: {"job_id": (str, True), "transfer": (str, True),
                                "bytes": (NUM, False), "t_ns": (int, False)},
    MsgType.COMPUTE_FINISHED: {"job_id": (str, True), "compute": (str, True),
                               "duration_s": (NUM, True), "t_ns": (int, False)},
    MsgType.JOB_FINISHED: {"job_id": (str, True), "jct_s": (NUM, False), "t_ns": (int, False)},
    MsgType.CANCEL_JOB: {"job_id": (str, True)},
    MsgType.STATUS: {"verbose": (bool, False)},
    MsgType.REGISTER: {"host": (str, True), "backend": (str, False),
                       "egress_bps": (NUM, False), "ingress_bps": (NUM, False),
                       "applied_seq": (int, False)},
    MsgType.HEARTBEAT: {"host": (str, True), "applied_seq": (int, False),
                        "flow_rates_Bps": (dict, False), "total_Bps": (NUM, False)},
    MsgType.ACK: {"host": (str, True), "seq": (int, True), "incarnation": (int, False)},
    MsgType.GET_SCHEDULE: {"host": (str, True)},
    MsgType.SCHEDULE: {"seq": (int, True), "slot_s": (NUM, True), "epoch_ns": (int, True),
                       "flows": (list, True), "leftover_Bps": (list, True),
                       "line_Bps": (NUM, False), "in_flows": (list, False),
                       "in_leftover_Bps": (list, False), "in_line_Bps": (NUM, False),
                       # the daemon process that planned it: seqs count anew in each
                       "incarnation": (int, False)},
    MsgType.REGISTER_FLOW: {"flow": (str, True), "direction": (str, False)},
    MsgType.UNREGISTER_FLOW: {"flow": (str, True), "direction": (str, False)},
}
MESSAGE_TYPES = frozenset(_SCHEMAS)

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
                  "type": type_, "body": body or {}})


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


def encode_error(req_id: int, code: str, message: str) -> bytes:
    """Pack an error reply; ``code`` must be one of :class:`ErrorCode`."""
    if code not in ERROR_CODES:
        raise ValueError(f"unknown error code {code!r}")
    return _pack({"v": VERSION, "id": req_id, "ok": False,
                  "error": {"code": code, "message": message}})


def _unpack(data: bytes, max_bytes: int) -> dict:
    if len(data) > max_bytes:
        raise ProtocolError(ErrorCode.TOO_LARGE,
                            f"message of {len(data)} bytes exceeds the limit of {max_bytes} bytes")
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=True)
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
                   allowed: frozenset[str] | None = None) -> Request:
    """Unpack and validate a request envelope and its body.

    Parameters
    ----------
    data : bytes
        One message frame.
    max_bytes : int
        Size limit, bytes.
    allowed : frozenset of str, optional
        Message types this socket accepts.

    Raises
    ------
    ProtocolError
        With the code saying what is wrong.
    """
    obj = _unpack(data, max_bytes)
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
    """Check ``body`` against the schema of ``type_``; raise ProtocolError(INVALID_BODY)."""
    schema = _SCHEMAS[type_]
    for key in body:
        if key not in schema:
            raise ProtocolError(ErrorCode.INVALID_BODY, f"body.{key}: unknown field for {type_}")
    for key, (kind, required) in schema.items():
        if key not in body:
            if required:
                raise ProtocolError(ErrorCode.INVALID_BODY, f"body.{key}: missing required field")
            continue
        val = body[key]
        if kind == NUM:
            ok = isinstance(val, (int, float)) and not isinstance(val, bool)
            name = "number"
        else:
            ok = isinstance(val, kind) and not (kind is int and isinstance(val, bool))
            name = kind.__name__
        if not ok:
            raise ProtocolError(ErrorCode.INVALID_BODY,
                                f"body.{key}: expected {name}, got {type(val).__name__}")


def decode_reply(data: bytes, *, max_bytes: int = MAX_MESSAGE_BYTES) -> Reply:
    """Unpack a reply envelope (client side); raise ProtocolError if malformed."""
    obj = _unpack(data, max_bytes)
    rid = obj.get("id")
    if obj.get("v") != VERSION or not isinstance(rid, int) or not isinstance(obj.get("ok"), bool):
        raise ProtocolError(ErrorCode.BAD_ENVELOPE, "not a reply envelope")
    if obj["ok"]:
        body = obj.get("body", {})
        return Reply(rid, True, body if isinstance(body, dict) else {})
    err = obj.get("error") or {}
    return Reply(rid, False, {}, str(err.get("code", ErrorCode.INTERNAL)), str(err.get("message", "")))


def is_reply(data: bytes) -> bool:
    """Whether a frame is a reply (has ``ok``) rather than a request, without full validation."""
    try:
        obj = msgpack.unpackb(data, raw=False)
    except Exception:  # noqa: BLE001
        return False
    return isinstance(obj, dict) and "ok" in obj


def decode_any(data: bytes, *, max_bytes: int = MAX_MESSAGE_BYTES) -> Request | Reply:
    """Decode a frame that may be a request or a reply (agents receive both)."""
    obj = _unpack(data, max_bytes)
    if "ok" in obj:
        return decode_reply(data, max_bytes=max_bytes)
    return decode_request(data, max_bytes=max_bytes)


def flow_id(job_id: str, transfer_id: str) -> str:
    """The flow id agents and backends use: ``"<job_id>/<transfer_id>"``."""
    return f"{job_id}/{transfer_id}"
