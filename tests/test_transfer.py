"""Transfers on raw TCP: one-shot sends, kept channels, the receiving sink and its agent registrations."""

from __future__ import annotations

import socket
import struct
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import msgpack
import pytest

from jitsched.agents.agent import Agent
from jitsched.agents.options import AgentOptions
from jitsched.client.transfer import Channels, TransferSink, send_bytes
from jitsched.daemon.server import wait_until
from tests.flowtickets import flow_ticket
from tests.test_daemon import system


def test_send_bytes_arrives_and_is_paced_by_the_agent():
    arrived = []
    sink = TransferSink(on_arrival=lambda f, n: arrived.append((f, n)))
    with system(hosts=("h0", "h1"), backend="pacing") as (d, agents):
        try:
            # no schedule yet: a registered flow shares the leftover = the line rate (125 MB/s)
            secs = send_bytes(sink.address, 3_000_000, "j/t0", agent=agents["h0"].local_name,
                              ticket=flow_ticket(agents["h0"], "j/t0", secret=d.state.ticket_secret))
            assert arrived == [("j/t0", 3_000_000)] and sink.received["j/t0"] == 3_000_000
            assert secs > 0
            assert wait_until(lambda: not agents["h0"].flows, 5.0)  # unregistered afterwards
        finally:
            sink.close()


def _raw(addr, data: bytes) -> socket.socket:
    s = socket.create_connection(addr, timeout=5.0)
    s.sendall(data)
    return s


def _spy_inbound(agent, first_delay_s: float = 0.0):
    """Record (direction, inbound flows held) after each local request ``agent`` serves;
    the first request waits ``first_delay_s`` (set ``entered`` as it starts)."""
    seen, entered = [], threading.Event()
    orig = agent._local_request

    def spy(req, fds, uid=0):
        if not entered.is_set():
            entered.set()
            time.sleep(first_delay_s)
        out = orig(req, fds, uid)
        seen.append((req.body.get("direction"), sorted(agent.in_flows)))
        return out

    agent._local_request = spy
    return seen, entered


def test_sink_registers_large_inbound_flows_with_the_receivers_agent():
    with system(hosts=("h0", "h1"), backend="record") as (d, agents):
        rx = agents["h1"]
        seen, _ = _spy_inbound(rx)
        sink = TransferSink(agent=rx.local_name, register_min_bytes=1000)
        try:
            send_bytes(sink.address, 1000, "j/small")
            # the big flow held open half-sent: the sink registers it while it lasts, with
            # the ticket its header brings
            ticket = flow_ticket(rx, "j/big", secret=d.state.ticket_secret)
            hdr = msgpack.packb({"flow": "j/big", "bytes": 2_000_000, "ticket": ticket})
            big = _raw(sink.address, struct.pack("!I", len(hdr)) + hdr + b"\0" * 1000)
            assert wait_until(lambda: len(seen) == 1, 5.0)
            assert seen == [("in", ["j/big"])]
            big.sendall(b"\0" * 1_999_000)
            assert big.recv(1) == b"\x01"
            big.close()
            assert sink.received == {"j/big": 2_000_000, "j/small": 1000}
            assert wait_until(lambda: len(seen) == 2, 5.0)
            assert seen[1] == ("in", [])  # gone once over; the small one never registered
            assert rx.registrations == {"out": 0, "in": 1}
            send_bytes(sink.address, 1000, "j/out", agent=agents["h0"].local_name,
                       ticket=flow_ticket(agents["h0"], "j/out", secret=d.state.ticket_secret))
            assert agents["h0"].registrations == {"out": 1, "in": 0}
            # a header without the ticket: the agent refuses the sink's registration
            hdr = msgpack.packb({"flow": "j/bare", "bytes": 2_000_000})
            bare = _raw(sink.address, struct.pack("!I", len(hdr)) + hdr + b"\0" * 1000)
            assert wait_until(lambda: rx.tickets_refused == 1, 5.0)
            assert rx.registrations == {"out": 0, "in": 1} and rx.in_flows == {}
            bare.sendall(b"\0" * 1_999_000)
            assert bare.recv(1) == b"\x01"
            bare.close()
        finally:
            sink.close()


