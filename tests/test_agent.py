"""Tests of the host agent: slot rates from a schedule, flow registration, the pacing backend on loopback."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jitsched import tickets
from jitsched.agents.agent import (
    TCP_RTO_MAX_MS,
    TCP_RTO_MIN_US,
    Agent,
    load_backend,
)
from jitsched.agents.backends.pacing import (
    PacingBackend,
    get_pacing_rate,
    set_pacing_rate,
)
from jitsched.agents.options import RTO_MAX_MS, RTO_MIN_MS, AgentOptions
from jitsched.daemon.server import wait_until
from jitsched.localreg import attach, register_flow, unregister_flow
from jitsched.protocol import RemoteError
from tests.flowtickets import flow_ticket


def _schedule(epoch_ns: int) -> dict:
    return {"seq": 3, "slot_s": 0.1, "epoch_ns": epoch_ns, "line_Bps": 1000.0,
            "leftover_Bps": [900.0, 500.0, 1000.0],
            "flows": [{"flow": "j/a", "dst": "h1", "start_slot": 0, "rates_Bps": [100.0, 500.0]},
                      {"flow": "j/b", "dst": "h2", "start_slot": 2, "rates_Bps": [0.0]}]}


def test_slot_rates_follow_the_plan():
    a = Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="record"))
    a.backend = load_backend("record", 1000.0)
    a.line_rate_Bps = 1000.0
    epoch = 10**18
    a._install(_schedule(epoch))
    k, flows, left = a.slot_rates(epoch + 50_000_000)  # inside slot 0
    assert k == 0 and left == 900.0
    assert {f.flow_id: f.rate_Bps for f in flows} == {"j/a": 100.0, "j/b": 0.0}  # b held until slot 2
    k, flows, left = a.slot_rates(epoch + 150_000_000)
    assert k == 1 and left == 500.0 and flows[0].rate_Bps == 500.0
    k, flows, left = a.slot_rates(epoch + 250_000_000)
    assert k == 2 and [f.flow_id for f in flows] == ["j/b"]  # a's plan is over: it shares the leftover
    k, flows, left = a.slot_rates(epoch + 10 * 100_000_000)
    assert flows == [] and left == 1000.0  # past the plan: the whole line is left over


def test_caps_into_reserved_hosts_follow_their_slots_and_reach_the_backend():
    a = Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="record"))
    a.backend = load_backend("record", 1000.0)
    a.line_rate_Bps = 1000.0
    now = time.time_ns()
    # h1's ingress is held for 0.2 s from 0.5 s ago (two slots), h2's for a minute from now
    caps = [{"host": "h1", "addr": "198.18.0.2", "epoch_ns": now - 500_000_000, "slot_s": 0.25,
             "left_Bps": [300.0, 50.0]},
            {"host": "h2", "addr": "198.18.0.3", "epoch_ns": now + 60 * 10**9, "slot_s": 0.1, "left_Bps": [0.0]}]
    a._install(_schedule(now) | {"caps_into": caps})
    assert a.dst_caps(now - 400_000_000) == {"198.18.0.2": 300.0}
    assert a.dst_caps(now - 100_000_000) == {"198.18.0.2": 50.0}
    assert a.dst_caps(now + 60 * 10**9 + 1) == {"198.18.0.3": 0.0}
    assert a.dst_caps(now + 10**9) == {}
    # the agent's own tick: the window of h1 is over, h2's not begun, nothing capped
    a._tick(force=True)
    assert a.backend.caps == {} and a.current_caps == {}
    a._install(_schedule(now) | {"seq": 4, "caps_into": [dict(caps[0], epoch_ns=now - 10**8, slot_s=30.0)]})
    a._tick()
    assert a.backend.caps == {"198.18.0.2": 300.0} and not a.caps_unenforced


def test_a_held_floor_reaches_both_backends_from_its_start():
    a = Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="record"))
    a.backend = load_backend("record", 1000.0)
    a.in_backend = load_backend("record", 1000.0)
    a.line_rate_Bps = 1000.0
    now = time.time_ns()
    later = [{"epoch_ns": now + 60 * 10**9, "share": 0.01}]
    a._install(_schedule(now) | {"floor_from": later})
    assert a.held_floor(now) is None and a.held_floor(now + 60 * 10**9) == 0.01
    a._tick(force=True)
    assert a.backend.floor is None and a.in_backend.floor is None and a.current_floor is None
    # begun: the latest entry begun holds
    begun = [{"epoch_ns": now - 2 * 10**8, "share": 0.02}, {"epoch_ns": now - 10**8, "share": 0.0}]
    a._install(_schedule(now) | {"seq": 4, "floor_from": begun + later})
    assert a.held_floor(now - 15 * 10**7) == 0.02 and a.held_floor(now) == 0.0
    a._tick()
    assert a.backend.floor == 0.0 and a.in_backend.floor == 0.0 and a.current_floor == 0.0
    # a body without it: the agents' own floor again
    a._install(_schedule(now) | {"seq": 5})
    a._tick()
    assert a.backend.floor is None and a.in_backend.floor is None and a.current_floor is None


def test_caps_a_backend_cannot_hold_are_reported():
    from jitsched.agents.backends.record import RecordBackend

    class Blind(RecordBackend):
        caps_destinations = False

    a = Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="record"))
    a.backend = Blind(1000.0)
    a.line_rate_Bps = 1000.0
    now = time.time_ns()
    a._install(_schedule(now) | {"caps_into": [{"host": "h1", "addr": "198.18.0.2", "epoch_ns": now - 10**8,
                                                "slot_s": 10.0, "left_Bps": [0.0]}]})
    a._tick()
    assert a.caps_unenforced and a.current_caps == {"198.18.0.2": 0.0}


def test_schedules_are_idempotent_by_seq():
    a = Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="record"))
    a._install(_schedule(1))
    held = a.schedule
    a._install(_schedule(2) | {"seq": 2})  # older: ignored
    a._install(_schedule(3) | {"seq": 3})  # same seq: ignored
    assert a.schedule is held and a.seq == 3
    # only the older one counts as stale: the daemon's status shows it (its heartbeat's counts)
    assert a.stale == 1 and a.counts() == {"fenced": 0, "stale": 1, "dropped": 0, "bad_messages": 0, "daemons": 0,
                                       "tickets_refused": 0}


def _sink():
    srv = socket.create_server(("127.0.0.1", 0))
    got = [0]
    marks: list[tuple[float, int]] = []

    def read():
        try:
            c, _ = srv.accept()
        except OSError:  # the test closed the server without connecting (it failed early)
            return
        with c:
            while True:
                b = c.recv(1 << 20)
                if not b:
                    return
                got[0] += len(b)
                marks.append((time.perf_counter(), got[0]))

    t = threading.Thread(target=read, daemon=True)
    t.start()
    return srv, t, marks


@pytest.mark.parametrize("rate_Bps", [4e6, 20e6])
def test_pacing_backend_reaches_target_rate(rate_Bps):
    srv, t, marks = _sink()
    s = socket.create_connection(srv.getsockname())
    b = PacingBackend(125e6)
    try:
        b.attach("j/x", s)
        from jitsched.agents.backends.base import FlowRate

        b.apply([FlowRate("j/x", rate_Bps)], 0.0)
        assert get_pacing_rate(s) == int(rate_Bps)
        buf = b"\0" * 65536
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 1.5:
            s.send(buf)
        s.shutdown(socket.SHUT_WR)
        t.join(5)
        # skip the first 0.25 s (the initial congestion window leaves unpaced), then one second
        start = next(m for m in marks if m[0] >= t0 + 0.25)
        end = next(m for m in marks if m[0] >= start[0] + 1.0)
        rate = (end[1] - start[1]) / (end[0] - start[0])
        assert rate == pytest.approx(rate_Bps, rel=0.10)
    finally:
        b.close()
        s.close()
        srv.close()


def test_pacing_value_is_64_bit():
    s = socket.socket()
    try:
        set_pacing_rate(s, 2**33)  # > 32 bits: ~68 Gbit/s
        assert get_pacing_rate(s) == 2**33
        set_pacing_rate(s, None)
        assert get_pacing_rate(s) == 2**64 - 1
    finally:
        s.close()


def test_unscheduled_sockets_share_the_leftover():
    socks = [socket.socket() for _ in range(3)]
    b = PacingBackend(1e6, min_rate_Bps=10.0)
    try:
        for i, s in enumerate(socks):
            b.attach(f"f{i}", s)
        from jitsched.agents.backends.base import FlowRate

        b.apply([FlowRate("f0", 300_000.0)], 600_000.0)
        assert [get_pacing_rate(s) for s in socks] == [300_000, 300_000, 300_000]
        b.apply([FlowRate("f0", 0.0)], 100_000.0)  # held flows keep a floor, never 0
        assert [get_pacing_rate(s) for s in socks] == [10, 50_000, 50_000]
    finally:
        b.close()
        for s in socks:
            s.close()


def test_flow_registration_hands_the_socket_to_the_agent():
    a = Agent("h9", "tcp://127.0.0.1:1", AgentOptions(backend="record"),
              local_namespace=f"reg{time.monotonic_ns()}")
    a.start()
    srv, t, _ = _sink()
    s = socket.create_connection(srv.getsockname())
    try:
        ctrl = register_flow(a.local_name, "j/t", s, ticket=flow_ticket(a, "j/t"))
        assert ctrl is not None
        assert wait_until(lambda: "j/t" in a.flows, 5.0)
        lf = a.flows["j/t"]
        assert (lf.src_port, lf.dst_port) == (s.getsockname()[1], srv.getsockname()[1])
        unregister_flow(ctrl, "j/t")
        assert wait_until(lambda: "j/t" not in a.flows, 5.0)
        assert register_flow("\0jitsched-no-such-agent", "j/u", s) is None
    finally:
        s.close()
        srv.close()
        a.stop()


def test_inbound_flows_and_ingress_leftover_come_from_the_in_fields():
    a = Agent("h1", "tcp://127.0.0.1:1", AgentOptions(backend="record"))
    a.backend, a.in_backend = load_backend("record", 1000.0), load_backend("record", 800.0)
    a.line_rate_Bps, a.in_line_Bps = 1000.0, 800.0
    epoch = 10**18
    body = _schedule(epoch) | {
        "in_leftover_Bps": [700.0, 300.0], "in_line_Bps": 800.0,
        "in_flows": [{"flow": "k/x", "src": "h0", "start_slot": 1, "rates_Bps": [500.0]}]}
    a._install(body)
    k, flows, left = a.slot_rates(epoch + 50_000_000, inbound=True)
    assert k == 0 and left == 700.0 and [(f.flow_id, f.rate_Bps) for f in flows] == [("k/x", 0.0)]
    k, flows, left = a.slot_rates(epoch + 150_000_000, inbound=True)
    assert left == 300.0 and [(f.flow_id, f.rate_Bps) for f in flows] == [("k/x", 500.0)]
    k, flows, left = a.slot_rates(epoch + 250_000_000, inbound=True)
    assert flows == [] and left == 800.0  # past the ingress plan: the shaped rate is left over
    # the egress side is untouched by the inbound fields
    assert {f.flow_id for f in a.slot_rates(epoch + 50_000_000)[1]} == {"j/a", "j/b"}
    # a schedule from a daemon that sends no ingress fields: nothing inbound, all left over
    a._install(_schedule(epoch) | {"seq": 4})
    assert a.slot_rates(epoch, inbound=True)[1:] == ([], 800.0)


def test_inbound_registration_names_the_remote_end_as_source():
    a = Agent("h8", "tcp://127.0.0.1:1", AgentOptions(backend="record"),
              local_namespace=f"in{time.monotonic_ns()}")
    a.start()
    srv = socket.create_server(("127.0.0.1", 0))
    s = socket.create_connection(srv.getsockname())
    conn, _ = srv.accept()
    try:
        ctrl = register_flow(a.local_name, "j/in", conn, ticket=flow_ticket(a, "j/in"), direction="in")
        assert ctrl is not None
        assert wait_until(lambda: "j/in" in a.in_flows, 5.0) and "j/in" not in a.flows
        lf = a.in_flows["j/in"]
        # packets of the flow go from the connecting side (s) to the accepted one
        assert (lf.src_port, lf.dst_port) == (s.getsockname()[1], srv.getsockname()[1])
        unregister_flow(ctrl, "j/in", direction="in")
        assert wait_until(lambda: "j/in" not in a.in_flows, 5.0)
        bad = register_flow(a.local_name, "j/odd", conn, ticket=flow_ticket(a, "j/odd"), direction="sideways")
        assert bad is None and "j/odd" not in a.flows and "j/odd" not in a.in_flows
    finally:
        s.close()
        conn.close()
        srv.close()
        a.stop()


def test_a_registration_reapplies_only_its_own_direction_within_a_slot():
    a = Agent("h1", "tcp://127.0.0.1:1", AgentOptions(backend="record"))
    a.backend, a.in_backend = load_backend("record", 1000.0), load_backend("record", 800.0)
    a.line_rate_Bps, a.in_line_Bps = 1000.0, 800.0
    a._install(_schedule(time.time_ns()) | {"slot_s": 60.0})  # one long slot: no boundary mid-test
    a._tick()
    assert (len(a.backend.snapshot()), len(a.in_backend.snapshot())) == (1, 1)
    a._tick(force=True, only="in")  # what an inbound registration does
    assert (len(a.backend.snapshot()), len(a.in_backend.snapshot())) == (1, 2)
    a._tick(force=True, only="out")
    assert (len(a.backend.snapshot()), len(a.in_backend.snapshot())) == (2, 2)
    a.current_slot = -5  # a new slot: both directions change, whatever asked
    a._tick(force=True, only="out")
    assert (len(a.backend.snapshot()), len(a.in_backend.snapshot())) == (3, 3)


def _reference_slot_rates(s: dict, k: int, local: dict) -> tuple[list, bool]:
    # slot_rates' walk for a backend that takes the whole schedule, written plainly
    from jitsched.agents.agent import dense_levels
    from jitsched.agents.backends.base import FlowRate

    out = []
    for f in s["flows"]:
        j, rates, prio = k - f["start_slot"], f["rates_Bps"], f.get("prio")
        if j >= len(rates) and prio is None:
            continue
        rate = float(rates[j]) if 0 <= j < len(rates) else 0.0
        lf = local.get(f["flow"])
        out.append(FlowRate(f["flow"], rate, prio=prio) if lf is None else
                   FlowRate(f["flow"], rate, lf.src_addr, lf.src_port, lf.dst_addr, lf.dst_port, prio=prio))
    ranked = any(f.get("prio") is not None for f in s["flows"])
    return (dense_levels(out) if ranked else out), ranked


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.lists(st.sampled_from([0.0, 50.0, 200.0]), max_size=4),
                          st.one_of(st.none(), st.integers(0, 12)), st.booleans()), max_size=25),
       st.lists(st.integers(-1, 6), min_size=1, max_size=6))
def test_the_cached_slot_walk_gives_the_plain_walks_rates(entries, slots):
    # random schedules (ranked or not, some flows registered here), slots visited in any
    # order and again: the cached walk's rates, levels and endpoints are the plain walk's
    from jitsched.agents.agent import LocalFlow
    from jitsched.agents.options import AgentOptions

    a = Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="record"))
    a.backend = load_backend("record", 1000.0)
    a.line_rate_Bps = 1000.0
    epoch = 10**18
    flows = [{"flow": f"j/t{i}", "dst": "h1", "start_slot": st_, "rates_Bps": r}
             | ({} if p is None else {"prio": p}) for i, (st_, r, p, _) in enumerate(entries)]
    s = _schedule(epoch) | {"flows": flows, "leftover_Bps": [700.0] * 8}
    a._install(s)
    for i, (_, _, _, reg) in enumerate(entries):
        if reg:
            a.flows[f"j/t{i}"] = LocalFlow(f"j/t{i}", None, "198.18.0.1", 40000 + i, "198.18.0.2", 5201, 0, 0.0)
    for k in slots:
        got_k, got, left = a.slot_rates(epoch + k * 100_000_000 + 50_000_000)
        want, ranked = _reference_slot_rates(a.schedule, k, a.flows)
        assert got_k == k and got == want
        assert left == (0.0 if ranked else (700.0 if 0 <= k < 8 else 1000.0))


def test_registrations_within_a_slot_walk_the_schedule_once():
    # the demo's Inception-v3 registers 851 transfers against an 851-flow schedule: each
    # registration re-applies the slot, and re-walking the schedule for it made the job 5x slower
    from jitsched.agents.agent import LocalFlow
    from jitsched.agents.options import AgentOptions

    a = Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="record"))
    a.backend = load_backend("record", 1000.0)
    a.line_rate_Bps = 1000.0
    flows = [{"flow": f"j/t{i}", "dst": "h1", "start_slot": 0, "rates_Bps": [], "prio": i} for i in range(50)]
    a._install(_schedule(time.time_ns()) | {"slot_s": 60.0, "flows": flows})
    a._tick()
    for i in range(10):
        a.flows[f"j/t{i}"] = LocalFlow(f"j/t{i}", None, "198.18.0.1", 40000 + i, "198.18.0.2", 5201, 0, 0.0)
        a._tick(force=True, only="out")  # what a registration does
    assert a.schedule_walks == 1 and len(a.backend.snapshot()) == 11
    last = a.backend.snapshot()[-1][1]
    assert len(last) == 50
    # the registered flows carry their endpoints, levels as dense_levels gives them
    _, rates, _ = a.slot_rates()
    assert rates[3].src_port == 40003 and rates[3].prio == 3 and rates[20].src_port == 0 and rates[20].prio == 6
    a.current_slot = -5
    a._install(dict(a.schedule, seq=a.schedule["seq"] + 1))  # a new schedule: walked anew
    a._tick(force=True)
    assert a.schedule_walks == 2


def test_dense_levels_map_the_carried_flows_ranks_to_the_backends_levels():
    from jitsched.agents.agent import dense_levels
    from jitsched.agents.backends.base import FLOW_LEVELS, FlowRate

    # ranks 40, 3, 17 (twice) of a host's transfers are the flows it carries now:
    # levels 2, 0, 1, 1; an unranked flow keeps None; past the last level the rest share it
    flows = [FlowRate("a", 0.0, prio=40), FlowRate("b", 0.0, prio=3), FlowRate("u", 5.0),
             FlowRate("c", 0.0, prio=17), FlowRate("d", 0.0, prio=17)]
    assert [f.prio for f in dense_levels(flows)] == [2, 0, None, 1, 1]
    many = [FlowRate(f"f{i}", 0.0, prio=100 - i) for i in range(FLOW_LEVELS + 2)]
    assert [f.prio for f in dense_levels(many)] == [FLOW_LEVELS - 1] * 3 + list(range(FLOW_LEVELS - 1))[::-1]


def test_pacing_backend_does_not_cap_a_ranked_flow():
    # a ranked flow's rate is a floor (0 past its plan); sockets have no priorities,
    # so the pacing backend leaves it at the line rate instead of its 0 floor
    from jitsched.agents.backends.base import FlowRate

    srv, t, _ = _sink()
    s = socket.create_connection(srv.getsockname())
    b = PacingBackend(125e6)
    try:
        b.attach("j/x", s)
        b.apply([FlowRate("j/x", 0.0, prio=3)], 0.0)
        assert get_pacing_rate(s) == int(125e6)
        b.apply([FlowRate("j/x", 2e6)], 0.0)  # unranked: its rate is its cap
        assert get_pacing_rate(s) == int(2e6)
    finally:
        b.close()
        s.close()
        srv.close()


class _FakeDaemon:
    """A ROUTER on loopback that plays the daemon's agent socket, one message at a time."""

    def __init__(self) -> None:
        import zmq

        self.zmq = zmq
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind("tcp://127.0.0.1:*")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)

    def recv(self, type_: str, timeout_s: float = 5.0):
        """The next request of ``type_`` (others are dropped): (identity, request, arrival)."""
        from jitsched.protocol import decode_request

        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.sock.poll(50):
                ident, data = self.sock.recv_multipart()
                req = decode_request(data)
                if req.type == type_:
                    return ident, req, time.monotonic()
        raise AssertionError(f"no {type_} within {timeout_s} s")

    def reply(self, ident: bytes, req, body: dict | None = None, error: str = "") -> None:
        from jitsched.protocol import encode_error, encode_ok

        data = encode_error(req.id, error, "x") if error else encode_ok(req.id, body or {})
        self.sock.send_multipart([ident, data])

    def push(self, ident: bytes, body: dict) -> None:
        from jitsched.protocol import MsgType, encode_request

        self.sock.send_multipart([ident, encode_request(MsgType.SCHEDULE, body)])

    def close(self) -> None:
        self.sock.close(0)
        self.ctx.term()


