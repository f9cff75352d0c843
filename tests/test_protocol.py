"""Tests of the wire protocol: envelopes, schemas, every rejection's error code."""

from __future__ import annotations

import pickle
import re

import msgpack
import pytest

from jitsched import protocol
from jitsched.errors import ValidationError
from jitsched.protocol import (
    AGENT_TYPES,
    ERROR_CODES,
    JOB_TYPES,
    LOCAL_TYPES,
    MESSAGE_TYPES,
    MESSAGES,
    VERSION,
    ErrorCode,
    MsgType,
    ProtocolError,
    decode_any,
    decode_reply,
    decode_request,
    encode_error,
    encode_ok,
    encode_packed_request,
    encode_request,
    pack_body,
    peek_id,
    unpack_body,
)


def _code(data: bytes, **kw) -> str:
    with pytest.raises(ProtocolError) as ei:
        decode_request(data, **kw)
    return ei.value.code


def test_request_round_trip():
    data = encode_request(MsgType.CANCEL_JOB, {"job_id": "j"}, req_id=7)
    req = decode_request(data)
    assert (req.id, req.type, req.body) == (7, "cancel_job", {"job_id": "j"})
    assert msgpack.unpackb(data) == {"v": VERSION, "id": 7, "type": "cancel_job", "body": {"job_id": "j"}}


@pytest.mark.parametrize("req_id", [1, 127, 128, 65_536, 2**40])
def test_packed_body_request_is_byte_for_byte_the_plain_one(req_id):
    body = {"seq": 9, "slot_s": 0.1, "epoch_ns": 1_700_000_000_000_000_000,
            "flows": [{"flow": "j/t", "dst": "h1", "start_slot": 2, "rates_Bps": [1.5e8, 2e7]}],
            "leftover_Bps": [1.25e8, 0.0], "line_Bps": 1.25e8}
    packed = pack_body(body)
    data = encode_packed_request(MsgType.SCHEDULE, packed, req_id=req_id)
    assert data == encode_request(MsgType.SCHEDULE, body, req_id=req_id)
    assert decode_request(data).body == body == unpack_body(packed)
    a, b = encode_packed_request(MsgType.SCHEDULE, packed), encode_packed_request(MsgType.SCHEDULE, packed)
    assert decode_request(a).id != decode_request(b).id  # fresh ids
    with pytest.raises(ValueError):
        encode_packed_request("fly", packed)


def test_replies_round_trip():
    ok = decode_reply(encode_ok(3, {"job_id": "x"}))
    assert ok.ok and ok.id == 3 and ok.body == {"job_id": "x"}
    err = decode_reply(encode_error(4, ErrorCode.UNKNOWN_JOB, "no job"))
    assert not err.ok and (err.id, err.code, err.message) == (4, "unknown_job", "no job")
    assert msgpack.unpackb(encode_error(4, ErrorCode.UNKNOWN_JOB, "m"))["error"] == {
        "code": "unknown_job", "message": "m"}
    with pytest.raises(ValueError):
        encode_error(1, "no_such_code", "m")


def test_type_sets_partition_the_types():
    assert JOB_TYPES.isdisjoint(AGENT_TYPES)
    assert JOB_TYPES | AGENT_TYPES <= MESSAGE_TYPES
    assert {"submit_job", "transfer_started", "transfer_finished", "compute_finished", "report",
            "job_finished", "cancel_job", "background_started", "background_finished", "attach_job",
            "status", "register_template", "iteration", "renew_lease"} == JOB_TYPES
    assert "schedule" in MESSAGE_TYPES and "schedule" not in AGENT_TYPES  # daemon -> agent only
    assert {"register", "heartbeat", "ack", "get_schedule", "leave"} == AGENT_TYPES
    assert {"register_flow", "unregister_flow", "attach", "detach"} == LOCAL_TYPES


def test_one_declaration_per_message_gives_every_table():
    """MsgType, the schemas and the socket sets all come from MESSAGES, and a message is a str."""
    assert MsgType.SUBMIT_JOB == "submit_job" and MsgType.UNREGISTER_FLOW == "unregister_flow"
    assert {getattr(MsgType, n) for n in vars(MsgType) if n.isupper()} == MESSAGE_TYPES
    assert len(MESSAGES) == len(MESSAGE_TYPES) == 24
    assert protocol._SCHEMAS["ack"] == {"host": (str, True), "seq": (int, True),
                                        "incarnation": (int, False)}
    # the declaration travels as the plain string: packed, pickled and decoded
    assert msgpack.unpackb(encode_request(MsgType.STATUS, {}, 9))["type"] == "status"
    assert type(pickle.loads(pickle.dumps(MsgType.ACK))) is str
    with pytest.raises(ValueError, match="unknown socket"):
        protocol.Message("x", "nowhere", {})


def test_every_request_the_daemon_answers_has_a_handler_and_job_requests_a_client_method():
    """Adding a message type without its SchedulerState (and Client) method fails here."""
    from jitsched.client import Client
    from jitsched.daemon.state import SchedulerState
    for m in MESSAGES:
        if m.socket in (protocol.JOB, protocol.AGENT):
            assert callable(getattr(SchedulerState, m, None)), m
        if m.socket == protocol.JOB:
            assert callable(getattr(Client, m, None)), m


