"""Tests of the agent's unscheduled-traffic meter on a real veth pair with real, paced TCP traffic."""

from __future__ import annotations

import contextlib
import socket
import statistics
import threading
import time
import uuid

import pytest

from jitsched.agents.agent import Agent, bytes_acked
from jitsched.agents.capacity import WIRE_PER_PAYLOAD, UnscheduledMeter, bytes_received, link_bytes
from jitsched.agents.options import AgentOptions
from jitsched.client import Client
from jitsched.config import DaemonConfig
from jitsched.daemon import Daemon
from jitsched.daemon.server import wait_until
from jitsched.dag.model import Cluster, Host
from jitsched.localreg import register_flow, unregister_flow
from jitsched.netns import PAIR_ADDRS, socket_in, veth_pair
from tests.flowtickets import flow_ticket

SO_MAX_PACING_RATE = 47
U_BPS = 3e6  # the unscheduled flow's paced payload rate, bytes/s
S_BPS = 6e6  # the scheduled one's
TOL = 0.25  # pacing, ACK frames and a second's sampling: within a quarter


@contextlib.contextmanager
def paced_flow(ns0: str, ns1: str, rate_Bps: float, tos: int | None = None):
    """A TCP connection ns0 -> ns1 sending as fast as its pacing rate lets it until the block ends.

    Yields (sender socket, receiver socket).
    """
    srv = socket_in(ns1)
    srv.bind((PAIR_ADDRS[1], 0))
    srv.listen(1)
    tx = socket_in(ns0)
    tx.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, int(rate_Bps))
    if tos is not None:
        tx.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, tos)
    tx.connect(srv.getsockname())
    rx, _ = srv.accept()
    srv.close()
    stop = threading.Event()

    def send() -> None:
        chunk = bytes(64 * 1024)
        with contextlib.suppress(OSError):
            while not stop.is_set():
                tx.send(chunk)

    def drain() -> None:
        with contextlib.suppress(OSError):
            while rx.recv(1 << 16):
                pass

    threads = [threading.Thread(target=f, daemon=True) for f in (send, drain)]
    for t in threads:
        t.start()
    try:
        yield tx, rx
    finally:
        stop.set()
        tx.shutdown(socket.SHUT_RDWR)
        for t in threads:
            t.join(5.0)
        tx.close()
        rx.close()


def test_link_bytes_reads_the_namespaces_own_counters_and_names_a_missing_device(netns_available):
    with veth_pair("jscap") as (ns0, _ns1):
        tx, rx = link_bytes("a0", ns0)
        assert tx >= 0 and rx >= 0
        with pytest.raises(OSError, match="no network device 'nope'"):
            link_bytes("nope", ns0)


def test_the_meter_counts_the_unscheduled_flow_and_not_the_scheduled_one_each_way(netns_available):
    with veth_pair("jscap") as (ns0, ns1), paced_flow(ns0, ns1, U_BPS), paced_flow(ns0, ns1, S_BPS) as (stx, srx):
        out_m, in_m = UnscheduledMeter("a0", ns0), UnscheduledMeter("a1", ns1)
        time.sleep(0.5)  # past slow start
        assert out_m.sample(lambda: {"out": bytes_acked(stx)}) == {}  # the first sample only reads
        in_m.sample(lambda: {"in": bytes_received(srx)})
        time.sleep(1.5)
        out = out_m.sample(lambda: {"out": bytes_acked(stx)})
        got_in = in_m.sample(lambda: {"in": bytes_received(srx)})
        wire_u = U_BPS * WIRE_PER_PAYLOAD
        # the sender's port: the unscheduled flow's frames (and the scheduled flow's ACKs' share, none)
        assert out["out"] == pytest.approx(wire_u, rel=TOL)
        # the receiver's port: the same flow arriving
        assert got_in["in"] == pytest.approx(wire_u, rel=TOL)
        # without the scheduled flow's bytes both flows count
        both = UnscheduledMeter("a0", ns0)
        both.sample(dict)
        time.sleep(1.0)
        assert both.sample(dict)["out"] == pytest.approx((U_BPS + S_BPS) * WIRE_PER_PAYLOAD, rel=TOL)
        assert out_m.sources == {"out": "payload", "in": "payload"}


def test_the_tc_backend_counts_its_scheduled_classes_and_leaves_the_background(netns_available):
    from jitsched.agents.backends.tc import TcBackend

    dl_tos = 0x88
    with veth_pair("jscap") as (ns0, ns1):
        b = TcBackend(125e6, dev="a0", netns=ns0, borrow=True, dl_tos=dl_tos)
        try:
            m = UnscheduledMeter("a0", ns0, {"out": b.scheduled_bytes})
            # the marked flow rides the DL class (scheduled), the other the background class
            with paced_flow(ns0, ns1, U_BPS), paced_flow(ns0, ns1, S_BPS, tos=dl_tos):
                time.sleep(0.5)
                m.sample(dict)
                s0 = b.scheduled_bytes()
                time.sleep(1.5)
                got = m.sample(dict)
                s1 = b.scheduled_bytes()
            assert got["out"] == pytest.approx(U_BPS * WIRE_PER_PAYLOAD, rel=TOL)
            assert (s1 - s0) / 1.5 == pytest.approx(S_BPS * WIRE_PER_PAYLOAD, rel=TOL)
            assert m.sources["out"] == "class"
        finally:
            b.close()
        assert b.scheduled_bytes() is None


