"""Tests of live capacity: the smoothing of measured unscheduled rates, and a real daemon planning on what they leave."""

from __future__ import annotations

import time

import numpy as np
import pytest
import zmq

from jitsched.client import Client
from jitsched.config import DaemonConfig
from jitsched.daemon import Daemon
from jitsched.daemon.capacity import CapacitySmoothing, LiveCapacity, check_sample, live_cluster
from jitsched.daemon.server import wait_until
from jitsched.dag.model import Cluster
from jitsched.protocol import MsgType, decode_reply, decode_request, encode_request
from jitsched.workloads.synth import layer_chain_job

LINE = 1e9 / 8  # Cluster.uniform's 1 Gbit/s, bytes/s


def test_first_sample_is_taken_whole_then_the_mean_moves_by_its_time_constant():
    live = LiveCapacity(Cluster.uniform(2), CapacitySmoothing(tau_s=2.0, dead_band=0.05, hold_s=0.0))
    assert live.observe("h0", {"out": 0.5 * LINE}, 0.0)
    assert live.capacity("out")[0] == pytest.approx(0.5 * LINE)
    assert live.capacity("out")[1] == LINE and live.capacity("in")[0] == LINE
    # the stream stops: after one time constant the mean has lost 1 - 1/e of it
    live.observe("h0", {"out": 0.0}, 2.0)
    assert live.mean["out"][0] == pytest.approx(0.5 * LINE / np.e)


def test_a_joined_host_is_measured_and_the_others_keep_their_figures():
    from jitsched.dag.model import Host

    live = LiveCapacity(Cluster.uniform(2), CapacitySmoothing(tau_s=2.0, dead_band=0.05, hold_s=0.0))
    live.observe("h0", {"out": 0.5 * LINE}, 0.0)
    grown = Cluster.uniform(2).with_host(Host("h9", LINE * 8, LINE * 8))
    live.fit(grown)
    assert live.observe("h9", {"in": 0.25 * LINE}, 1.0)
    assert live.capacity("in")[2] == pytest.approx(0.75 * LINE)
    assert live.capacity("out")[0] == pytest.approx(0.5 * LINE) and live.capacity("out")[2] == LINE


def test_noise_inside_the_dead_band_does_not_move_the_plan():
    live = LiveCapacity(Cluster.uniform(1), CapacitySmoothing(tau_s=1.0, dead_band=0.05, hold_s=0.0))
    live.observe("h0", {"out": 0.3 * LINE}, 0.0)
    rng = np.random.default_rng(0)
    moved = [live.observe("h0", {"out": (0.3 + rng.uniform(-0.04, 0.04)) * LINE}, 0.5 * k) for k in range(1, 41)]
    assert not any(moved)
    assert live.capacity("out")[0] == pytest.approx(0.7 * LINE)
    # a lasting change past the band moves it, within a few heartbeats
    moved = [live.observe("h0", {"out": 0.6 * LINE}, 20.0 + 0.5 * k) for k in range(1, 5)]
    assert any(moved)
    assert live.capacity("out")[0] < 0.62 * LINE


def test_a_hosts_planned_rates_move_at_most_once_per_hold():
    live = LiveCapacity(Cluster.uniform(1), CapacitySmoothing(tau_s=0.1, dead_band=0.05, hold_s=2.0))
    assert live.observe("h0", {"out": 0.5 * LINE}, 0.0)
    # the traffic goes and comes back within the hold: the plan stays where it was
    assert not live.observe("h0", {"out": 0.0}, 1.0)
    assert live.capacity("out")[0] == pytest.approx(0.5 * LINE)
    assert not live.observe("h0", {"out": 0.5 * LINE}, 1.9)
    # gone for good: it follows once the hold is over
    assert live.observe("h0", {"out": 0.0}, 2.5)
    assert live.capacity("out")[0] == pytest.approx(LINE, rel=0.01)
    assert live.changes == 2
    with pytest.raises(ValueError, match="hold_s"):
        CapacitySmoothing(hold_s=-1.0)


def test_capacity_never_goes_under_the_floor_and_agent_loss_restores_the_line():
    live = LiveCapacity(Cluster.uniform(1), CapacitySmoothing(min_share=0.1))
    live.observe("h0", {"out": 5 * LINE, "in": LINE}, 0.0)  # more than the line: clipped to it
    assert live.capacity("out")[0] == pytest.approx(0.1 * LINE)
    assert live.capacity("in")[0] == pytest.approx(0.1 * LINE)
    assert live.forget("h0")
    assert live.arrays() is None and live.capacity("out")[0] == LINE


def test_disabled_keeps_the_figures_but_plans_on_the_line_rate():
    live = LiveCapacity(Cluster.uniform(1), enabled=False)
    assert not live.observe("h0", {"out": 0.5 * LINE}, 0.0)
    assert live.arrays() is None
    assert live.host_view("h0")["unscheduled_mean_Bps"]["out"] == pytest.approx(0.5 * LINE)
    assert live.host_view("h0")["planned_capacity_Bps"]["out"] == LINE


def test_bad_samples_and_smoothing_are_named():
    assert check_sample({"out": 1.0, "in": 0}) is None
    assert "unknown direction 'up'" in check_sample({"up": 1.0})
    assert "body.unscheduled_Bps.in" in check_sample({"in": -1.0})
    assert "body.unscheduled_Bps.out" in check_sample({"out": float("nan")})
    assert "body.unscheduled_Bps.out" in check_sample({"out": "fast"})
    with pytest.raises(ValueError, match="min_share"):
        CapacitySmoothing(min_share=0.0)