@pytest.mark.alone
def test_a_slow_agent_does_not_hold_the_sinks_other_transfers():
    # The receiver's agent takes 1 s to answer a registration: the big flow waits for
    # it on the sink's registrar, and a small transfer started meanwhile is confirmed
    # at once (it waited the whole second when the selector thread registered). The big
    # flow is held half-sent until its registration has begun: sent whole, it could end
    # before the registrar ran, and a flow over while queued is never registered.
    with system(hosts=("h0", "h1"), backend="record") as (d, agents):
        rx = agents["h1"]
        seen, entered = _spy_inbound(rx, first_delay_s=1.0)
        sink = TransferSink(agent=rx.local_name, register_min_bytes=1000)
        try:
            ticket = flow_ticket(rx, "j/big", secret=d.state.ticket_secret)
            hdr = msgpack.packb({"flow": "j/big", "bytes": 2_000_000, "ticket": ticket})
            big = _raw(sink.address, struct.pack("!I", len(hdr)) + hdr + b"\0" * 1000)
            assert entered.wait(5.0)
            # the rest while the agent still sleeps: the flow ends before it is registered
            big.sendall(b"\0" * 1_999_000)
            assert big.recv(1) == b"\x01"
            big.close()
            t0 = time.monotonic()
            send_bytes(sink.address, 1000, "j/small")
            small_s = time.monotonic() - t0
            assert small_s < 0.5
            assert sink.received == {"j/big": 2_000_000, "j/small": 1000}
            # registered (late), then its end, in that order, though the flow was over first
            assert wait_until(lambda: len(seen) == 2, 3.0)
            assert seen == [("in", ["j/big"]), ("in", [])]
        finally:
            sink.close()
        assert not sink._registrar.is_alive()


def test_send_bytes_without_agent():
    sink = TransferSink()
    try:
        send_bytes(sink.address, 1, "j/one")
        assert sink.received == {"j/one": 1}
    finally:
        sink.close()


@pytest.mark.alone
def test_agent_paces_a_slow_line():
    """An agent whose line is 2 MB/s holds an unscheduled transfer to about that rate."""
    sink = TransferSink()
    with system(hosts=("h1",)) as (d, _):
        a = Agent("h0", d.agent_endpoint, AgentOptions(backend="pacing"),
                  line_rate_Bps=2e6, local_namespace=f"slow{id(d)}").start()
        try:
            assert wait_until(a.registered.is_set, 5.0)
            secs = send_bytes(sink.address, 2_000_000, "j/slow", agent=a.local_name,
                              ticket=flow_ticket(a, "j/slow", secret=d.state.ticket_secret))
            # 2 MB at 2 MB/s: ~1 s (the first congestion window leaves before pacing bites)
            assert 0.7 < secs < 1.5
        finally:
            a.stop()
            sink.close()


def test_sink_confirms_many_concurrent_transfers_on_one_thread():
    # 300 connections at once, more than a thread per connection could start in time
    # in a busy process; every one confirmed, and the sink never started a thread for them
    sink = TransferSink()
    try:
        before = threading.active_count()
        sizes = {f"j/t{i}": (i * 7919) % 300_000 for i in range(300)}
        with ThreadPoolExecutor(max_workers=64) as pool:
            secs = list(pool.map(lambda kv: send_bytes(sink.address, kv[1], kv[0]), sizes.items()))
        assert sink.received == sizes
        assert all(s > 0 for s in secs)
        assert threading.active_count() <= before
    finally:
        sink.close()


def test_sink_drops_bad_or_cut_connections_and_keeps_serving():
    sink = TransferSink()
    try:
        # a header longer than any send_bytes writes: dropped unread
        bad = _raw(sink.address, struct.pack("!I", 5000) + b"x" * 100)
        assert bad.recv(1) == b""  # closed by the sink, no confirmation
        bad.close()
        # not msgpack: dropped
        junk = _raw(sink.address, struct.pack("!I", 3) + b"\xc1\xc1\xc1")
        assert junk.recv(1) == b""
        junk.close()
        # a flow cut short: never recorded as received
        hdr = msgpack.packb({"flow": "j/cut", "bytes": 10_000})
        cut = _raw(sink.address, struct.pack("!I", len(hdr)) + hdr + b"\0" * 4000)
        cut.close()
        # a zero-byte flow and a flow whose header and payload come in one segment
        assert send_bytes(sink.address, 0, "j/empty") > 0
        send_bytes(sink.address, 5, "j/five")
        assert wait_until(lambda: "j/five" in sink.received, 5.0)
        assert sink.received == {"j/empty": 0, "j/five": 5}
    finally:
        sink.close()


def test_sink_serves_a_small_flow_in_the_wake_up_that_accepts_it(monkeypatch):
    # the header and a small payload leave in one segment and the accept waits for
    # data, so a small flow costs the sink one read; a large one reads on
    calls = []
    real = TransferSink._readable
    monkeypatch.setattr(TransferSink, "_readable", lambda self, c: (calls.append(c.flow), real(self, c)))
    sink = TransferSink()
    try:
        for i in range(20):
            send_bytes(sink.address, 100 + 40 * i, f"j/small{i}")
        assert len(calls) == 20
        send_bytes(sink.address, 1_000_000, "j/large")
        assert len(calls) > 21
        assert sink.received["j/large"] == 1_000_000 and len(sink.received) == 21
    finally:
        sink.close()


