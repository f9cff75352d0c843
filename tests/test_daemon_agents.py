"""The agent table on real loopback sockets: one live agent per host, acks of sent seqs only,
schedule re-sends that back off and stop, clock offsets, bounded rejection lines."""

from __future__ import annotations

import logging
import subprocess
import sys
import time

import pytest

from jitsched.agents.agent import REGISTER_TRIES, Agent, RegistrationRefused
from jitsched.agents.options import AgentOptions
from jitsched.client import Client
from jitsched.daemon import Daemon
from jitsched.daemon.agents import RESEND_BACKOFF_MAX, RESEND_TRIES, AgentTable, check_counts
from jitsched.daemon.bodies import host_bodies
from jitsched.daemon.server import wait_until
from jitsched.keys import init_keys, load_curve_keys
from jitsched.protocol import ErrorCode, MsgType, decode_any, encode_request, is_reply
from jitsched.workloads.synth import layer_chain_job
from tests.test_daemon import config, system
from tests.test_daemon_security import ask, raw_dealer


def _agent(host: str, d: Daemon, tag: str, **kw) -> Agent:
    return Agent(host, d.agent_endpoint, AgentOptions(backend="record"),
                 local_namespace=f"{tag}{id(d)}", **kw)


@pytest.mark.parametrize("keyed", [False, True])
def test_a_second_agent_of_a_live_host_is_refused_and_the_first_keeps_it(keyed, tmp_path):
    keys = None
    if keyed:
        keys = tmp_path / "keys"
        init_keys(keys, ["h0", "h1"], ["client"])
    d = Daemon(config(keys_dir=str(keys) if keys else "")).start()
    first = _agent("h0", d, "one", keys=keys).start()
    second = None
    try:
        assert wait_until(first.registered.is_set, 5.0)
        identity = d.state.agents["h0"].identity
        second = _agent("h0", d, "two", keys=keys).start()
        # past twice the heartbeat timeout (0.6 s): the second is refused, tries again,
        # and the first holds its host throughout (no flapping between the two)
        assert wait_until(lambda: d.state.agent_table.counts["registrations_refused"] >= 2, 5.0)
        time.sleep(1.2)
        a = d.state.agents["h0"]
        assert a.identity == identity and a.up and first.registered.is_set()
        assert not second.registered.is_set() and second.running and second.failure is None
        assert d.state.agent_table.counts["agents_marked_down"] == 0
        assert first.registered_count == 1 and second.register_refused >= 2
        # the first stops (its connection closes): the second takes the host at once
        first.stop()
        assert wait_until(second.registered.is_set, 5.0)
        assert d.state.agents["h0"].identity != identity and d.state.agents["h0"].up
    finally:
        for x in (first, second):
            if x is not None:
                x.stop()
        d.stop()


def test_an_agent_reconnecting_on_a_new_connection_keeps_its_host():
    # the same agent (its agent_id) on a fresh connection is no second agent
    with system(hosts=("h0",)) as (d, agents), raw_dealer(d.agent_endpoint, None) as s:
        own = agents["h0"].agent_id
        rep = ask(s, MsgType.REGISTER, {"host": "h0", "agent_id": "someone-else"})
        assert rep.code == ErrorCode.HOST_IN_USE and "h0" in rep.message
        rep = ask(s, MsgType.REGISTER, {"host": "h0", "agent_id": own})
        assert rep.ok


def test_an_agent_refused_for_good_stops_after_a_few_backed_off_tries(caplog):
    caplog.set_level(logging.INFO, logger="jitsched.agent")
    with system(hosts=("h0",)) as (d, _):
        t0 = time.monotonic()
        a = _agent("mars", d, "mars").start()
        try:
            assert wait_until(lambda: not a.running, 10.0)
            took = time.monotonic() - t0
        finally:
            a.stop()
        assert isinstance(a.failure, RegistrationRefused) and "unknown_host" in str(a.failure)
        assert d.state.agent_table.counts["registrations_refused"] == REGISTER_TRIES
        waits = [float(r.getMessage().rsplit("retry_in_s=", 1)[1]) for r in caplog.records
                 if "agent_register_refused" in r.getMessage()]
        # each wait doubles from 0.25 s, drawn in its upper half (jitter)
        assert len(waits) == REGISTER_TRIES - 1
        for k, w in enumerate(waits):
            assert 0.25 * 2**k * 0.5 - 0.005 <= w <= 0.25 * 2**k + 0.005, waits
        # the log gives each wait to 0.01 s
        assert took >= sum(waits) - 0.005 * len(waits)