@pytest.mark.parametrize("data, code", [
    (b"\xc1\xff garbage", ErrorCode.BAD_MESSAGE),
    (encode_request(MsgType.STATUS, {}, 1)[:-3], ErrorCode.BAD_MESSAGE),  # truncated
    (msgpack.packb([1, 2, 3]), ErrorCode.BAD_MESSAGE),
    (msgpack.packb({"v": 1, "id": "x", "type": "status", "body": {}}), ErrorCode.BAD_ENVELOPE),
    (msgpack.packb({"v": 1, "id": True, "type": "status", "body": {}}), ErrorCode.BAD_ENVELOPE),
    (msgpack.packb({"v": 1, "id": 1, "type": 5, "body": {}}), ErrorCode.BAD_ENVELOPE),
    (msgpack.packb({"v": 1, "id": 1, "type": "status", "body": []}), ErrorCode.BAD_ENVELOPE),
    (msgpack.packb({"v": 1, "id": 1, "type": "status", "body": {}, "x": 1}), ErrorCode.BAD_ENVELOPE),
    (msgpack.packb({"v": 2, "id": 1, "type": "status", "body": {}}), ErrorCode.UNSUPPORTED_VERSION),
    (msgpack.packb({"v": 1, "id": 1, "type": "launch_missiles", "body": {}}), ErrorCode.UNKNOWN_TYPE),
    (msgpack.packb({"v": 1, "id": 1, "type": "submit_job", "body": {}}), ErrorCode.INVALID_BODY),
    (msgpack.packb({"v": 1, "id": 1, "type": "submit_job", "body": {"job": []}}), ErrorCode.INVALID_BODY),
    (msgpack.packb({"v": 1, "id": 1, "type": "ack", "body": {"host": "h", "seq": True}}),
     ErrorCode.INVALID_BODY),
    (msgpack.packb({"v": 1, "id": 1, "type": "compute_finished",
                    "body": {"job_id": "j", "compute": "c", "duration_s": "1"}}), ErrorCode.INVALID_BODY),
    (msgpack.packb({"v": 1, "id": 1, "type": "status", "body": {"bogus": 1}}), ErrorCode.INVALID_BODY),
])
def test_rejections_have_the_right_code(data, code):
    assert _code(data) == code
    assert code in ERROR_CODES


def test_size_limit_and_allowed_types():
    big = encode_request(MsgType.SUBMIT_JOB, {"job": {"id": "x" * 5000}}, 1)
    assert _code(big, max_bytes=1000) == ErrorCode.TOO_LARGE
    assert decode_request(big, max_bytes=len(big)).type == "submit_job"
    # an agent-side type on the job socket is unknown there
    assert _code(encode_request(MsgType.REGISTER, {"host": "h"}, 1), allowed=JOB_TYPES) == ErrorCode.UNKNOWN_TYPE


def test_peek_id_and_decode_any():
    assert peek_id(msgpack.packb({"v": 9, "id": 42})) == 42
    assert peek_id(b"\xc1") == 0
    assert peek_id(msgpack.packb({"id": True})) == 0
    assert decode_any(encode_ok(5)).ok
    assert decode_any(encode_request(MsgType.STATUS, {}, 6)).type == "status"


def test_protocol_errors_are_jitsched_errors():
    from jitsched import client, errors, protocol
    from jitsched.daemon.server import error_code

    assert protocol.ProtocolError is errors.ProtocolError
    assert protocol.RemoteError is client.RemoteError is errors.RemoteError
    exc = ProtocolError(ErrorCode.TOO_LARGE, "message too large")
    assert isinstance(exc, errors.JitschedError)
    assert (exc.code, exc.message, str(exc)) == ("too_large", "message too large", "message too large")
    assert error_code(exc) == ErrorCode.TOO_LARGE  # its own code, not the base class's
    rem = protocol.RemoteError(ErrorCode.UNKNOWN_JOB, "no job 'j'")
    assert isinstance(rem, errors.JitschedError)
    assert (rem.code, rem.message, str(rem)) == ("unknown_job", "no job 'j'", "unknown_job: no job 'j'")


def test_report_events_stand_for_the_single_messages():
    body = {"job_id": "j", "events": [["started", "t", None], ["finished", "t", 10],
                                      ["finished", "u", None], ["compute", "c", 0.5]]}
    assert protocol.report_bodies(body) == [
        ("transfer_started", {"job_id": "j", "transfer": "t"}),
        ("transfer_finished", {"job_id": "j", "transfer": "t", "bytes": 10}),
        ("transfer_finished", {"job_id": "j", "transfer": "u"}),
        ("compute_finished", {"job_id": "j", "compute": "c", "duration_s": 0.5})]
    for bad, where in [(["finished", 7, None], "events[0]: body.transfer: expected str"),
                       (["compute", "c", True], "events[0]: body.duration_s: expected number"),
                       ({"kind": "started"}, "events[0]: expected [kind, node, value]"),
                       ([["started"], "t", None], "events[0]: unknown kind")]:
        with pytest.raises(ProtocolError, match=re.escape(where)) as ei:
            protocol.report_bodies({"job_id": "j", "events": [bad]})
        assert ei.value.code == ErrorCode.INVALID_BODY
    n = protocol.MAX_REPORT_EVENTS + 1
    with pytest.raises(ProtocolError, match=f"{n} events"):
        protocol.report_bodies({"job_id": "j", "events": [["started", "t", None]] * n})