def test_sink_accepts_a_connection_whose_data_comes_late():
    # accepts wait for the first data (TCP_DEFER_ACCEPT): a sender that connects, then
    # registers with its agent or is descheduled for longer than that wait, is still served
    sink = TransferSink()
    try:
        s = socket.create_connection(sink.address, timeout=5.0)
        time.sleep(1.5)
        hdr = msgpack.packb({"flow": "j/late", "bytes": 10})
        s.sendall(struct.pack("!I", len(hdr)) + hdr + b"\0" * 10)
        assert s.recv(1) == b"\x01"
        s.close()
        assert sink.received == {"j/late": 10}
    finally:
        sink.close()


def test_channels_carry_small_transfers_on_kept_connections():
    sink = TransferSink()
    ch = Channels()
    try:
        for i in range(20):
            send_bytes(sink.address, 100 + i, f"j/s{i}", channels=ch)
        assert (ch.opened, ch.reused) == (1, 19)
        assert sink.received == {f"j/s{i}": 100 + i for i in range(20)}
        assert len(sink._open) == 1  # the one connection, waiting for its next header
        # another class (TOS) is another channel; several senders at once open a few more
        send_bytes(sink.address, 10, "j/marked", tos=0x28, channels=ch)
        assert ch.opened == 2
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(lambda i: send_bytes(sink.address, 2000, f"j/p{i}", channels=ch), range(200)))
        assert 2 < ch.opened <= 2 + 8 and ch.opened + ch.reused == 221
        assert all(sink.received[f"j/p{i}"] == 2000 for i in range(200))
        # the sender closing its idle connections: the sink lets them go, and serves on
        ch.close()
        assert wait_until(lambda: not sink._open, 5.0)
        send_bytes(sink.address, 7, "j/after")
        assert sink.received["j/after"] == 7
    finally:
        ch.close()
        sink.close()


def test_a_kept_connection_the_receiver_closed_is_replaced():
    sink = TransferSink()
    ch = Channels()
    try:
        send_bytes(sink.address, 50, "j/one", channels=ch)
        addr = sink.address
        sink.close()  # the kept connection's other end goes
        sink = TransferSink(addr[0], addr[1])
        send_bytes(addr, 60, "j/two", channels=ch)  # the dead one tried, then a new one
        assert sink.received == {"j/two": 60}
        assert (ch.opened, ch.reused) == (2, 1)
    finally:
        ch.close()
        sink.close()


def test_sink_marks_its_confirmation_with_the_senders_tos():
    # The confirmation is the transfer's last packet: it must leave the receiver in the
    # sender's traffic class, not as background. TCP gives no cmsg of a received TOS, so
    # read the mark off the sink's side of the connection just before it confirms.
    seen = {}

    def arrival(flow, n):
        [c] = [c for c in sink._open if c.flow == flow]
        seen[flow] = c.conn.getsockopt(socket.IPPROTO_IP, socket.IP_TOS)

    sink = TransferSink(on_arrival=arrival)
    try:
        send_bytes(sink.address, 1000, "j/marked", tos=0x28)
        send_bytes(sink.address, 1000, "j/plain")
        assert seen == {"j/marked": 0x28, "j/plain": 0}
    finally:
        sink.close()


def test_sink_close_ends_its_thread_with_connections_open():
    sink = TransferSink()
    hdr = msgpack.packb({"flow": "j/open", "bytes": 1_000_000})
    hanging = _raw(sink.address, struct.pack("!I", len(hdr)) + hdr + b"\0" * 10)
    time.sleep(0.1)
    t0 = time.monotonic()
    sink.close()
    assert time.monotonic() - t0 < 2.0 and not sink._thread.is_alive()
    assert hanging.recv(1) == b""  # the sink closed it
    hanging.close()


def test_sink_drops_a_header_of_impossible_numbers_and_keeps_serving():
    sink = TransferSink()
    try:
        for head in ({"flow": "j/inf", "bytes": float("inf")},
                     {"flow": "j/tos", "bytes": 10, "tos": float("inf")}):
            hdr = msgpack.packb(head)
            bad = _raw(sink.address, struct.pack("!I", len(hdr)) + hdr + b"\0" * 10)
            bad.settimeout(5.0)
            assert bad.recv(1) == b""  # closed by the sink, no confirmation
            bad.close()
        assert sink._thread.is_alive()
        send_bytes(sink.address, 5, "j/five", timeout_s=5.0)
        assert sink.received == {"j/five": 5}
    finally:
        sink.close()


def test_a_callback_that_raises_is_counted_and_the_sink_serves_on():
    seen = []

    def fails_on_a(flow, nbytes):
        seen.append(flow)
        if flow == "j/a":
            raise RuntimeError("callback broke")

    sink = TransferSink(on_arrival=fails_on_a)
    try:
        send_bytes(sink.address, 5, "j/a", timeout_s=5.0)  # confirmed all the same
        send_bytes(sink.address, 7, "j/b", timeout_s=5.0)
        assert seen == ["j/a", "j/b"] and sink.received == {"j/a": 5, "j/b": 7}
        assert sink.callback_errors == 1
        assert sink.last_callback_error == "j/a: RuntimeError: callback broke"
    finally:
        sink.close()
