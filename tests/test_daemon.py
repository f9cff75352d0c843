"""Tests of the daemon on real loopback ZeroMQ sockets: schedules, acks, reconnects, failures, bad input."""

from __future__ import annotations

import contextlib
import time
import urllib.error
import urllib.request

import msgpack
import pytest
import zmq

from jitsched.agents.agent import Agent
from jitsched.agents.options import AgentOptions
from jitsched.bench.bench_faults import free_ports
from jitsched.client import Client
from jitsched.config import DaemonConfig
from jitsched.daemon import Daemon
from jitsched.daemon.server import wait_until
from jitsched.dag.model import Cluster
from jitsched.errors import ValidationError
from jitsched.policies import POLICIES
from jitsched.protocol import ErrorCode, MsgType, RemoteError, decode_reply, encode_request
from jitsched.workloads.synth import VGG16_LAYERS, layer_chain_job

HOSTS = ("h0", "h1", "h2", "h3")


def config(**kw) -> DaemonConfig:
    # the paper's LP formulation (jit-paper, alpha 0.4): these tests follow planned
    # per-slot rates; the default jit policy's levels have tests of their own below
    base = dict(cluster=Cluster.uniform(len(HOSTS), bps=1e9), job_endpoint="tcp://127.0.0.1:*",
                agent_endpoint="tcp://127.0.0.1:*", heartbeat_s=0.1, heartbeat_timeout_s=0.6,
                resend_s=0.1, slot_s=0.1, policy="jit-paper")
    base.update(kw)
    return DaemonConfig(**base)


@contextlib.contextmanager
def system(hosts=HOSTS, backend="record", **kw):
    """A daemon (real JIT policy, jit-paper unless ``policy=``) and one agent per host, all stopped on exit."""
    d = Daemon(config(**kw))
    agents: dict[str, Agent] = {}
    try:
        d.start()
        for h in hosts:
            agents[h] = Agent(h, d.agent_endpoint, AgentOptions(backend=backend),
                              local_namespace=f"t{id(d)}").start()
        assert wait_until(lambda: all(a.registered.is_set() for a in agents.values()), 5.0)
        yield d, agents
    finally:
        for a in agents.values():
            a.stop()
        d.stop()


@pytest.fixture
def sys4():
    with system() as s:
        yield s


@pytest.fixture
def client(sys4):
    c = Client(sys4[0].job_endpoint, timeout_s=5.0)
    try:
        yield c
    finally:
        c.close()


def all_acked(d: Daemon, seq: int, hosts) -> bool:
    """Every agent of ``hosts`` acked its current schedule, and those are at least ``seq``
    old: an incremental plan re-sends only the agents whose schedules changed."""
    st = d.state
    return all(st.agents[h].acked_seq >= max(st.host_seq.get(h, 0), 1)
               and st.host_seq.get(h, 0) <= seq for h in hosts)


def test_submit_every_agent_receives_and_acks(sys4, client):
    d, agents = sys4
    job = layer_chain_job("vgg-a", "h1", "h2")
    assert client.submit_job(job) == "vgg-a"
    assert wait_until(lambda: d.state.schedule_seq >= 1 and all_acked(d, d.state.schedule_seq, HOSTS), 5.0)
    seq = d.state.schedule_seq
    assert all(a.seq == seq for a in agents.values())
    # the sender's agent holds the job's planned flows (first alpha = 13 of 32 transfers)
    flows = agents["h1"].schedule["flows"]
    assert len(flows) == 13 and all(f["flow"].startswith("vgg-a/") and f["dst"] == "h2" for f in flows)
    assert agents["h2"].schedule["flows"] == []
    # rates never exceed the line rate and the leftover is what they leave
    line = 1e9 / 8
    for k in range(len(agents["h1"].schedule["leftover_Bps"])):
        used = sum(f["rates_Bps"][k - f["start_slot"]] for f in flows
                   if 0 <= k - f["start_slot"] < len(f["rates_Bps"]))
        assert used <= line * (1 + 1e-6)
        assert agents["h1"].schedule["leftover_Bps"][k] == pytest.approx(line - used, abs=1.0)
    # and it was applied at a slot boundary through the backend
    assert wait_until(lambda: agents["h1"].backend.snapshot(), 5.0)
    st = client.status()
    assert st["plan"]["seq"] == seq and st["plan"]["jobs"] == 1 and st["plan"]["flows"] == 13
    assert st["jobs"]["vgg-a"]["state"] == "running"
    assert set(st["agents"]) == set(HOSTS) and all(a["up"] for a in st["agents"].values())


