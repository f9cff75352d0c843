"""Fuzzing kept in the suite: seeded mutated messages on both daemon sockets, and hypothesis on the handler."""

from __future__ import annotations

import math
import os
import signal
import socket
import time

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jitsched.bench.bench_faults import (
    HOSTS,
    DaemonProc,
    Fuzzer,
    expected_id,
    free_ports,
    fuzz,
    raw_tcp_garbage,
    torn_connections,
)
from jitsched.client import Client
from jitsched.config import DaemonConfig
from jitsched.daemon import Daemon
from jitsched.dag.model import Cluster
from jitsched.protocol import AGENT_TYPES, ERROR_CODES, JOB_TYPES, MsgType, decode_reply, is_reply
from jitsched.workloads.synth import VGG16_LAYERS, layer_chain_job
from tests.test_daemon_security import ask, raw_dealer

MESSAGES_PER_SOCKET = 2000


@pytest.fixture(scope="module")
def daemon_proc(tmp_path_factory):
    """One daemon process for the socket-level tests, stopped (with its planner child) at the end."""
    d = DaemonProc(tmp_path_factory.mktemp("fuzz"))
    try:
        d.start()
        yield d
    finally:
        d.stop()


def test_fuzzer_is_seeded():
    a, b, c = Fuzzer(7), Fuzzer(7), Fuzzer(8)
    for side in ("job", "agent") * 150:
        ca, cb = a.case(side), b.case(side)
        assert (ca.frames, ca.label, ca.expect_reply, ca.expect_id) == (cb.frames, cb.label, cb.expect_reply,
                                                                       cb.expect_id)
    assert [Fuzzer(7).case("job").frames for _ in range(1)] != [c.case("job").frames]


def test_fuzzer_covers_its_mutations():
    fz = Fuzzer(0, too_large_p=0.0)
    labels = {fz.case(side).label for side in ("job", "agent") * 1000}
    assert labels == {name for name, _, _ in fz.mutations}


def test_fuzz_both_sockets_no_crash_no_hang(daemon_proc):
    d = daemon_proc
    raw_tcp_garbage(d.job_endpoint, 5, seed=0)
    raw_tcp_garbage(d.agent_endpoint, 5, seed=1)
    stats = fuzz(d.job_endpoint, d.agent_endpoint, 2 * MESSAGES_PER_SOCKET, seed=0, alive=d.alive)
    assert stats.sent == 2 * MESSAGES_PER_SOCKET
    assert stats.crashes == 0 and d.alive(), d.log_tail()
    # every request frame owed an answer got one, with its own id; only frames that parse
    # as replies on the agent socket go unanswered (protocol: agents may answer pushes)
    assert stats.hangs == 0, stats.hung
    assert stats.unexpected == 0 and stats.bad_replies == 0, stats.summary()
    assert stats.internal == [], stats.internal[:3]
    assert set(stats.codes) - {"ok"} <= ERROR_CODES
    assert stats.codes["ok"] > 0 and stats.codes["bad_message"] > 0 and stats.codes["invalid_body"] > 0
    # a fuzzing agent may have said its host leaves the cluster (without keys any local peer
    # may act as any host): an agent registering again brings such a host back
    with Client(d.job_endpoint, timeout_s=5.0) as c:
        left = sorted(set(c.status()["hosts"]["left"]) & {"h0", "h1"})
    with raw_dealer(d.agent_endpoint, None) as s:
        for h in left:
            assert ask(s, MsgType.REGISTER, {"host": h}).ok
    # afterwards an ordinary client is served as before
    with Client(d.job_endpoint, timeout_s=5.0) as c:
        jid = c.submit_job(layer_chain_job("after-fuzz", "h0", "h1", layers=VGG16_LAYERS[:2]))
        assert jid == "after-fuzz"
        status = c.status()
        assert status["jobs"]["after-fuzz"]["state"] == "running"
        assert c.cancel_job("after-fuzz")["state"] == "cancelled"


def test_connections_torn_down_mid_message_leave_the_daemon_serving(daemon_proc):
    d = daemon_proc
    made = torn_connections(d.job_endpoint, 150, seed=3) + torn_connections(d.agent_endpoint, 150, seed=4)
    assert made >= 290
    stats = fuzz(d.job_endpoint, d.agent_endpoint, 400, seed=5, alive=d.serving)
    assert stats.crashes == 0 and stats.hangs == 0 and d.serving(), d.log_tail()
    with Client(d.job_endpoint, timeout_s=5.0) as c:
        assert c.status()["loop"]["loop_errors"] == 0