def _register_reply(incarnation: int) -> dict:
    return {"host": "h0", "seq": 0, "heartbeat_s": 0.1, "heartbeat_timeout_s": 0.6, "line_Bps": 1000.0,
            "ingress_Bps": 1000.0, "t0_wall_ns": 0, "incarnation": incarnation}


@pytest.mark.alone
def test_agent_follows_a_restarted_daemon():
    fake = _FakeDaemon()
    a = Agent("h0", fake.endpoint, AgentOptions(backend="record"), local_namespace=f"fake{id(fake)}").start()
    try:
        ident, req, _ = fake.recv("register")
        fake.reply(ident, req, _register_reply(111))
        assert wait_until(a.registered.is_set, 5.0)
        fake.push(ident, _schedule(time.time_ns()) | {"seq": 4, "incarnation": 111})
        _, ack, _ = fake.recv("ack")
        assert ack.body == {"host": "h0", "seq": 4, "incarnation": 111} and a.seq == 4
        # an older body of the same daemon is not installed, so not acked
        fake.push(ident, _schedule(time.time_ns()) | {"seq": 2, "incarnation": 111})
        fake.push(ident, _schedule(time.time_ns()) | {"seq": 4, "incarnation": 111})
        _, ack, _ = fake.recv("ack")
        assert ack.body["seq"] == 4 and a.seq == 4
        # the daemon restarts: it answers a heartbeat with not_registered, and the agent
        # registers again at once (its silence timer never runs out: the replies reset it)
        ident, hb, _ = fake.recv("heartbeat")
        assert "counts" not in hb.body  # this daemon's register reply did not say it takes them
        t_err = time.monotonic()
        fake.reply(ident, hb, error="not_registered")
        ident, req, t_reg = fake.recv("register", timeout_s=1.0)
        assert t_reg - t_err < 0.5
        assert a.schedule is not None  # the old plan holds until the new daemon answers
        fake.reply(ident, req, _register_reply(222) | {"takes": ["counts"]})
        assert wait_until(lambda: a.incarnation == 222 and a.schedule is None and a.seq == 0, 5.0)
        fake.push(ident, _schedule(time.time_ns()) | {"seq": 1, "incarnation": 222})
        _, ack, _ = fake.recv("ack")
        assert ack.body == {"host": "h0", "seq": 1, "incarnation": 222}
        assert a.seq == 1 and a.schedule["incarnation"] == 222 and a.daemons == 2
        # this one takes them: the older body of the first daemon counted
        _, hb, _ = fake.recv("heartbeat")
        assert hb.body["counts"] == {"fenced": 0, "stale": 1, "dropped": 0, "bad_messages": 0, "daemons": 2,
                                     "tickets_refused": 0}
        # the daemon goes silent: past its heartbeat timeout the plan is no longer enforced
        assert wait_until(lambda: a.schedule is None, 5.0) and a.dropped == 1
        _, rates, left = a.slot_rates()
        assert rates == [] and left == 1000.0
    finally:
        a.stop()
        fake.close()