def test_default_policy_pushes_priority_levels_and_no_background_guarantee():
    # the default jit policy (alpha 0): each sender's agent gets every unfinished
    # transfer of its jobs with a level, no rates; the smaller job on h1 goes first
    with system(policy="jit") as (d, agents), Client(d.job_endpoint) as c:
        assert d.state.incremental_ok is True  # ranked increments admit arrivals at once
        c.submit_job(layer_chain_job("big", "h1", "h2"))
        c.submit_job(layer_chain_job("small", "h1", "h3", layers=VGG16_LAYERS[:3]))

        def ranks():
            flows = agents["h1"].schedule["flows"] if agents["h1"].schedule else []
            return {job: {f["prio"] for f in flows if f["flow"].startswith(job + "/")} for job in ("small", "big")}

        # one group per job on h1 (one destination each): the small job's first, once the
        # joint re-solve after its (provisional, last-ranked) admission ran; no rates
        assert wait_until(lambda: ranks() == {"small": {0}, "big": {1}}, 5.0), ranks()
        flows = agents["h1"].schedule["flows"]
        assert all(f["rates_Bps"] == [] for f in flows)
        k, rates, leftover = agents["h1"].slot_rates()
        assert leftover == 0.0 and len(rates) == len(flows) and all(r.rate_Bps == 0.0 for r in rates)
        assert {r.flow_id.split("/")[0]: r.prio for r in rates} == {"small": 0, "big": 1}
        assert agents["h0"].slot_rates()[2] == 1e9 / 8  # a host with no DL keeps its line


def test_create_policy_gives_jit_paper_the_daemons_slot_and_alpha():
    # jit-paper's options class declares only its own defaults; slot_s is JitOptions' field
    from jitsched.daemon.server import create_policy

    pol = create_policy(config(policy="jit-paper", slot_s=0.05, objective="minmax"))
    assert (pol.slot_s, pol.objective, pol.alpha, pol.leftover) == (0.05, "minmax", 0.4, "fair")
    pol = create_policy(config(policy="jit"))  # alpha left to the policy: 0
    assert (pol.alpha, pol.leftover) == (0.0, "priority")


def test_create_policy_passes_the_daemons_settings_only_to_policies_declaring_them():
    from jitsched.daemon.server import create_policy
    from jitsched.errors import ValidationError

    # tictac declares slot_s but neither alpha nor objective; tensorflow declares nothing
    pol = create_policy(config(policy="tictac", slot_s=0.05, objective="minmax"))
    assert pol.slot_s == 0.05 and pol.options == POLICIES["tictac"].Options(slot_s=0.05)
    assert create_policy(config(policy="tensorflow", slot_s=0.05)).options == POLICIES["tensorflow"].Options()
    # the configured options win over the daemon's, and an undeclared one is refused naming the declared
    pol = create_policy(config(policy="sincronia", slot_s=0.05, policy_options={"slot_s": 0.2}))
    assert pol.slot_s == 0.2
    with pytest.raises(ValidationError, match=r"policy 'varys': unknown option\(s\) alpha; it takes: background, bg_floor, madd, slot_s$"):
        create_policy(config(policy="varys", policy_options={"alpha": 0.4}))


def test_second_job_replans_and_duplicate_is_refused(sys4, client):
    d, _ = sys4
    client.submit_job(layer_chain_job("a", "h0", "h1"))
    assert wait_until(lambda: d.state.schedule_seq >= 1, 5.0)
    first = d.state.schedule_seq
    client.submit_job(layer_chain_job("b", "h0", "h3"))
    assert wait_until(lambda: d.state.plan_summary.get("jobs") == 2 and all_acked(d, d.state.schedule_seq, HOSTS), 5.0)
    assert d.state.schedule_seq > first
    assert d.state.host_seq["h0"] == d.state.schedule_seq  # the sender's schedule changed
    with pytest.raises(RemoteError) as ei:
        client.submit_job(layer_chain_job("a", "h0", "h1"))
    assert ei.value.code == ErrorCode.DUPLICATE_JOB
    client.job_finished("a", 1.0)
    client.cancel_job("b")
    st = client.status()
    assert st["jobs"]["a"]["state"] == "finished" and st["jobs"]["a"]["jct_s"] == 1.0
    assert st["jobs"]["b"]["state"] == "cancelled"