def test_the_scheduled_count_is_read_right_after_the_interface_and_only_where_no_class_counts(monkeypatch):
    import jitsched.agents.capacity as capacity

    order = []
    counters = iter([(100, 50), (1100, 550)])

    def fake_link(dev, netns=None):
        order.append("link")
        return next(counters)

    def scheduled():
        order.append("scheduled")
        return {"out": 0, "in": 0}

    monkeypatch.setattr(capacity, "link_bytes", fake_link)
    clock = iter([0.0, 1.0])
    m = UnscheduledMeter("x", class_bytes={"out": lambda: 0}, clock=lambda: next(clock))
    m.sample(scheduled)
    assert order == ["link", "scheduled"]  # once, for "in": "out" has its class counter
    assert m.sample(scheduled) == {"out": 1000.0, "in": 500.0}
    assert m.sources == {"out": "class", "in": "payload"}


def test_an_agent_reports_unscheduled_traffic_to_the_daemon_and_status_shows_it(netns_available):
    with veth_pair("jscap") as (ns0, ns1):
        cluster = Cluster((Host("h0", 1e8, 1e8, PAIR_ADDRS[0]), Host("h1", 1e8, 1e8, PAIR_ADDRS[1])))
        cfg = DaemonConfig(cluster=cluster, job_endpoint="tcp://127.0.0.1:*", agent_endpoint="tcp://127.0.0.1:*",
                           heartbeat_s=0.2, heartbeat_timeout_s=3.0, resend_s=0.1, slot_s=0.1)
        d = Daemon(cfg).start()
        a = None
        try:
            a = Agent("h0", d.agent_endpoint, AgentOptions(backend="record", port_dev="a0"),
                      backend_options={"netns": ns0}, local_namespace=f"c{uuid.uuid4().hex[:8]}").start()
            assert wait_until(a.registered.is_set, 5.0)
            with paced_flow(ns0, ns1, U_BPS), paced_flow(ns0, ns1, S_BPS) as (stx, _):
                ctl = register_flow(a.local_name, "j/t", stx, ticket=flow_ticket(a, "j/t", secret=d.state.ticket_secret))
                assert ctl is not None
                try:
                    wire_u = U_BPS * WIRE_PER_PAYLOAD

                    def reported() -> float:
                        with Client(d.job_endpoint, timeout_s=5.0) as c:
                            return c.status()["agents"]["h0"]["unscheduled_Bps"].get("out", 0.0)

                    # a few heartbeats: the registered flow's bytes are taken off the port's
                    time.sleep(1.5)
                    # each report is one 0.2 s heartbeat's sample: the middle one of five
                    reports = []
                    for _ in range(5):
                        reports.append(reported())
                        time.sleep(0.25)
                    assert statistics.median(reports) == pytest.approx(wire_u, rel=TOL)
                    with Client(d.job_endpoint, timeout_s=5.0) as c:
                        h0 = c.status()["agents"]["h0"]
                    # a quarter of the 100 Mbit/s port, past the dead band: planned on the rest
                    assert h0["unscheduled_mean_Bps"]["out"] == pytest.approx(wire_u, rel=TOL)
                    assert h0["planned_capacity_Bps"]["out"] == pytest.approx(1e8 / 8 - wire_u, rel=0.1)
                    assert h0["planned_capacity_Bps"]["in"] == 1e8 / 8  # nothing arrives at h0
                finally:
                    unregister_flow(ctl, "j/t")
        finally:
            if a is not None:
                a.stop()
            d.stop()


def test_a_port_that_cannot_be_read_sends_no_sample_and_status_shows_none():
    cfg = DaemonConfig(cluster=Cluster.uniform(2, bps=1e8), job_endpoint="tcp://127.0.0.1:*",
                       agent_endpoint="tcp://127.0.0.1:*", heartbeat_s=0.1, heartbeat_timeout_s=3.0, resend_s=0.1)
    d = Daemon(cfg).start()
    a = None
    try:
        a = Agent("h0", d.agent_endpoint, AgentOptions(backend="record", port_dev="nosuchdev0"),
                  local_namespace=f"c{uuid.uuid4().hex[:8]}").start()
        assert wait_until(lambda: a.meter is not None and a.meter.errors >= 3, 5.0)
        assert "nosuchdev0" in a.meter.last_error
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            h0 = c.status()["agents"]["h0"]
        assert h0["up"] and h0["unscheduled_Bps"] == {}
        assert h0["planned_capacity_Bps"] == {"out": 1e8 / 8, "in": 1e8 / 8}
    finally:
        if a is not None:
            a.stop()
        d.stop()