def test_another_hosts_key_ends_the_agent(tmp_path):
    keys = tmp_path / "keys"
    init_keys(keys, ["h0", "h1"], ["client"])
    d = Daemon(config(keys_dir=str(keys))).start()
    a = _agent("h0", d, "stolen", keys=load_curve_keys(keys, "hosts", "h1")).start()
    try:
        assert wait_until(lambda: not a.running, 10.0)
        assert isinstance(a.failure, RegistrationRefused) and "forbidden" in str(a.failure)
        assert d.state.agent_table.counts["registrations_refused"] == REGISTER_TRIES
    finally:
        a.stop()
        d.stop()


def test_the_agent_command_says_a_final_refusal_in_one_line(tmp_path):
    with system(hosts=("h0",)) as (d, _):
        res = subprocess.run([sys.executable, "-m", "jitsched", "agent", "--host", "mars", "--daemon",
                              d.agent_endpoint, "--backend", "record", "--local-dir", str(tmp_path), "--quiet"],
                             capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith("jitsched agent: error:") and "'mars'" in lines[0] and "unknown_host" in lines[0]


def test_rejected_lines_are_rate_limited(caplog):
    caplog.set_level(logging.INFO, logger="jitsched.daemon")
    with system(hosts=("h0",)) as (d, _), raw_dealer(d.agent_endpoint, None) as s:
        for i in range(300):
            s.send(encode_request(MsgType.HEARTBEAT, {"host": "h0"}, i + 1))
        got = 0
        while got < 300 and s.poll(5000):
            got += is_reply(s.recv())
        assert got == 300  # every one answered (not_registered) ...
        d.logs.flush()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("event=rejected")]
    assert 1 <= len(lines) <= d.logs.burst  # ... but a few logged
    assert d.metrics.requests.labels("heartbeat", ErrorCode.NOT_REGISTERED)._value.get() == 300


def test_an_ack_of_a_seq_never_sent_is_refused_and_the_host_still_gets_schedules():
    with system(hosts=("h0", "h2")) as (d, _), raw_dealer(d.agent_endpoint, None) as s, \
            Client(d.job_endpoint, timeout_s=5.0) as c:
        assert ask(s, MsgType.REGISTER, {"host": "h1"}).ok
        rep = ask(s, MsgType.ACK, {"host": "h1", "seq": 2**40})
        assert rep.code == ErrorCode.INVALID_BODY and str(2**40) in rep.message
        assert d.state.agents["h1"].acked_seq == 0 and d.state.agent_table.counts["acks_refused"] == 1
        c.submit_job(layer_chain_job("j", "h1", "h2"))
        end = time.monotonic() + 5.0
        pushed = None
        while pushed is None and s.poll(max(1, int((end - time.monotonic()) * 1000))):
            m = decode_any(s.recv())
            if getattr(m, "type", None) == MsgType.SCHEDULE:
                pushed = m.body
        assert pushed is not None and pushed["seq"] >= 1 and pushed["flows"]
        s.send(encode_request(MsgType.ACK, {"host": "h1", "seq": pushed["seq"]}))
        assert wait_until(lambda: d.state.agents["h1"].acked_seq == pushed["seq"], 5.0)