def test_progress_reports_and_unknown_ids(sys4, client):
    d, _ = sys4
    client.submit_job(layer_chain_job("p", "h0", "h1"))
    client.transfer_started("p", "read_w0")
    rep = client.transfer_finished("p", "read_w0", 6912)
    assert "lat_hit" in rep
    client.compute_finished("p", "fwd0", 0.01)
    assert d.state.jobs["p"].done.keys() >= {"read_w0", "fwd0"}
    for call, code in [(lambda: client.transfer_finished("nope", "read_w0"), ErrorCode.UNKNOWN_JOB),
                       (lambda: client.transfer_finished("p", "fwd0"), ErrorCode.UNKNOWN_NODE),
                       (lambda: client.compute_finished("p", "read_w1", 0.1), ErrorCode.UNKNOWN_NODE),
                       (lambda: client.cancel_job("nope"), ErrorCode.UNKNOWN_JOB)]:
        with pytest.raises(RemoteError) as ei:
            call()
        assert ei.value.code == code


def test_a_report_applies_its_events_in_order_and_stops_at_the_first_refused(sys4, client):
    d, _ = sys4
    client.submit_job(layer_chain_job("b", "h0", "h1"))
    js = d.state.jobs["b"]
    got = client.report("b", [["started", "read_w0", None], ["finished", "read_w0", 6912],
                              ["compute", "fwd0", 0.01]])
    # each event's reply as its own message gives it: a finished transfer's LAT verdict
    assert len(got) == 3 and got[0] == {} and "lat_hit" in got[1] and got[2] == {}
    assert "read_w0" in js.started and js.done.keys() == {"read_w0", "fwd0"}
    assert js.measured_s["fwd0"] == 0.01
    # a compute reported as a transfer: refused at its index, the event before it applied
    with pytest.raises(RemoteError) as ei:
        client.report("b", [["finished", "read_w1", None], ["finished", "fwd1", None],
                            ["compute", "fwd1", 0.02]])
    assert ei.value.code == ErrorCode.UNKNOWN_NODE and "events[1]" in str(ei.value)
    assert "read_w1" in js.done and "fwd1" not in js.done
    # sent again whole (what a runner does after a refusal it recovers from): no double count
    hits = js.lat_hits + js.lat_misses
    assert client.report("b", [["finished", "read_w1", None]]) == [{"lat_hit": None}]
    assert js.lat_hits + js.lat_misses == hits
    for events, code in [([["started", "read_w0", 5]], ErrorCode.INVALID_BODY),  # started takes no value
                         ([["compute", "fwd1", None]], ErrorCode.INVALID_BODY),  # compute needs one
                         ([["moved", "read_w0", None]], ErrorCode.INVALID_BODY),
                         ([["finished", "read_w0"]], ErrorCode.INVALID_BODY)]:
        with pytest.raises(RemoteError) as ei:
            client.report("b", events)
        assert ei.value.code == code and "events[0]" in str(ei.value), events
    with pytest.raises(RemoteError) as ei:
        client.report("nope", [["started", "read_w0", None]])
    assert ei.value.code == ErrorCode.UNKNOWN_JOB


def test_reconnecting_agent_gets_current_schedule(sys4, client):
    d, agents = sys4
    client.submit_job(layer_chain_job("r", "h0", "h1"))
    assert wait_until(lambda: d.state.schedule_seq >= 1 and all_acked(d, d.state.schedule_seq, HOSTS), 5.0)
    seq = d.state.schedule_seq
    downs = d.state.agent_table.counts["agents_marked_down"]
    agents["h0"].stop()
    fresh = Agent("h0", d.agent_endpoint, AgentOptions(backend="record"), local_namespace=f"r{id(d)}")
    agents["h0"] = fresh  # the fixture stops it
    fresh.start()
    # the fresh agent is refused while the old one's connection still looks open; on a loaded
    # machine the old one may fall silent first and be marked down, which re-plans without it
    assert wait_until(lambda: fresh.seq == d.state.agent_table.host_seq.get("h0"), 5.0)
    if d.state.agent_table.counts["agents_marked_down"] == downs:
        assert d.state.schedule_seq == seq  # no re-plan was needed to serve it
    assert [f["flow"] for f in fresh.schedule["flows"]] == [
        f["flow"] for f in d.state.host_body("h0")["flows"]]
    assert wait_until(lambda: d.state.agents["h0"].acked_seq == d.state.agent_table.host_seq.get("h0"), 5.0)