def test_an_agent_whose_backend_cannot_be_installed_stops_and_says_why(monkeypatch):
    # the backend is built when the daemon's reply gives the line rate; if that
    # fails (no CAP_NET_ADMIN, no such device) the loop ends, its cleanup runs,
    # and the failure is kept for the CLI, which exits non-zero on it
    import jitsched.agents.agent as agent_mod

    def broken(name, line, **options):
        raise OSError("tc: Operation not permitted")

    monkeypatch.setattr(agent_mod, "load_backend", broken)
    fake = _FakeDaemon()
    a = Agent("h0", fake.endpoint, AgentOptions(backend="record"), local_namespace=f"fail{id(fake)}").start()
    try:
        assert a.running and a.failure is None
        ident, req, _ = fake.recv("register")
        fake.reply(ident, req, _register_reply(1))
        assert wait_until(lambda: not a.running, 5.0)
        assert isinstance(a.failure, OSError) and "not permitted" in str(a.failure)
    finally:
        a.stop()
        fake.close()


def _kernel_caps_rto() -> bool:
    s = socket.socket()
    try:
        s.setsockopt(socket.IPPROTO_TCP, TCP_RTO_MAX_MS, 1000)
        return True
    except OSError:
        return False
    finally:
        s.close()


@pytest.mark.parametrize("rto_max_ms", [RTO_MAX_MS, 2500, None])
def test_registration_caps_the_retransmission_timeout_of_outbound_sockets_only(rto_max_ms):
    """A held flow retries within rto_max_ms of its promotion: outbound sockets get the cap, inbound keep theirs."""
    opts = AgentOptions(backend="record", rto_max_ms=rto_max_ms, rto_min_ms=RTO_MIN_MS if rto_max_ms else None)
    a = Agent("h7", "tcp://127.0.0.1:1", opts,
              local_namespace=f"rto{time.monotonic_ns()}")
    a.start()
    srv = socket.create_server(("127.0.0.1", 0))
    s = socket.create_connection(srv.getsockname())
    conn, _ = srv.accept()
    supported = _kernel_caps_rto()
    try:
        default = conn.getsockopt(socket.IPPROTO_TCP, TCP_RTO_MAX_MS) if supported else None
        assert register_flow(a.local_name, "j/out", s, ticket=flow_ticket(a, "j/out")) is not None
        assert register_flow(a.local_name, "j/in", conn, ticket=flow_ticket(a, "j/in"), direction="in") is not None
        assert wait_until(lambda: "j/out" in a.flows and "j/in" in a.in_flows, 5.0)
        if not rto_max_ms:
            assert (a.rto_capped, a.rto_cap_failed) == (0, 0)
        elif supported:
            assert s.getsockopt(socket.IPPROTO_TCP, TCP_RTO_MAX_MS) == rto_max_ms
            # the floor: 10 ms, rounded up to the kernel's tick (4 ms at HZ=250, 1 ms at 1000)
            assert 10_000 <= s.getsockopt(socket.IPPROTO_TCP, TCP_RTO_MIN_US) <= 12_000
            assert conn.getsockopt(socket.IPPROTO_TCP, TCP_RTO_MIN_US) >= 200_000  # inbound: kernel's
            assert (a.rto_capped, a.rto_cap_failed) == (1, 0)
        else:  # an older kernel: counted, the socket as it was
            assert (a.rto_capped, a.rto_cap_failed) == (0, 1)
        if supported:
            assert default == 120_000  # the kernel's, untouched on the inbound socket
            assert conn.getsockopt(socket.IPPROTO_TCP, TCP_RTO_MAX_MS) == default
            if not rto_max_ms:
                assert s.getsockopt(socket.IPPROTO_TCP, TCP_RTO_MAX_MS) == default
                assert s.getsockopt(socket.IPPROTO_TCP, TCP_RTO_MIN_US) >= 200_000
    finally:
        s.close()
        conn.close()
        srv.close()
        a.stop()