def test_schedule_resends_to_an_agent_that_never_acks_back_off_and_stop():
    # a bare agent that heartbeats (so stays up) and never acks: its body is sent, then
    # re-sent RESEND_TRIES times, each gap doubling up to RESEND_BACKOFF_MAX x resend_s
    resend_s = 0.02
    with system(hosts=("h0",), resend_s=resend_s, policy="jit") as (d, _), \
            raw_dealer(d.agent_endpoint, None) as s, Client(d.job_endpoint, timeout_s=5.0) as c:
        assert ask(s, MsgType.REGISTER, {"host": "h1"}).ok
        c.submit_job(layer_chain_job("j", "h1", "h0"))
        pushes: dict[int, list[float]] = {}
        end = time.monotonic() + 10.0
        stopped_at = None
        next_hb = 0.0
        while time.monotonic() < min(end, (stopped_at or end) + 0.5):
            if stopped_at is None and "h1" in d.state.agents and d.state.agents["h1"].resends_stopped:
                stopped_at = time.monotonic()
            if time.monotonic() >= next_hb:
                s.send(encode_request(MsgType.HEARTBEAT, {"host": "h1"}))
                next_hb = time.monotonic() + 0.1
            if s.poll(10):
                m = decode_any(s.recv())
                if getattr(m, "type", None) == MsgType.SCHEDULE:
                    pushes.setdefault(m.body["seq"], []).append(time.monotonic())
        assert stopped_at is not None, {k: len(v) for k, v in pushes.items()}
        seq = d.state.agents["h1"].sent_seq
        times = pushes[seq]
        assert len(times) == 1 + RESEND_TRIES, {k: len(v) for k, v in pushes.items()}
        gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
        want = [resend_s * min(2**k, RESEND_BACKOFF_MAX) for k in range(RESEND_TRIES)]
        # as received: each push may reach this socket up to a poll late
        assert all(g >= w - 0.015 for g, w in zip(gaps, want, strict=True)), (gaps, want)
        assert sum(gaps) >= sum(want) - 0.015 and gaps[-1] > 4 * gaps[0], (gaps, want)
        a = c.status()["agents"]["h1"]
        assert a["resends_stopped"] and a["resends"] == RESEND_TRIES and a["up"]
        assert d.state.agent_table.counts["schedule_resends_stopped"] >= 1
        # the agent asks for what it lacks (a real agent does, seeing the seq in its
        # heartbeat replies): it gets it, and its ack is taken
        rep = ask(s, MsgType.GET_SCHEDULE, {"host": "h1"})
        assert rep.ok and rep.body["seq"] == seq
        assert ask(s, MsgType.ACK, {"host": "h1", "seq": seq}).ok
        assert d.state.agents["h1"].acked_seq == seq


def test_resend_gaps_double_and_a_new_body_starts_them_anew():
    cfg = config(resend_s=0.1)
    table = AgentTable(cfg, 0.0, lambda *_: None)
    table.register(b"a", {"host": "h0"}, 0.0)

    def publish(seq: int) -> None:
        table.publish(host_bodies(None, [0], seq, 0.0, cfg.cluster, cfg.slot_s, 0), seq)

    publish(1)
    sends = []
    for ms in range(0, 30_000, 5):
        t = ms / 1000
        if table.outbox(t):
            sends.append(ms)
        table.agents["h0"].last_seen_s = t
    assert len(sends) == 1 + RESEND_TRIES
    gaps = [b - a for a, b in zip(sends, sends[1:], strict=False)]
    want = [100 * min(2**k, RESEND_BACKOFF_MAX) for k in range(RESEND_TRIES)]
    assert all(w <= g <= w + 5 for g, w in zip(gaps, want, strict=True)), (gaps, want)  # 5 ms steps
    assert table.agents["h0"].resends_stopped and table.counts["schedule_resends_stopped"] == 1
    publish(2)  # a new body: sent at once, re-sends counted anew
    assert table.outbox(30.0) and not table.agents["h0"].resends_stopped and table.agents["h0"].resends == 0