def test_killed_agent_is_detected_and_flows_replanned(client, sys4):
    d, agents = sys4
    client.submit_job(layer_chain_job("k", "h2", "h3"))
    assert wait_until(lambda: d.state.schedule_seq >= 1 and all_acked(d, d.state.schedule_seq, HOSTS), 5.0)
    before = d.state.schedule_seq
    agents["h2"].kill()
    assert wait_until(lambda: not d.state.agents["h2"].up, 3.0)
    # the loss is a re-solve trigger: a new plan reaches the agents still up
    assert wait_until(lambda: d.state.schedule_seq > before
                      and "agent_down" in d.state.plan_summary.get("reasons", []), 5.0)
    new = d.state.schedule_seq
    # a full re-solve: the agent still up with a flow (h3 receives h2's) gets it; idle
    # h0 and h1 keep the idle body they acked (test_daemon_idle.py)
    assert wait_until(lambda: d.state.agents["h3"].acked_seq >= new, 5.0)
    assert all(d.state.agents[h].acked_seq >= d.state.host_seq[h] for h in ("h0", "h1"))
    assert d.state.agents["h2"].acked_seq < new
    assert d.state.plan_summary["unenforced_flows"] > 0  # h2's flows, planned but unenforced
    st = client.status()
    assert st["agents"]["h2"]["up"] is False


def _raw(endpoint: str, data: bytes, ctx: zmq.Context) -> bytes:
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    try:
        s.connect(endpoint)
        s.send(data)
        assert s.poll(5000), "no reply"
        return s.recv()
    finally:
        s.close(0)


def test_bad_input_gets_error_replies_and_daemon_keeps_serving(sys4, client):
    d, _ = sys4
    ctx = zmq.Context.instance()
    h0 = {"v": 1, "id": 9, "type": "submit_job"}
    cases = [
        (b"\x00\xff\xfe garbage bytes", ErrorCode.BAD_MESSAGE),
        (encode_request(MsgType.STATUS, {}, 3)[:-2], ErrorCode.BAD_MESSAGE),
        (msgpack.packb({"v": 1, "id": "one", "type": "status", "body": {}}), ErrorCode.BAD_ENVELOPE),
        (msgpack.packb(h0 | {"body": {"job": "not a map"}}), ErrorCode.INVALID_BODY),
        (msgpack.packb({"v": 1, "id": 9, "type": "fly", "body": {}}), ErrorCode.UNKNOWN_TYPE),
        (msgpack.packb({"v": 1, "id": 9, "type": "register", "body": {"host": "h0"}}), ErrorCode.UNKNOWN_TYPE),
        (msgpack.packb(h0 | {"body": {"job": {"id": "x", "pad": "y" * (9 * 2**20)}}}), ErrorCode.TOO_LARGE),
        (msgpack.packb(h0 | {"body": {"job": {"id": "x", "computes": [
            {"id": "c", "host": "nowhere", "duration_s": 1}]}}}), ErrorCode.INVALID_JOB),
        (msgpack.packb(h0 | {"body": {"job": {"id": "x", "computes": [
            {"id": "a", "host": "h0", "duration_s": 1}, {"id": "b", "host": "h0", "duration_s": 1}],
            "edges": [["a", "b"], ["b", "a"]]}}}), ErrorCode.INVALID_JOB),
        (msgpack.packb(h0 | {"body": {"job": {"id": "x", "computes": [
            {"id": "c", "host": "h0", "duration_s": 1}]}, "cluster": {"hosts": [
                {"name": "zz", "egress_bps": 1, "ingress_bps": 1}]}}}), ErrorCode.UNKNOWN_HOST),
    ]
    for data, code in cases:
        rep = decode_reply(_raw(d.job_endpoint, data, ctx))
        assert not rep.ok and rep.code == code, (code, rep)
        assert rep.message
    rep = decode_reply(_raw(d.job_endpoint, msgpack.packb({"v": 1, "id": 77, "type": "fly", "body": {}}), ctx))
    assert rep.id == 77  # the error names the request it answers
    # agent socket: garbage and unregistered agents get errors too
    rep = decode_reply(_raw(d.agent_endpoint, b"\x93garbage", ctx))
    assert rep.code == ErrorCode.BAD_MESSAGE
    rep = decode_reply(_raw(d.agent_endpoint, encode_request(MsgType.HEARTBEAT, {"host": "h0"}, 5), ctx))
    assert rep.code == ErrorCode.NOT_REGISTERED
    rep = decode_reply(_raw(d.agent_endpoint, encode_request(MsgType.REGISTER, {"host": "mars"}, 6), ctx))
    assert rep.code == ErrorCode.UNKNOWN_HOST
    # still serving, and every real agent still up
    assert client.submit_job(layer_chain_job("ok", "h0", "h1")) == "ok"
    assert client.status()["jobs"]["ok"]["state"] == "running"
    assert all(a.up for a in d.state.agents.values())