def test_agent_registers_its_backend_and_whether_it_orders_the_ingress():
    # what the daemon's status shows of the host's enforcement; nothing is installed
    # before the register reply, which this fake daemon never sends
    for opts, expected in ((AgentOptions(backend="record"), "record"),
                           (AgentOptions(backend="tc", dev="eth9", ingress=False), "tc"),
                           (AgentOptions(backend="tc", dev="eth9"), "tc+tc-ingress")):
        fake = _FakeDaemon()
        a = Agent("h0", fake.endpoint, opts, local_namespace=f"fake{id(fake)}").start()
        try:
            _, req, _ = fake.recv("register")
            assert req.body["backend"] == expected
        finally:
            a.stop()
            fake.close()


@pytest.mark.alone
def test_an_agent_asks_for_the_body_its_heartbeat_replies_say_it_lacks():
    # the daemon stops re-sending a body its agent never acked; a heartbeat reply names the
    # host's seq: newer than the one held on two replies in a row, the agent asks for it,
    # installs it and acks it. The replies also carry the daemon's clock: the agent
    # measures its offset (here none) and reports it with the next heartbeat.
    fake = _FakeDaemon()
    a = Agent("h0", fake.endpoint, AgentOptions(backend="record"), local_namespace=f"pull{id(fake)}").start()
    try:
        ident, req, _ = fake.recv("register")
        assert req.body["agent_id"] == a.agent_id
        fake.reply(ident, req, _register_reply(7))
        _, get, _ = fake.recv("get_schedule")  # asked at registration: nothing yet
        fake.reply(ident, get, _schedule(time.time_ns()) | {"seq": 0, "incarnation": 7})
        for _ in range(2):
            ident, hb, _ = fake.recv("heartbeat")
            fake.reply(ident, hb, {"seq": 3, "t_ns": time.time_ns(), "sent_ns": hb.body["sent_ns"]})
        ident, get, _ = fake.recv("get_schedule", timeout_s=1.0)
        fake.reply(ident, get, _schedule(time.time_ns()) | {"incarnation": 7})
        _, ack, _ = fake.recv("ack")
        assert ack.body == {"host": "h0", "seq": 3, "incarnation": 7} and a.seq == 3
        _, hb, _ = fake.recv("heartbeat")
        assert abs(hb.body["clock_offset_s"]) < 0.05 and 0 <= hb.body["clock_rtt_s"] < 1.0
        assert abs(a.daemon_ns() - time.time_ns()) < 0.05e9
    finally:
        a.stop()
        fake.close()


