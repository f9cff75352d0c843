"""Idle hosts keep their schedule: a re-solve sends no new body to a host idle before and after it."""

from __future__ import annotations

import time

from jitsched.agents.agent import Agent
from jitsched.agents.options import AgentOptions
from jitsched.client import Client
from jitsched.config import DaemonConfig
from jitsched.daemon.agents import AgentTable
from jitsched.daemon.bodies import IdleFrame, host_bodies, pack_frames
from jitsched.daemon.server import wait_until
from jitsched.dag.model import Cluster
from jitsched.workloads.synth import layer_chain_job
from tests.test_daemon import system

IDLE = ("h2", "h3")


def table(n: int = 4) -> AgentTable:
    cfg = DaemonConfig(cluster=Cluster.uniform(n), job_endpoint="tcp://127.0.0.1:*",
                       agent_endpoint="tcp://127.0.0.1:*")
    return AgentTable(cfg, 0.0, lambda reason, now: None)


def test_an_idle_body_is_not_published_over_an_idle_one():
    t = table()
    empty = pack_frames(host_bodies(None, None, 1, 0.0, t.cluster, 0.1))
    assert all(isinstance(f, IdleFrame) for f in empty.values())
    assert t.publish(empty, 1) == 4  # nothing held yet: everybody gets the first body
    t.unacked.clear()
    assert t.publish(pack_frames(host_bodies(None, None, 2, 5.0, t.cluster, 0.1)), 2) == 0
    assert t.host_seq == dict.fromkeys(t.cluster.names, 1) and not t.unacked and t.kept_idle == 4
    # a body with a flow is published; once idle again, that idle body is too (the agent
    # must stop pacing), and only then kept
    busy = {"h1": b"a flow"}
    assert t.publish(busy, 3) == 1 and t.host_seq["h1"] == 3 and "h1" not in t.idle
    assert t.publish(pack_frames(host_bodies(None, [1], 4, 5.0, t.cluster, 0.1)), 4) == 1
    assert t.host_seq["h1"] == 4 and "h1" in t.idle
    assert t.publish(pack_frames(host_bodies(None, [1], 5, 6.0, t.cluster, 0.1)), 5) == 0
    assert t.host_seq["h1"] == 4


def test_a_full_resolve_leaves_idle_agents_alone_until_they_get_a_flow():
    # full planning: every re-solve has a new slot grid, so every body is rebuilt
    with system(planning="full") as (d, agents), Client(d.job_endpoint) as c:
        st = d.state
        c.submit_job(layer_chain_job("a", "h0", "h1"))
        assert wait_until(lambda: st.plan_summary.get("jobs") == 1 and all(
            st.agents[h].acked_seq >= st.host_seq.get(h, 0) > 0 for h in agents), 5.0)
        first = st.schedule_seq
        first_installed = st.plan_summary["installed_at_s"]
        assert all(agents[h].seq == first for h in agents)
        c.submit_job(layer_chain_job("b", "h0", "h1"))
        assert wait_until(lambda: st.plan_summary.get("jobs") == 2 and all(
            st.agents[h].acked_seq >= st.host_seq[h] for h in agents), 5.0)
        second = st.schedule_seq
        assert second > first and st.plan_summary["hosts_changed"] == 4  # all rebuilt ...
        assert st.plan_summary["hosts_sent"] == 2  # ... the two busy ones sent
        # building and packing the 4 bodies took time, less than the whole re-solve's wall
        assert 0.0 < st.plan_summary["bodies_s"] < st.plan_summary["installed_at_s"] - first_installed
        assert [agents[h].seq for h in ("h0", "h1")] == [second] * 2
        assert [st.host_seq[h] for h in IDLE] == [first] * 2  # ... the idle ones not sent
        assert [agents[h].seq for h in IDLE] == [first] * 2
        # idle agents keep hearing from the daemon (heartbeat replies): past the
        # heartbeat timeout (0.6 s) they still hold their schedule
        time.sleep(3 * d.config.heartbeat_timeout_s)
        assert all(agents[h].dropped == 0 and agents[h].schedule is not None for h in IDLE)
        assert all(st.agents[h].up for h in agents)
        # a re-registering idle agent gets the body its host has (seq first)
        agents["h3"].stop()
        fresh = agents["h3"] = Agent("h3", d.agent_endpoint, AgentOptions(backend="record"),
                                     local_namespace=f"i{id(d)}").start()
        assert wait_until(lambda: fresh.seq == first and st.agents["h3"].acked_seq == first, 5.0)
        assert fresh.schedule["flows"] == [] and fresh.schedule["in_flows"] == []
        # a flow on h2 -> h3: both are sent their new bodies
        c.submit_job(layer_chain_job("c", "h2", "h3"))
        assert wait_until(lambda: st.plan_summary.get("jobs") == 3 and agents["h2"].seq == st.schedule_seq
                          and fresh.seq == st.schedule_seq, 5.0)
        assert agents["h2"].schedule["flows"] and all(f["dst"] == "h3" for f in agents["h2"].schedule["flows"])
        assert fresh.schedule["in_flows"]