@pytest.mark.alone
def test_loop_answers_while_the_lp_solves():
    """A 60-job plan takes a while; status requests meanwhile are answered at once."""
    import time

    from jitsched.workloads.synth import random_vgg16_jobs

    with system(hosts=("h0",), coalesce_s=0.2) as (d, _):
        with Client(d.job_endpoint) as c:
            for j in random_vgg16_jobs(60, list(HOSTS), seed=2):
                c.submit_job(j)
            during = []
            end = time.monotonic() + 20.0
            while d.state.plan_summary.get("jobs") != 60 and time.monotonic() < end:
                busy = d.state.planning_seq != 0
                t0 = time.perf_counter()
                c.status()
                if busy and d.state.planning_seq != 0:
                    during.append(time.perf_counter() - t0)
            assert d.state.plan_summary.get("jobs") == 60
            assert len(during) >= 3, during
            assert sorted(during)[len(during) // 2] < 0.05


def _free_port() -> int:
    return free_ports(1)[0]


def test_metrics_endpoint():
    port = _free_port()
    with system(hosts=("h0", "h1"), metrics_port=port) as (d, _):
        with Client(d.job_endpoint) as c:
            c.submit_job(layer_chain_job("m", "h0", "h1"))
            assert wait_until(lambda: d.state.n_plans >= 1, 5.0)
            # a critical job that finishes at once: within its guarantee
            from tests.test_daemon_limits import tiny_job
            assert c.submit(tiny_job("crit", 1.25e6, src="h1", dst="h0") | {"class": "critical"})["class"] == "critical"
            assert c.job_finished("crit")["guarantee"] == "met"
        want = ("jitsched_solve_seconds_count", 'jitsched_jobs{state="running"} 1.0',
                'jitsched_critical_jobs{outcome="met"} 1.0',
                'jitsched_critical_jobs{outcome="missed"} 0.0',
                'jitsched_agents{up="true"} 2.0', "jitsched_lat_misses 0.0",
                'jitsched_requests_total{outcome="ok",type="submit_job"} 2.0')
        # gauges refresh on the loop's housekeeping tick (50 ms)
        assert wait_until(lambda: all(w in _get(port) for w in want), 3.0), _get(port)


def _get(port: int, host: str = "127.0.0.1") -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=2) as r:
        return r.read().decode()


def test_metrics_url_names_where_the_endpoint_answers():
    from jitsched.daemon.metrics import metrics_url
    assert metrics_url("127.0.0.1", 9108) == "http://127.0.0.1:9108/metrics"
    assert metrics_url("0.0.0.0", 9108) == "http://127.0.0.1:9108/metrics"
    assert metrics_url("::", 9108) == "http://[::1]:9108/metrics"
    assert metrics_url("fd00::5", 9108) == "http://[fd00::5]:9108/metrics"


def test_metrics_endpoint_listens_on_its_address():
    # another loopback address than the default: the endpoint answers there and not on 127.0.0.1
    port = _free_port()
    with system(hosts=("h0",), metrics_port=port, metrics_address="127.0.0.2") as (d, _):
        assert d.metrics_port == port
        assert "jitsched_agents" in _get(port, "127.0.0.2")
        with pytest.raises(urllib.error.URLError):
            _get(port)