def test_registration_refusals_back_off_and_a_host_in_use_is_tried_on():
    fake = _FakeDaemon()
    a = Agent("h0", fake.endpoint, AgentOptions(backend="record"), local_namespace=f"busy{id(fake)}").start()
    try:
        arrivals = []
        for _ in range(6):  # past REGISTER_TRIES: host_in_use may change, so no end
            ident, req, t = fake.recv("register", timeout_s=10.0)
            arrivals.append(t)
            fake.reply(ident, req, error="host_in_use")
        gaps = [b - a_ for a_, b in zip(arrivals, arrivals[1:], strict=False)]
        for k, g in enumerate(gaps):
            assert 0.25 * 2**k * 0.5 - 0.02 <= g <= 0.25 * 2**k + 0.2, gaps
        assert wait_until(lambda: a.register_refused == 6, 2.0) and a.running and a.failure is None
        ident, req, _ = fake.recv("register", timeout_s=10.0)
        fake.reply(ident, req, _register_reply(9))
        assert wait_until(a.registered.is_set, 5.0) and a.register_refused == 0
    finally:
        a.stop()
        fake.close()


def test_an_agent_installs_the_bodies_the_daemon_writes_and_refuses_a_malformed_flow_entry():
    # bodies as the daemon writes them (planned rates and a rank, both directions), pushed
    # and fetched; a body whose entry breaks protocol.OUT_FLOW_ENTRY is refused, counted,
    # not acked, and the schedule held stays
    import numpy as np

    from jitsched.daemon.bodies import host_bodies
    from jitsched.dag.model import Cluster
    from jitsched.policies.base import SlotSchedule

    flows = [("j", "a", 0, 1, 0, np.array([100.0, 500.0])), ("j", "b", 1, 0, 2, np.zeros(0))]
    sched = SlotSchedule(0.0, 0.1, flows, np.full((2, 3), 400.0), np.full((2, 3), 400.0), prio={("j", "b"): 0})
    body = host_bodies(sched, None, 3, time.time(), Cluster.uniform(2, bps=8000.0), 0.1, incarnation=7)["h0"]
    assert body["flows"][0]["dst"] == "h1" and body["in_flows"][0] == {
        "flow": "j/b", "src": "h1", "start_slot": 2, "rates_Bps": [], "prio": 0}
    bad = body | {"seq": 4, "flows": [body["flows"][0] | {"start_slot": "0"}]}
    fake = _FakeDaemon()
    a = Agent("h0", fake.endpoint, AgentOptions(backend="record"),
              local_namespace=f"entries{id(fake)}").start()
    try:
        ident, req, _ = fake.recv("register")
        fake.reply(ident, req, _register_reply(7))
        _, get, _ = fake.recv("get_schedule")
        fake.reply(ident, get, bad)  # fetched, malformed
        assert wait_until(lambda: a.bad_messages == 1, 2.0) and a.schedule is None
        fake.push(ident, body)  # pushed, as written
        _, ack, _ = fake.recv("ack")
        assert ack.body["seq"] == 3 and a.schedule == body
        fake.push(ident, bad)  # pushed, malformed: no ack, the body held stays
        assert wait_until(lambda: a.bad_messages == 2, 2.0)
        assert a.schedule == body and a.seq == 3
        k, rates, _ = a.slot_rates(body["epoch_ns"] + 150_000_000)
        assert k == 1 and {r.flow_id: r.rate_Bps for r in rates} == {"j/a": 500.0}
    finally:
        a.stop()
        fake.close()