def test_flow_entries_follow_the_declared_schema_and_a_malformed_one_is_refused_naming_the_field():
    from jitsched.protocol import IN_FLOW_ENTRY, OUT_FLOW_ENTRY, flow_entry, validate_body

    out = flow_entry("j/t", "h1", 2, [1.0, 2.5], 0)
    into = flow_entry("j/t", "h0", 2, [], inbound=True)
    assert out == {"flow": "j/t", "dst": "h1", "start_slot": 2, "rates_Bps": [1.0, 2.5], "prio": 0}
    assert into == {"flow": "j/t", "src": "h0", "start_slot": 2, "rates_Bps": []}
    assert set(out) == set(OUT_FLOW_ENTRY) and set(into) <= set(IN_FLOW_ENTRY)
    body = {"seq": 1, "slot_s": 0.1, "epoch_ns": 0, "flows": [out], "leftover_Bps": [], "in_flows": [into],
            "in_leftover_Bps": []}
    validate_body(MsgType.SCHEDULE, body)
    assert decode_any(encode_request(MsgType.SCHEDULE, body)).body == body
    for flows_key, entry, where in [
        ("flows", out | {"start_slot": "2"}, r"body\.flows\[0\]\.start_slot: expected int, got str"),
        ("flows", out | {"rates_Bps": [1.0, "x"]}, r"body\.flows\[0\]\.rates_Bps: expected list of numbers"),
        ("flows", out | {"prio": True}, r"body\.flows\[0\]\.prio: expected int, got bool"),
        ("flows", {k: v for k, v in out.items() if k != "flow"}, r"body\.flows\[0\]\.flow: missing required"),
        ("flows", into, r"body\.flows\[0\]\.src: unknown field for schedule flows"),
        ("in_flows", out, r"body\.in_flows\[0\]\.dst: unknown field for schedule in_flows"),
        ("in_flows", [into], r"body\.in_flows\[0\]: expected dict, got list"),
    ]:
        bad = body | {flows_key: [entry]}
        with pytest.raises(ProtocolError, match=where) as ei:
            validate_body(MsgType.SCHEDULE, bad)
        assert ei.value.code == ErrorCode.INVALID_BODY
        with pytest.raises(ProtocolError, match=where):
            decode_any(encode_request(MsgType.SCHEDULE, bad))


@pytest.mark.parametrize("endpoint, why", [
    ("tcp://127.0.0.1:5555", None), ("tcp://*:5555", None), ("tcp://127.0.0.1:*", None),
    ("tcp://[::1]:5555", None), ("tcp://eth0;198.18.0.1:5555", None), ("ipc:///run/j.sock", None),
    ("inproc://j", None),
    ("tcp://127.0.0.1:65536", "within 0-65535, got '65536'"), ("tcp://127.0.0.1:-5", "got '-5'"),
    ("tcp://127.0.0.1:x", "got 'x'"), ("tcp://127.0.0.1", "needs HOST:PORT"), ("tcp://:5555", "needs HOST:PORT"),
    ("garbage", "not an endpoint"), ("http://h:1", "not an endpoint"), ("tcp://", "not an endpoint"),
])
def test_endpoint_problem_names_what_zeromq_would_misread(endpoint, why):
    from jitsched.protocol import endpoint_problem
    got = endpoint_problem(endpoint)
    assert got is None if why is None else why in got


def test_a_client_refuses_a_port_zeromq_would_wrap():
    # ZeroMQ connects tcp://host:70000 to port 70000 - 65536 without a word
    from jitsched.client import Client
    with pytest.raises(ValidationError, match="'tcp://127.0.0.1:70000': the port must be"):
        Client("tcp://127.0.0.1:5555,tcp://127.0.0.1:70000")


@pytest.mark.parametrize("error", ["boom", ["a"], 7])
def test_an_error_reply_whose_error_is_no_map_is_a_protocol_error(error):
    data = msgpack.packb({"v": VERSION, "id": 3, "ok": False, "error": error})
    for decode in (decode_reply, decode_any):
        with pytest.raises(ProtocolError) as ei:
            decode(data)
        assert ei.value.code == ErrorCode.BAD_ENVELOPE


def test_an_error_message_is_cut_to_max_error_chars():
    # a message echoing a client's input (here a 1 MB message type) stays small
    rep = decode_reply(encode_error(7, ErrorCode.UNKNOWN_TYPE, "type: unknown message type " + "x" * 1_000_000))
    assert len(rep.message) < protocol.MAX_ERROR_CHARS + 40
    assert rep.message.endswith("... (1000027 characters)")
    short = "type: unknown message type 'nope' here"
    assert decode_reply(encode_error(7, ErrorCode.UNKNOWN_TYPE, short)).message == short