def test_live_cluster_sets_each_hosts_capacities():
    c = Cluster.uniform(2)
    got = live_cluster(c, (np.array([0.4 * LINE, LINE]), np.array([LINE, 0.25 * LINE])))
    assert got.egress_Bps == pytest.approx([0.4 * LINE, LINE])
    assert got.ingress_Bps == pytest.approx([LINE, 0.25 * LINE])
    assert live_cluster(c, None) is c


def _config(**kw) -> DaemonConfig:
    base = dict(cluster=Cluster.uniform(2, bps=1e9), job_endpoint="tcp://127.0.0.1:*",
                agent_endpoint="tcp://127.0.0.1:*", heartbeat_s=0.1, heartbeat_timeout_s=5.0,
                resend_s=0.1, slot_s=0.1, policy="jit-paper", planning="full")
    return DaemonConfig(**(base | kw))


def _peak_egress(report_Bps: float | None, **kw) -> tuple[float, dict]:
    """Agents h0, h1 emulated over ZeroMQ; h0 reports ``report_Bps`` unscheduled egress (None: no
    field); a VGG16 iteration h0 -> h1 is planned. Returns the peak per-slot sum of the rates in
    h0's schedule body and h0's line in status."""
    d = Daemon(_config(**kw)).start()
    ctx = zmq.Context()
    socks = {}
    try:
        for h in ("h0", "h1"):
            s = ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.connect(d.agent_endpoint)
            s.send(encode_request(MsgType.REGISTER, {"host": h}))
            socks[h] = s
        assert wait_until(lambda: len(d.state.agents) == 2, 10.0)
        hb = {"host": "h0"} | ({} if report_Bps is None else {"unscheduled_Bps": {"out": report_Bps}})
        socks["h0"].send(encode_request(MsgType.HEARTBEAT, hb))
        if report_Bps is not None:
            assert wait_until(lambda: d.state.agents["h0"].unscheduled_Bps.get("out") == report_Bps, 10.0)
        with Client(d.job_endpoint) as c:
            c.submit_job(layer_chain_job("j", "h0", "h1"))
            status = c.status()
        body = None
        end = time.monotonic() + 10.0
        while body is None and time.monotonic() < end:
            while socks["h0"].poll(50):
                msg = socks["h0"].recv()
                if b"schedule" not in msg:  # a reply
                    continue
                req = decode_request(msg)
                if req.type == MsgType.SCHEDULE and req.body["flows"]:
                    body = req.body
        assert body is not None, "no schedule with flows reached h0"
        n = max(f["start_slot"] + len(f["rates_Bps"]) for f in body["flows"])
        per_slot = np.zeros(n)
        for f in body["flows"]:
            per_slot[f["start_slot"]:f["start_slot"] + len(f["rates_Bps"])] += f["rates_Bps"]
        return float(per_slot.max()), status["agents"]["h0"]
    finally:
        for s in socks.values():
            s.close(0)
        ctx.term()
        d.stop()


def test_the_daemon_plans_on_what_unscheduled_traffic_leaves_and_status_shows_it():
    peak, h0 = _peak_egress(0.6 * LINE)
    assert peak <= 0.4 * LINE * 1.001
    assert h0["unscheduled_Bps"] == {"out": 0.6 * LINE}
    assert h0["planned_capacity_Bps"]["out"] == pytest.approx(0.4 * LINE)
    assert h0["planned_capacity_Bps"]["in"] == pytest.approx(LINE)
    # the same job with nothing reported, and with live capacity off, is planned past it
    for kw in ({"report_Bps": None}, {"report_Bps": 0.6 * LINE, "live_capacity": False}):
        peak, h0 = _peak_egress(**kw)
        assert peak > 0.5 * LINE, kw
        assert h0["planned_capacity_Bps"]["out"] == pytest.approx(LINE)


def test_a_malformed_unscheduled_rate_is_refused_naming_the_field():
    d = Daemon(_config()).start()
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(d.agent_endpoint)
        s.send(encode_request(MsgType.REGISTER, {"host": "h0"}))
        assert wait_until(lambda: "h0" in d.state.agents, 10.0)
        s.send(encode_request(MsgType.HEARTBEAT, {"host": "h0", "unscheduled_Bps": {"out": -5.0}}))
        end = time.monotonic() + 5.0
        errors = []
        while not errors and time.monotonic() < end:
            if s.poll(100):
                rep = decode_reply(s.recv())
                if not rep.ok:
                    errors.append(rep)
        assert errors and errors[0].code == "invalid_body"
        assert "body.unscheduled_Bps.out" in errors[0].message
        assert d.state.agent_table.capacity.arrays() is None
    finally:
        s.close(0)
        ctx.term()
        d.stop()



def test_a_host_that_leaves_is_measured_afresh_when_it_comes_back():
    # what its agent measured is forgotten with it: a rejoining host is planned on its line
    # rate until its new agent reports
    from jitsched.daemon.agents import AgentTable

    table = AgentTable(_config(), 0.0, lambda why, now: None)
    assert table.capacity.observe("h1", {"out": 0.5 * LINE}, 0.0)
    assert table.capacity.capacity("out")[1] == pytest.approx(0.5 * LINE)
    table.forget("h1")
    assert table.capacity.capacity("out")[1] == LINE