def test_an_agent_takes_its_options_object_and_the_backends_plumbing_beside_it():
    # the defaults are AgentOptions' (pacing, the RTO timers, no ingress); the tc options
    # reach both backends' keywords with the plumbing given beside them
    a = Agent("h0", "tcp://127.0.0.1:1")
    assert a.options == AgentOptions() and a.backend_name == "pacing"
    assert (a.rto_max_ms, a.rto_min_us) == (RTO_MAX_MS, RTO_MIN_MS * 1000) and a.ingress_options is None
    assert (a.reconnect_s, a.leave_on_exit, a.port_dev) == (3.0, False, None)
    from jitsched.agents.backends.base import BACKGROUND_FLOOR, FLOW_FLOOR, FLOW_FLOORS_SUM

    a = Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="tc", dev="eth1", rto_max_ms=0, port_dev="eth2"),
              backend_options={"netns": "ns0"})
    tc = {"dev": "eth1", "borrow": True, "background_floor": BACKGROUND_FLOOR, "flow_floor": FLOW_FLOOR,
          "flow_floors_sum": FLOW_FLOORS_SUM, "netns": "ns0"}
    assert a.backend_options == tc and a.ingress_options == tc | {"share": 0.98}
    assert a.rto_max_ms == 0 and a.port_dev == "eth2"
    with pytest.raises(TypeError, match="Agent takes an AgentOptions, got dict"):
        Agent("h0", "tcp://127.0.0.1:1", {"backend": "record"})