def test_replies_to_departed_clients_are_counted_and_logged_sparingly(caplog):
    from jitsched.daemon.server import JOB_TYPES

    class Gone:
        errno = zmq.EHOSTUNREACH

        def send_multipart(self, frames, flags=0):
            raise zmq.ZMQError(self.errno)

    d = Daemon(config())
    try:
        req = encode_request(MsgType.STATUS, {})
        with caplog.at_level("INFO", logger="jitsched.daemon"):
            for _ in range(50):
                d._serve_one(Gone(), [b"peer", req], JOB_TYPES)
        assert d.replies_dropped == 50
        recs = [r for r in caplog.records if "reply_dropped" in r.getMessage()]
        assert len(recs) == 1 and "count=1" in recs[0].getMessage()  # the first, then quiet for DROPPED_LOG_S
        assert recs[0].levelname == "INFO"  # a client that left is no fault of the daemon's
        d._dropped_log_s -= 60.0  # the interval is over: the next one reports all held back
        full = Gone()
        full.errno = zmq.EAGAIN  # a peer whose queue is full: that one is a warning
        with caplog.at_level("INFO", logger="jitsched.daemon"):
            d._serve_one(full, [b"peer", req], JOB_TYPES)
        recs = [r for r in caplog.records if "reply_dropped" in r.getMessage()]
        assert len(recs) == 2 and "count=50" in recs[1].getMessage() and "total=51" in recs[1].getMessage()
        assert recs[1].levelname == "WARNING"
    finally:
        d.ctx.term()


def test_dispatch_table_derived_from_the_declarations():
    """Agent requests carry the routing identity; status is the one request taken without a key."""
    from jitsched.daemon.server import DISPATCH
    assert DISPATCH == {
        "submit_job": ("submit_job", False, True), "transfer_started": ("transfer_started", False, True),
        "background_started": ("background_started", False, True),
        "attach_job": ("attach_job", False, True),
        "background_finished": ("background_finished", False, True),
        "transfer_finished": ("transfer_finished", False, True),
        "compute_finished": ("compute_finished", False, True),
        "report": ("report", False, True),
        "job_finished": ("job_finished", False, True), "cancel_job": ("cancel_job", False, True),
        "renew_lease": ("renew_lease", False, True),
        "register_template": ("register_template", False, True), "iteration": ("iteration", False, True),
        "status": ("status", False, False), "register": ("register", True, True),
        "heartbeat": ("heartbeat", True, True), "ack": ("ack", True, True),
        "get_schedule": ("get_schedule", True, True), "leave": ("leave", True, True),
    }


# ---------------------------------------------------------------------- a loop that never dies silently


class _FrameWithoutFd:
    """A received frame whose source descriptor libzmq no longer knows (torn-down connection)."""

    def __init__(self, frame):
        self._frame = frame
        self.bytes = frame.bytes

    def get(self, prop):
        if prop == zmq.SRCFD:
            raise zmq.ZMQError(zmq.EINVAL)
        return self._frame.get(prop)


def test_a_message_whose_source_fd_cannot_be_read_is_served_and_counted(monkeypatch):
    d = Daemon(config()).start()
    try:
        real = zmq.Socket.recv_multipart

        def recv_multipart(self, *a, **kw):
            frames = real(self, *a, **kw)
            return [_FrameWithoutFd(f) for f in frames] if kw.get("copy") is False else frames

        monkeypatch.setattr(zmq.Socket, "recv_multipart", recv_multipart)
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            for _ in range(3):
                assert "jobs" in c.status()
        assert d.counts["srcfd_unreadable"] >= 3
        assert d.running and d.counts["loop_errors"] == 0
    finally:
        d.stop()


def test_a_request_that_raises_in_the_loop_is_contained_counted_and_logged(monkeypatch, caplog):
    d = Daemon(config()).start()
    try:
        real = d._serve_one
        calls = []

        def fails_once(*a, **kw):
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError("boom in one message")
            return real(*a, **kw)

        monkeypatch.setattr(d, "_serve_one", fails_once)
        with Client(d.job_endpoint, timeout_s=0.5) as c, pytest.raises(TimeoutError):
            c.status()  # its message failed: no reply, and the loop goes on
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            st = c.status()
        assert d.running and d.counts["loop_errors"] == 1
        assert st["loop"]["loop_errors"] == 1 or wait_until(lambda: d.state.loop["loop_errors"] == 1, 2.0)
        assert any("loop_error" in r.getMessage() and r.exc_info for r in caplog.records)
    finally:
        d.stop()