@pytest.mark.alone
def test_an_agent_whose_clock_is_off_says_so_and_follows_the_daemons_slots():
    # h1's clock is 30 s behind the daemon's: status shows the offset it measured, and it
    # takes slot times on the daemon's clock (it would hold every planned flow at rate 0)
    with system(hosts=("h0", "h2", "h3")) as (d, agents):
        skewed = _agent("h1", d, "skew", clock_ns=lambda: time.time_ns() - 30 * 10**9).start()
        try:
            with Client(d.job_endpoint, timeout_s=5.0) as c:
                assert wait_until(lambda: (c.status()["agents"].get("h1") or {}).get("clock_off"), 5.0)
                st = c.status()["agents"]
                assert st["h1"]["clock_offset_s"] == pytest.approx(-30.0, abs=0.05)
                assert st["h1"]["clock_rtt_s"] < 0.5
                assert all(not st[h]["clock_off"] and abs(st[h]["clock_offset_s"]) < 0.05 for h in ("h0", "h2"))
                assert wait_until(lambda: d.metrics.clock_off._value.get() == 1, 2.0)
                c.submit_job(layer_chain_job("j", "h1", "h2"))
                assert wait_until(lambda: skewed.schedule is not None and skewed.schedule["flows"], 5.0)
            s = skewed.schedule
            k_daemon = (time.time_ns() - s["epoch_ns"]) // int(s["slot_s"] * 1e9)
            k, rates, _ = skewed.slot_rates()
            assert abs(k - k_daemon) <= 1
            assert skewed.daemon_ns() == pytest.approx(time.time_ns(), abs=0.05e9)
        finally:
            skewed.stop()


def test_a_key_the_daemon_refuses_ends_the_agent(tmp_path):
    # a key pair the daemon does not know: no reply ever comes, each connection's handshake
    # is refused; after a few the agent ends and says why
    keys, other = tmp_path / "keys", tmp_path / "other"
    init_keys(keys, ["h0"], ["client"])
    init_keys(other, ["h0"], ["client"])
    d = Daemon(config(keys_dir=str(keys))).start()
    stranger = load_curve_keys(other, "hosts", "h0")
    a = Agent("h0", d.agent_endpoint, AgentOptions(backend="record", reconnect_s=0.3),
              local_namespace=f"zap{id(d)}",
              keys=stranger.__class__(stranger.public, stranger.secret, d.keys.public)).start()
    try:
        assert wait_until(lambda: not a.running, 10.0)
        assert isinstance(a.failure, RegistrationRefused) and "refused this key" in str(a.failure)
        assert "h0" not in d.state.agents
    finally:
        a.stop()
        d.stop()


def test_an_agents_own_counts_reach_status_and_metrics_and_bad_ones_are_refused():
    with system(hosts=("h1",)) as (d, _), raw_dealer(d.agent_endpoint, None) as s, \
            Client(d.job_endpoint, timeout_s=5.0) as c:
        reg = ask(s, MsgType.REGISTER, {"host": "h0"})
        assert reg.ok and reg.body["takes"] == ["counts"]  # so an agent sends them
        rep = ask(s, MsgType.HEARTBEAT, {"host": "h0", "counts": {"stale": 3, "fenced": 0, "daemons": 1}})
        assert rep.ok
        # zeros are left out of status
        assert c.status()["agents"]["h0"]["counts"] == {"stale": 3, "daemons": 1}
        # the real agent of h1, idle (its seq-0 bodies are no schedule at all), counts nothing
        assert c.status()["agents"]["h1"]["counts"] == {"daemons": 1}
        d.metrics.update(d.state, 0.0)
        assert d.metrics.agent_reported.labels("stale")._value.get() == 3
        assert d.metrics.agent_reported.labels("fenced")._value.get() == 0
        for counts, why in (({"late": 1}, "unknown count 'late'"), ({"stale": -1}, "body.counts.stale"),
                            ({"stale": 1.5}, "body.counts.stale"), ({"stale": True}, "body.counts.stale")):
            rep = ask(s, MsgType.HEARTBEAT, {"host": "h0", "counts": counts, "unscheduled_Bps": {"out": 5.0}})
            assert not rep.ok and rep.code == ErrorCode.INVALID_BODY and why in rep.message, rep.message
        # kept as last taken, and nothing else of the refused heartbeats taken either
        st = c.status()["agents"]["h0"]
        assert st["counts"] == {"stale": 3, "daemons": 1} and st["unscheduled_Bps"] == {}
    assert check_counts({"stale": 0, "bad_messages": 2}) is None