@pytest.mark.parametrize(("backend", "floor", "sent", "payload"),
                         [("tc", 0.1, 0.1, 1448 / 1514), ("record", 0.1, 0.0, 1.0)])
def test_an_agent_registers_the_background_floor_and_payload_share_its_backend_keeps(backend, floor, sent,
                                                                                      payload):
    # the daemon reserves for critical jobs on what they leave; only the tc backend keeps a
    # floor and shapes whole frames (MTU 1500: 1448 bytes of TCP payload in 1514 of frame)
    fake = _FakeDaemon()
    a = Agent("h0", fake.endpoint, AgentOptions(backend=backend, background_floor=floor),
              local_namespace=f"floor{id(fake)}").start()
    try:
        _, req, _ = fake.recv("register")
        assert req.body["background_floor"] == sent
        assert req.body["payload_share"] == pytest.approx(payload)
    finally:
        a.stop()
        fake.close()


@pytest.mark.parametrize(("backend", "dscp", "plumbing", "holds"),
                         [("tc", None, {"dl_tos": (0x88, 0xB8)}, True), ("tc", "34", {}, True),
                          ("tc", None, {}, False), ("record", None, {"dl_tos": 0x88}, False)])
def test_an_agent_says_it_keeps_the_critical_floor_only_where_dl_packets_have_their_class(backend, dscp, plumbing,
                                                                                          holds):
    # a tc agent with the DL marks (its --dl-dscp, or the testbed's plumbing) keeps the
    # daemon's critical floor on a critical job's ports; without them a flow's first packets
    # would wait in the background class at it
    fake = _FakeDaemon()
    a = Agent("h0", fake.endpoint, AgentOptions(backend=backend, dl_dscp=dscp), backend_options=plumbing,
              local_namespace=f"hold{id(fake)}").start()
    try:
        _, req, _ = fake.recv("register")
        assert req.body.get("holds_floor", False) is holds
    finally:
        a.stop()
        fake.close()