def test_a_dead_worker_thread_stops_the_daemon_with_its_failure(monkeypatch):
    def dies(self):
        raise RuntimeError("decoder bug")

    monkeypatch.setattr(Daemon, "_decode_worker", dies)
    d = Daemon(config()).start()
    try:
        assert wait_until(lambda: not d.running, 5.0)
        assert "decoder bug" in str(d.failure)
        # nothing answers from a daemon whose loop is gone
        with Client(d.job_endpoint, timeout_s=0.5) as c, pytest.raises(TimeoutError):
            c.status()
    finally:
        d.stop()


def test_the_daemon_command_exits_non_zero_when_its_loop_dies(monkeypatch, tmp_path, capsys):
    from jitsched.cli import main

    def broken(self, now):
        raise RuntimeError("housekeeping bug")

    monkeypatch.setattr(Daemon, "_housekeeping", broken)
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[hosts]]\nname = "h0"\negress_bps = 1e9\ningress_bps = 1e9\n\n[daemon]\n'
                   'job_endpoint = "tcp://127.0.0.1:*"\nagent_endpoint = "tcp://127.0.0.1:*"\n')
    assert main(["daemon", "--config", str(cfg), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert "jitsched daemon: stopped: RuntimeError: housekeeping bug" in err


# it times another client's replies (1 s at most) while one floods the daemon: beside the
# other pytest worker's load one of them took 1.05 s in a fresh-clone CI run
@pytest.mark.alone
def test_agents_stay_up_while_a_client_pipelines_big_reports(caplog):
    # 300 reports of 4,096 valid events about the client's own job, sent without waiting
    # for replies (~10 ms of the loop each): agents heartbeat every 0.1 s, 1.5 s timeout
    # (a loaded machine delays the agents' threads too). A loop that read the job socket
    # 256 messages at a time first would go 2.5 s without the agents: all four down.
    import logging
    import time

    from jitsched.bench.bench_flood import FLOOD_JOB, report_message

    caplog.set_level(logging.WARNING, logger="jitsched.daemon")
    with system(heartbeat_timeout_s=1.5) as (d, agents), Client(d.job_endpoint, timeout_s=30.0) as c:
        c.submit_job(layer_chain_job(FLOOD_JOB, "h0", "h1"))
        data = report_message()
        ctx = zmq.Context.instance()
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.SNDHWM, 0)
        s.connect(d.job_endpoint)
        n, lat = 300, []
        try:
            for _ in range(n):
                s.send(data)
            got = 0
            while got < n:
                t0 = time.perf_counter()
                c.status(limit=1)  # another client is answered meanwhile
                lat.append(time.perf_counter() - t0)
                assert s.poll(30_000)
                while s.poll(0):
                    assert decode_reply(s.recv()).ok
                    got += 1
        finally:
            s.close(0)
        st = c.status()
    assert st["agent_counts"]["agents_marked_down"] == 0
    assert not [r for r in caplog.records if "agent_down" in r.getMessage()]
    assert all(a["up"] for a in st["agents"].values()) and all(a.dropped == 0 for a in agents.values())
    assert max(lat) < 1.0, lat


def test_a_step_of_the_wall_clock_neither_freezes_nor_expires_liveness_and_retention(monkeypatch):
    real = time.time
    with system(hosts=("h0", "h1"), policy="jit", ended_retention_s=5.0) as (d, agents):
        with Client(d.job_endpoint, timeout_s=5.0) as c:
            c.submit_job(layer_chain_job("x", "h0", "h1"))
            c.cancel_job("x")
            for step in (3600.0, -3600.0):  # the machine's clock jumps an hour, each way
                monkeypatch.setattr(time, "time", lambda s=step: real() + s)
                t0 = real()
                while real() - t0 < 1.5:
                    assert all(a.up for a in d.state.agents.values())
                    time.sleep(0.05)
                assert c.status()["jobs"]["x"]["state"] == "cancelled"  # not pruned at once
            monkeypatch.setattr(time, "time", real)
        # a killed agent still goes down on time (liveness does not freeze either)
        agents["h1"].kill()
        assert wait_until(lambda: not d.state.agents["h1"].up, 5.0)


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_jobs_of_many_workers_are_accepted_and_planned_on_every_senders_host(policy):
    from jitsched.workloads.shapes import ShapeOptions, expand_job
    from tests.test_daemon_incremental import settled

    one = layer_chain_job("one", "ps", "wk", layers=VGG16_LAYERS[:3], pushes=True)
    # a ring h1 -> h2 -> h3 -> h1, and two workers (h1, h2) of parameters sharded on h0 and h3
    ring = expand_job(one, "allreduce", [], ["h1", "h2", "h3"], options=ShapeOptions("allreduce", 3),
                      job_id="ring")
    shard = expand_job(one, "ps-sharded", ["h0", "h3"], ["h1", "h2"], job_id="shard",
                       options=ShapeOptions("ps-sharded", 2, 2, min_slice_bytes=1e3))
    with system(policy=policy) as (d, agents), Client(d.job_endpoint, timeout_s=5.0) as c:
        assert c.submit_job(ring) == "ring" and c.submit_job(shard) == "shard"
        assert wait_until(lambda: d.state.plan_summary.get("jobs") == 2 and settled(d), 10.0)
        st = c.status()
        assert st["jobs"]["ring"]["state"] == st["jobs"]["shard"]["state"] == "running"
        assert not any(d.state.plan_book.plans_failed.values())
        flows = {h: (a.schedule or {"flows": []})["flows"] for h, a in agents.items()}
        if d.state.plan_summary["flows"] == 0:  # fair sharing: nothing to rank or rate
            assert policy in ("tensorflow", "fifo")
            return
        ring_on = {h for h, fl in flows.items() if any(f["flow"].startswith("ring/") for f in fl)}
        shard_on = {h for h, fl in flows.items() if any(f["flow"].startswith("shard/") for f in fl)}
        nxt = {"h1": "h2", "h2": "h3", "h3": "h1"}
        assert all(f["dst"] == nxt[h] for h, fl in flows.items() for f in fl if f["flow"].startswith("ring/"))
        if policy == "jit-paper":  # the LP's first alpha of the transfers, wherever they are
            assert ring_on | shard_on
        else:  # every worker of the ring sends, and both servers and both workers of the shards
            assert ring_on == {"h1", "h2", "h3"} and shard_on == {"h0", "h1", "h2", "h3"}


def test_a_daemon_built_in_code_refuses_an_endpoint_zeromq_would_misread():
    # tcp://127.0.0.1:99999 would bind port 34463 without a word; the same endpoint twice
    # would fail only at the second bind
    with pytest.raises(ValidationError, match="the port must be"):
        Daemon(config(job_endpoint="tcp://127.0.0.1:99999"))
    with pytest.raises(ValidationError, match="need an endpoint each"):
        Daemon(config(job_endpoint="tcp://127.0.0.1:5999", agent_endpoint="tcp://127.0.0.1:5999"))


def test_the_jobs_gauge_of_a_state_reads_zero_once_its_last_job_is_pruned():
    from jitsched.daemon.metrics import Metrics
    from jitsched.daemon.state import SchedulerState
    from tests.test_daemon_limits import tiny_job

    st = SchedulerState(config(job_lease_s=1.0, ended_retention_s=5.0))
    m = Metrics()
    assert st.submit_job({"job": tiny_job("a")}, 0.0) == {"job_id": "a"}
    assert st.submit_job({"job": tiny_job("b")}, 0.0) == {"job_id": "b"}
    assert st.cancel_job({"job_id": "b"}, 0.5) == {"state": "cancelled"}
    assert st.expire_leases(2.0) == ["a"]
    m.update(st, 2.0)
    assert m.jobs.labels("abandoned")._value.get() == 1
    assert m.jobs.labels("cancelled")._value.get() == 1
    # past their retention both are forgotten: no job is abandoned or cancelled any more
    assert st.prune(100.0) == 2 and not st.jobs
    m.update(st, 100.0)
    assert m.jobs.labels("abandoned")._value.get() == 0
    assert m.jobs.labels("cancelled")._value.get() == 0