def test_a_wedged_daemon_is_a_counted_failure_not_a_hung_bench(daemon_proc):
    # SIGSTOP: the pid lives on and nothing is read, as with a dead loop thread
    d = daemon_proc
    os.kill(d.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        stats = fuzz(d.job_endpoint, d.agent_endpoint, 20_000, seed=6, alive=lambda: d.serving(0.5),
                     timeout_s=1.0)
        assert stats.crashes == 1 and d.alive() and not d.serving(0.5)
        assert time.monotonic() - t0 < 30.0
    finally:
        os.kill(d.pid, signal.SIGCONT)
    assert d.serving(5.0)


# ---------------------------------------------------------------------- hypothesis on Daemon.handle


@pytest.fixture(scope="module")
def handler():
    """A daemon that is never started: its request handler, without sockets or planner."""
    cfg = DaemonConfig(cluster=Cluster.uniform(len(HOSTS), bps=1e9), job_endpoint="tcp://127.0.0.1:*",
                       agent_endpoint="tcp://127.0.0.1:*", planner_process=False)
    d = Daemon(cfg)
    try:
        yield d
    finally:
        d.ctx.term()


def _check_reply(reply: bytes, data: bytes) -> None:
    rep = decode_reply(reply)
    assert rep.id == expected_id(data)
    assert rep.ok or rep.code in ERROR_CODES
    assert rep.ok or rep.code != "internal", rep.message


scalars = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40) | st.binary(max_size=40))
values = st.recursive(scalars, lambda kids: st.lists(kids, max_size=4)
                      | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=12)
types = st.sampled_from(sorted(JOB_TYPES | AGENT_TYPES | {MsgType.SCHEDULE, "nope"}))
fields = st.sampled_from(["job_id", "transfer", "compute", "host", "seq", "duration_s", "jct_s", "bytes",
                          "t_ns", "applied_seq", "flow_rates_Bps", "total_Bps", "job", "cluster",
                          "verbose", "egress_bps", "backend"])
bodies = st.dictionaries(fields, values | st.sampled_from(["fz0", "h0", "read_w0", "fwd0"]), max_size=5)
envelopes = st.fixed_dictionaries({"v": st.just(1) | values, "id": st.integers(0, 2**64 - 1) | values,
                                   "type": types | values, "body": bodies | values})


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(env=envelopes, agent=st.booleans())
def test_handle_answers_any_envelope(handler, env, agent):
    data = msgpack.packb(env, use_bin_type=True)
    if agent and is_reply(data):
        return  # the socket loop drops these before the handler
    _check_reply(handler.handle(b"hyp", data, AGENT_TYPES if agent else JOB_TYPES), data)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=200), agent=st.booleans())
def test_handle_answers_any_bytes(handler, data, agent):
    if agent and is_reply(data):
        return
    _check_reply(handler.handle(b"hyp", data, AGENT_TYPES if agent else JOB_TYPES), data)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1))
def test_handle_answers_fuzzer_cases(handler, seed):
    # the fuzzer's own cases, straight into the handler (no socket between)
    fz = Fuzzer(seed, too_large_p=0.0)
    for side in ("job", "agent"):
        case = fz.case(side)
        if not case.expect_reply:
            continue
        reply = handler.handle(b"hyp-" + side.encode(), case.frames[-1], JOB_TYPES if side == "job" else AGENT_TYPES)
        _check_reply(reply, case.frames[-1])


def test_expected_id_reads_only_integer_ids():
    pack = msgpack.packb
    assert expected_id(pack({"id": 5})) == 5 and expected_id(pack({"id": True})) == 0
    assert expected_id(pack({"id": 1.0})) == 0 and expected_id(b"\xc1") == 0
    assert expected_id(pack([1])) == 0 and not math.isnan(expected_id(pack({"id": 2**64 - 1})))


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range():
    # a port from the ephemeral range can be handed to another process's outgoing
    # connection or tcp://*:* bind between the pick and the daemon's bind
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    ports = free_ports(8)
    assert len(set(ports)) == 8
    assert all(1024 <= p < low for p in ports), (ports, low)
    for p in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))