@pytest.fixture
def agent():
    a = Agent("h9", "tcp://127.0.0.1:1", AgentOptions(backend="record"),
              local_namespace=f"rv{time.monotonic_ns()}").start()
    try:
        yield a
    finally:
        a.stop()


class _Fd:
    """Anything with a descriptor: register_flow sends ``fileno()``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd

    def fileno(self) -> int:
        return self.fd


def test_register_flow_of_a_non_socket_descriptor_is_refused_and_the_agent_keeps_running(agent):
    with tempfile.TemporaryFile() as f:
        assert register_flow(agent.local_name, "j/file", _Fd(f.fileno()),
                             ticket=flow_ticket(agent, "j/file")) is None
    time.sleep(0.2)
    assert agent.running and agent.failure is None, agent.failure


def test_register_flow_of_a_unix_socket_is_refused_and_the_agent_keeps_running(agent):
    a, b = socket.socketpair()
    try:
        assert register_flow(agent.local_name, "j/unix", a, ticket=flow_ticket(agent, "j/unix")) is None
        time.sleep(0.2)
        assert agent.running and agent.failure is None, agent.failure
        assert "j/unix" not in agent.flows
    finally:
        a.close()
        b.close()


def test_attach_of_a_cgroup_path_with_a_nul_byte_is_refused_and_the_agent_keeps_running(agent):
    # the daemon's ticket passes (the agent holds its host's key as a register reply gives
    # it): the body is the agent's to refuse
    secret = tickets.daemon_secret()
    agent.ticket_key = tickets.host_key(secret, agent.host)
    ticket = tickets.issue(secret, "j", agent.host, os.geteuid(), time.time_ns() + 10**12)
    with pytest.raises(RemoteError) as e:
        attach(agent.local_name, "j", cgroup="/sys/fs/cgroup/x\0y", ticket=ticket, timeout_s=2.0)
    assert e.value.code == "invalid_body"
    assert agent.running and agent.failure is None, agent.failure


def test_a_new_daemon_incarnation_is_timed_by_its_own_clock_not_the_last_ones():
    now = [10**18]
    a = Agent("h0", "tcp://127.0.0.1:1", AgentOptions(backend="record"), clock_ns=lambda: now[0])

    def round_trip(delay_ns: int, daemon_minus_agent_ns: int) -> None:
        sent = now[0]
        now[0] += delay_ns
        a._clock_sample({"sent_ns": sent, "t_ns": sent + delay_ns // 2 + daemon_minus_agent_ns})

    a._daemon_is(1)
    round_trip(1_000_000, 0)  # daemon 1: same clock, a 1 ms round trip
    assert a.clock_offset_s == 0.0
    # the daemon restarts on another node whose clock is 300 ms ahead; the link is a bit slower now
    a._daemon_is(2)
    for _ in range(3):
        round_trip(2_000_000, 300_000_000)
    assert abs(a.clock_offset_s + 0.3) < 1e-3, a.clock_offset_s
    assert abs((a.daemon_ns() - now[0]) - 300_000_000) < 1_000_000


def test_a_flow_registered_again_with_a_new_socket_is_paced():
    a = Agent("h9", "tcp://127.0.0.1:1", AgentOptions(backend="pacing"),
              local_namespace=f"rr{time.monotonic_ns()}")
    a.backend = load_backend("pacing", 1e6)  # no daemon here: the backend it would build
    a.line_rate_Bps = 1e6
    a.start()
    srv = socket.create_server(("127.0.0.1", 0))
    s1 = socket.create_connection(srv.getsockname())
    s2 = socket.create_connection(srv.getsockname())
    ctrls = []
    try:
        ctrls.append(register_flow(a.local_name, "j/t", s1, ticket=flow_ticket(a, "j/t")))
        assert wait_until(lambda: get_pacing_rate(s1) == 1_000_000, 2.0), get_pacing_rate(s1)
        # the job reconnected: the same flow, a new socket
        ctrls.append(register_flow(a.local_name, "j/t", s2, ticket=flow_ticket(a, "j/t")))
        assert wait_until(lambda: a.flows["j/t"].src_port == s2.getsockname()[1], 2.0)
        time.sleep(0.2)
        assert get_pacing_rate(s2) == 1_000_000, hex(get_pacing_rate(s2))
    finally:
        for c in ctrls:
            if c is not None:
                c.close()
        a.stop()
        s1.close()
        s2.close()
        srv.close()
